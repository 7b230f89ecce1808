"""Priced engine curves kept between runs, so a what-if re-prices only what it changed.

Candidate pricing asks the performance model for one curve per engine (model, GPU, engine and version, layout,
precision, lengths, percentile, speculation, network hop): its points over the concurrency or arrival-rate ladder,
or why it has none. The open-loop solve behind a curve takes 0.1-1 s, and a realistic scenario prices hundreds, so
most of a plan's time is spent there; the integer program takes a fraction of a second.

A curve is kept as priced: up to its reach (planner/perf/reach.py) or whole, and says which (`complete`); a kept
curve cut for one scenario's limits serves another only where it reaches a point all of that one's limits refuse
(`PricedCurve.serves`), else it is priced again, further, and written over.

A curve is stored under a key that is the SHA-256 of everything it depends on: the curve's own arguments (the
candidate builder's memo key, `repr` of frozen dataclasses and numbers), the source of the whole `planner` package,
the catalog's content the model reads (`fit_cache.catalog_fingerprint`: GPUs, models, benchmark rows, step tables;
not the nodes and their prices, so a price or node what-if prices nothing again), the
shipped engine tables (`catalogs/engines/*.csv`, read by planner/perf/engines.py beside the catalog) and, where
aiconfigurator answers, its package version. Any change is a new key, never a stale answer.

A cache file is untrusted input (`fit_cache.read_entry`): a regular file within a size bound, JSON nested within
bounds, carrying its key and the SHA-256 of key and content, then validated into the model's own types (pydantic)
with every number finite and no figure negative; anything else is a miss, priced again and written over. Files are
JSON (no code runs on load), written whole (a temporary file renamed). A curve's ceiling (the highest rate of its
ladder, planner/candidates/bounds.py) is kept beside it under its own key, so a what-if decides which curves to
leave unpriced without the closed loops that give the ceilings; so is a curve's floor found unused (the piece of its
ladder that showed its asks use no rate above the floor, so it was never priced). The
folder is `fit_cache.cache_directory()` (`PLANNER_CACHE_DIR`; `off` turns it off) and is kept under
`MAX_CACHE_BYTES` of curves, the least recently written removed first."""

from __future__ import annotations

import functools
import hashlib
import math
import os
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel, ConfigDict, StrictBool, ValidationError

from planner.catalog import default_catalog_dir
from planner.perf.fit_cache import cache_directory, catalog_fingerprint, finite_numbers, read_entry, write_entry
from planner.perf.reach import PricedCurve
from planner.perf.types import PerfResult

PREFIX = "curve-"
MAX_CACHE_BYTES = 256 * 1024 * 1024  # all curves kept; beyond it the oldest go
FORMAT = 2  # the file layout; a new one is a new key (2: a curve says whether its whole ladder was priced)


class _Stored(BaseModel):
    """A kept curve as written: its points (or why none) and whether every rate of its ladder was priced."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # every typed number finite (in C, as it is read)
    points: list[PerfResult] | str
    complete: StrictBool


@functools.cache
def _package_digest() -> str:
    """SHA-256 of the planner package's source (every module: a curve may depend on any helper it calls)."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@functools.cache
def _engine_tables_digest() -> str:
    """SHA-256 of the shipped engine tables (read once per process, as planner/perf/engines.py reads them)."""
    digest = hashlib.sha256()
    folder = default_catalog_dir() / "engines"
    for path in sorted(folder.glob("*.csv")) if folder.is_dir() else []:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _aic_version() -> str:
    try:
        return metadata.version("aiconfigurator-core")
    except metadata.PackageNotFoundError:
        return "absent"


@functools.cache
def _adapter():
    from pydantic import TypeAdapter

    return TypeAdapter(_Stored)


def _plausible(points: list[PerfResult]) -> bool:
    """Every number finite (the typed ones as read: `_Stored`; the expected-error bands', of no declared type,
    here), no figure a plan reads negative, at least one GPU and one sequence per point."""
    for point in points:
        if point.expected_error is not None and not finite_numbers(point.expected_error):
            return False
        for name in ("ttft_ms", "itl_ms", "e2e_ms", "tpot_ms", "request_throughput_rps", "output_tokens_per_s"):
            value = getattr(point, name)
            if value is not None and value < 0:
                return False
        if point.gpus_per_instance < 1 or (point.concurrency is not None and point.concurrency < 1):
            return False
    return True


