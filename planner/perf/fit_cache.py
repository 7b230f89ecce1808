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
fit's own types with every number finite. Anything else is a miss: fitted again and written over.

The shipped catalog's fits travel with the package under the same keys (`shipped_fits`, made by
planner/perf/ship_fits.py): read where no kept fit is, with the same checks, so a first run fits nothing."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import os
from collections.abc import Callable, Iterator
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


def _entry_head(key_text: str) -> str:
    """How an entry's text begins: its key, then its seal (`_entry_text`)."""
    return f'{{"key": {json.dumps(key_text)}, "sha256": "'


_PAYLOAD_MARK = '", "payload": '  # between an entry's seal and its payload's text


def _entry_text(key_text: str, payload_text: str) -> str:
    """One entry as written, in a cache file or a line of the shipped fits: key, seal, payload."""
    return _entry_head(key_text) + _sealed(key_text, payload_text) + _PAYLOAD_MARK + payload_text + "}"


def read_entry(path: Path, key_text: str, what: str):
    """The payload kept at `path` for `key_text`, or None: not kept, not a regular file, over the size bound, not
    laid out as `write_entry` writes it for this key, its payload's text not what was sealed, not JSON or nested too
    deep. The seal is checked on the text as read (nothing serialized again), before the payload is parsed."""
    try:
        text = read_bounded_text(path, what, MAX_ENTRY_BYTES)
        head = _entry_head(key_text)
        if not (text.startswith(head) and text.endswith("}")):
            return None
        seal, found, payload_text = text[len(head) : -1].partition(_PAYLOAD_MARK)
        if not found or seal != _sealed(key_text, payload_text):
            return None
        return parse_json(payload_text, str(path))
    except (PlannerInputError, ValueError, TypeError, RecursionError, MemoryError):
        return None


def write_entry(path: Path, key_text: str, payload) -> bool:
    """Keep `payload` (JSON values and dataclasses of them) at `path` under `key_text`, sealed; False where it could
    not be written (a read-only home). The payload is serialized once: the seal is taken over the text written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        temporary.write_text(_entry_text(key_text, _payload_text(payload)), encoding="utf-8")
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


SHIPPED_FITS = Path(__file__).with_name("shipped_fits.json")  # made by `python -m planner.perf.ship_fits`
MAX_SHIPPED_BYTES = 4 * 1024 * 1024
USE_SHIPPED = True  # off in tests of fitting and keeping fits
_AFRESH: dict | None = None  # within `fitting_afresh`: key text -> every fit made


@contextlib.contextmanager
def fitting_afresh() -> Iterator[dict]:
    """Within it every fit is made here (no kept or shipped fit read, none kept), and recorded in the dict it
    yields (key text -> fit): how the shipped fits are made (planner/perf/ship_fits.py)."""
    global _AFRESH
    previous, _AFRESH = _AFRESH, {}
    try:
        yield _AFRESH
    finally:
        _AFRESH = previous


@functools.cache
def shipped_fits() -> dict:
    """Key text -> payload of the fits shipped with the package: the shipped catalog's, made with this code, so a
    first run fits nothing. A fit of another code or catalog has another key (not found here: fitted). Read as a
    cache file is: within a size bound, each entry sealed (one that does not match its seal is left out); {} where
    the file is absent or unreadable. Its payloads are validated where they are used, as a kept fit's are."""
    try:
        document = parse_json(read_bounded_text(SHIPPED_FITS, "the shipped calibration fits", MAX_SHIPPED_BYTES),
                              str(SHIPPED_FITS))  # fmt: skip
    except (PlannerInputError, OSError, ValueError, TypeError, RecursionError, MemoryError):
        return {}
    entries = document.get("fits") if isinstance(document, dict) else None
    return {entry["key"]: entry["payload"] for entry in entries if isinstance(entry, dict) and isinstance(entry.get("key"), str)
            and entry.get("sha256") == _sealed(entry["key"], _payload_text(entry.get("payload")))
            } if isinstance(entries, list) else {}  # fmt: skip


def shipped_document(fits: dict) -> str:
    """The text of a shipped-fits file holding `fits` (key text -> fit), each entry sealed, in key order."""
    entries = [_entry_text(key_text, _payload_text(fits[key_text])) for key_text in sorted(fits)]
    return '{"fits": [\n' + ",\n".join(entries) + "\n]}\n"


def _validated(payload, kind: type, valid: Callable[[object], bool]):
    """A kept or shipped payload as a `kind` that passes `valid` with every number finite, else None."""
    if payload is None:
        return None
    from pydantic import TypeAdapter, ValidationError

    try:
        value = TypeAdapter(kind).validate_python(payload)
    except (ValidationError, TypeError, ValueError):
        return None  # a payload of other types: fit again
    return value if finite_numbers(value) and valid(value) else None


def cached_dataclass(catalog, name: tuple, kind: type, compute: Callable[[], object],
                     valid: Callable[[object], bool] = lambda value: True):
    """`compute()` (a dataclass of `kind` whose fields are numbers and strings), from the disk cache when a fit with
    this catalog, code and `name` was kept, else from the shipped fits (`shipped_fits`), else computed; either
    passes `valid` (what the types alone do not say). Kept on disk unless the cache is off."""
    key_text = catalog_fingerprint(catalog) + repr(name)
    if _AFRESH is not None:
        value = compute()
        if value is not None:
            _AFRESH[key_text] = value
        return value
    directory = cache_directory()
    path = None if directory is None else directory / f"fit-{hashlib.sha256(key_text.encode()).hexdigest()}.json"
    value = None if path is None else _validated(read_entry(path, key_text, "a cached calibration fit"), kind, valid)
    if value is None:
        value = _validated(shipped_fits().get(key_text), kind, valid) if USE_SHIPPED else None
        if value is None:
            value = compute()
        if value is not None and path is not None:  # None (nothing to fit) is no answer to keep: computed again
            write_entry(path, key_text, value)
    return value
