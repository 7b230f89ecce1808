"""The performance model: per (engine config, workload) latency and throughput, each with its provenance.

Layers (design.md), tried in order, data first:
1. measured      a benchmark row matches exactly (model, GPU, ISL, OSL; TP, precision, concurrency when asked);
2. interpolated  between measured rows (log-log over concurrency, ISL or OSL), never beyond them;
3. aic           NVIDIA's operator-level database (`aic.py`, the optional extra planner[aic]), when asked for;
4. modeled       the roofline (`roofline.py`) with efficiencies calibrated on the rows (`calibration.py`).
Where data exists for a query, the model does not overrule it: a limit the data misses is a miss with its reason.
"""

from __future__ import annotations

import dataclasses

from planner.catalog import Catalog
from planner.perf.calibration import efficiency_for
from planner.perf.interpolate import concurrency_grid, over_concurrency, over_lengths
from planner.perf.roofline import (
    EngineShape,
    concurrency_ladder,
    kv_bytes_for,
    steady_state,
    supports_roofline,
)
from planner.perf.tables import group_by_engine, instance_memory, matching_rows, result_from_row
from planner.perf.types import MemoryFit, PerfMiss, PerfQuery, PerfResult

__all__ = [
    "MemoryFit", "PerfMiss", "PerfQuery", "PerfResult", "SOURCES", "PERF_SOURCE_LAYERS", "TP_LADDER",
    "estimate", "operating_points", "limit_violation", "throughput_key", "modeled_curve", "model_precisions",
    "modeled_points", "best_point", "aic_unavailable_message",
]  # fmt: skip

SOURCES = ("measured", "interpolated", "modeled")
# --perf-source names -> layers, in order (aic only where installed and supported, except when asked alone)
PERF_SOURCE_LAYERS = {
    "auto": ("measured", "interpolated", "aic", "modeled"),
    "tables": ("measured", "interpolated"),
    "model": ("modeled",),
    "aic": ("aic",),
}
TP_LADDER = (1, 2, 4, 8)


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
                return f"{name} {value:.5g} ms > limit {limit:g} ms"
        elif bound is not None:
            if bound > limit:
                return f"{name} only known to be below {bound:g} ms, which is above the limit {limit:g} ms"
        else:
            return f"{name} not recorded by the source"
    return None


def throughput_key(result: PerfResult) -> float:
    """Rank points by requests/s per GPU (output tokens/s when requests are unknown)."""
    if result.request_throughput_rps is not None:
        return result.request_throughput_rps / result.gpus_per_instance
    return (result.output_tokens_per_s or 0.0) * 1e-9 / result.gpus_per_instance


def _best(results: list[PerfResult], query: PerfQuery) -> PerfResult | str:
    usable = [r for r in results if r.memory is None or r.memory.fits]
    if not usable:
        return f"does not fit in memory: {results[0].memory.reason}"
    meeting = [r for r in usable if limit_violation(r, query.ttft_ms, query.itl_ms, query.e2e_ms) is None]
    if not meeting:
        lowest = min(usable, key=lambda r: (r.concurrency or 0, r.ttft_ms or 0))
        what = "measured" if lowest.provenance != "modeled" else "modeled"
        return (
            f"no {what} point meets the limits; at the lowest concurrency ({lowest.concurrency or 'n/s'}): "
            f"{limit_violation(lowest, query.ttft_ms, query.itl_ms, query.e2e_ms)}"
        )
    return max(meeting, key=lambda r: (throughput_key(r), -(r.concurrency or 0)))


def _table_points(query: PerfQuery, catalog: Catalog, interpolate: bool) -> list[list[PerfResult]]:
    """Measured points per engine variant, plus interpolated concurrencies between them."""
    rows = matching_rows(catalog, dataclasses.replace(query, concurrency=None))
    variants = []
    for group in group_by_engine(rows):
        if query.concurrency is not None:
            exact = [result_from_row(r, catalog) for r in group if r.concurrency == query.concurrency]
            between = over_concurrency(group, query.concurrency, catalog) if interpolate and not exact else None
            points = exact or ([between] if between else [])
        else:
            points = [result_from_row(r, catalog) for r in group]
            if interpolate:
                points += [p for c in concurrency_grid(group) if (p := over_concurrency(group, c, catalog))]
        if points:
            variants.append(points)
    return variants


def model_precisions(catalog: Catalog, gpu: str) -> tuple[str, ...]:
    """Precisions worth modeling on a GPU: fp16 runs at the bf16 rate, so bf16 stands for both."""
    return tuple(p for p in catalog.gpus[gpu].precisions if p != "fp16")


