"""Calibration fits kept on disk between runs: fitting a GPU generation's factors to its timed iterations and
measured rows takes about a second (planner/perf/calibration.py), and every command that prices or simulates an
engine of that generation pays it again in a fresh process.

A fit is stored under a key that is the SHA-256 of everything it depends on: the source of the performance model
(planner/perf/*.py and planner/catalog/*.py), the catalog's content (GPUs, systems, models, benchmark rows, step
tables, layers) and the fit's own arguments. A catalog or code change is a new key, never a stale answer; a file
that cannot be read is fitted again. Files are JSON (no code runs on load), written whole (a temporary file
renamed). `PLANNER_CACHE_DIR` names the folder (default `$XDG_CACHE_HOME/planner` or `~/.cache/planner`); `off`
turns the cache off. Nothing is written where the folder cannot be created."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

CACHE_ENV = "PLANNER_CACHE_DIR"
OFF = ("", "0", "off", "none", "false")


def cache_directory() -> Path | None:
    """Where fits are kept, or None when the cache is off."""
    given = os.environ.get(CACHE_ENV)
    if given is not None:
        return None if given.strip().lower() in OFF else Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "planner"


@functools.cache
def _code_digest() -> str:
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted([*root.glob("*.py"), *(root.parent / "catalog").glob("*.py")]):
        digest.update(path.parent.name.encode() + b"/" + path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def catalog_fingerprint(catalog) -> str:
    """SHA-256 of the code and of the catalog's content (kept with the catalog: it does not change)."""
    derived = catalog.derived
    if "fingerprint" not in derived:
        digest = hashlib.sha256(_code_digest().encode())
        digest.update(catalog.model_dump_json(exclude={"steps"}).encode())
        for table in catalog.steps:
            digest.update(repr((table.origin, sorted(table.columns.items()))).encode())
        derived["fingerprint"] = digest.hexdigest()
    return derived["fingerprint"]


def cached_dataclass(catalog, name: tuple, kind: type, compute: Callable[[], object]):
    """`compute()` (a dataclass of `kind` whose fields are numbers and strings), from the disk cache when a fit with
    this catalog, code and `name` was kept, else computed and kept."""
    directory = cache_directory()
    if directory is None:
        return compute()
    key = hashlib.sha256((catalog_fingerprint(catalog) + repr(name)).encode()).hexdigest()
    path = directory / f"fit-{key}.json"
    try:
        return kind(**json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        pass  # not kept yet, or unreadable: fit again
    value = compute()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(dataclasses.asdict(value)), encoding="utf-8")
        os.replace(temporary, path)
    except OSError:
        pass  # a read-only home: the fit is simply not kept
    return value
