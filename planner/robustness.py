"""Plans that survive being wrong: derated capacity, several demand forecasts, and where a plan breaks.

- Robust planning: capacity per node x (1 - perf_margin) (and / (1 + band) of its engine class at `confidence`),
  and each workload's demand x the largest factor any
  forecast gives it (a fixed fleet that serves the element-wise largest demand serves every forecast: scale
  each cell's routes down). The nominal plan is solved alongside to price the robustness.
- Break point of a plan: the largest uniform demand multiplier lambda* its nodes can serve at the same cost (the
  fleet program with the plan's node counts fixed: idle GPUs count, engines may be rearranged on the same nodes).
  Throughput x t and demand x d hold iff d / t <= lambda*.
- Sensitivity: over a grid of throughput, demand and latency-limit scales, whether the nominal plan holds and
  what a plan made for that point costs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pulp

from planner.candidates import CandidateSet, enumerate_candidates
from planner.catalog import Catalog
from planner.errors import InfeasiblePlanError, PlannerInputError, SolverStoppedError
from planner.metrics import LATENCY_METRICS
from planner.plan import Plan, RobustnessSummary
from planner.scenario import Scenario


def derate(cset: CandidateSet, perf_margin: float) -> CandidateSet:
    """Every option's rps per node x (1 - perf_margin): plan as if the perf model were that optimistic."""
    if perf_margin == 0:
        return cset
    factor = 1.0 - perf_margin
    options = tuple(dataclasses.replace(o, rps_per_node=o.rps_per_node * factor) for o in cset.options)
    return dataclasses.replace(cset, options=options)


def derate_by_band(cset: CandidateSet, catalog: Catalog, confidence: float | None) -> CandidateSet:
    """Every modeled option's rps per node / (1 + e), e the relative throughput error covering `confidence` of the
    held-out errors of its engine class (planner/perf/engines.py): the pessimistic edge of its band. An option whose
    class's band is too wide to be an answer (`expected error unknown`) is left out: no confidence can be stated
    for it. Options answered by a measured row carry no band and keep their rate."""
    if confidence is None:
        return cset
    from planner.candidates import Pruned
    from planner.perf.engines import class_of
    from planner.perf.serving import engine_named

    options, left_out = [], []
    for option in cset.options:
        candidate = cset.candidate(option.candidate)
        if option.perf.expected_error is None:
            options.append(option)
            continue
        version = candidate.engine_version if candidate.pinned else None
        cls = class_of(catalog, candidate.model, candidate.gpu, candidate.engine, version)
        if not option.perf.error_known:
            left_out.append(Pruned(option.workload, candidate.system, (
                f"{engine_named(candidate.engine, candidate.engine_version)} on {cls.architecture} {cls.kind} models: "
                f"expected error unknown (80% of its held-out errors reach ±{cls.expected_error.throughput:.0%} "
                f"throughput), so no confidence can be stated for it: --confidence leaves it out"), "data"))  # fmt: skip
            continue
        band = cls.throughput_error_at(confidence)
        options.append(dataclasses.replace(option, rps_per_node=option.rps_per_node / (1.0 + band)))
    return dataclasses.replace(cset, options=tuple(options), pruned=cset.pruned + tuple(dict.fromkeys(left_out)))


def demand_scales(scenario: Scenario) -> dict[str, float]:
    """Per workload, the largest factor of the scenario's forecasts (1 for a workload no forecast names)."""
    scales = {w.name: 1.0 for w in scenario.workloads}
    if scenario.demand_forecasts:
        scales = {name: 0.0 for name in scales}
        for _, factors in scenario.demand_forecasts:
            given = dict(factors)
            for name in scales:
                scales[name] = max(scales[name], given.get(name, 1.0))
    return scales


def scale_demand(scenario: Scenario, scales: dict[str, float]) -> Scenario:
    """The scenario with each workload's demand (peak to size for) in every period x its scale."""
    periods = tuple(
        dataclasses.replace(p, demand_rps={w: rps * scales.get(w, 1.0) for w, rps in p.demand_rps.items()})
        for p in scenario.periods
    )
    return dataclasses.replace(scenario, periods=periods)


def robust_scenario(scenario: Scenario) -> Scenario:
    return scale_demand(scenario, demand_scales(scenario))


def is_robust(scenario: Scenario) -> bool:
    return scenario.perf_margin > 0 or bool(scenario.demand_forecasts) or scenario.confidence is not None


