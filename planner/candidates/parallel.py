"""Engine curves priced before the enumeration, in parallel: forked worker processes (`--executor process`, the
default) or Ray tasks (`--executor ray`), into the builder's memo, so the enumeration finds them there and its result
is the same whatever the number of processes."""

from __future__ import annotations

import dataclasses
import multiprocessing
from collections.abc import Callable
from dataclasses import dataclass

from planner import deadline
from planner.catalog import Catalog
from planner.perf.reach import PricedCurve
from planner.workers import can_fork, executor, map_on_ray, worker_count  # noqa: F401 (worker_count: read by tests as candidates.worker_count)

from planner.candidates.curves import modeled_curve_keys, price_curve


CANDIDATE_STAGE = "pricing candidates (workload x system)"
PARALLEL_MIN_CURVES = 24  # a scenario with fewer curves prices them all in one pass (no first pass to bound them)
# fewer pending curves than this are priced in this process: forking costs more than it saves (about 0.1 s; the
# fp4 alternative's 20 leading curves priced here took 1.5 s, forked 0.9 s)
FORK_MIN_CURVES = 8
_FORKED = None  # the builder forked workers price curves for (inherited by fork, never pickled)


def _price_on_ray(context: tuple[Catalog, bool, bool], item: tuple) -> PricedCurve:
    """A Ray task's curve: `item` is (memo key, reach)."""
    return price_curve(context, *item)


def _price_curve(key: tuple) -> tuple:
    """In a forked worker: one engine curve (the builder's memo key) and its points (none past the deadline), kept in
    the curve cache from here (`CandidateBuilder.priced`): the parent does not write it again. A curve with a floor
    is settled (`CandidateBuilder.settle_floor`): (key, None) where it serves no rate above it, its points unpriced."""
    deadline.check(CANDIDATE_STAGE)
    if key in _FORKED.floors and _FORKED.settle_floor(key):
        return key, None
    return key, _FORKED.priced(key)


def _prefetch_on_ray(builder, keys: list[tuple], progress) -> int:
    """The curves as Ray tasks (`--executor ray`): the catalog, its calibration fits made, goes to the object store
    once; each task prices a few curves with `price_curve`. Checked against the deadline as results come back."""
    if progress is not None:
        progress(0, len(keys), f"pricing {len(keys)} engine curves on Ray")
    context = builder.context

    def report(done: int, total: int) -> None:
        deadline.check(CANDIDATE_STAGE)
        if progress is not None:
            progress(done, total)

    items = [(key, builder.reach(key)) for key in keys]
    for key, points in zip(keys, map_on_ray(_price_on_ray, context, items, report)):
        builder.curves[key] = points
        builder.keep_curve(key)
    return len(keys)


@dataclass(frozen=True)
class CurveTally:
    """The modeled engine curves an enumeration asks for before it starts: how many, how many were kept from an
    earlier run (or this process), how many were priced in parallel and where; the rest are priced as reached."""

    needed: int = 0
    kept: int = 0
    priced: int = 0
    where: str = ""
    unpriced: int = 0  # left unpriced: every candidate of theirs dominated by a bound (planner/candidates/bounds.py)

    def describe(self) -> str:
        """'224 modeled engine curves: 98 kept from earlier runs, 126 priced on 2 processes' (empty: none needed)."""
        if not self.needed:
            return ""
        parts = [f"{self.kept} kept from earlier runs"] if self.kept else []
        if self.priced:
            parts.append(f"{self.priced} priced {self.where}")
        if self.needed - self.kept - self.priced > 0:
            parts.append(f"{self.needed - self.kept - self.priced} priced here as reached")
        if self.unpriced:
            parts.append(f"{self.unpriced} left unpriced, dominated by a bound")
        return f"{self.needed} modeled engine curve{'s' if self.needed != 1 else ''}: {', '.join(parts)}"


def prefetched_curves(builder) -> list[tuple]:
    """The memo keys of the modeled curves `prefetch_curves` prices for the builder's enumeration (whether it wants
    them or not), in the order asked: all but those of the reference engine on a (model, GPU) with benchmark rows,
    which data may answer."""
    catalog = builder.catalog
    with_rows = {(row.model, row.gpu) for row in catalog.benchmarks}
    keys: dict[tuple, None] = {}
    for workload, offer, reference, key in modeled_curve_keys(builder):
        if not (reference and (workload.model, catalog.systems[offer.system].gpu) in with_rows):
            keys[key] = None
    return list(keys)


