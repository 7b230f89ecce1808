"""The fleet integer program (design.md, "The integer program"), one period.

Notations
---------
w in W          workloads (name)
c in C          candidate configurations (site, system, model, TP, precision, max batch, engine ISL/OSL)
(w, c) in O     options: c can serve w within w's latency limits, at r[w,c] requests/s per node
N[c]            integer nodes of configuration c (on-prem: bought; cloud: rented all year in this one-period model)
x[w,c] >= 0     requests/s of w routed to c
d[w]            peak demand of w (requests/s); h the demand headroom fraction
cost[c]         annualized cost of one node of c (USD/year)

minimize    sum_c cost[c] N[c]
subject to  sum_c x[w,c] = d[w] (1 + h)                  for every w          (demand; design.md's >=, held
                                                                               tight so x is the actual routing)
            sum_w x[w,c] / r[w,c] <= N[c]                for every c          (capacity)
            sum_c power_kw[c] N[c] <= P                  when a power budget is given
            sum_c rack_units[c] N[c] <= R                when a rack-unit budget is given
            sum_c capex_usd[c] N[c] <= K                 when a capex budget is given

Counts are integers per configuration, never one binary per node (symmetric binaries make CBC crawl).
"""

from __future__ import annotations

import math
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pulp

from planner.candidates import Candidate, CandidateSet, Option, enumerate_candidates
from planner.catalog import Catalog
from planner.errors import InfeasiblePlanError, PlannerInputError
from planner.plan import Assignment, CandidateStats, Plan, PlanLine, Totals, WorkloadResult
from planner.scenario import Scenario

SOLVERS = ("cbc", "highs")
_TOLERANCE = 1e-6


@dataclass
class FleetModel:
    """The PuLP problem with its named variables, as built by the `add_*` functions below."""

    problem: pulp.LpProblem
    nodes: dict[str, pulp.LpVariable]  # N[c]
    routed: dict[tuple[str, str], pulp.LpVariable]  # x[w,c]


def define_node_variables(model: FleetModel, cset: CandidateSet) -> None:
    """N[c] in Z>=0 for every candidate configuration c."""
    for index, candidate in enumerate(cset.candidates):
        model.nodes[candidate.key] = pulp.LpVariable(f"N_{index}", lowBound=0, cat=pulp.LpInteger)


def define_routing_variables(model: FleetModel, cset: CandidateSet) -> None:
    """x[w,c] >= 0 for every option (w, c): only where c meets w's limits."""
    for index, option in enumerate(cset.options):
        model.routed[(option.workload, option.candidate)] = pulp.LpVariable(f"x_{index}", lowBound=0)


def add_demand_constraints(model: FleetModel, scenario: Scenario) -> None:
    """sum_c x[w,c] = d[w] (1 + h) for every workload w.

    design.md writes >=; routing more than the demand never lowers the cost, and equality makes x[w,c] the
    requests/s actually sent to c, which the report shows.
    """
    headroom = 1.0 + scenario.limits.headroom_fraction
    for workload in scenario.workloads:
        routed = [var for (w, _), var in model.routed.items() if w == workload.name]
        model.problem += pulp.lpSum(routed) == workload.peak_rps * headroom, f"demand_{_safe(workload.name)}"


def add_capacity_constraints(model: FleetModel, cset: CandidateSet) -> None:
    """sum_w x[w,c] / r[w,c] <= N[c] for every configuration c."""
    for index, candidate in enumerate(cset.candidates):
        load = [
            model.routed[(option.workload, candidate.key)] * (1.0 / option.rps_per_node)
            for option in cset.options
            if option.candidate == candidate.key
        ]
        model.problem += pulp.lpSum(load) <= model.nodes[candidate.key], f"capacity_{index}"


def _resource_sum(model: FleetModel, cset: CandidateSet, attribute: str) -> pulp.LpAffineExpression:
    return pulp.lpSum(getattr(c, attribute) * model.nodes[c.key] for c in cset.candidates)


def add_power_limit(model: FleetModel, cset: CandidateSet, power_kw: float | None) -> None:
    """sum_c power_kw[c] N[c] <= P (on-prem nodes; cloud power is in the hourly price)."""
    if power_kw is not None:
        model.problem += _resource_sum(model, cset, "power_kw") <= power_kw, "power_limit"


