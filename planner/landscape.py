"""The engine landscape of a workload: throughput per GPU against interactivity for every engine it could run on.

The chart the field draws to compare serving configurations (NVIDIA's aiconfigurator, the InferenceMAX /
SemiAnalysis dashboards): each point is one engine (GPU, layout, precision) at one concurrency, placed at

    tokens_per_gpu  = output tokens/s of the instance / GPUs of the instance
    tokens_per_user = 1000 / TPOT_ms           (the decode speed one user sees: a request's mean gap)

Higher is better on both axes; the Pareto front is the set of points no other point beats on both. Raising the
batch moves an engine along its curve: more tokens per GPU, fewer per user. The plan's operating point is placed
on the same axes, so a reviewer sees how far from the front the chosen configuration sits and why (a latency
limit, a price, an engine the catalog measured).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from planner.catalog import Catalog
from planner.perf import PerfQuery, PerfResult, is_modeled, limit_violation, model_precisions, modeled_points
from planner.perf.engines import DEFAULT_ENGINE, engine_label
from planner.perf.tables import matching_rows, result_from_row
from planner.answers import PlannedScenario
from planner.plan import Assignment, Plan
from planner.scenario import Scenario, Workload


@dataclass(frozen=True)
class LandscapePoint:
    engine: str  # "H100-SXM-80GB TP4 fp8", or "H100-SXM-80GB 8 GPUs (engine not stated)" for a whole-node row
    gpu: str
    tp: int | None  # None: a row of a whole system that does not state its engine
    precision: str | None
    concurrency: int | None
    tokens_per_gpu: float  # output tokens/s per GPU
    tokens_per_user: float  # 1000 / TPOT_ms
    meets_limits: bool
    provenance: str  # measured | interpolated | modeled | extrapolated ...


@dataclass(frozen=True)
class Landscape:
    workload: str
    model: str
    isl: int
    osl: int
    tpot_limit_ms: float | None  # the interactivity axis is 1000 / TPOT: a user's tokens/s
    points: tuple[LandscapePoint, ...]
    front: tuple[LandscapePoint, ...]  # Pareto-optimal points, by tokens_per_user descending
    chosen: LandscapePoint | None  # the plan's operating point for this bucket, where its TPOT is known
    chosen_note: str  # what the chosen point is, or why it cannot be placed
    missing_note: str = ""  # why some engines are absent (no roofline for the model, rows only), if they are


def pareto_front(points: list[LandscapePoint] | tuple[LandscapePoint, ...]) -> tuple[LandscapePoint, ...]:
    """Points not beaten on both axes: walk by tokens_per_user descending, keep a point whose tokens_per_gpu
    exceeds every point before it (ties: the higher tokens_per_gpu first)."""
    ordered = sorted(points, key=lambda p: (-p.tokens_per_user, -p.tokens_per_gpu, p.engine, p.concurrency or 0))
    front, best = [], float("-inf")
    for point in ordered:
        if point.tokens_per_gpu > best:
            front.append(point)
            best = point.tokens_per_gpu
    return tuple(front)


def _point(result: PerfResult, engine: str, limits) -> LandscapePoint | None:
    if not result.tpot_ms or not result.output_tokens_per_s or result.gpus_per_instance <= 0:
        return None  # no decode speed stated: nothing to place on the interactivity axis
    if result.memory is not None and not result.memory.fits:
        return None
    return LandscapePoint(
        engine=engine, gpu=result.gpu, tp=result.tp, precision=result.precision, concurrency=result.concurrency,
        tokens_per_gpu=result.output_tokens_per_s / result.gpus_per_instance, tokens_per_user=1000.0 / result.tpot_ms,
        meets_limits=limit_violation(result, limits) is None,
        provenance=result.provenance,
    )  # fmt: skip


def _engine_label(result: PerfResult) -> str:
    if result.tp and result.precision:
        return f"{result.gpu} TP{result.tp} {result.precision}"
    return f"{result.gpu} {result.gpus_per_instance} GPUs (engine not stated)"


def measured_points(catalog: Catalog, model: str, gpu: str, isl: int, osl: int, limits) -> list[LandscapePoint]:
    """The benchmark rows of the model on the GPU at these lengths that state a TPOT."""
    results = [result_from_row(row, catalog) for row in matching_rows(catalog, PerfQuery(model, gpu, isl, osl))]
    return [p for r in results if (p := _point(r, _engine_label(r), limits))]


def modeled_engine_points(
    catalog: Catalog, model: str, gpu: str, isl: int, osl: int, limits, layouts, precisions,
    percentile: float | None = None, hop_bytes_per_s=lambda layout: 0.0, arrivals: str = "closed",
    token_budget: int | None = None, engine_lengths: tuple[int, int] | None = None, engine: str = DEFAULT_ENGINE,
    prefix_cache=None,
) -> list[LandscapePoint]:  # fmt: skip
    """The roofline's curve for every layout x precision that fits (modeled points only: the measured ones come
    from measured_points): over concurrency (`arrivals` "closed", as a benchmark runs) or over rates of requests
    arriving at random ("poisson", as a plan sizes an instance)."""
    from planner.perf.roofline import supports_roofline

    if not supports_roofline(catalog.models[model]):
        return []
    query = PerfQuery(model, gpu, isl, osl, arrivals=arrivals, engine=engine, prefix_cache=prefix_cache)
    if token_budget is not None:
        query = dataclasses.replace(query, token_budget=token_budget)
    out = []
    for layout in layouts:
        for precision in precisions:
            curve = modeled_points(query, catalog, layout.tp, precision, percentile, layout=layout,
                                   hop_bytes_per_s=hop_bytes_per_s(layout), engine_lengths=engine_lengths)  # fmt: skip
            if isinstance(curve, str):
                continue  # does not fit, or no steady state: no point to draw
            label = " ".join(filter(None, (gpu, layout.label, precision, engine_label(engine))))
            out += [p for r in curve if is_modeled(r.provenance) and (p := _point(r, label, limits))]
    return out


def landscape_of(workload: str, model: str, isl: int, osl: int, limits, points: list[LandscapePoint],
                 chosen: LandscapePoint | None, chosen_note: str, catalog: Catalog, sources) -> Landscape:  # fmt: skip
    from planner.perf.roofline import supports_roofline

    points = sorted(points, key=lambda p: (p.engine, p.concurrency or 0, p.provenance))
    missing = ""
    if "modeled" not in sources:
        missing = "benchmark rows only (perf sources): no modeled engines"
    elif not supports_roofline(catalog.models[model]):
        missing = f"no modeled engines: the architecture of {model} is not published"
    return Landscape(workload, model, isl, osl, limits.tpot_ms, tuple(points), pareto_front(points), chosen, chosen_note,
                     missing)  # fmt: skip


def main_assignment(plan: Plan, workload: str) -> Assignment | None:
    """The assignment carrying most of a workload's requests: the one its plots show."""
    result = next((w for w in plan.workloads if w.name == workload), None)
    if result is None or not result.assignments:
        return None
    return max(result.assignments, key=lambda a: a.rps)


