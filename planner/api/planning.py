"""The Python API for planning: a scenario planned, compared, billed, simulated, repaired and reported."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from planner.answers import (  # noqa: F401 (the API's names: planner.api.BreakEven, break_even)
    BreakEven,
    DecisionInputs,
    DeploymentResult,
    PlannedScenario,
    break_even,
    gpu_hours_per_year,
    output_tokens_per_year,
)
from planner.catalog import Catalog, CatalogDirs, as_directory_list, load_catalog
from planner.errors import PlannerInputError
from planner.optimize import plan as solve_plan
from planner.plan import PER_PERIOD_ROLES, Plan
from planner.scenario import (
    Scenario,
    ScenarioOverrides,
    load_scenario,
    scenario_catalog_dirs,
)


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
    executor: str | None = None,
) -> Plan:
    """Load the catalog and a scenario file, then size the fleet (raises InfeasiblePlanError with a diagnosis).
    `progress(done, total)` follows the candidate enumeration, the long part of big scenarios. A perf margin
    (argument or the scenario's `robustness:`) or demand forecasts make it a robust plan priced against the nominal.
    `overrides` change the scenario for this run (deployment, systems, precisions, engines). `executor`: where the
    engine curves are priced, process (forked workers here, the default) or ray (planner.workers); the plan is the
    same either way."""
    from planner.workers import use_executor

    with use_executor(executor):
        catalog = scenario_catalog(scenario_path, catalog_dirs)
        scenario = load_scenario(scenario_path, catalog, overrides)
        scenario = with_perf_source(with_perf_margin(scenario, perf_margin), perf_source)
        return solve_scenario(with_confidence(scenario, confidence), catalog, solver, time_limit_s, progress)


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
        saved = (deployment, _saved_plan(plan_document, deployments[deployment], catalog))
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
        return PlannedScenario(_saved_plan(plan_document, scenario, catalog, progress), scenario, catalog)
    result = solve_scenario(scenario, catalog, solver, time_limit_s, progress)
    return PlannedScenario(result, scenario, catalog)


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
        result = _saved_plan(plan_document, scenario, catalog, progress)
    else:
        result = solve_plan(scenario, catalog, solver=solver, time_limit_s=time_limit_s, progress=progress)
    return result, simulate_plan(result, scenario, catalog, options, _named_stage(progress, "simulating (workload x period)"))


def _saved_plan(document, scenario: Scenario, catalog: Catalog, progress=None) -> Plan:
    """A saved `planner plan --json` document as a Plan, refused when it is not one, is another scenario's, or any
    figure it holds disagrees with what its fleet costs under the scenario and catalog or what the performance model
    gives its configurations (optimize/recheck.py; `progress` follows the pricing that recomputes the latter)."""
    from planner.plan import (
        configuration_key,
        plan_field_problems,
        plan_from_document,
        route_matches,
    )

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
    from planner.optimize.recheck import recheck_plan

    return recheck_plan(result, scenario, catalog, progress, _as_planned(document.get("overrides"), scenario))


def _as_planned(overrides, scenario: Scenario) -> Scenario:
    """The scenario with the `--precisions` and `--engines` a saved plan was made with (its `overrides`), which set
    the configurations its performance figures are recomputed for; refused where they are not such lists."""
    if overrides is None:
        return scenario
    from planner.catalog import PRECISIONS
    from planner.perf.serving import EngineSpec

    def engine_ok(value) -> bool:
        try:
            EngineSpec.parse(value)
        except (ValueError, TypeError, AttributeError):
            return False
        return True

    if not isinstance(overrides, dict):
        raise PlannerInputError("--plan", "overrides", "must be the options the plan was made with (an object)")
    changes = {}
    for name, ok, allowed in (("precisions", lambda v: v in PRECISIONS, ", ".join(PRECISIONS)),
                              ("engines", engine_ok, "engine names, each optionally pinned as engine@version")):  # fmt: skip
        values = overrides.get(name)
        if values is None:
            continue
        if not isinstance(values, list) or not values or not all(isinstance(v, str) and ok(v) for v in values):
            raise PlannerInputError("--plan", f"overrides.{name}", f"must be a list of {allowed}")
        changes[name] = tuple(values)
    if not changes:
        return scenario
    return dataclasses.replace(scenario, workloads=tuple(dataclasses.replace(w, **changes) for w in scenario.workloads))


def _verify_options(options):
    """A plan's simulation options for verifying it: the caller's, or the defaults with the balancer the plan sizes
    an instance for (planner/simulate/options.py VERIFY_BALANCER)."""
    if options is not None:
        return options
    from planner.simulate.options import VERIFY_BALANCER, SimulationOptions

    return SimulationOptions(balancer=VERIFY_BALANCER)


def verify(plan: Plan, scenario_path: Path | str, catalog_dirs: CatalogDirs = None, options=None, progress=None,
           overrides: ScenarioOverrides | None = None):  # fmt: skip
    """Simulate a plan just made (`planner plan --verify`): the checks of `planner.simulate.simulate_plan`, each
    with its `verdict` (holds, misses, inconclusive, not simulated)."""
    from planner.simulate import simulate_plan

    catalog = scenario_catalog(scenario_path, catalog_dirs)
    return simulate_plan(plan, load_scenario(scenario_path, catalog, overrides), catalog, _verify_options(options), progress)


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
        simulate=lambda p, s: simulate_plan(p, s, catalog, _verify_options(options), progress),
        solve=lambda s: solve_scenario(s, catalog, solver, time_limit_s),
    )  # fmt: skip



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



SENSITIVITY_DEMAND_SCALES = (0.8, 1.0, 1.2, 1.5)
SENSITIVITY_THROUGHPUT_SCALES = (1.0, 0.8)


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
    catalog = scenario_catalog(scenario_path, catalog_dirs)
    scenario = load_scenario(scenario_path, catalog, overrides)
    wide = overrides if not overrides or overrides.deployment is None else dataclasses.replace(overrides, deployment=None)
    sites = {offer.site for offer in load_scenario(scenario_path, catalog, wide or None).offers}
    comparison, comparison_note, plan = None, "", None
    if plan_document is not None:
        plan = _saved_plan(plan_document, scenario, catalog, progress)
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
                           "side. `planner compare` plans the other side on the catalog's priced systems of the same "
                           "GPUs (cloud instances for an on-prem site, servers for a cloud one).")  # fmt: skip
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
        from planner.simulate.document import simulation_document

        checks = simulate_plan(plan, scenario, catalog, verify_options, _named_stage(progress, "simulating (workload x period)"))
        verification = simulation_document(checks)
        seeds = f"{verify_options.seeds} seed{'s' if verify_options.seeds != 1 else ''}"
        duration = (f"{verify_options.duration_s:g} s simulated per workload and period" if verify_options.duration_s
                    else "run until every verdict's 95% interval is within 5%")  # fmt: skip
        source = f"simulated for this report (--verify: {duration}, {seeds}, {verify_options.balancer} balancer)"
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