def add_rack_limit(model: FleetModel, cset: CandidateSet, rack_units: int | None) -> None:
    """sum_c rack_units[c] N[c] <= R."""
    if rack_units is not None:
        model.problem += _resource_sum(model, cset, "rack_units") <= rack_units, "rack_limit"


def add_capex_limit(model: FleetModel, cset: CandidateSet, capex_usd: float | None) -> None:
    """sum_c capex_usd[c] N[c] <= K."""
    if capex_usd is not None:
        model.problem += _resource_sum(model, cset, "capex_usd") <= capex_usd, "capex_limit"


def set_cost_objective(model: FleetModel, cset: CandidateSet) -> None:
    """minimize sum_c cost[c] N[c] (annualized USD)."""
    model.problem += _resource_sum(model, cset, "annual_cost_usd"), "annual_cost_usd"


def build_fleet_model(scenario: Scenario, cset: CandidateSet, with_limits: bool = True) -> FleetModel:
    model = FleetModel(pulp.LpProblem(_safe(scenario.name), pulp.LpMinimize), {}, {})
    define_node_variables(model, cset)
    define_routing_variables(model, cset)
    set_cost_objective(model, cset)
    add_demand_constraints(model, scenario)
    add_capacity_constraints(model, cset)
    if with_limits:
        add_power_limit(model, cset, scenario.limits.power_kw)
        add_rack_limit(model, cset, scenario.limits.rack_units)
        add_capex_limit(model, cset, scenario.limits.capex_usd)
    return model


@dataclass(frozen=True)
class SolveOutcome:
    status: str  # optimal | feasible | infeasible | no-solution
    mip_gap: float | None
    seconds: float


def solve_model(model: FleetModel, solver: str, time_limit_s: float) -> SolveOutcome:
    """Solve with CBC (default) or HiGHS and read the status from the solver itself."""
    started = time.perf_counter()
    gap: float | None = None
    if solver == "cbc":
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "cbc.log"
            backend = pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s, threads=1, logPath=str(log))
            model.problem.solve(backend)
            log_text = log.read_text(errors="replace") if log.exists() else ""
        gap = _cbc_gap(log_text)
    elif solver == "highs":
        backend = pulp.HiGHS(msg=False, timeLimit=time_limit_s, threads=1)
        model.problem.solve(backend)
        highs = getattr(model.problem, "solverModel", None)
        if highs is not None:
            info_gap = highs.getInfo().mip_gap
            gap = float(info_gap) if math.isfinite(info_gap) else None
    else:
        raise PlannerInputError("--solver", "solver", f"unknown solver '{solver}'; allowed: {', '.join(SOLVERS)}")
    seconds = time.perf_counter() - started
    status = {
        pulp.LpSolutionOptimal: "optimal",
        pulp.LpSolutionIntegerFeasible: "feasible",
        pulp.LpSolutionInfeasible: "infeasible",
        pulp.LpSolutionUnbounded: "infeasible",
    }.get(model.problem.sol_status, "no-solution")
    if status == "optimal":
        gap = 0.0
    return SolveOutcome(status, gap, seconds)


def _cbc_gap(log_text: str) -> float | None:
    """CBC prints 'Gap: 0.0123' in its summary when it stops early; relative gap as a fraction."""
    found = re.findall(r"^Gap:\s+([0-9.eE+-]+)", log_text, flags=re.MULTILINE)
    return float(found[-1]) if found else None


def plan(scenario: Scenario, catalog: Catalog, solver: str | None = None, time_limit_s: float | None = None) -> Plan:
    """Size the fleet for `scenario`: the cheapest node counts that serve every workload's peak within its limits.

    Raises InfeasiblePlanError with a diagnosis when no plan exists.
    """
    solver = solver or scenario.solver
    if solver not in SOLVERS:
        raise PlannerInputError("--solver", "solver", f"unknown solver '{solver}'; allowed: {', '.join(SOLVERS)}")
    time_limit_s = time_limit_s if time_limit_s is not None else scenario.time_limit_s
    cset = enumerate_candidates(scenario, catalog)
    check_every_workload_has_options(scenario, cset)
    model = build_fleet_model(scenario, cset)
    outcome = solve_model(model, solver, time_limit_s)
    if outcome.status == "infeasible":
        raise InfeasiblePlanError(diagnose_limits(scenario, cset, solver, time_limit_s))
    if outcome.status == "no-solution":
        raise InfeasiblePlanError(
            [f"the solver ({solver}) found no feasible plan within the time limit of {time_limit_s:g} s; raise --time-limit"]
        )
    return _read_plan(scenario, cset, model, solver, outcome)


