"""The Python API for exploring: one engine's performance and curve, peak rates, users, catalog entries, sweeps."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from planner.catalog import Catalog, CatalogDirs, load_catalog
from planner.errors import PlannerInputError
from planner.api.planning import perf_layers
from planner.answers import PeakAnswer, PerfAnswer, UsersAnswer
from planner.landscape import CurveAnswer, curve_in_catalog, engine_landscape, workload_landscapes  # noqa: F401 (planner.api's)
from planner.perf import PerfMiss, PerfQuery, estimate
from planner.perf.shapes import tensor_split_refusal
from planner.requirements import (
    daily_active_users,
    peak_rps_from_mean,
    requests_per_day,
)


def perf_point(query: PerfQuery, catalog_dirs: CatalogDirs = None, perf_source: str | None = None,
               percentile: float | None = None, layout_given: bool = False) -> PerfAnswer:  # fmt: skip
    """Latency and throughput of one engine config, with provenance (or why there is no answer); latencies at
    `percentile` (None: means), the limits of the query at it too. `layout_given`: the TP came from `--layout`
    (errors name that option)."""
    catalog = load_catalog(catalog_dirs)
    query = _check_query_ids(query, catalog, layout_given)
    answer = estimate(query, catalog, sources=perf_layers(perf_source), percentile=percentile)
    if isinstance(answer, PerfMiss):
        return PerfAnswer(query, None, answer.reason, percentile)
    return PerfAnswer(query, answer, None, percentile)


def _check_query_ids(query: PerfQuery, catalog: Catalog, layout_given: bool = False) -> PerfQuery:
    """The query with catalog ids for its model and GPU (aliases resolved), checked against the catalog: the
    precision on the GPU, TP within its largest node and splitting the attention heads as engines require (named
    as `--layout` where the layout was given so: `layout_given`, or a layout beyond TP)."""
    query = dataclasses.replace(
        query, model=catalog.resolve("model", query.model, "--model", "model"), gpu=catalog.resolve("gpu", query.gpu, "--gpu", "gpu")
    )
    gpu = catalog.gpus[query.gpu]
    if query.precision is not None and query.precision not in gpu.precisions:
        raise PlannerInputError(
            "--precision", "precision", f"{query.gpu} does not support {query.precision}; allowed: {', '.join(gpu.precisions)}"
        )
    # tensor parallelism stays within one node's NVLink domain: the largest node of this GPU bounds it
    option = "--layout" if query.layout is not None or layout_given else "--tp"
    largest = max((s.gpus_per_node for s in catalog.systems.values() if s.gpu == query.gpu), default=8)
    if query.tp is not None and query.tp > largest:
        raise PlannerInputError(
            option, option.lstrip("-"), f"TP {query.tp} spans more GPUs than the largest {query.gpu} node in the "
            f"catalog ({largest}); allowed: 1 to {largest}",
        )  # fmt: skip
    refusal = tensor_split_refusal(catalog.models[query.model], query.tp) if query.tp is not None else None
    if refusal is not None:  # no engine loads the model so: a layout to fix, not an answer
        raise PlannerInputError(option, option.lstrip("-"), refusal)
    return query


def peak(mean_rps: float, quantile: float = 0.95) -> PeakAnswer:
    """Peak requests/s at a quantile of Poisson arrivals (seed case C4)."""
    from planner.scenario import MAX_RPS

    if not (math.isfinite(mean_rps) and 0 <= mean_rps <= MAX_RPS):
        raise PlannerInputError("--mean-rps", "mean_rps", f"must be between 0 and {MAX_RPS:,.0f} (got {mean_rps:g})")
    if not 0 < quantile < 1:
        raise PlannerInputError("--quantile", "quantile", f"must be strictly between 0 and 1 (got {quantile:g})")
    return PeakAnswer(mean_rps, quantile, peak_rps_from_mean(mean_rps, quantile))


def users(rps: float, hours_per_day: float = 8.0, requests_per_user: float = 3.0) -> UsersAnswer:
    """Requests per working day and daily active users a sustained rate serves (seed case C2)."""
    for flag, name, value, low in (
        ("--rps", "rps", rps, 0.0), ("--hours", "hours", hours_per_day, 0.0), ("--requests-per-user", "requests_per_user", requests_per_user, 0.0),
    ):  # fmt: skip
        if not math.isfinite(value) or value < low or (name != "rps" and value == 0) or value > 1e9:
            raise PlannerInputError(flag, name, f"must be a finite number > 0 and at most 1e9 (got {value:g})")
    if hours_per_day > 24:
        raise PlannerInputError("--hours", "hours", f"a day has at most 24 hours (got {hours_per_day:g})")
    return UsersAnswer(
        rps, hours_per_day, requests_per_user,
        round(requests_per_day(rps, hours_per_day), 6), daily_active_users(rps, hours_per_day, requests_per_user),
    )


CATALOG_KINDS = ("gpus", "systems", "models", "benchmarks", "calibration")


def catalog_entries(kind: str, catalog_dirs: CatalogDirs = None) -> list[dict]:
    """Catalog entries of one kind as plain records (for listing)."""
    if kind not in CATALOG_KINDS:
        raise PlannerInputError("catalog", "kind", f"unknown kind '{kind}'; allowed: {', '.join(CATALOG_KINDS)}")
    catalog = load_catalog(catalog_dirs)
    if kind == "benchmarks":
        return [row.model_dump(exclude_none=True) for row in catalog.benchmarks]
    if kind == "calibration":
        from planner.perf.fit_report import calibration_entries

        return calibration_entries(catalog)
    entries = getattr(catalog, kind)
    return [entries[key].model_dump(exclude_none=True) for key in sorted(entries)]


def curve(query: PerfQuery, gpus_per_node: int = 8, catalog_dirs: CatalogDirs = None,
          perf_source: str | None = None, with_landscape: bool = False, percentile: float | None = None) -> CurveAnswer:  # fmt: skip
    """Points over concurrency for one engine (model, GPU, TP, precision, ISL/OSL) and the best under the limits;
    `with_landscape`: also every TP x precision of the model on the GPU in throughput per GPU vs per user."""

    catalog = load_catalog(catalog_dirs)
    query = _check_query_ids(query, catalog)
    sources = perf_layers(perf_source)
    answer = curve_in_catalog(query, catalog, gpus_per_node, sources, percentile)
    if not with_landscape:
        return answer
    return dataclasses.replace(answer, landscape=engine_landscape(query, catalog, gpus_per_node, sources, answer.chosen,
                                                                  percentile))  # fmt: skip


@dataclass(frozen=True)
class SweepResult:
    sweep: object  # planner.sweep.Sweep
    records: tuple[dict, ...]
    front: tuple[dict, ...]  # the Pareto front when the sweep names one


def sweep(sweep_path: Path | str, executor: str | None = None, workers: int | None = None, progress=None) -> SweepResult:
    """Plan every point of a sweep file (grid or Monte Carlo) in parallel; records in point order."""
    from planner.sweep import load_sweep, pareto_front, run_sweep

    loaded = load_sweep(sweep_path)
    if workers is not None and workers < 1:
        raise PlannerInputError("--workers", "workers", f"must be >= 1 (got {workers})")
    records = run_sweep(loaded, executor, workers, progress)
    front = pareto_front(records, loaded.pareto.x, loaded.pareto.y) if loaded.pareto else []
    return SweepResult(loaded, tuple(records), tuple(front))


