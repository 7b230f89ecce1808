"""Calibration fits kept on disk between runs: fitting a GPU generation's factors to its timed iterations and
measured rows takes about a second (planner/perf/calibration.py), and every command that prices or simulates an
engine of that generation pays it again in a fresh process. Both stages are kept: the kernel factors
(planner/perf/kernel_fit.py, read back only where plausible) and the calibrated efficiency.

A fit is stored under a key that is the SHA-256 of everything it depends on: the source of the performance model
(planner/perf/*.py and planner/catalog/*.py), the catalog's content the model reads (GPUs, models, benchmark rows,
step tables, layers, the memory reserve; not the nodes and their prices: `unpriced_content`) and the fit's own
arguments. A change of any of it or of the code is a new key, never a stale answer; a file that cannot be read is
fitted again. Files are JSON (no code runs on load), written whole (a temporary file renamed). `PLANNER_CACHE_DIR`
names the folder (default `$XDG_CACHE_HOME/planner` or `~/.cache/planner`); `off` turns the cache off. Nothing is
written where the folder cannot be created.

A cache file is untrusted input (`read_entry`): only a regular file within a size bound is read (planner/loading.py's
bounded reader: a FIFO or a link to /dev/zero is refused at once), JSON nested within bounds, carrying its own key
and the SHA-256 of its key and content (a damaged or hand-edited file does not match), then validated into the
fit's own types with every number finite. Anything else is a miss: fitted again and written over."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
from collections.abc import Callable
from pathlib import Path

from planner.errors import PlannerInputError
from planner.loading import parse_json, read_bounded_text

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


# the catalog's defaults the performance model reads (planner/perf/tables.py: the memory an engine may not use); the
# others are the site's costs and the scenario's words per token and peak quantile, which reach a curve through its key
PERF_DEFAULTS = ("memory_reserve_fraction",)


def unpriced_content(catalog) -> dict:
    """What of the catalog no fit or curve reads, left out of its fingerprint (`model_dump_json`'s exclude):
    - where the catalog lies, and each row's file with it (a row is named by its table and line), so a cache
      outlives a move or a fresh clone;
    - the names of the user layers (the model reads the bottom one's; a row carries its own);
    - the nodes: prices, power, racks (the model reads a GPU, never a node; a curve's key carries what a node gives
      it, as the hop bandwidth), and whose entry gave a price;
    - the defaults other than PERF_DEFAULTS.
    So a what-if on a price, a node or a site cost, or a user catalog of nodes alone, keeps every fit and priced
    curve (tests/test_disk_caches.py checks that planner/perf reads none of these)."""
    return {"steps": True, "directory": True, "systems": True, "price_layers": True, "benchmarks": {"__all__": {"path"}},
            "layers": set(range(1, len(catalog.layers))),
            "defaults": {name for name in type(catalog.defaults).model_fields if name not in PERF_DEFAULTS}}


def catalog_fingerprint(catalog) -> str:
    """SHA-256 of the code and of the catalog's content the performance model reads (`unpriced_content` left out;
    kept with the catalog: it does not change)."""
    derived = catalog.derived
    if "fingerprint" not in derived:
        digest = hashlib.sha256(_code_digest().encode())
        digest.update(catalog.model_dump_json(exclude=unpriced_content(catalog)).encode())
        for table in catalog.steps:
            digest.update(repr((Path(table.path).name, table.origin, sorted(table.columns.items()))).encode())
        derived["fingerprint"] = digest.hexdigest()
    return derived["fingerprint"]


MAX_ENTRY_BYTES = 8 * 1024 * 1024  # a fit is ~1 KB, a priced curve ~50 KB (planner/perf/curve_cache.py)


def _fields(value) -> dict:
    """A dataclass's fields, one level (json.dumps' `default`: it serializes the values, tuples as lists, itself)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    raise TypeError(f"{type(value).__name__} is not JSON")


def _payload_text(payload) -> str:
    """The canonical JSON of a payload (keys sorted; dataclasses as their fields): what the seal is taken over, and
    what is written (the same as dataclasses.asdict's JSON, without its deep copies)."""
    return json.dumps(payload, sort_keys=True, default=_fields)


def _sealed(key_text: str, payload_text: str) -> str:
    return hashlib.sha256((key_text + "\0" + payload_text).encode()).hexdigest()


def read_entry(path: Path, key_text: str, what: str):
    """The payload kept at `path` for `key_text`, or None: not kept, not a regular file, over the size bound, not
    JSON, nested too deep, another key's, or its content not what was written (the seal)."""
    try:
        document = parse_json(read_bounded_text(path, what, MAX_ENTRY_BYTES), str(path))
        if not isinstance(document, dict) or document.get("key") != key_text:
            return None
        payload = document.get("payload")
        return payload if document.get("sha256") == _sealed(key_text, _payload_text(payload)) else None
    except (PlannerInputError, ValueError, TypeError, RecursionError, MemoryError):
        return None


def write_entry(path: Path, key_text: str, payload) -> bool:
    """Keep `payload` (JSON values and dataclasses of them) at `path` under `key_text`, sealed; False where it could
    not be written (a read-only home). The payload is serialized once: the seal is taken over the text written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        text = _payload_text(payload)
        document = f'{{"key": {json.dumps(key_text)}, "sha256": "{_sealed(key_text, text)}", "payload": {text}}}'
        temporary.write_text(document, encoding="utf-8")
        os.replace(temporary, path)
        return True
    except (OSError, ValueError):
        return False


def finite_numbers(value) -> bool:
    """Whether every number in a dataclass (or list, dict or tuple of them) is finite (booleans aside)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            pending.extend(getattr(item, f.name) for f in dataclasses.fields(item))
        elif isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
        elif isinstance(item, float) and not math.isfinite(item):
            return False
    return True


def cached_dataclass(catalog, name: tuple, kind: type, compute: Callable[[], object],
                     valid: Callable[[object], bool] = lambda value: True):
    """`compute()` (a dataclass of `kind` whose fields are numbers and strings), from the disk cache when a fit with
    this catalog, code and `name` was kept (and passes `valid`: what the types alone do not say), else computed and
    kept."""
    directory = cache_directory()
    if directory is None:
        return compute()
    key_text = catalog_fingerprint(catalog) + repr(name)
    path = directory / f"fit-{hashlib.sha256(key_text.encode()).hexdigest()}.json"
    payload = read_entry(path, key_text, "a cached calibration fit")
    if payload is not None:
        from pydantic import TypeAdapter, ValidationError

        try:
            value = TypeAdapter(kind).validate_python(payload)
            if finite_numbers(value) and valid(value):
                return value
        except (ValidationError, TypeError, ValueError):
            pass  # a payload of other types: fit again
    value = compute()
    if value is not None:  # None (nothing to fit) is no answer to keep: computed again, at no cost
        write_entry(path, key_text, value)
    return value
