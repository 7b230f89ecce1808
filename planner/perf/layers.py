"""The performance model: per (engine config, workload) latency and throughput, each with its provenance.

Layers (design.md), data first:
1. measured      a benchmark row matches exactly (model, GPU, ISL, OSL; TP, precision, concurrency when asked);
2. interpolated  between measured rows of one engine: the roofline anchored on them (`anchor.py`: exact at the
                 rows, a residual correction between), or log-log between rows the roofline cannot model;
3. modeled       the roofline (`roofline.py`) calibrated per GPU generation (`calibration.py`) and anchored on the
                 engine's rows where it has any, so that a curve runs on continuously where the data ends.
                 'modeled (aic kernels)' where the generation's factors rest on aiconfigurator's kernel database
                 alone (no measured rows of it), 'extrapolated' beyond what its calibration covers;
4. aic           NVIDIA's aiconfigurator (`aic.py`, the optional extra .[aic]): asked for alone, or, in
                 `auto`, for an engine the roofline would only extrapolate (the roofline calibrated on the package's
                 kernel database is the more accurate of the two where it is calibrated: docs/perf-model.md).
Where data exists for a query, the model does not overrule it: a limit the data misses is a miss with its reason.
"""

from __future__ import annotations

import dataclasses

from planner.catalog import Catalog
from planner.metrics import percentile_label
from planner.perf.engines import DEFAULT_ENGINE
from planner.perf.interpolate import concurrency_grid, over_concurrency, over_lengths
from planner.perf.modeled_engine import engine_shape, step_efficiency
from planner.perf.point_engine import kept_point_engine_answer
from planner.perf.roofline import supports_roofline
from planner.perf.tables import (
    answers_at,
    group_by_engine,
    matching_rows,
    result_from_row,
)
from planner.perf.reach import limit_violation, within_cap  # noqa: F401 (within_cap: planner.perf's)
from planner.perf.engine_curve import (  # noqa: F401 (the model's names, read through planner.perf)
    MODEL_PROVENANCE,
    aic_instead,
    modeled_curve,
    modeled_points,
    priced_points,
    whole_curve,
)
from planner.perf.points import best_point, best_points_by_cap, is_modeled, throughput_key  # noqa: F401
from planner.perf.precisions import QUALITY_PRECISIONS, keeps_quality, model_precisions, plan_precisions  # noqa: F401
from planner.perf.types import Layout, MemoryFit, PerfMiss, PerfQuery, PerfResult  # noqa: F401 (Layout: planner.perf's)

__all__ = [
    "PERF_SOURCE_LAYERS",
    "SOURCES",
    "TP_LADDER",
    "MemoryFit",
    "PerfMiss",
    "PerfQuery",
    "PerfResult",
    "aic_unavailable_message",
    "best_point",
    "engine_shape",
    "estimate",
    "is_modeled",
    "limit_violation",
    "keeps_quality",
    "model_precisions",
    "plan_precisions",
    "modeled_curve",
    "modeled_points",
    "priced_points",
    "step_efficiency",
    "operating_points",
    "throughput_key",
]  # fmt: skip

SOURCES = ("measured", "interpolated", "modeled")
# --perf-source names -> layers, in order (aic only where installed and supported, except when asked alone)
PERF_SOURCE_LAYERS = {
    "auto": ("measured", "interpolated", "modeled", "aic"),
    "tables": ("measured", "interpolated"),
    "model": ("modeled",),
    "aic": ("aic",),
}
TP_LADDER = (1, 2, 4, 8)


def _table_points(query: PerfQuery, catalog: Catalog, interpolate: bool, groups=None) -> list[list[PerfResult]]:
    """Measured points per engine variant, plus log-log interpolated concurrencies between them."""
    if groups is None:
        groups = group_by_engine(matching_rows(catalog, dataclasses.replace(query, concurrency=None)))
    variants = []
    for group in groups:
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