def demand_multiplier_limit(plan: Plan, scenario: Scenario, cset: CandidateSet, catalog: Catalog,
                            solver: str | None = None, time_limit_s: float | None = None) -> float:  # fmt: skip
    """lambda* = the largest uniform demand multiplier the plan's nodes serve at the plan's cost: its bought,
    reserved and rented node counts held, the engines on them free (idle GPUs run more whole units, a node may run
    other configurations), under the scenario's fleet switches and limits. The fleet program of
    planner/optimize with its node counts fixed and every demand row d x Lambda x mu, maximizing mu <= 1; Lambda
    starts at 2 and grows x4 while mu reaches 1 (the unit bounds are computed at Lambda x d, so they never cut
    off a multiplier below Lambda). Spare nodes stay idle."""
    from planner.optimize import _ROLE, build_fleet_model, solve_model

    pricing_of = {role: pricing for pricing, role in _ROLE.items()}  # a plan line's role -> its hardware's pricing
    nodes: dict[tuple, int] = {}
    for line in plan.lines:
        if line.role != "spare":
            key = ((line.site, pricing_of[line.role], line.system), line.period)
            nodes[key] = nodes.get(key, 0) + line.nodes
    cap, limit = 2.0, time_limit_s if time_limit_s is not None else scenario.time_limit_s
    while True:
        share = pulp.LpVariable("mu", 0, 1)
        model = build_fleet_model(scale_demand(scenario, {w.name: cap for w in scenario.workloads}), cset, catalog,
                                  valid_inequalities=False, demand_share=share)  # fmt: skip
        for hardware, var in model.fixed_nodes.items():
            var.lowBound = var.upBound = nodes.get((hardware, "all"), 0)
        for (hardware, period), var in model.period_nodes.items():
            var.lowBound = var.upBound = nodes.get((hardware, period), 0)
        model.problem.sense = pulp.LpMaximize
        model.problem.setObjective(share)
        outcome = solve_model(model, solver or scenario.solver, limit)
        reached = share.value() if outcome.status in ("optimal", "feasible") and share.value() is not None else 0.0
        if reached < 1 - 1e-9 or cap >= 4096:
            return float(cap * reached)
        cap *= 4




def plan_robust(scenario: Scenario, catalog: Catalog, solver: str | None = None, time_limit_s: float | None = None,
                progress=None) -> Plan:  # fmt: skip
    """The robust plan (capacity derated, every forecast served), with what it costs against the nominal plan."""
    from planner.optimize import solve_candidates

    cset = enumerate_candidates(scenario, catalog, progress)
    if progress is not None:
        limit = time_limit_s if time_limit_s is not None else scenario.time_limit_s
        progress(0, None, f"solving the robust and the nominal integer programs ({solver or scenario.solver}, at most "
                          f"{limit:g} s each)")  # fmt: skip
    derated = derate(derate_by_band(cset, catalog, scenario.confidence), scenario.perf_margin)
    robust = solve_candidates(robust_scenario(scenario), derated, catalog, solver, time_limit_s)
    try:
        nominal = solve_candidates(scenario, cset, catalog, solver, time_limit_s)
        nominal_cost = nominal.objective_usd_per_year
        breaks_at = demand_multiplier_limit(nominal, scenario, cset, catalog, solver, time_limit_s)
    except InfeasiblePlanError:
        nominal_cost, breaks_at = None, None
    summary = RobustnessSummary(
        perf_margin=scenario.perf_margin, demand_scales=demand_scales(scenario),
        forecasts=tuple(name for name, _ in scenario.demand_forecasts), nominal_objective_usd_per_year=nominal_cost,
        cost_of_robustness_usd_per_year=None if nominal_cost is None else robust.objective_usd_per_year - nominal_cost,
        nominal_demand_multiplier_limit=breaks_at, confidence=scenario.confidence,
    )  # fmt: skip
    return dataclasses.replace(robust, robustness=summary)


@dataclass(frozen=True)
class SensitivityPoint:
    throughput_scale: float
    demand_scale: float
    latency_scale: float
    nominal_holds: bool
    nominal_reason: str  # why it breaks ('' when it holds)
    plan_status: str  # of the plan made for this point: optimal | feasible | infeasible
    plan_objective_usd_per_year: float | None
    plan_nodes: int | None


@dataclass(frozen=True)
class Sensitivity:
    scenario: str
    nominal_objective_usd_per_year: float
    nominal_nodes: int
    demand_multiplier_limit: float  # lambda*: the nominal plan holds iff demand_scale / throughput_scale <= it
    points: tuple[SensitivityPoint, ...]
    headroom_fraction: float = 0.0  # limits.headroom_fraction: kept free on top of lambda* x demand

    @property
    def headroom_note(self) -> str:
        """What lambda* is measured against where the scenario keeps capacity free ('' where it keeps none)."""
        if not self.headroom_fraction:
            return ""
        return (f" (with the scenario's {self.headroom_fraction:.0%} headroom still kept free: the fleet's capacity is "
                f"{self.demand_multiplier_limit * (1 + self.headroom_fraction):.3g} x the demand)")  # fmt: skip