def _chosen(assignment: Assignment, workload: Workload, catalog: Catalog) -> tuple[LandscapePoint | None, str]:
    system = catalog.systems[assignment.system]
    engine = (f"{system.gpu} {assignment.layout or f'TP{assignment.tp}'} {assignment.precision}" if assignment.tp
              else f"{system.gpu} {system.gpus_per_node} GPUs (engine not stated)")  # fmt: skip
    engine = " ".join(filter(None, (engine, engine_label(assignment.engine))))
    where = f"{assignment.system} {engine.removeprefix(system.gpu + ' ')}"
    if assignment.stage != "aggregated":
        return None, f"the plan serves it disaggregated ({where}): a prefill pool and a decode pool, not one engine"
    if not assignment.tpot_ms:
        return None, f"the plan's point ({where}, {assignment.provenance}) states no TPOT, so it has no place on this axis"
    tokens_per_gpu = assignment.rps_per_node * assignment.bucket_osl / system.gpus_per_node
    point = LandscapePoint(engine, system.gpu, assignment.tp, assignment.precision, assignment.concurrency, tokens_per_gpu,
                           1000.0 / assignment.tpot_ms, True, assignment.provenance)  # fmt: skip
    return point, f"chosen: {where}" + (f" at concurrency {assignment.concurrency}" if assignment.concurrency else "")