def estimate(query: PerfQuery, catalog: Catalog, sources: tuple[str, ...] = SOURCES, percentile: float | None = None) -> PerfResult | PerfMiss:
    """Answer one query: at the given concurrency, or the highest-throughput point meeting the limits."""
    answer = operating_points(query, catalog, sources=sources, percentile=percentile)
    if isinstance(answer, PerfMiss):
        return answer
    return max(answer, key=lambda r: (throughput_key(r), -(r.concurrency or 0)))


def _modelable(group, catalog: Catalog) -> bool:
    """Rows of an engine the roofline can reproduce: TP and precision stated, per instance, architecture known."""
    row = group[0]
    return (row.tp is not None and row.precision is not None and row.per == "instance" and row.tp == row.gpus
            and supports_roofline(catalog.models[row.model]))  # fmt: skip


def _at_random(variants: list, query: PerfQuery, catalog: Catalog, percentile: float | None) -> list:
    """For requests arriving at random on a model without an architecture, each closed-loop point of the variants
    (rows, or interpolated between rows) as its own engine answers (planner/perf/point_engine.py); a variant all of
    whose points miss is the first one's reason. Other variants as they are."""
    if not query.open_loop or supports_roofline(catalog.models[query.model]):
        return variants
    out = []
    for variant in variants:
        if isinstance(variant, str):
            out.append(variant)
            continue
        answers = [kept_point_engine_answer(p, catalog, query, percentile) if p.arrivals != "poisson" else p for p in variant]
        found = [a for a in answers if not isinstance(a, str)]
        out.append(found or answers[0])
    return out


def _pick(variants, query: PerfQuery, reasons: list[str], max_concurrency: int | None = None) -> list[PerfResult]:
    points = []
    for variant in variants:
        best = variant if isinstance(variant, str) else best_point(variant, query, max_concurrency)
        (reasons if isinstance(best, str) else points).append(best)
    return points