def _modeled(
    query: PerfQuery,
    catalog: Catalog,
    tp: int,
    precision: str,
    percentile: float,
    beyond_capacity: bool = False,
    engine_lengths: tuple[int, int] | None = None,
) -> list[PerfResult] | str:
    model = catalog.models[query.model]
    if not supports_roofline(model):
        return f"architecture of {query.model} not published: the roofline cannot model it"
    if query.isl is None or query.osl is None:
        return "the roofline needs both ISL and OSL"
    gpu = catalog.gpus[query.gpu]
    if precision not in gpu.tflops_by_precision:
        return f"{gpu.id} does not support {precision}"
    # the engine reserves KV cache for its max ISL + OSL: that, not the request's lengths, bounds the batch
    engine_isl, engine_osl = engine_lengths or (query.isl, query.osl)
    memory = instance_memory(catalog, query.model, query.gpu, tp, precision, engine_isl, engine_osl)
    if not memory.fits:
        return f"TP{tp} {precision}: does not fit: {memory.reason}"
    shape = EngineShape(model, gpu, tp, precision, kv_bytes_for(precision))
    eff = efficiency_for(catalog, gpu.architecture)
    capacity = memory.max_concurrency_by_memory
    top = 2 * capacity if (beyond_capacity and capacity) else capacity
    ladder = [query.concurrency] if query.concurrency else concurrency_ladder(top)
    points = []
    for concurrency in ladder:
        state = steady_state(shape, eff, query.isl, query.osl, concurrency, memory.max_concurrency_by_memory, percentile)
        points.append(
            PerfResult(
                model=query.model, gpu=query.gpu, tp=tp, precision=precision, isl=query.isl, osl=query.osl,
                concurrency=concurrency, gpus_per_instance=tp, ttft_ms=state.ttft_ms, itl_ms=state.itl_ms,
                e2e_ms=state.e2e_ms, ttft_ms_bound=None, itl_ms_bound=None,
                request_throughput_rps=state.request_throughput_rps, output_tokens_per_s=state.output_tokens_per_s,
                provenance="modeled", source=f"roofline ({eff.source})", memory=memory,
                derivations=(
                    f"prefill {state.prefill_ms:.1f} ms, decode step {state.decode_step_ms:.2f} ms at batch "
                    f"{state.running}, prefill share of time {state.prefill_share:.0%}"
                    + (f", {concurrency - state.running} queued (KV cache full)" if concurrency > state.running else ""),
                    f"efficiencies: compute {eff.compute:.0%}, bandwidth {eff.bandwidth:.0%}, overhead "
                    f"{eff.overhead_ms:g} ms/step, all-reduce step {eff.allreduce_step_us:g} us",
                    f"latencies are means; limits at percentile {percentile:g}" if percentile > 50 else "latencies are means",
                ),
            )  # fmt: skip
        )
    return points


def modeled_points(
    query: PerfQuery,
    catalog: Catalog,
    tp: int,
    precision: str,
    percentile: float = 50.0,
    engine_lengths: tuple[int, int] | None = None,
) -> list[PerfResult] | str:
    """Roofline points over the concurrency ladder (up to the KV capacity of an engine built for
    `engine_lengths`), or why there are none (architecture unknown, precision unsupported, does not fit)."""
    return _modeled(query, catalog, tp, precision, percentile, engine_lengths=engine_lengths)


def best_point(points: list[PerfResult], query: PerfQuery, max_concurrency: int | None = None) -> PerfResult | str:
    """The highest-throughput point meeting the query's limits, at concurrency <= max_concurrency."""
    if max_concurrency is not None:
        points = [p for p in points if (p.concurrency or 0) <= max_concurrency]
        if not points:
            return f"no point at concurrency <= {max_concurrency}"
    return _best(points, query)


def modeled_curve(query: PerfQuery, catalog: Catalog, percentile: float = 50.0) -> list[PerfResult] | PerfMiss:
    """The roofline's latency-throughput curve over the concurrency ladder for one TP and precision, on to twice
    the KV-cache capacity to show the queueing beyond it."""
    points = _modeled(query, catalog, query.tp or 1, query.precision or "bf16", percentile, beyond_capacity=True)
    return PerfMiss(query, points) if isinstance(points, str) else points


def estimate(query: PerfQuery, catalog: Catalog, sources: tuple[str, ...] = SOURCES, percentile: float = 50.0) -> PerfResult | PerfMiss:
    """Answer one query: at the given concurrency, or the highest-throughput point meeting the limits."""
    answer = operating_points(query, catalog, sources=sources, percentile=percentile)
    if isinstance(answer, PerfMiss):
        return answer
    best = max(answer, key=lambda r: (throughput_key(r), -(r.concurrency or 0)))
    return best


