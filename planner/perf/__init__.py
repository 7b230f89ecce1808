"""The performance model: per (engine config, workload) latency and throughput, each with its provenance.

Layers (design.md): measured table rows first; interpolation and the calibrated roofline model come next.
Today only exact rows answer; anything else is an honest `PerfMiss` with the reason.
"""

from __future__ import annotations

from planner.catalog import Catalog
from planner.perf.tables import group_by_engine, matching_rows, result_from_row
from planner.perf.types import MemoryFit, PerfMiss, PerfQuery, PerfResult

__all__ = [
    "MemoryFit", "PerfMiss", "PerfQuery", "PerfResult",
    "estimate", "operating_points", "limit_violation", "throughput_key",
]  # fmt: skip


def limit_violation(result: PerfResult, ttft_ms: float | None, itl_ms: float | None, e2e_ms: float | None) -> str | None:
    """None when the point meets every given limit, else why not. A value the source did not record meets a
    limit only when the source states a bound at or below it (e.g. 'TTFT < 500 ms')."""
    e2e_bound = None
    if result.ttft_ms_bound is not None and result.itl_ms_bound is not None and result.osl:
        e2e_bound = result.ttft_ms_bound + (result.osl - 1) * result.itl_ms_bound
    checks = (
        ("TTFT", ttft_ms, result.ttft_ms, result.ttft_ms_bound),
        ("ITL", itl_ms, result.itl_ms, result.itl_ms_bound),
        ("E2E", e2e_ms, result.e2e_ms, e2e_bound),
    )
    for name, limit, value, bound in checks:
        if limit is None:
            continue
        if value is not None:
            if value > limit:
                return f"{name} {value:g} ms > limit {limit:g} ms"
        elif bound is not None:
            if bound > limit:
                return f"{name} only known to be below {bound:g} ms, which is above the limit {limit:g} ms"
        else:
            return f"{name} not recorded by the source"
    return None


def throughput_key(result: PerfResult) -> float:
    """Rank operating points by request throughput (output tokens/s when requests are unknown)."""
    if result.request_throughput_rps is not None:
        return result.request_throughput_rps
    return (result.output_tokens_per_s or 0.0) * 1e-9


def _best(results: list[PerfResult], query: PerfQuery) -> PerfResult | str:
    usable = [r for r in results if r.memory is None or r.memory.fits]
    if not usable:
        return f"does not fit in memory: {results[0].memory.reason}"
    meeting = [r for r in usable if limit_violation(r, query.ttft_ms, query.itl_ms, query.e2e_ms) is None]
    if not meeting:
        reasons = sorted({limit_violation(r, query.ttft_ms, query.itl_ms, query.e2e_ms) for r in usable})
        return "no measured point meets the limits: " + "; ".join(reasons)
    return max(meeting, key=lambda r: (throughput_key(r), -(r.concurrency or 0)))


def estimate(query: PerfQuery, catalog: Catalog) -> PerfResult | PerfMiss:
    """Answer one query: at the given concurrency, or the highest-throughput point meeting the limits."""
    rows = matching_rows(catalog, query)
    if not rows:
        return PerfMiss(query, _no_data_reason(query))
    best = _best([result_from_row(row, catalog) for row in rows], query)
    return PerfMiss(query, best) if isinstance(best, str) else best


def operating_points(query: PerfQuery, catalog: Catalog) -> list[PerfResult] | PerfMiss:
    """The best point meeting the limits for each engine variant (TP, precision) that has data."""
    rows = matching_rows(catalog, query)
    if not rows:
        return PerfMiss(query, _no_data_reason(query))
    points, reasons = [], []
    for group in group_by_engine(rows):
        best = _best([result_from_row(row, catalog) for row in group], query)
        if isinstance(best, str):
            reasons.append(best)
        else:
            points.append(best)
    return points if points else PerfMiss(query, "; ".join(sorted(set(reasons))))


def _no_data_reason(query: PerfQuery) -> str:
    engine = "".join(
        part for part in (
            f" TP{query.tp}" if query.tp else "",
            f" {query.precision}" if query.precision else "",
            f" at concurrency {query.concurrency}" if query.concurrency else "",
        )
    )  # fmt: skip
    return (
        f"no benchmark row for {query.model} on {query.gpu}{engine} at ISL {query.isl} / OSL {query.osl} "
        "(only exact rows answer for now; the roofline model is not built yet)"
    )