def operating_points(
    query: PerfQuery,
    catalog: Catalog,
    tps: tuple[int, ...] | None = None,
    precisions: tuple[str, ...] | None = None,
    sources: tuple[str, ...] = SOURCES,
    percentile: float | None = None,
    model_without_rows: bool = True,
    max_concurrency: int | None = None,
) -> list[PerfResult] | PerfMiss:
    """The best point meeting the limits for each engine variant (TP, precision), from the first layer with data,
    at concurrency <= `max_concurrency` (the largest batch of the scenario's ladder) when given.

    `tps`/`precisions` are the variants the roofline may model (default: TP 1-8 and the GPU's precisions, or the
    query's own TP/precision when it names them); `precisions` also filters table rows (a row that does not state
    its precision ran the published checkpoint: it counts as the model's `checkpoint_precision`). With the roofline among the sources, an engine with rows at the query's
    lengths answers with the roofline anchored on them (its measured rows exactly); without it, rows and log-log
    interpolation between them. `model_without_rows=False` keeps the roofline to engines with rows at the query's
    lengths (candidate enumeration models the others itself).
    """
    reasons: list[str] = []
    modeled = "modeled" in sources
    other_statistic = ""  # rows at the query's lengths that hold another statistic than the percentile asked for

    native = catalog.models[query.model].checkpoint_precision if query.model in catalog.models else None

    def allowed(point) -> bool:
        """A table point of an engine the caller allows (a row that states no TP passes the TP filter; one that
        states no precision ran the model's checkpoint as published: its `checkpoint_precision`)."""
        precision_ok = not precisions or (point.precision or native) in precisions
        return precision_ok and (not tps or point.tp is None or point.tp in tps)

    # rows are TP engines of the reference, measured with cold prefills: a prefix-cached workload is modeled
    reference = query.engine == DEFAULT_ENGINE and query.layout is None and query.prefix_cache is None
    if query.prefix_cache is not None and not supports_roofline(catalog.models[query.model]):
        return PerfMiss(query, f"a prefix cache is modeled by the roofline, which has no architecture for {query.model} "
                               "(its benchmark rows measured cold prefills); state no prefix_cache for it")  # fmt: skip
    if "measured" in sources and reference:
        groups = [g for g in group_by_engine(matching_rows(catalog, dataclasses.replace(query, concurrency=None))) if allowed(g[0])]
        if modeled:  # estimates (aic tables) stand in for nothing the calibrated roofline does not answer better
            groups = [g for g in groups if any(r.is_measurement for r in g)]
        # rows of another statistic speak only through the roofline anchored on them: without it they are no data
        # for this percentile, and the next layers (the roofline for the model) answer
        unusable = [g for g in groups if not answers_at(g[0], percentile)
                    and not (modeled and query.isl and query.osl and _modelable(g, catalog))]  # fmt: skip
        if unusable:
            statistics = ", ".join(sorted({g[0].statistic for g in unusable}))
            other_statistic = (f"no benchmark row at {percentile_label(percentile)} for {query.model} on {query.gpu} at "
                               f"ISL {query.isl} / OSL {query.osl}: the rows there give the {statistics} "
                               f"({unusable[0][0].citation})")  # fmt: skip
            groups = [g for g in groups if not any(g is u for u in unusable)]
        if groups:
            variants = []
            for group in groups:
                if modeled and query.isl and query.osl and _modelable(group, catalog):
                    variants.append(whole_curve(query, catalog, group[0].tp, group[0].precision, percentile))
                else:
                    variants += _table_points(query, catalog, "interpolated" in sources, [group])
            points = _pick(_at_random(variants, query, catalog, percentile), query, reasons, max_concurrency)
            return points if points else PerfMiss(query, "; ".join(sorted(set(reasons))) or _no_data_reason(query, sources))
    if "interpolated" in sources and reference:
        between = [p for p in over_lengths(query, catalog, percentile) if allowed(p)]
        if modeled:  # the anchored roofline interpolates where it can model the engine
            between = [p for p in between if p.tp is None or p.precision is None or not supports_roofline(catalog.models[query.model])]
        if query.concurrency is not None:
            between = [p for p in between if p.concurrency == query.concurrency]
        if between:
            points = _pick(_at_random([[p] for p in between], query, catalog, percentile), query, reasons, max_concurrency)
            return points if points else PerfMiss(query, "; ".join(sorted(set(reasons))))
    if sources == ("aic",):
        points = _pick(_aic_points(query, catalog, tps, precisions), query, reasons, max_concurrency)
        return points if points else PerfMiss(query, "; ".join(dict.fromkeys(reasons)))
    if modeled and model_without_rows:
        tps = (query.layout.tp,) if query.layout else (query.tp,) if query.tp else (tps or TP_LADDER)
        precisions = (query.precision,) if query.precision else (precisions or model_precisions(catalog, query.gpu, query.model))
        points = []
        for tp in tps:
            for precision in precisions:
                curve = whole_curve(query, catalog, tp, precision, percentile, anchored=sources != ("modeled",), layout=query.layout)
                if "aic" in sources and reference:  # auto: the package (TP, TensorRT-LLM) where the roofline extrapolates
                    curve = aic_instead(query, catalog, tp, precision, curve)
                best = curve if isinstance(curve, str) else best_point(curve, query, max_concurrency)
                if isinstance(best, str):
                    reasons.append(best if best.startswith(("TP", "aic")) or "architecture" in best else f"TP{tp} {precision}: {best}")
                else:
                    points.append(best)
        if points:
            return points
    return PerfMiss(query, "; ".join(dict.fromkeys(reasons)) or other_statistic or _no_data_reason(query, sources))


def _aic_points(query: PerfQuery, catalog: Catalog, tps, precisions) -> list:
    """Per (TP, precision): aic points or why none (the source asked for alone: not installed is an input error)."""
    from planner.errors import PlannerInputError
    from planner.perf import aic

    if not aic.available():
        raise PlannerInputError("--perf-source", "aic", aic_unavailable_message())
    tps = (query.layout.tp,) if query.layout else (query.tp,) if query.tp else (tps or TP_LADDER)
    precisions = (query.precision,) if query.precision else (precisions or model_precisions(catalog, query.gpu, query.model))
    supported = [p for p in precisions if aic.unsupported_reason(query.model, query.gpu, p, query.engine) is None]
    if not supported:
        return [aic.unsupported_reason(query.model, query.gpu, precisions[0], query.engine)]
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
