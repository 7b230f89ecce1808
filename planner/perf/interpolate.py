"""Layer 2 of the performance model: interpolation between measured rows (provenance 'interpolated').

Rows of the same model, GPU, TP, precision and run kind are interpolated linearly in log-log space:
over concurrency at a fixed ISL/OSL, or over ISL (OSL) between two rows of the same OSL (ISL) and concurrency.
Never extrapolated: a point outside the measured range is left to the roofline.
"""

from __future__ import annotations

import math

from planner.catalog import BenchmarkRow, Catalog
from planner.perf.tables import answers_at, instance_memory, measurements_first, result_from_row, rows_for
from planner.perf.types import PerfQuery, PerfResult

_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "request_throughput_rps", "output_tokens_per_s")


def _log_interp(x: float, x0: float, x1: float, y0: float | None, y1: float | None) -> float | None:
    if y0 is None or y1 is None:
        return None
    t = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return math.exp(math.log(y0) + t * (math.log(y1) - math.log(y0)))


def _blend(low: PerfResult, high: PerfResult, axis: str, value: float, low_x: float, high_x: float, **fields) -> PerfResult:
    metrics = {m: _log_interp(value, low_x, high_x, getattr(low, m), getattr(high, m)) for m in _METRICS}
    osl = fields.get("osl", low.osl)
    e2e = None
    if metrics["ttft_ms"] is not None and metrics["tpot_ms"] is not None and osl:
        e2e = metrics["ttft_ms"] + (osl - 1) * metrics["tpot_ms"]
    return PerfResult(
        model=low.model, gpu=low.gpu, tp=low.tp, precision=low.precision,
        isl=fields.get("isl", low.isl), osl=osl, concurrency=fields.get("concurrency", low.concurrency),
        gpus_per_instance=low.gpus_per_instance, ttft_ms=metrics["ttft_ms"], itl_ms=metrics["itl_ms"], e2e_ms=e2e,
        ttft_ms_bound=None, itl_ms_bound=None, tpot_ms=metrics["tpot_ms"], percentile=low.percentile,
        statistic=low.statistic,
        request_throughput_rps=metrics["request_throughput_rps"], output_tokens_per_s=metrics["output_tokens_per_s"],
        # between estimates it is still an estimate: keep whose
        provenance=f"{low.provenance} interpolated" if low.provenance.startswith("aic:") else "interpolated",
        source=f"between {low.source} and {high.source}",
        memory=fields.get("memory", low.memory),
        derivations=(f"log-log interpolation over {axis} between {low_x:g} and {high_x:g}",),
    )  # fmt: skip


def over_concurrency(group: list[BenchmarkRow], concurrency: int, catalog: Catalog) -> PerfResult | None:
    """The point at `concurrency` between the two measured concurrencies around it, if any."""
    online = sorted((r for r in group if r.concurrency is not None), key=lambda r: r.concurrency)
    for low, high in zip(online, online[1:]):
        if low.concurrency < concurrency < high.concurrency:
            return _blend(
                result_from_row(low, catalog), result_from_row(high, catalog), "concurrency", concurrency,
                low.concurrency, high.concurrency, concurrency=concurrency,
            )
    return None


def concurrency_grid(group: list[BenchmarkRow]) -> list[int]:
    """Concurrencies strictly between measured ones (a coarse ladder), to search for the best point under limits."""
    measured = sorted({r.concurrency for r in group if r.concurrency is not None})
    grid: set[int] = set()
    for low, high in zip(measured, measured[1:]):
        step = max(1, (high - low) // 8)
        grid.update(range(low + step, high, step))
    return sorted(grid)


def over_lengths(query: PerfQuery, catalog: Catalog, percentile: float | None = None) -> list[PerfResult]:
    """Points at the query's ISL/OSL interpolated between rows that bracket it on one axis, per engine variant,
    from rows whose statistic is the percentile (`tables.answers_at`)."""
    if query.isl is None or query.osl is None:
        return []
    rows = [
        r for r in rows_for(catalog, query.model, query.gpu, query.engine)
        if r.isl is not None and r.osl is not None
        and (query.tp is None or r.tp == query.tp) and (query.precision is None or r.precision == query.precision)
        and answers_at(r, percentile)
    ]  # fmt: skip
    rows = measurements_first(rows)
    results: dict[tuple, PerfResult] = {}
    for fixed, moving in (("osl", "isl"), ("isl", "osl")):
        target = getattr(query, moving)
        same = [r for r in rows if getattr(r, fixed) == getattr(query, fixed)]
        keyed: dict[tuple, list[BenchmarkRow]] = {}
        for r in same:
            keyed.setdefault((r.tp, r.precision, r.gpus, r.per, r.run_kind, r.concurrency, r.origin, r.table, r.statistic), []).append(r)
        for key in sorted(keyed, key=str):
            line = sorted(keyed[key], key=lambda r: getattr(r, moving))
            for low, high in zip(line, line[1:]):
                low_x, high_x = getattr(low, moving), getattr(high, moving)
                if low_x < target < high_x:
                    point = _blend(
                        result_from_row(low, catalog), result_from_row(high, catalog), moving.upper(), target,
                        low_x, high_x, isl=query.isl, osl=query.osl,
                        memory=instance_memory(
                            catalog, low.model, low.gpu, result_from_row(low, catalog).gpus_per_instance,
                            low.precision or "bf16", query.isl, query.osl,
                        ),
                    )
                    results.setdefault(key[:5], point)
    return [results[k] for k in sorted(results, key=str)]