def check_every_workload_has_options(scenario: Scenario, cset: CandidateSet) -> None:
    """A workload no candidate can serve makes the plan infeasible before any solve: say why per system."""
    problems = []
    for workload in scenario.workloads:
        if workload.peak_rps > 0 and not cset.options_for(workload.name):
            reasons = [f"{p.system}: {p.reason}" for p in cset.pruned if p.workload == workload.name]
            problems.append(f"workload {workload.name}: no candidate can serve it ({'; '.join(reasons) or 'no system allowed'})")
    if problems:
        raise InfeasiblePlanError(problems)


def diagnose_limits(scenario: Scenario, cset: CandidateSet, solver: str, time_limit_s: float) -> list[str]:
    """Which budget cannot be met: the least each resource can be while demand is served, against its limit."""
    checks = (
        ("power budget", "power_kw", scenario.limits.power_kw, "kW"),
        ("rack-unit budget", "rack_units", scenario.limits.rack_units, "RU"),
        ("capex budget", "capex_usd", scenario.limits.capex_usd, "USD"),
    )
    problems = []
    for label, attribute, limit, unit in checks:
        if limit is None:
            continue
        model = build_fleet_model(scenario, cset, with_limits=False)
        model.problem.setObjective(_resource_sum(model, cset, attribute))
        outcome = solve_model(model, solver, time_limit_s)
        if outcome.status in ("optimal", "feasible"):
            least = pulp.value(model.problem.objective) or 0.0
            if least > limit + _TOLERANCE:
                problems.append(f"{label} {limit:,.6g} {unit} < {least:,.6g} {unit} needed at minimum")
    if not problems:
        given = [label for label, _, limit, _ in checks if limit is not None]
        problems.append(
            f"the limits together ({', '.join(given) or 'none given'}) cannot all be met at once, though each alone can"
        )
    return problems


def _read_plan(scenario: Scenario, cset: CandidateSet, model: FleetModel, solver: str, outcome: SolveOutcome) -> Plan:
    counts = {key: int(round(var.value() or 0.0)) for key, var in model.nodes.items()}
    routed = {key: max(0.0, var.value() or 0.0) for key, var in model.routed.items()}
    used = [c for c in cset.candidates if counts[c.key] > 0]
    lines = tuple(
        PlanLine(
            site=c.site, system=c.system, gpu=c.gpu, model=c.model, tp=c.tp, precision=c.precision,
            max_batch=c.max_batch, engine_isl=c.engine_isl, engine_osl=c.engine_osl, nodes=counts[c.key],
            gpus=c.gpus_per_node * counts[c.key],
            period="all", annual_cost_usd=round(c.annual_cost_usd * counts[c.key], 2),
            capex_usd=round(c.capex_usd * counts[c.key], 2), power_kw=round(c.power_kw * counts[c.key], 6),
            cost_note=c.cost_note,
        )
        for c in used
    )
    nodes_by_system: dict[str, int] = {}
    for c in used:
        nodes_by_system[c.system] = nodes_by_system.get(c.system, 0) + counts[c.key]
    objective = sum(c.annual_cost_usd * counts[c.key] for c in used)
    totals = Totals(
        nodes_by_system=dict(sorted(nodes_by_system.items())),
        gpus=sum(c.gpus_per_node * counts[c.key] for c in used),
        capex_usd=round(sum(c.capex_usd * counts[c.key] for c in used), 2),
        power_kw=round(sum(c.power_kw * counts[c.key] for c in used), 6),
        rack_units=sum(c.rack_units * counts[c.key] for c in used),
        annual_cost_usd=round(objective, 2),
    )
    workloads = tuple(_workload_result(w, cset, routed, counts) for w in scenario.workloads)
    return Plan(
        scenario=scenario.name, status=outcome.status, solver=solver,
        objective_usd_per_year=round(objective, 2), solve_seconds=round(outcome.seconds, 3),
        mip_gap=outcome.mip_gap, lines=lines, totals=totals, workloads=workloads,
        binding_limits=_binding_limits(scenario, totals),
        candidates=CandidateStats(
            generated=len(cset.candidates), options=len(cset.options),
            pruned=tuple((p.workload, p.system, p.reason) for p in cset.pruned),
        ),
    )