def workload_landscape(plan: Plan, scenario: Scenario, catalog: Catalog, workload_name: str) -> Landscape | None:
    """Every engine the scenario's systems could run the workload's main bucket on (rows where the scenario reads
    rows, the roofline where it models), with the Pareto front and the plan's point; None if the plan does not
    serve the workload. Only at the precisions the workload may plan (its `precisions:`, else the quality-keeping
    default: the candidates' own rules), so the front is one the plan could reach; the note names those left out."""
    from planner.candidates import CandidateBuilder, engine_layouts

    assignment = main_assignment(plan, workload_name)
    if assignment is None:
        return None
    workload = next(w for w in scenario.workloads if w.name == workload_name)
    isl, osl = assignment.bucket_isl, assignment.bucket_osl
    limits = workload.slo
    points: list[LandscapePoint] = []
    rules = CandidateBuilder(scenario, catalog)  # what candidate enumeration allows the workload
    left_out: set[str] = set()
    systems = sorted({offer.system for offer in scenario.offers})
    if any(s != "modeled" for s in scenario.perf_sources) and workload.prefix_cache is None:  # rows: cold prefills
        for gpu in sorted({catalog.systems[s].gpu for s in systems}):
            for point in measured_points(catalog, workload.model, gpu, isl, osl, limits):
                if rules.precision_refused(workload, point.precision) is None:
                    points.append(point)
                else:
                    left_out.add(point.precision or "unstated")
    if "modeled" in scenario.perf_sources:
        seen_gpus = set()
        for system_id in systems:  # one system per GPU: the curve per GPU does not depend on the chassis
            system = catalog.systems[system_id]
            if system.gpu in seen_gpus:
                continue
            seen_gpus.add(system.gpu)
            precisions = rules.precisions(workload, system.gpu)
            left_out |= set(model_precisions(catalog, system.gpu, workload.model)) - set(precisions)
            points += [point for engine in workload.engines for point in modeled_engine_points(
                catalog, workload.model, system.gpu, isl, osl, limits,
                engine_layouts(scenario, catalog, workload.model, system_id), precisions, workload.slo.percentile,
                lambda layout, system=system: (system.network_bytes_per_s(layout.tp * layout.dp) or 0.0) if layout.pp > 1 else 0.0,
                # as the plan sizes its instances: requests arriving at random, engines built for its lengths
                arrivals="poisson", token_budget=scenario.token_budget,
                engine_lengths=(assignment.engine_isl, assignment.engine_osl), engine=engine,
                prefix_cache=workload.prefix_cache,
            )]  # fmt: skip
    chosen, note = _chosen(assignment, workload, catalog)
    landscape = landscape_of(workload_name, workload.model, isl, osl, limits, points, chosen, note, catalog,
                             scenario.perf_sources)  # fmt: skip
    if not left_out:
        return landscape
    why = ("not in the workload's precisions" if workload.precisions is not None
           else "not allowed by default (precisions: allows them)")  # fmt: skip
    hidden = f"not drawn: {', '.join(sorted(left_out))} ({why})"
    return dataclasses.replace(landscape, missing_note="; ".join(filter(None, (landscape.missing_note, hidden))))