class CurveCache:
    """The priced curves of one catalog on disk (module docstring); `None`-free: build it with `curve_cache()`."""

    def __init__(self, directory: Path, base: str):
        self.directory, self.base = directory, base
        self.hits = self.misses = self.written = 0

    def _path(self, key: tuple) -> Path:
        name = hashlib.sha256((self.base + "\0" + repr(key)).encode()).hexdigest()
        return self.directory / f"{PREFIX}{name}.json"

    def get(self, key: tuple) -> PricedCurve | None:
        """The curve kept under `key`, or None (not kept, or the file is not a valid curve: a miss)."""
        payload = read_entry(self._path(key), repr(key), "a cached engine curve")
        value = None
        if payload is not None:
            try:
                stored = _adapter().validate_python(payload)
                value = PricedCurve(stored.points, stored.complete)
            except (ValidationError, TypeError, ValueError):
                value = None
            if value is not None and not isinstance(value.points, str) and not _plausible(value.points):
                value = None
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
        return value

    def put(self, key: tuple, value: PricedCurve) -> None:
        """Keep a curve (nothing is written where the folder cannot be)."""
        if write_entry(self._path(key), repr(key), {"points": value.points, "complete": value.complete}):
            self.written += 1

    def get_ceiling(self, key: tuple) -> tuple[bool, float | None]:
        """(whether one is kept, the ceiling kept for the curve of `key`: the highest rate of its ladder,
        planner/candidates/bounds.py, None for a curve without one); anything but null or a finite positive number
        is a miss."""
        ceiling_key = ("ceiling", *key)
        payload = read_entry(self._path(ceiling_key), repr(ceiling_key), "a cached curve ceiling")
        if isinstance(payload, dict) and set(payload) == {"ceiling"}:
            value = payload["ceiling"]
            if value is None or (type(value) is float and math.isfinite(value) and value > 0):
                self.hits += 1
                return True, value
        self.misses += 1
        return False, None

    def put_ceiling(self, key: tuple, value: float | None) -> None:
        ceiling_key = ("ceiling", *key)
        if write_entry(self._path(ceiling_key), repr(ceiling_key), {"ceiling": value}):
            self.written += 1

    def get_unused_floor(self, key: tuple, reach) -> tuple[bool, float | None]:
        """(whether one is kept, the lowest rate above which the asks of `reach` were found to use no point of the
        curve of `key`: its floor, planner/candidates/bounds.py, when a piece of its ladder showed it); anything but
        a finite number at or above 0 is a miss."""
        floor_key = ("unused floor", *key, reach)
        payload = read_entry(self._path(floor_key), repr(floor_key), "a cached curve floor")
        if isinstance(payload, dict) and set(payload) == {"floor_rps"}:
            value = payload["floor_rps"]
            if type(value) is float and math.isfinite(value) and value >= 0:
                self.hits += 1
                return True, value
        self.misses += 1
        return False, None

    def put_unused_floor(self, key: tuple, reach, floor_rps: float) -> None:
        floor_key = ("unused floor", *key, reach)
        if write_entry(self._path(floor_key), repr(floor_key), {"floor_rps": floor_rps}):
            self.written += 1

    def trim(self, max_bytes: int = MAX_CACHE_BYTES) -> int:
        """Remove the least recently written curves until the kept ones take at most 80% of `max_bytes` (when they
        exceed it); the number removed."""
        try:
            entries = [(e.stat().st_mtime, e.stat().st_size, e.path) for e in os.scandir(self.directory)
                       if e.name.startswith(PREFIX) and e.is_file(follow_symlinks=False)]  # fmt: skip
        except OSError:
            return 0
        total = sum(size for _, size, _ in entries)
        if total <= max_bytes:
            return 0
        removed = 0
        for _, size, path in sorted(entries):
            if total <= 0.8 * max_bytes:
                break
            try:
                os.remove(path)
            except OSError:
                continue
            total -= size
            removed += 1
        return removed


def curve_cache(catalog, with_aic: bool, anchored: bool = True) -> CurveCache | None:
    """The curve cache of this catalog (None when `PLANNER_CACHE_DIR` turns caching off), for curves priced with
    aiconfigurator's tables or not and anchored on measured rows or not."""
    directory = cache_directory()
    if directory is None:
        return None
    parts = (f"format {FORMAT}", _package_digest(), catalog_fingerprint(catalog), _engine_tables_digest(),
             f"aic {_aic_version()}" if with_aic else "no aic", *(() if anchored else ("not anchored",)))  # fmt: skip
    return CurveCache(directory, hashlib.sha256("\0".join(parts).encode()).hexdigest())
