"""The Python API: every CLI command is one call of a function here."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from planner.catalog import Catalog, CatalogDirs, as_directory_list, load_catalog
from planner.errors import PlannerInputError
from planner.landscape import Landscape, engine_landscape, workload_landscape
from planner.optimize import plan as solve_plan
from planner.perf import PerfMiss, PerfQuery, PerfResult, estimate
from planner.plan import PER_PERIOD_ROLES, Plan
from planner.requirements import (
    daily_active_users,
    peak_rps_from_mean,
    requests_per_day,
)
from planner.scenario import Scenario, ScenarioOverrides, load_scenario, scenario_catalog_dirs


def scenario_catalog(scenario_path: Path | str, catalog_dirs: CatalogDirs = None) -> Catalog:
    """The catalog a scenario plans with: shipped, then the scenario's `catalog:` directories, then `catalog_dirs`
    (the CLI's `--catalog`), each layer adding to or overriding the ones below."""
    return load_catalog([*scenario_catalog_dirs(scenario_path), *as_directory_list(catalog_dirs)])


def plan_file(
    scenario_path: Path | str,
    catalog_dirs: CatalogDirs = None,
    solver: str | None = None,
    time_limit_s: float | None = None,
    progress=None,
    perf_margin: float | None = None,
    perf_source: str | None = None,
    confidence: float | None = None,
    overrides: ScenarioOverrides | None = None,
) -> Plan:
    """Load the catalog and a scenario file, then size the fleet (raises InfeasiblePlanError with a diagnosis).
    `progress(done, total)` follows the candidate enumeration, the long part of big scenarios. A perf margin
    (argument or the scenario's `robustness:`) or demand forecasts make it a robust plan priced against the nominal.
    `overrides` change the scenario for this run (deployment, systems, precisions, engines)."""
    catalog = scenario_catalog(scenario_path, catalog_dirs)
    scenario = load_scenario(scenario_path, catalog, overrides)
    scenario = with_perf_source(with_perf_margin(scenario, perf_margin), perf_source)
    return solve_scenario(with_confidence(scenario, confidence), catalog, solver, time_limit_s, progress)


def with_perf_source(scenario: Scenario, perf_source: str | None) -> Scenario:
    """The scenario with `--perf-source` applied (it overrides the scenario's perf sources)."""
    import dataclasses

    if perf_source is None:
        if scenario.perf_sources == ("aic",):
            perf_layers("aic")  # asked for alone in the scenario: the same clear message when not installed
        return scenario
    return dataclasses.replace(scenario, perf_sources=perf_layers(perf_source))


def with_confidence(scenario: Scenario, confidence: float | None) -> Scenario:
    """The scenario with `--confidence` applied (it overrides the scenario's `robustness.confidence`)."""
    if confidence is None:
        return scenario
    if not 0 < confidence < 1:
        raise PlannerInputError("--confidence", "confidence", f"must be a share in (0, 1), e.g. 0.8 (got {confidence:g})")
    return dataclasses.replace(scenario, confidence=confidence)


def with_perf_margin(scenario: Scenario, perf_margin: float | None) -> Scenario:
    """The scenario with `--perf-margin` applied (it overrides the scenario's `robustness.perf_margin`)."""
    import dataclasses

    if perf_margin is None:
        return scenario
    if not 0 <= perf_margin < 1:
        raise PlannerInputError("--perf-margin", "perf_margin", f"must be in [0, 1) (got {perf_margin:g})")
    return dataclasses.replace(scenario, perf_margin=perf_margin)


def solve_scenario(scenario: Scenario, catalog: Catalog, solver: str | None = None, time_limit_s: float | None = None,
                   progress=None) -> Plan:  # fmt: skip
    """The nominal plan, or the robust one (with its cost against the nominal) when the scenario asks for it."""
    from planner.robustness import is_robust, plan_robust

    if is_robust(scenario):
        return plan_robust(scenario, catalog, solver, time_limit_s, progress)
    return solve_plan(scenario, catalog, solver=solver, time_limit_s=time_limit_s, progress=progress)


def validate_file(scenario_path: Path | str, catalog_dirs: CatalogDirs = None) -> Scenario:
    """Load and check a scenario against the catalog; returns the resolved scenario."""
    return load_scenario(scenario_path, scenario_catalog(scenario_path, catalog_dirs))


@dataclass(frozen=True)
class PerfAnswer:
    """`planner perf` output: the point (or the miss) plus node normalization facts."""

    query: PerfQuery
    result: PerfResult | None
    miss_reason: str | None
    percentile: float | None = None  # the latencies' percentile (None: means)


def perf_layers(perf_source: str | None) -> tuple[str, ...]:
    """The layers a `--perf-source` choice asks for (None: the default, rows then the roofline)."""
    from planner.perf import PERF_SOURCE_LAYERS, SOURCES, aic_unavailable_message

    if perf_source is None:
        return SOURCES
    if perf_source not in PERF_SOURCE_LAYERS:
        raise PlannerInputError("--perf-source", "perf_source", f"unknown '{perf_source}'; allowed: {', '.join(PERF_SOURCE_LAYERS)}")
    if perf_source == "aic" and aic_unavailable_message():
        raise PlannerInputError("--perf-source", "aic", aic_unavailable_message())
    return PERF_SOURCE_LAYERS[perf_source]


def perf_point(query: PerfQuery, catalog_dirs: CatalogDirs = None, perf_source: str | None = None,
               percentile: float | None = None) -> PerfAnswer:  # fmt: skip
    """Latency and throughput of one engine config, with provenance (or why there is no answer); latencies at
    `percentile` (None: means), the limits of the query at it too."""
    catalog = load_catalog(catalog_dirs)
    query = _check_query_ids(query, catalog)
    answer = estimate(query, catalog, sources=perf_layers(perf_source), percentile=percentile)
    if isinstance(answer, PerfMiss):
        return PerfAnswer(query, None, answer.reason, percentile)
    return PerfAnswer(query, answer, None, percentile)


def _check_query_ids(query: PerfQuery, catalog: Catalog) -> PerfQuery:
    """The query with catalog ids for its model and GPU (aliases resolved), checked against the catalog."""
    query = dataclasses.replace(
        query, model=catalog.resolve("model", query.model, "--model", "model"), gpu=catalog.resolve("gpu", query.gpu, "--gpu", "gpu")
    )
    gpu = catalog.gpus[query.gpu]
    if query.precision is not None and query.precision not in gpu.precisions:
        raise PlannerInputError(
            "--precision", "precision", f"{query.gpu} does not support {query.precision}; allowed: {', '.join(gpu.precisions)}"
        )
    # tensor parallelism stays within one node's NVLink domain: the largest node of this GPU bounds it
    largest = max((s.gpus_per_node for s in catalog.systems.values() if s.gpu == query.gpu), default=8)
    if query.tp is not None and query.tp > largest:
        raise PlannerInputError(
            "--tp", "tp", f"TP {query.tp} spans more GPUs than the largest {query.gpu} node in the catalog "
            f"({largest}); allowed: 1 to {largest}",
        )  # fmt: skip
    return query


@dataclass(frozen=True)
class PeakAnswer:
    mean_rps: float
    quantile: float
    peak_rps: float


def peak(mean_rps: float, quantile: float = 0.95) -> PeakAnswer:
    """Peak requests/s at a quantile of Poisson arrivals (seed case C4)."""
    from planner.scenario import MAX_RPS

    if not (math.isfinite(mean_rps) and 0 <= mean_rps <= MAX_RPS):
        raise PlannerInputError("--mean-rps", "mean_rps", f"must be between 0 and {MAX_RPS:,.0f} (got {mean_rps:g})")
    if not 0 < quantile < 1:
        raise PlannerInputError("--quantile", "quantile", f"must be strictly between 0 and 1 (got {quantile:g})")
    return PeakAnswer(mean_rps, quantile, peak_rps_from_mean(mean_rps, quantile))


@dataclass(frozen=True)
class UsersAnswer:
    rps: float
    hours_per_day: float
    requests_per_user: float
    requests_per_day: float
    daily_active_users: int


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
        from planner.perf.calibration import calibration_entries

        return calibration_entries(catalog)
    entries = getattr(catalog, kind)
    return [entries[key].model_dump(exclude_none=True) for key in sorted(entries)]


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


def curve_in_catalog(query: PerfQuery, catalog: Catalog, gpus_per_node: int = 8, sources: tuple[str, ...] | None = None,
                     percentile: float | None = None) -> CurveAnswer:  # fmt: skip
    import dataclasses

    from planner.perf import modeled_curve
    from planner.perf.tables import matching_rows, result_from_row

    open_query = dataclasses.replace(query, concurrency=None, ttft_ms=None, tpot_ms=None, itl_ms=None, e2e_ms=None)
    from planner.perf import SOURCES

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


@dataclass(frozen=True)
class DeploymentResult:
    """One side of `planner compare`: the plan of one deployment, or why there is none."""

    deployment: str
    plan: Plan | None
    infeasible: tuple[str, ...]
    output_tokens_per_year: float
    no_plan_status: str = "infeasible"  # or "stopped": the time limit came before any plan
    note: str = ""  # what was derived for this side (a cloud site the scenario does not have), or why it is missing

    @property
    def usd_per_million_output_tokens(self) -> float | None:
        if self.plan is None or self.output_tokens_per_year <= 0:
            return None
        return self.plan.objective_usd_per_year / (self.output_tokens_per_year / 1e6)


    @property
    def usd_per_gpu_hour(self) -> float | None:
        """The plan's annual cost over the GPU-hours it pays for (`gpu_hours`)."""
        if self.plan is None or self.gpu_hours <= 0:
            return None
        return self.plan.objective_usd_per_year / self.gpu_hours

    gpu_hours: float = 0.0  # GPU-hours a year the plan pays for (gpu_hours_per_year)


def gpu_hours_per_year(plan: Plan, scenario: Scenario) -> float:
    """GPU-hours a plan pays for in a year: bought, spare and reserved GPUs all year (8,760 h), on-demand ones for
    the hours of their period."""
    hours = {period.name: period.hours_per_year for period in scenario.periods}
    return sum(line.gpus * (hours[line.period] if line.role in PER_PERIOD_ROLES else 8760.0) for line in plan.lines)


@dataclass(frozen=True)
class BreakEven:
    """When buying beats renting (`planner compare`): on-prem costs `on_prem_usd_per_gpu_hour` for every hour of
    the year it owns its GPUs, the cloud `cloud_usd_per_gpu_hour` for each hour it rents one. Owning is cheaper when
    its GPUs would otherwise be rented more than `utilization` of the year (`hours_per_year`, `months` of
    continuous use); the cloud plan rents its GPUs `cloud_utilization` of the year at its peak count."""

    on_prem_usd_per_gpu_hour: float
    cloud_usd_per_gpu_hour: float
    utilization: float
    hours_per_year: float
    months: float
    cloud_utilization: float | None
    cheaper: str  # on-prem | cloud: at the cloud plan's own use

    def describe(self) -> str:
        reach = (f"on-prem is cheaper when its GPUs would be rented more than {self.utilization:.0%} of the year "
                 f"({self.hours_per_year:,.0f} h, {self.months:.1f} months of continuous use)")
        if self.utilization >= 1:
            reach = "on-prem is never cheaper: owning a GPU all year costs more than renting it all year"
        use = ("" if self.cloud_utilization is None else
               f"; the cloud plan rents its peak GPUs {self.cloud_utilization:.0%} of the year, so {self.cheaper} is cheaper here")
        return (f"Break-even: on-prem {self.on_prem_usd_per_gpu_hour:,.2f} USD per GPU-hour owned, cloud "
                f"{self.cloud_usd_per_gpu_hour:,.2f} USD per GPU-hour rented; {reach}{use}")  # fmt: skip


def break_even(results) -> BreakEven | None:
    """The break-even of `compare`'s on-prem and cloud sides (None unless both have a plan)."""
    sides = {r.deployment: r for r in results if r.plan is not None}
    if "on-prem" not in sides or "cloud" not in sides:
        return None
    on_prem, cloud = sides["on-prem"], sides["cloud"]
    owned, rented = on_prem.usd_per_gpu_hour, cloud.usd_per_gpu_hour
    if not owned or not rented:
        return None
    utilization = owned / rented
    peak = cloud.plan.totals.peak_concurrent_gpus
    used = cloud.gpu_hours / (peak * 8760.0) if peak else None
    cheaper = "on-prem" if on_prem.plan.objective_usd_per_year < cloud.plan.objective_usd_per_year else "cloud"
    return BreakEven(round(owned, 4), round(rented, 4), round(utilization, 4), round(min(utilization, 1.0) * 8760.0, 1),
                     round(min(utilization, 1.0) * 12.0, 2), None if used is None else round(used, 4), cheaper)  # fmt: skip


def output_tokens_per_year(scenario: Scenario) -> float:
    """sum over periods and workloads of traffic rps x mean OSL x 3600 x hours (the mean rate where one is given)."""
    osl = {w.name: sum(b.osl_tokens * b.share for b in w.buckets) for w in scenario.workloads}
    return sum(
        period.traffic_rps[name] * osl[name] * 3600 * period.hours_per_year
        for period in scenario.periods for name in osl
    )  # fmt: skip


def compare(
    scenario_path: Path | str, catalog_dirs: CatalogDirs = None, solver: str | None = None,
    time_limit_s: float | None = None, overrides: ScenarioOverrides | None = None, plan_document: dict | None = None,
) -> tuple[DeploymentResult, ...]:
    """Plan the scenario on-prem, in the cloud and hybrid (as its sites allow) and return the three side by side.
    Candidates are priced once, for the deployment with the most offers, and each deployment solves on its part.
    With `plan_document` (a saved plan), its deployment's side is that plan as it is, checked against the scenario."""
    from planner.candidates import enumerate_candidates, restrict_candidates
    from planner.errors import InfeasiblePlanError, SolverStoppedError
    from planner.optimize import solve_candidates
    from planner.scenario import comparable_deployments

    catalog = scenario_catalog(scenario_path, catalog_dirs)
    deployments, notes = comparable_deployments(scenario_path, catalog, overrides)
    widest = max(deployments.values(), key=lambda s: len(s.offers))
    priced = enumerate_candidates(widest, catalog)
    results = []
    saved = None
    if plan_document is not None:
        deployment = plan_document.get("deployment") if isinstance(plan_document, dict) else None
        if deployment not in deployments:
            raise PlannerInputError("--plan", "deployment", f"the plan's deployment {str(deployment)[:20]!r} is not one "
                                    f"this scenario compares ({', '.join(deployments)})")  # fmt: skip
        saved = (deployment, _saved_plan(plan_document, deployments[deployment]))
    for deployment, scenario in deployments.items():
        tokens = output_tokens_per_year(scenario)
        note = notes.get(deployment, "")
        if saved is not None and saved[0] == deployment:
            results.append(DeploymentResult(deployment, saved[1], (), tokens, note=(note + "; " if note else "")
                                            + "the saved plan (--plan), not re-solved",
                                            gpu_hours=gpu_hours_per_year(saved[1], scenario)))  # fmt: skip
            continue
        try:
            result = solve_candidates(scenario, restrict_candidates(priced, scenario.offers), catalog, solver, time_limit_s)
            results.append(DeploymentResult(deployment, result, (), tokens, note=note,
                                            gpu_hours=gpu_hours_per_year(result, scenario)))
        except InfeasiblePlanError as error:
            results.append(DeploymentResult(deployment, None, tuple(error.diagnosis), tokens, note=note))
        except SolverStoppedError as error:
            results.append(DeploymentResult(deployment, None, (str(error),), tokens, "stopped", note=note))
    for deployment in ("on-prem", "cloud", "hybrid"):
        if deployment not in deployments and deployment in notes:  # a side that could not be planned, and why
            results.append(DeploymentResult(deployment, None, (notes[deployment],), 0.0, "not compared", note=notes[deployment]))
    return tuple(results)


@dataclass(frozen=True)
class PlannedScenario:
    """A plan with what it was made from: what the BOM and the report need."""

    plan: Plan
    scenario: Scenario
    catalog: Catalog


def plan_in_context(
    scenario_path: Path | str, catalog_dirs: CatalogDirs = None, solver: str | None = None,
    time_limit_s: float | None = None, progress=None, perf_margin: float | None = None, perf_source: str | None = None,
    overrides: ScenarioOverrides | None = None, plan_document: dict | None = None,
) -> PlannedScenario:
    """The scenario planned (or, with `plan_document`, a saved `planner plan --json`, repaired or edited, taken as
    it is once checked against the scenario), with the scenario and catalog it goes with."""
    catalog = scenario_catalog(scenario_path, catalog_dirs)
    scenario = with_perf_source(with_perf_margin(load_scenario(scenario_path, catalog, overrides), perf_margin), perf_source)
    if plan_document is not None:
        return PlannedScenario(_saved_plan(plan_document, scenario), scenario, catalog)
    result = solve_scenario(scenario, catalog, solver, time_limit_s, progress)
    return PlannedScenario(result, scenario, catalog)


def workload_landscapes(planned: PlannedScenario) -> list[Landscape]:
    """For each workload the plan serves: every engine it could run on, throughput per GPU vs tokens/s per user,
    the Pareto front and the plan's point (planner.landscape)."""
    out = []
    for workload in planned.scenario.workloads:
        landscape = workload_landscape(planned.plan, planned.scenario, planned.catalog, workload.name)
        if landscape is not None:
            out.append(landscape)
    return out


def bom(scenario_path: Path | str, catalog_dirs: CatalogDirs = None, solver: str | None = None,
        time_limit_s: float | None = None, progress=None, overrides: ScenarioOverrides | None = None,
        plan_document: dict | None = None):  # fmt: skip
    """Plan the scenario (or take a saved plan) and return its bill of materials (planner.report.bom.Bom)."""
    from planner.report.bom import build_bom

    planned = plan_in_context(scenario_path, catalog_dirs, solver, time_limit_s, progress, overrides=overrides,
                              plan_document=plan_document)  # fmt: skip
    return build_bom(planned.plan, planned.scenario, planned.catalog)


def simulate(
    scenario_path: Path | str, catalog_dirs: CatalogDirs = None, options=None, plan_document: dict | None = None,
    solver: str | None = None, time_limit_s: float | None = None, trace_path: Path | str | None = None,
    time_unit: str = "auto", progress=None,
):
    """Plan the scenario (or take a saved plan JSON) and simulate every workload at each period's peak, or replay a
    trace (`planner.simulate.SimulationOptions` says how)."""
    from planner.simulate import SimulationOptions, simulate_plan

    catalog = scenario_catalog(scenario_path, catalog_dirs)
    scenario = load_scenario(scenario_path, catalog)
    options = options or SimulationOptions()
    if trace_path is not None:
        from planner.traces import load_trace

        options = dataclasses.replace(options, trace=load_trace(trace_path, time_unit=time_unit))
    if plan_document is not None:
        result = _saved_plan(plan_document, scenario)
    else:
        result = solve_plan(scenario, catalog, solver=solver, time_limit_s=time_limit_s, progress=progress)
    return result, simulate_plan(result, scenario, catalog, options, progress)


def _saved_plan(document, scenario: Scenario) -> Plan:
    """A saved `planner plan --json` document as a Plan, refused when it is not one or is another scenario's."""
    from planner.plan import configuration_key, plan_field_problems, plan_from_document, route_matches

    if not isinstance(document, dict) or document.get("status") not in ("optimal", "feasible"):
        raise PlannerInputError("--plan", "plan", "not a plan of `planner plan --json` (no optimal or feasible status)")
    try:
        result = plan_from_document(document)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise PlannerInputError("--plan", "plan", f"not a plan of `planner plan --json`: bad or missing {str(exc)[:80]}") from None
    problems = plan_field_problems(result)
    if problems:
        field, allowed_value = problems[0]
        more = f" ({len(problems) - 1} more fields like it)" if len(problems) > 1 else ""
        raise PlannerInputError("--plan", field, f"must be {allowed_value}{more}")
    planned = {w.name for w in result.workloads}
    wanted = {w.name for w in scenario.workloads}
    if result.scenario != scenario.name or planned != wanted or tuple(result.periods) != tuple(p.name for p in scenario.periods):
        raise PlannerInputError(
            "--plan", "plan", f"the plan is for scenario '{result.scenario[:60]}' (workloads {', '.join(sorted(planned))[:120]}), "
            f"not for '{scenario.name}' (workloads {', '.join(sorted(wanted))[:120]}) with the same periods",
        )  # fmt: skip
    allowed = {(offer.site, offer.system) for offer in scenario.offers}
    periods = {*result.periods, "all"}
    workloads = {w.name for w in scenario.workloads}
    used = [(f"routing[{i}]", r) for i, r in enumerate(result.routing)] + [
        (f"instances[{i}]", a) for i, a in enumerate(result.instances)]
    for where, item in used:
        if (item.site, item.system) not in allowed:
            raise PlannerInputError("--plan", f"{where}.system", f"'{str(item.system)[:60]}' at site '{str(item.site)[:20]}' "
                                    "is not a system the scenario allows")  # fmt: skip
        if item.period not in periods or getattr(item, "workload", next(iter(workloads))) not in workloads:
            raise PlannerInputError("--plan", where, f"must be a period and a workload of the scenario (got period "
                                    f"'{str(item.period)[:40]}', workload '{str(getattr(item, 'workload', '-'))[:40]}')")  # fmt: skip
    assignments = {w.name: w.assignments for w in result.workloads}
    for index, route in enumerate(result.routing):
        key = configuration_key(route)
        if result.instances:
            served = any(configuration_key(a) == key and a.period == route.period for a in result.instances)
        else:  # plans saved before instances were recorded: its plan line
            served = any(configuration_key(line) == key and (line.role not in PER_PERIOD_ROLES or line.period == route.period)
                         for line in result.lines)  # fmt: skip
        if not served:
            raise PlannerInputError("--plan", f"routing[{index}]", "must run on instances of the plan: no allocation "
                                    "(or plan line) runs its configuration in its period")  # fmt: skip
        if not any(route_matches(a, route) for a in assignments.get(route.workload, ())):
            raise PlannerInputError("--plan", f"routing[{index}]", f"its configuration (system, TP, precision, batch cap, "
                                    f"lengths, layout) is none of workload '{str(route.workload)[:60]}''s assignments")  # fmt: skip
    for index, line in enumerate(result.lines):
        if (line.site, line.system) not in allowed:
            offered = ", ".join(sorted(f"{s} ({site})" for site, s in allowed))[:200]
            raise PlannerInputError("--plan", f"lines[{index}].system", f"'{str(line.system)[:60]}' at site "
                                    f"'{str(line.site)[:20]}' is not a system the scenario allows; allowed: {offered}")  # fmt: skip
        if line.period not in periods or not (isinstance(line.nodes, int) and 0 < line.nodes <= 1_000_000):
            raise PlannerInputError("--plan", f"lines[{index}]", "a period of the plan (or 'all') and 1 to 1,000,000 nodes")
    return result


def verify(plan: Plan, scenario_path: Path | str, catalog_dirs: CatalogDirs = None, options=None, progress=None,
           overrides: ScenarioOverrides | None = None):  # fmt: skip
    """Simulate a plan just made (`planner plan --verify`): the checks of `planner.simulate.simulate_plan`, each
    with its `verdict` (holds, misses, inconclusive, not simulated)."""
    from planner.simulate import simulate_plan

    catalog = scenario_catalog(scenario_path, catalog_dirs)
    return simulate_plan(plan, load_scenario(scenario_path, catalog, overrides), catalog, options, progress)


def repair(plan: Plan, scenario_path: Path | str, catalog_dirs: CatalogDirs = None, options=None, solver: str | None = None,
           time_limit_s: float | None = None, progress=None, perf_margin: float | None = None,
           perf_source: str | None = None, overrides: ScenarioOverrides | None = None):  # fmt: skip
    """`planner plan --verify --repair`: simulate, and add the cheapest capacity until no limit is conclusively
    missed; inconclusive checks are reported, not repaired (`planner.repair.repair_plan`)."""
    from planner.repair import repair_plan
    from planner.simulate import simulate_plan

    catalog = scenario_catalog(scenario_path, catalog_dirs)
    scenario = with_perf_source(with_perf_margin(load_scenario(scenario_path, catalog, overrides), perf_margin), perf_source)
    return repair_plan(
        plan, scenario, catalog,
        simulate=lambda p, s: simulate_plan(p, s, catalog, options, progress),
        solve=lambda s: solve_scenario(s, catalog, solver, time_limit_s),
    )  # fmt: skip


@dataclass(frozen=True)
class WorkloadFromTrace:
    """`planner workload analyze`: the trace analysis and the scenario block made from it (and, with a base
    scenario, the whole scenario with the workload in it, already checked against the catalog)."""

    analysis: object  # planner.workload_analysis.TraceAnalysis
    block: dict
    scenario_document: dict | None


def analyze_workload(
    trace_path: Path | str, period: str = "hour", engines: int = 2, quantile: float | None = None,
    name: str | None = None, model: str | None = None, mode: str = "streaming",
    columns: tuple[str | None, str | None, str | None] = (None, None, None), time_unit: str = "auto",
    base_scenario: Path | str | None = None, catalog_dirs: CatalogDirs = None,
) -> WorkloadFromTrace:
    """Rates per period, the ISL x OSL histogram and engine variants of a request trace, as a scenario block."""
    from planner.traces import load_trace
    from planner.workload_analysis import analyze_trace, period_seconds, workload_block

    if name is not None and not (0 < len(name.strip()) <= 100):
        raise PlannerInputError("--name", "name", "a workload name of 1 to 100 characters")
    catalog = load_catalog(catalog_dirs) if base_scenario is None else scenario_catalog(base_scenario, catalog_dirs)
    if model is not None:
        model = catalog.resolve("model", model, "--model", "model")
    if base_scenario is not None and model is None:
        raise PlannerInputError("--model", "model", "required with --base: the workload must name a catalog model")
    trace = load_trace(trace_path, *columns, time_unit=time_unit)
    analysis = analyze_trace(
        trace, period_seconds(period), engines,
        quantile if quantile is not None else catalog.defaults.peak_quantile.value,
    )  # fmt: skip
    block = workload_block(analysis, name or Path(trace_path).stem, model or "set-a-model-id", mode)
    document = None
    if base_scenario is not None:
        document = scenario_with_workload(base_scenario, block, catalog)
    return WorkloadFromTrace(analysis, block, document)


def scenario_with_workload(base_scenario: Path | str, block: dict, catalog: Catalog) -> dict:
    """The base scenario with the block's workload added (or replacing the one of the same name) and its daily
    profile as the scenario's periods; checked against the catalog before anything is written."""
    from planner.loading import read_yaml, validate_model
    from planner.scenario import ScenarioSpec, build_scenario

    file = str(base_scenario)
    document = read_yaml(Path(base_scenario))
    if not isinstance(document, dict):
        raise PlannerInputError(file, "", "expected a scenario (a YAML mapping)")
    workload = block["workloads"][0]
    workloads = [w for w in document.get("workloads") or [] if not (isinstance(w, dict) and w.get("name") == workload["name"])]
    document = {**document, "workloads": [*workloads, workload]}
    if "periods" in block:
        if document.get("periods"):
            raise PlannerInputError(
                file, "periods",
                "the base scenario has periods of its own; the trace's daily profile cannot be merged into them. "
                "Paste the block by hand, or analyze with --period day",
            )  # fmt: skip
        document["periods"] = block["periods"]
    build_scenario(validate_model(ScenarioSpec, document, file), catalog, file)
    return document


def ingest_results(
    tool: str, paths: list[Path | str], options, table: str = "ingested", catalog_dirs: CatalogDirs = None
):
    """Benchmark result files of genai-perf / vLLM / GuideLLM as catalog rows (planner.ingest.IngestResult)."""
    from planner.ingest import ingest

    return ingest(tool, paths, options, load_catalog(catalog_dirs), table)


def sensitivity(
    scenario_path: Path | str, catalog_dirs: CatalogDirs = None, throughput_scales=(1.0, 0.9, 0.8, 0.7),
    demand_scales=(1.0, 1.25, 1.5, 2.0), latency_scales=(1.0,), solver: str | None = None,
    time_limit_s: float | None = None, progress=None,
):
    """Where the scenario's nominal plan breaks over a grid of scales, and what a plan for each point costs."""
    from planner.robustness import sensitivity as run_sensitivity

    catalog = scenario_catalog(scenario_path, catalog_dirs)
    scenario = load_scenario(scenario_path, catalog)
    return run_sensitivity(scenario, catalog, tuple(throughput_scales), tuple(demand_scales), tuple(latency_scales),
                           solver, time_limit_s, progress)  # fmt: skip


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


@dataclass(frozen=True)
class TablesBuild:
    rows: tuple
    skipped: tuple[str, ...]

    def csv_text(self) -> str:
        from planner.catalog import benchmark_csv_text

        return benchmark_csv_text(self.rows)


def tables_build(
    models: list[str], gpus: list[str], tps=(1, 2, 4, 8), precisions=("bf16", "fp8", "fp4"), concurrencies=(1, 8, 32, 128),
    lengths=((1024, 128), (4096, 512)), source: str = "aic", catalog_dirs: CatalogDirs = None, progress=None,
) -> TablesBuild:
    """Benchmark-table rows from a perf source over a grid (today: aic), so that catalogs carry them."""
    from planner.perf import aic

    if source != "aic":
        raise PlannerInputError("--source", "source", f"unknown source '{source}'; allowed: aic")
    perf_layers("aic")  # the clear message when the extra is not installed
    catalog = load_catalog(catalog_dirs)
    models = [catalog.resolve("model", model, "--models", "models") for model in models]
    gpus = [catalog.resolve("gpu", gpu, "--gpus", "gpus") for gpu in gpus]
    rows, skipped = aic.table_rows(catalog, models, gpus, tuple(tps), tuple(precisions), tuple(concurrencies),
                                   tuple(lengths), progress=progress)  # fmt: skip
    return TablesBuild(tuple(rows), tuple(skipped))


# ---- the decision report (`planner report`): the plan with what a decision rests on ----------------------------

SENSITIVITY_DEMAND_SCALES = (0.8, 1.0, 1.2, 1.5)
SENSITIVITY_THROUGHPUT_SCALES = (1.0, 0.8)


@dataclass(frozen=True)
class DecisionInputs:
    """What `planner report` adds to a plan: on-prem, cloud and hybrid side by side, the simulation's verdict and
    the sensitivity grid, each absent (None) with a note that says why."""

    comparison: tuple[DeploymentResult, ...] | None = None  # None: not compared (comparison_note says why)
    comparison_note: str = ""
    verification: dict | None = None  # `planner simulate --json`'s document (json_out.simulation_document)
    verification_source: str = ""  # simulated for this report, or the plan file's (`planner plan --verify --json`)
    sensitivity: object | None = None  # planner.robustness.Sensitivity
    sensitivity_note: str = ""


def decision_report(
    scenario_path: Path | str, catalog_dirs: CatalogDirs = None, solver: str | None = None,
    time_limit_s: float | None = None, progress=None, overrides: ScenarioOverrides | None = None,
    plan_document: dict | None = None, verify_options=None, with_sensitivity: bool = False,
) -> tuple[PlannedScenario, DecisionInputs]:
    """The plan of `planner report` (or the saved one) with the inputs of its decision sections:
    - on-prem, cloud and hybrid side by side (`compare`) where the scenario has both sites; the row of the plan's
      own deployment is the report's plan (made as `planner plan` makes it, with its precision and prefix-cache
      notes, and robust where the scenario asks);
    - the simulation's verdict: simulated now with `verify_options`, else a plan file's `verification`, else none;
    - with `with_sensitivity`, the nominal plan over demand x (0.8, 1, 1.2, 1.5) and throughput x (1, 0.8)."""
    from planner.report.json_out import simulation_document

    catalog = scenario_catalog(scenario_path, catalog_dirs)
    scenario = load_scenario(scenario_path, catalog, overrides)
    wide = overrides if not overrides or overrides.deployment is None else dataclasses.replace(overrides, deployment=None)
    sites = {offer.site for offer in load_scenario(scenario_path, catalog, wide or None).offers}
    comparison, comparison_note, plan = None, "", None
    if plan_document is not None:
        plan = _saved_plan(plan_document, scenario)
    if len(sites) > 1:
        if progress:
            progress(0, None, "planning on-prem, cloud and hybrid side by side")
        try:
            comparison = compare(scenario_path, catalog_dirs, solver, time_limit_s, wide or None, plan_document)
        except PlannerInputError as error:  # a saved plan of a deployment the comparison does not make
            if plan_document is None:
                raise
            comparison, comparison_note = None, f"Not compared: {error}."
    else:
        comparison_note = (f"The scenario has one site ({', '.join(sorted(sites))}): there is nothing to set side by "
                           "side. `planner compare` plans it against the catalog's cloud instances of the same GPUs "
                           "where the scenario has no cloud site.")  # fmt: skip
    if plan is None:
        plan = solve_scenario(scenario, catalog, solver, time_limit_s, progress)
    if comparison is not None and plan_document is None:  # the plan's own deployment: this very plan
        comparison = tuple(
            dataclasses.replace(r, plan=plan, infeasible=(), no_plan_status="infeasible",
                                note=(r.note + "; " if r.note else "") + "this report's plan")
            if r.deployment == plan.deployment else r for r in comparison
        )  # fmt: skip
    planned = PlannedScenario(plan, scenario, catalog)
    verification, source = None, ""
    if verify_options is not None:
        from planner.simulate import simulate_plan

        checks = simulate_plan(plan, scenario, catalog, verify_options, _named_stage(progress, "simulating (workload x period)"))
        verification = simulation_document(checks)
        seeds = f"{verify_options.seeds} seed{'s' if verify_options.seeds != 1 else ''}"
        duration = (f"{verify_options.duration_s:g} s simulated per workload and period" if verify_options.duration_s
                    else "run until every verdict's 95% interval is within 5%")  # fmt: skip
        source = f"simulated for this report (--verify: {duration}, {seeds})"
    elif isinstance(plan_document, dict) and isinstance(plan_document.get("verification"), dict):
        verification = plan_document["verification"]
        source = "the plan file's (`planner plan --verify --json`), not simulated again: --verify simulates anew"
    sensitivity_result, sensitivity_note = None, ""
    if with_sensitivity:
        from planner.robustness import sensitivity as run_sensitivity

        sensitivity_result = run_sensitivity(scenario, catalog, SENSITIVITY_THROUGHPUT_SCALES, SENSITIVITY_DEMAND_SCALES,
                                             (1.0,), solver, time_limit_s, progress)  # fmt: skip
    else:
        sensitivity_note = "not computed: run with --sensitivity (it re-plans the scenario at each point)"
    return planned, DecisionInputs(comparison, comparison_note, verification, source, sensitivity_result, sensitivity_note)


def _named_stage(progress, name: str):
    """The `progress` callback with its first counted call starting a stage called `name` (a display otherwise
    names a counted stage after the command's first one)."""
    if progress is None:
        return None
    named = [False]

    def call(done, total=None, phase=None):
        if phase is None and not named[0]:
            phase = name
        named[0] = True
        return progress(done, total, phase)

    return call