def operating_points(
    query: PerfQuery,
    catalog: Catalog,
    tps: tuple[int, ...] | None = None,
    precisions: tuple[str, ...] | None = None,
    sources: tuple[str, ...] = SOURCES,
    percentile: float = 50.0,
) -> list[PerfResult] | PerfMiss:
    """The best point meeting the limits for each engine variant (TP, precision), from the first layer with data.

    `tps`/`precisions` are the variants the roofline may model (default: TP 1-8 and the GPU's precisions, or the
    query's own TP/precision when it names them); `precisions` also filters table rows (a row that does not state
    its precision is then left out).
    """
    reasons: list[str] = []
    def allowed(point) -> bool:
        """A table point of an engine the caller allows (a row that states no TP passes the TP filter)."""
        precision_ok = not precisions or point.precision in precisions
        return precision_ok and (not tps or point.tp is None or point.tp in tps)

    if "measured" in sources:
        variants = [v for v in _table_points(query, catalog, interpolate="interpolated" in sources) if allowed(v[0])]
        if variants:
            points = []
            for variant in variants:
                best = _best(variant, query)
                (reasons if isinstance(best, str) else points).append(best)
            return points if points else PerfMiss(query, "; ".join(sorted(set(reasons))))
    if "interpolated" in sources:
        between = [p for p in over_lengths(query, catalog) if allowed(p)]
        if query.concurrency is not None:
            between = [p for p in between if p.concurrency == query.concurrency]
        if between:
            points = []
            for point in between:
                best = _best([point], query)
                (reasons if isinstance(best, str) else points).append(best)
            return points if points else PerfMiss(query, "; ".join(sorted(set(reasons))))
    if "aic" in sources:
        answer = _aic_points(query, catalog, tps, precisions, explicit=sources == ("aic",))
        if answer is not None:
            points = []
            for variant in answer:
                best = variant if isinstance(variant, str) else _best(variant, query)
                (reasons if isinstance(best, str) else points).append(best)
            if points:
                return points
            if "modeled" not in sources:
                return PerfMiss(query, "; ".join(dict.fromkeys(reasons)))
    if "modeled" in sources:
        tps = (query.tp,) if query.tp else (tps or TP_LADDER)
        precisions = (query.precision,) if query.precision else (precisions or model_precisions(catalog, query.gpu))
        points = []
        for tp in tps:
            for precision in precisions:
                modeled = _modeled(query, catalog, tp, precision, percentile)
                best = modeled if isinstance(modeled, str) else _best(modeled, query)
                if isinstance(best, str):
                    reasons.append(best if best.startswith("TP") or "architecture" in best else f"TP{tp} {precision}: {best}")
                else:
                    points.append(best)
        if points:
            return points
    return PerfMiss(query, "; ".join(dict.fromkeys(reasons)) or _no_data_reason(query, sources))


def _aic_points(query: PerfQuery, catalog: Catalog, tps, precisions, explicit: bool) -> list | None:
    """Per (TP, precision): aic points or why none. None when the package cannot answer for this model/GPU at
    all (not installed, not supported), so that the next layer answers; asked for alone, that is an error."""
    from planner.errors import PlannerInputError
    from planner.perf import aic

    if not aic.available():
        if explicit:
            raise PlannerInputError("--perf-source", "aic", aic_unavailable_message())
        return None
    tps = (query.tp,) if query.tp else (tps or TP_LADDER)
    precisions = (query.precision,) if query.precision else (precisions or model_precisions(catalog, query.gpu))
    supported = [p for p in precisions if aic.unsupported_reason(query.model, query.gpu, p) is None]
    if not supported:
        reason = aic.unsupported_reason(query.model, query.gpu, precisions[0])
        return [reason] if explicit else None
    memory_gb = catalog.gpus[query.gpu].memory_gb
    variants = []
    for tp in tps:
        for precision in supported:
            variants.append(aic.aic_points(query, memory_gb, tp, precision))
    return variants


def aic_unavailable_message() -> str:
    from planner.perf import aic

    try:
        aic.package_version()
    except aic.AicUnavailable as error:
        return str(error)
    return ""


def _no_data_reason(query: PerfQuery, sources: tuple[str, ...]) -> str:
    engine = "".join(
        part for part in (
            f" TP{query.tp}" if query.tp else "",
            f" {query.precision}" if query.precision else "",
            f" at concurrency {query.concurrency}" if query.concurrency else "",
        )
    )  # fmt: skip
    return (
        f"no benchmark row for {query.model} on {query.gpu}{engine} at ISL {query.isl} / OSL {query.osl} "
        f"(sources tried: {', '.join(sources)})"
    )