def _workload_result(workload, cset: CandidateSet, routed: dict, counts: dict) -> WorkloadResult:
    assignments = []
    capacity = 0.0
    why_parts = []
    for option in cset.options_for(workload.name):
        candidate: Candidate = cset.candidate(option.candidate)
        rps = routed.get((workload.name, option.candidate), 0.0)
        if counts[candidate.key] > 0 and rps > _TOLERANCE:
            capacity += option.rps_per_node * counts[candidate.key] if _sole_user(cset, candidate.key) else rps
            assignments.append(_assignment(option, candidate, rps))
            why_parts.append(_why(workload, option, candidate, rps))
    worst = {
        name: max((getattr(a, name) for a in assignments if getattr(a, name) is not None), default=None)
        for name in ("ttft_ms", "itl_ms", "e2e_ms")
    }
    provenance = ",".join(sorted({a.provenance for a in assignments})) or "none"
    return WorkloadResult(
        name=workload.name, model=workload.model, isl_tokens=workload.isl_tokens, osl_tokens=workload.osl_tokens,
        demand_rps=workload.peak_rps, demand_note=workload.demand_note, capacity_rps=round(capacity, 6),
        ttft_ms=worst["ttft_ms"], itl_ms=worst["itl_ms"], e2e_ms=worst["e2e_ms"], provenance=provenance,
        why="; ".join(why_parts) or "no demand", assignments=tuple(assignments),
    )


def _sole_user(cset: CandidateSet, candidate_key: str) -> bool:
    """A configuration used by one workload only: all its nodes' capacity counts for that workload."""
    return sum(1 for o in cset.options if o.candidate == candidate_key) == 1


def _assignment(option: Option, candidate: Candidate, rps: float) -> Assignment:
    perf = option.perf
    return Assignment(
        system=candidate.system, site=candidate.site, tp=candidate.tp, precision=candidate.precision,
        rps=round(rps, 6), rps_per_node=round(option.rps_per_node, 6), ttft_ms=perf.ttft_ms, itl_ms=perf.itl_ms,
        e2e_ms=None if perf.e2e_ms is None else round(perf.e2e_ms, 3), provenance=perf.provenance, source=perf.source,
    )


def _why(workload, option: Option, candidate: Candidate, rps: float) -> str:
    perf = option.perf
    slo = workload.slo
    limits = [
        f"{name} {value:.4g} ms (limit {limit:g})" if value is not None else f"{name} < {bound:g} ms (limit {limit:g})"
        for name, value, bound, limit in (
            ("TTFT", perf.ttft_ms, perf.ttft_ms_bound, slo.ttft_ms),
            ("ITL", perf.itl_ms, perf.itl_ms_bound, slo.itl_ms),
            ("E2E", perf.e2e_ms, None, slo.e2e_ms),
        )
        if limit is not None and (value is not None or bound is not None)
    ]
    point = ", ".join(limits) if limits else "no latency limit: max-throughput point"
    return (
        f"{rps:.4g} rps on {candidate.system} at {option.rps_per_node:.4g} rps/node "
        f"({rps / option.rps_per_node:.2f} nodes of load) [{point}; {perf.provenance}]"
    )


def _binding_limits(scenario: Scenario, totals: Totals) -> tuple[str, ...]:
    """The budgets the plan uses up (no room for one more unit): what stops a cheaper or bigger answer."""
    limits = scenario.limits
    binding = []
    for label, used, limit, unit in (
        ("power budget", totals.power_kw, limits.power_kw, "kW"),
        ("rack-unit budget", totals.rack_units, limits.rack_units, "RU"),
        ("capex budget", totals.capex_usd, limits.capex_usd, "USD"),
    ):
        if limit is not None and used >= limit - _TOLERANCE * max(1.0, limit):
            binding.append(f"{label}: {used:,.6g} of {limit:,.6g} {unit} used")
    return tuple(binding)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)