def engine_landscape(query: PerfQuery, catalog: Catalog, gpus_per_node: int, sources: tuple[str, ...], chosen: PerfResult | None,
                     percentile: float | None = None) -> Landscape:  # fmt: skip
    """`planner curve --y tokens-per-user`: every TP (1, 2, 4, 8 within the node) x precision of the model on the
    query's GPU at the query's lengths, the asked engine's chosen point marked."""
    from planner.perf.types import Layout

    limits = query
    points = measured_points(catalog, query.model, query.gpu, query.isl, query.osl, limits) if "measured" in sources else []
    if "modeled" in sources:
        layouts = [Layout(tp) for tp in (1, 2, 4, 8) if tp <= gpus_per_node]
        points += modeled_engine_points(catalog, query.model, query.gpu, query.isl, query.osl, limits, layouts,
                                        model_precisions(catalog, query.gpu, query.model), percentile)  # fmt: skip
    point = _point(chosen, _engine_label(chosen), limits) if chosen is not None else None
    note = (f"chosen: {point.engine} at concurrency {chosen.concurrency} ({chosen.provenance})" if point
            else "no point of the asked engine meets the limits" if chosen is None else "the chosen point states no TPOT")  # fmt: skip
    return landscape_of("", query.model, query.isl, query.osl, limits, points, point, note, catalog, sources)


def workload_landscapes(planned: PlannedScenario) -> list[Landscape]:
    """For each workload the plan serves: every engine it could run on, throughput per GPU vs tokens/s per user,
    the Pareto front and the plan's point (planner.landscape)."""
    out = []
    for workload in planned.scenario.workloads:
        landscape = workload_landscape(planned.plan, planned.scenario, planned.catalog, workload.name)
        if landscape is not None:
            out.append(landscape)
    return out


@dataclass(frozen=True)
class CurveAnswer:
    """A latency-throughput curve over concurrency: measured/interpolated points, the roofline's, and the point
    chosen under the limits."""

    query: PerfQuery
    gpus_per_node: int
    data_points: tuple[PerfResult, ...]
    modeled_points: tuple[PerfResult, ...]
    chosen: PerfResult | None
    miss_reason: str | None
    landscape: Landscape | None = None  # every engine of the model on the GPU, when asked (planner.landscape)
    percentile: float | None = None  # the latencies' percentile (None: means)


def curve_in_catalog(query: PerfQuery, catalog: Catalog, gpus_per_node: int = 8, sources: tuple[str, ...] | None = None,
                     percentile: float | None = None) -> CurveAnswer:  # fmt: skip
    """One engine's points in the catalog over concurrency: its measured rows (and aiconfigurator's, where asked
    and installed), the roofline's curve through them, and the point `estimate` chooses under the query's limits."""
    from planner.perf import SOURCES, PerfMiss, estimate, modeled_curve

    open_query = dataclasses.replace(query, concurrency=None, ttft_ms=None, tpot_ms=None, itl_ms=None, e2e_ms=None)
    sources = sources or SOURCES
    rows = matching_rows(catalog, open_query) if "measured" in sources else []
    data = [result_from_row(r, catalog) for r in rows]
    if "aic" in sources and query.tp and query.precision:
        from planner.perf import aic

        if aic.available():
            answer = aic.aic_points(open_query, catalog.gpus[query.gpu].memory_gb, query.tp, query.precision)
            data += [] if isinstance(answer, str) else answer
    data = tuple(sorted(data, key=lambda p: (p.concurrency or 0, p.provenance)))
    # the roofline needs the engine's TP and precision; a row that does not state them gets no modeled curve
    modeled = (
        modeled_curve(open_query, catalog, percentile) if query.tp and query.precision and "modeled" in sources
        else PerfMiss(query, "TP/precision not stated" if not (query.tp and query.precision) else "roofline not asked for")
    )  # fmt: skip
    # the modeled curve runs through the measured rows, which are listed once, as data
    modeled_points = () if isinstance(modeled, PerfMiss) else tuple(p for p in modeled if p.provenance != "measured")
    chosen = estimate(dataclasses.replace(query, concurrency=None), catalog, sources=sources, percentile=percentile)
    miss = chosen.reason if isinstance(chosen, PerfMiss) else None
    if not data and not modeled_points:
        miss = modeled.reason if isinstance(modeled, PerfMiss) else miss
    return CurveAnswer(
        query, gpus_per_node, data, modeled_points, None if isinstance(chosen, PerfMiss) else chosen, miss,
        percentile=percentile,
    )