def _fit_before_fork(catalog: Catalog, keys) -> None:
    """The calibration fits of the curves of `keys` and the model's lazy imports, once here before workers are
    forked (each would otherwise fit them again)."""
    from planner.perf import open_loop  # noqa: F401 (imported once, before the fork)
    from planner.perf.calibration import fit_kernels
    from planner.perf.engines import calibrated

    for model, gpu, engine, version in sorted({(key[0].model, key[0].gpu, key[0].engine, key[0].engine_version or "")
                                               for key in keys}):  # fmt: skip
        calibrated(catalog, model, gpu, engine, version or None)  # the calibration fits, kept with the catalog
        fit_kernels(catalog, catalog.gpus[gpu].architecture)


def prefetch_curves(builder, progress: Callable[..., None] | None = None, which: str = "") -> CurveTally:
    """Price the engine curves the enumeration will ask the roofline for, in parallel processes, into the builder's
    memo; the enumeration then runs as before and finds them there, so its result is the same whatever the number of
    processes (the curves are pure functions of their keys). Curves of a (model, GPU) with benchmark rows are left to
    the enumeration (data may answer and need none). The calibration fits and lazy imports happen here, once,
    before the fork. On `--executor ray` (planner.workers.executor) every pending curve is a Ray task instead.
    Returns the tally: curves needed, kept from earlier runs, priced in parallel (none where there are too few, one
    process, or no fork on this platform)."""
    global _FORKED
    scenario, catalog = builder.scenario, builder.catalog
    if "modeled" not in scenario.perf_sources:
        return CurveTally()
    pending: dict[tuple, None] = {}
    needed = [key for key in prefetched_curves(builder) if builder.wanted(key)]
    for key in needed:
        if not builder.has_curve(key) and not builder.floor_known_unused(key):
            pending[key] = None
    tally = CurveTally(len(needed), len(needed) - len(pending))
    on_ray = executor() == "ray" and bool(pending)
    workers = min(worker_count(), len(pending) // 4)
    if not on_ray and (workers < 2 or len(pending) < FORK_MIN_CURVES or not can_fork()):
        return tally
    _fit_before_fork(catalog, pending)
    rest = list(pending)
    if on_ray:
        return dataclasses.replace(tally, priced=_prefetch_on_ray(builder, rest, progress), where="on Ray")
    if progress is not None:
        kept = f" ({tally.kept} already priced)" if tally.kept else ""
        progress(0, len(rest), f"pricing {len(rest)} {which}engine curves on {workers} processes{kept}")
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    _FORKED = builder
    done = priced = 0
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            for done, (key, points) in enumerate(pool.map(_price_curve, rest, chunksize=4), start=1):
                if deadline.remaining_s() is not None and deadline.remaining_s() <= 0:
                    pool.shutdown(wait=False, cancel_futures=True)  # the workers stop at their next curve
                    deadline.check(CANDIDATE_STAGE)
                if points is None:  # its floor unused: never priced (kept on disk by the worker)
                    builder.note_floor_unused(key)
                else:
                    builder.curves[key] = points  # kept on disk by the worker that priced it (builder.priced)
                    priced += 1
                if progress is not None:
                    progress(done, len(rest))
    except (BrokenProcessPool, OSError):  # a worker killed (memory) or no process to start: price the rest here
        pass
    finally:
        _FORKED = None
    return dataclasses.replace(tally, priced=priced, where=f"on {workers} processes")


class PricingAhead:
    """Engine curves priced on forked workers while this process does something else (a plan's solve): `finish`
    puts them among the builder's curves (the shared memo of the catalog), `cancel` drops what is not done."""

    def __init__(self, builder, keys: list[tuple]):
        from concurrent.futures import ProcessPoolExecutor

        global _FORKED
        self.builder = builder
        _fit_before_fork(builder.catalog, keys)
        _FORKED = builder
        try:
            self.pool = ProcessPoolExecutor(min(worker_count(), 2), mp_context=multiprocessing.get_context("fork"))
            self.results = self.pool.map(_price_curve, keys, chunksize=1)
        finally:
            _FORKED = None

    def finish(self) -> int:
        """Wait for the curves and keep them; how many. A worker lost, or the command's deadline reached, keeps
        what came back (the enumeration that asks for the rest prices it, or says the deadline ran out)."""
        from concurrent.futures.process import BrokenProcessPool

        done = 0
        try:
            for key, points in self.results:
                self.builder.curves[key] = points
                done += 1
        except (BrokenProcessPool, OSError, deadline.TimeLimitError):
            pass
        finally:
            self.pool.shutdown(wait=True, cancel_futures=True)
        return done

    def cancel(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