def _tightened(scenario: Scenario, factor: float) -> Scenario:
    workloads = tuple(
        dataclasses.replace(w, slo=dataclasses.replace(
            w.slo, **{k: (getattr(w.slo, k) * factor if getattr(w.slo, k) is not None else None)
                      for k in LATENCY_METRICS}))
        for w in scenario.workloads
    )  # fmt: skip
    return dataclasses.replace(scenario, workloads=workloads)


def _latency_misses(plan: Plan, scenario: Scenario) -> list[str]:
    """Assignments of the plan whose operating point misses a (tightened) limit."""
    slo = {w.name: w.slo for w in scenario.workloads}
    misses = []
    for workload in plan.workloads:
        limits = slo[workload.name]
        for a in workload.assignments:
            for metric in LATENCY_METRICS:
                value, limit = getattr(a, metric), getattr(limits, metric)
                if value is not None and limit is not None and value > limit * (1 + 1e-9):
                    misses.append(f"{workload.name} on {a.system}: {metric} {value:.4g} > {limit:.4g}")
    return misses


def sensitivity(
    scenario: Scenario, catalog: Catalog, throughput_scales=(1.0, 0.9, 0.8, 0.7), demand_scales=(1.0, 1.25, 1.5, 2.0),
    latency_scales=(1.0,), solver: str | None = None, time_limit_s: float | None = None, progress=None,
) -> Sensitivity:
    """Where the nominal plan breaks over a grid, and what a plan made for each point costs."""
    from planner.optimize import solve_candidates

    for flag, values, low, high in (("--throughput", throughput_scales, 0.0, 10.0), ("--demand", demand_scales, 0.0, 100.0),
                                    ("--latency", latency_scales, 0.0, 10.0)):  # fmt: skip
        bad = [v for v in values if not low < v <= high]
        if not values or bad:
            raise PlannerInputError(flag, flag.lstrip("-"), f"scales must be in ({low:g}, {high:g}] (got {list(values)})")
    nominal_cset = enumerate_candidates(scenario, catalog, progress)
    if progress:
        seconds = time_limit_s if time_limit_s is not None else scenario.time_limit_s
        progress(0, None, f"solving the nominal plan ({solver or scenario.solver}, at most {seconds:g} s)")
    nominal = solve_candidates(scenario, nominal_cset, catalog, solver, time_limit_s)
    limit = demand_multiplier_limit(nominal, scenario, nominal_cset, catalog, solver, time_limit_s)
    grid = [(t, d, s) for s in latency_scales for t in throughput_scales for d in demand_scales]
    points = []
    tightened = {s: scenario if s == 1.0 else _tightened(scenario, s) for s in latency_scales}
    if progress and any(s != 1.0 for s in latency_scales):
        progress(0, None, "pricing candidates at the tighter latency limits")
    csets = {s: nominal_cset if s == 1.0 else enumerate_candidates(tightened[s], catalog) for s in latency_scales}
    if progress:
        progress(0, len(grid), "planning each grid point (latency x throughput x demand)")
    for done, (t, d, s) in enumerate(grid):
        reasons = []
        if d / t > limit * (1 + 1e-9):
            reasons.append(f"demand x {d:g} / throughput x {t:g} = {d / t:.3g} > {limit:.3g}, the most the fleet serves")
        if s != 1.0:
            reasons += _latency_misses(nominal, tightened[s])[:3]
        point_scenario = scale_demand(tightened[s], {w.name: d for w in scenario.workloads})
        try:
            replanned = solve_candidates(point_scenario, derate(csets[s], 1.0 - t), catalog, solver, time_limit_s)
            status, cost, nodes = replanned.status, replanned.objective_usd_per_year, replanned.totals.nodes
        except InfeasiblePlanError:
            status, cost, nodes = "infeasible", None, None
        except SolverStoppedError:
            status, cost, nodes = "stopped", None, None
        points.append(SensitivityPoint(t, d, s, not reasons, "; ".join(reasons), status, cost, nodes))
        if progress:
            progress(done + 1, len(grid))
    return Sensitivity(scenario.name, nominal.objective_usd_per_year, nominal.totals.nodes, limit, tuple(points),
                       scenario.limits.headroom_fraction)  # fmt: skip
