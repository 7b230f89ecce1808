"""The fleet integer program (design.md, "The integer program").

Notations
---------
w, b            workload w and its length bucket b (share s[w,b] of w's requests)
t in T          periods, h[t] hours per year
c in C          candidate configurations (site, pricing, system, model, TP, precision, max batch, engine ISL/OSL);
                C_fix: bought on-prem (capex) or reserved cloud; C_dem: on-demand cloud
(w,b,c) in O    options: c serves bucket (w,b) within w's limits at r[w,b,c] requests/s per node
N[c]  in Z>=0   nodes of c in C_fix, the same in every period
M[c,t] in Z>=0  nodes of c in C_dem rented in period t
x[w,b,c,t] >= 0 requests/s of bucket (w,b) routed to c in period t
d[w,t]          peak demand of w in period t; H the headroom fraction
S[s]  in Z>=0   spare on-prem nodes of system s (N + k), with used[s] in {0,1}
use[v] in {0,1} engine variant v is built (only with a variant limit)

minimize   sum_{c in C_fix} cost[c] N[c] + sum_{c in C_dem, t} usd_per_hour[c] h[t] M[c,t] + sum_s cost[s] S[s]
subject to sum_c x[w,b,c,t] = d[w,t] s[w,b] (1 + H)                       demand, every (w,b,t)
           sum_{(w,b)} x[w,b,c,t] / r[w,b,c] <= N[c]  (or M[c,t])          capacity, every (c,t)
           sum power_kw (N + S) <= P;  sum rack_units (N + S) <= R;  sum capex_usd (N + S) <= K   budgets
           sum_{c on GPU g} gpus_per_node (N[c] or M[c,t]) + spares <= G[g]                   GPUs, every (g,t)
           sum_{c of s} N[c] <= U[s] used[s];  S[s] = k used[s]                               spares N + k
           nodes of variant v in any period <= U[v] use[v];  sum_v use[v] <= V                engine variants

Counts are integers per configuration, never one binary per node (symmetric binaries make CBC crawl).
design.md writes the demand constraint with >=; routing more than the demand never lowers the cost, and
equality makes x the requests/s actually sent to each configuration, which the report shows.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pulp

from planner.candidates import Candidate, CandidateSet, Option, enumerate_candidates
from planner.catalog import Catalog
from planner.errors import InfeasiblePlanError, PlannerInputError
from planner.plan import (
    Assignment,
    CostBreakdown,
    PeriodLoad,
    Plan,
    PlanLine,
    Route,
    Totals,
    WorkloadResult,
)
from planner.scenario import Scenario

SOLVERS = ("cbc", "highs", "ortools")
_TOLERANCE = 1e-6
CBC_THREADS = 1  # deterministic: the same inputs give the same plan


@dataclass
class FleetModel:
    """The PuLP problem with its named variables, as built by the `define_*` / `add_*` functions below."""

    problem: pulp.LpProblem
    fixed_nodes: dict[str, pulp.LpVariable] = field(default_factory=dict)  # N[c]
    period_nodes: dict[tuple[str, str], pulp.LpVariable] = field(default_factory=dict)  # M[c,t]
    routed: dict[tuple[str, int, str, str], pulp.LpVariable] = field(default_factory=dict)  # x[w,b,c,t]
    spares: dict[str, pulp.LpVariable] = field(default_factory=dict)  # S[s]
    system_used: dict[str, pulp.LpVariable] = field(default_factory=dict)  # used[s]
    variant_used: dict[tuple, pulp.LpVariable] = field(default_factory=dict)  # use[v]
    spare_figures: dict[str, dict[str, float]] = field(default_factory=dict)  # per-node figures of spare systems

    def nodes(self, candidate: Candidate, period: str):
        """N[c] for bought/reserved configurations, M[c,t] for on-demand ones."""
        if candidate.fixed:
            return self.fixed_nodes[candidate.key]
        return self.period_nodes.get((candidate.key, period), 0)


def bucket_demand(scenario: Scenario) -> dict[tuple[str, int, str], float]:
    """d[w,t] s[w,b] (1 + H) for every bucket and period with demand."""
    headroom = 1.0 + scenario.limits.headroom_fraction
    demand = {}
    for period in scenario.periods:
        for workload in scenario.workloads:
            for index, bucket in enumerate(workload.buckets):
                value = period.demand_rps[workload.name] * bucket.share * headroom
                if value > 0:
                    demand[(workload.name, index, period.name)] = value
    return demand


def node_upper_bound(cset: CandidateSet, demand: dict, candidate: Candidate, periods) -> int:
    """Most nodes configuration c can usefully have: all the demand it can serve, in its busiest period."""
    options = cset.options_of(candidate.key)
    busiest = 0.0
    for period in periods:
        load = sum(demand.get((o.workload, o.bucket, period.name), 0.0) / o.rps_per_node for o in options)
        busiest = max(busiest, load)
    return math.ceil(busiest - 1e-9)


def define_node_variables(model: FleetModel, cset: CandidateSet, scenario: Scenario, demand: dict, bounds: dict) -> None:
    """N[c] in Z>=0 for bought/reserved c; M[c,t] in Z>=0 for on-demand c and every period; each bounded by the
    nodes that all the demand c can serve would need (a tighter box helps branch and bound)."""
    for index, candidate in enumerate(cset.candidates):
        if candidate.fixed:
            model.fixed_nodes[candidate.key] = pulp.LpVariable(f"N_{index}", 0, bounds[candidate.key], cat=pulp.LpInteger)
        else:
            for t, period in enumerate(scenario.periods):
                upper = node_upper_bound(cset, demand, candidate, (period,))
                model.period_nodes[(candidate.key, period.name)] = pulp.LpVariable(
                    f"M_{index}_{t}", 0, upper, cat=pulp.LpInteger
                )


def define_routing_variables(model: FleetModel, cset: CandidateSet, demand: dict) -> None:
    """x[w,b,c,t] >= 0 for every option (w,b,c) and period t where (w,b) has demand."""
    periods_of: dict[tuple[str, int], list[str]] = defaultdict(list)
    for workload, bucket, period in demand:
        periods_of[(workload, bucket)].append(period)
    index = 0
    for option in cset.options:
        for period in periods_of.get((option.workload, option.bucket), []):
            model.routed[(option.workload, option.bucket, option.candidate, period)] = pulp.LpVariable(
                f"x_{index}", lowBound=0
            )
            index += 1


def add_demand_constraints(model: FleetModel, demand: dict) -> None:
    """sum_c x[w,b,c,t] = d[w,t] s[w,b] (1 + H) for every bucket and period with demand."""
    routed_by_cell: dict[tuple[str, int, str], list] = defaultdict(list)
    for (workload, bucket, _, period), var in model.routed.items():
        routed_by_cell[(workload, bucket, period)].append(var)
    for index, (cell, value) in enumerate(sorted(demand.items())):
        model.problem += pulp.lpSum(routed_by_cell.get(cell, [])) == value, f"demand_{index}"


def add_capacity_constraints(model: FleetModel, cset: CandidateSet) -> None:
    """sum_(w,b) x[w,b,c,t] / r[w,b,c] <= N[c] (or M[c,t]) for every configuration and period."""
    rate = {(o.workload, o.bucket, o.candidate): o.rps_per_node for o in cset.options}
    load: dict[tuple[str, str], list] = defaultdict(list)
    for (workload, bucket, key, period), var in model.routed.items():
        load[(key, period)].append(var * (1.0 / rate[(workload, bucket, key)]))
    for index, ((key, period), terms) in enumerate(sorted(load.items(), key=lambda kv: kv[0])):
        model.problem += pulp.lpSum(terms) <= model.nodes(cset.candidate(key), period), f"capacity_{index}"


def _on_prem_sum(model: FleetModel, cset: CandidateSet, catalog: Catalog, attribute: str) -> pulp.LpAffineExpression:
    """sum over bought nodes (and spares) of a per-node figure (power_kw, rack_units, capex_usd)."""
    terms = [getattr(c, attribute) * model.fixed_nodes[c.key] for c in cset.candidates if c.pricing == "capex"]
    for system_id, spare in model.spares.items():
        terms.append(model.spare_figures[system_id][attribute] * spare)
    return pulp.lpSum(terms)


def add_power_limit(model: FleetModel, cset: CandidateSet, catalog: Catalog, power_kw: float | None) -> None:
    """sum power_kw (N + S) <= P over on-prem nodes (cloud power is in the hourly price)."""
    if power_kw is not None:
        model.problem += _on_prem_sum(model, cset, catalog, "power_kw") <= power_kw, "power_limit"


def add_rack_limit(model: FleetModel, cset: CandidateSet, catalog: Catalog, rack_units: int | None) -> None:
    """sum rack_units (N + S) <= R."""
    if rack_units is not None:
        model.problem += _on_prem_sum(model, cset, catalog, "rack_units") <= rack_units, "rack_limit"


def add_capex_limit(model: FleetModel, cset: CandidateSet, catalog: Catalog, capex_usd: float | None) -> None:
    """sum capex_usd (N + S) <= K."""
    if capex_usd is not None:
        model.problem += _on_prem_sum(model, cset, catalog, "capex_usd") <= capex_usd, "capex_limit"


def add_gpu_availability(
    model: FleetModel, cset: CandidateSet, scenario: Scenario, catalog: Catalog, skip: frozenset = frozenset()
) -> None:
    """sum_{c on GPU g} gpus_per_node (N[c] or M[c,t]) + spares of g <= G[g] in every period t."""
    for gpu, available in sorted(scenario.limits.max_gpus.items()):
        if f"gpus:{gpu}" in skip:
            continue
        for t, period in enumerate(scenario.periods):
            terms = [c.gpus_per_node * model.nodes(c, period.name) for c in cset.candidates if c.gpu == gpu]
            for system_id, spare in model.spares.items():
                system = catalog.systems[system_id]
                if system.gpu == gpu:
                    terms.append(system.gpus_per_node * spare)
            model.problem += pulp.lpSum(terms) <= available, f"gpus_{_safe(gpu)}_{t}"


def add_spare_nodes(model: FleetModel, cset: CandidateSet, scenario: Scenario, catalog: Catalog, bounds: dict) -> None:
    """N + k: S[s] = k used[s], sum_{c of s} N[c] <= U[s] used[s] for every on-prem system s."""
    k = scenario.limits.spare_nodes_per_system
    if k <= 0:
        return
    systems = sorted({c.system for c in cset.candidates if c.pricing == "capex"})
    for index, system_id in enumerate(systems):
        members = [c for c in cset.candidates if c.pricing == "capex" and c.system == system_id]
        used = pulp.LpVariable(f"used_{index}", cat=pulp.LpBinary)
        spare = pulp.LpVariable(f"S_{index}", lowBound=0, cat=pulp.LpInteger)
        upper = max(1, sum(bounds[c.key] for c in members))
        model.problem += pulp.lpSum(model.fixed_nodes[c.key] for c in members) <= upper * used, f"spare_use_{index}"
        model.problem += spare == k * used, f"spare_count_{index}"
        model.system_used[system_id], model.spares[system_id] = used, spare
        sample = members[0]
        model.spare_figures[system_id] = {
            "power_kw": sample.power_kw, "rack_units": sample.rack_units, "capex_usd": sample.capex_usd,
            "annual_cost_usd": sample.annual_cost_usd,
        }  # fmt: skip


def add_variant_limit(model: FleetModel, cset: CandidateSet, scenario: Scenario, bounds: dict) -> None:
    """nodes of variant v <= U[v] use[v] in every period; sum_v use[v] <= V."""
    limit = scenario.limits.max_engine_variants
    if limit is None:
        return
    by_variant: dict[tuple, list[Candidate]] = defaultdict(list)
    for c in cset.candidates:
        by_variant[c.variant].append(c)
    for index, (variant, members) in enumerate(sorted(by_variant.items(), key=lambda kv: str(kv[0]))):
        use = pulp.LpVariable(f"use_{index}", cat=pulp.LpBinary)
        model.variant_used[variant] = use
        upper = max(1, sum(bounds[c.key] for c in members))
        for t, period in enumerate(scenario.periods):
            model.problem += pulp.lpSum(model.nodes(c, period.name) for c in members) <= upper * use, f"variant_{index}_{t}"
    model.problem += pulp.lpSum(model.variant_used.values()) <= limit, "variant_limit"


def cost_expression(model: FleetModel, cset: CandidateSet, scenario: Scenario) -> pulp.LpAffineExpression:
    """sum_{C_fix} cost[c] N[c] + sum_{C_dem,t} usd_per_hour[c] h[t] M[c,t] + sum_s cost[s] S[s]."""
    terms = [c.annual_cost_usd * model.fixed_nodes[c.key] for c in cset.candidates if c.fixed]
    hours = {p.name: p.hours_per_year for p in scenario.periods}
    for (key, period), var in model.period_nodes.items():
        terms.append(cset.candidate(key).usd_per_hour * hours[period] * var)
    for system_id, spare in model.spares.items():
        terms.append(model.spare_figures[system_id]["annual_cost_usd"] * spare)
    return pulp.lpSum(terms)


def build_fleet_model(
    scenario: Scenario, cset: CandidateSet, catalog: Catalog, with_limits: bool = True, skip: frozenset = frozenset()
) -> FleetModel:
    """The whole program; `skip` leaves out budgets by name (power, rack, capex, gpus:<id>) for diagnosis."""
    model = FleetModel(pulp.LpProblem(_safe(scenario.name), pulp.LpMinimize))
    demand = bucket_demand(scenario)
    bounds = {c.key: node_upper_bound(cset, demand, c, scenario.periods) for c in cset.candidates}
    define_node_variables(model, cset, scenario, demand, bounds)
    define_routing_variables(model, cset, demand)
    add_spare_nodes(model, cset, scenario, catalog, bounds)
    model.problem += cost_expression(model, cset, scenario), "annual_cost_usd"
    add_demand_constraints(model, demand)
    add_capacity_constraints(model, cset)
    add_variant_limit(model, cset, scenario, bounds)
    if with_limits:
        if "power" not in skip:
            add_power_limit(model, cset, catalog, scenario.limits.power_kw)
        if "rack" not in skip:
            add_rack_limit(model, cset, catalog, scenario.limits.rack_units)
        if "capex" not in skip:
            add_capex_limit(model, cset, catalog, scenario.limits.capex_usd)
        add_gpu_availability(model, cset, scenario, catalog, skip)
    return model


@dataclass(frozen=True)
class SolveOutcome:
    status: str  # optimal | feasible | infeasible | no-solution
    mip_gap: float | None
    seconds: float


def solve_model(model: FleetModel, solver: str, time_limit_s: float) -> SolveOutcome:
    """Solve with CBC (default), HiGHS or OR-Tools (SCIP) and read the status from the solver itself."""
    started = time.perf_counter()
    if solver == "cbc":
        status, gap = _solve_cbc(model.problem, time_limit_s)
    elif solver == "highs":
        status, gap = _solve_highs(model.problem, time_limit_s)
    elif solver == "ortools":
        status, gap = _solve_ortools(model.problem, time_limit_s)
    else:
        raise PlannerInputError("--solver", "solver", f"unknown solver '{solver}'; allowed: {', '.join(SOLVERS)}")
    if status == "optimal":
        gap = 0.0
    return SolveOutcome(status, gap, time.perf_counter() - started)


_PULP_STATUS = {
    pulp.LpSolutionOptimal: "optimal",
    pulp.LpSolutionIntegerFeasible: "feasible",
    pulp.LpSolutionInfeasible: "infeasible",
    pulp.LpSolutionUnbounded: "infeasible",
}


def _pulp_status(problem: pulp.LpProblem) -> str:
    """The solution status, falling back on the problem status: CBC reports an integer-infeasible MIP as
    'no solution found' with problem status 'infeasible'."""
    if problem.sol_status in _PULP_STATUS:
        return _PULP_STATUS[problem.sol_status]
    return "infeasible" if problem.status == pulp.LpStatusInfeasible else "no-solution"


def _solve_cbc(problem: pulp.LpProblem, time_limit_s: float) -> tuple[str, float | None]:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "cbc.log"
        problem.solve(pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s, threads=CBC_THREADS, logPath=str(log)))
        log_text = log.read_text(errors="replace") if log.exists() else ""
    status = _pulp_status(problem)
    return status, _cbc_gap(log_text, pulp.value(problem.objective)) if status == "feasible" else None


def _cbc_gap(log_text: str, objective: float | None) -> float | None:
    """CBC's summary on an early stop: 'Gap: 0.0123', or the best bound from which the gap follows."""
    found = re.findall(r"^Gap:\s+([0-9.eE+-]+)", log_text, flags=re.MULTILINE)
    if found:
        return float(found[-1])
    bound = re.findall(r"best possible\s+([0-9.eE+-]+)", log_text)
    if bound and objective:
        return abs(objective - float(bound[-1])) / max(abs(objective), 1e-9)
    return None


def _solve_highs(problem: pulp.LpProblem, time_limit_s: float) -> tuple[str, float | None]:
    problem.solve(pulp.HiGHS(msg=False, timeLimit=time_limit_s, threads=1))
    status = _pulp_status(problem)
    highs = getattr(problem, "solverModel", None)
    gap = None
    if highs is not None and status == "feasible":
        info_gap = highs.getInfo().mip_gap
        gap = float(info_gap) if math.isfinite(info_gap) else None
    return status, gap


def _solve_ortools(problem: pulp.LpProblem, time_limit_s: float) -> tuple[str, float | None]:
    """OR-Tools' SCIP on the same model exported as MPS, in a child process (see planner/ortools_worker.py);
    values are written back into the PuLP variables."""
    with tempfile.TemporaryDirectory() as tmp:
        mps, out = Path(tmp) / "fleet.mps", Path(tmp) / "result.json"
        problem.writeMPS(str(mps))
        completed = subprocess.run(
            [sys.executable, "-m", "planner.ortools_worker", str(mps), str(time_limit_s), str(out)],
            capture_output=True, text=True, timeout=time_limit_s + 120, check=False,
        )  # fmt: skip
        if completed.returncode != 0 or not out.exists():
            raise RuntimeError(f"OR-Tools worker failed: {completed.stderr.strip()[-2000:]}")
        result = json.loads(out.read_text())
    status = result["status"]
    if status in ("optimal", "feasible"):
        for var in problem.variables():
            var.varValue = result["values"].get(var.name, 0.0)
    gap = None
    if status == "feasible" and result["objective"] is not None:
        gap = abs(result["objective"] - result["bound"]) / max(abs(result["objective"]), 1e-9)
    return status, gap


def plan(
    scenario: Scenario,
    catalog: Catalog,
    solver: str | None = None,
    time_limit_s: float | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Plan:
    """Size the fleet for `scenario`: the cheapest nodes that serve every workload's demand in every period
    within its limits. Raises InfeasiblePlanError with a diagnosis when no plan exists."""
    solver = solver or scenario.solver
    if solver not in SOLVERS:
        raise PlannerInputError("--solver", "solver", f"unknown solver '{solver}'; allowed: {', '.join(SOLVERS)}")
    cset = enumerate_candidates(scenario, catalog, progress)
    return solve_candidates(scenario, cset, catalog, solver, time_limit_s)


def solve_candidates(
    scenario: Scenario, cset: CandidateSet, catalog: Catalog, solver: str | None = None, time_limit_s: float | None = None
) -> Plan:
    """The integer program over a candidate set already priced (the robust and sensitivity modes reuse one)."""
    solver = solver or scenario.solver
    time_limit_s = time_limit_s if time_limit_s is not None else scenario.time_limit_s
    check_every_workload_has_options(scenario, cset)
    model = build_fleet_model(scenario, cset, catalog)
    outcome = solve_model(model, solver, time_limit_s)
    if outcome.status == "infeasible":
        raise InfeasiblePlanError(diagnose_limits(scenario, cset, catalog, solver, time_limit_s))
    if outcome.status == "no-solution":
        raise InfeasiblePlanError(
            [f"the solver ({solver}) found no feasible plan within the time limit of {time_limit_s:g} s; raise --time-limit"]
        )
    return _read_plan(scenario, cset, catalog, model, solver, outcome)


def check_every_workload_has_options(scenario: Scenario, cset: CandidateSet) -> None:
    """A bucket with demand that no candidate can serve makes the plan infeasible before any solve: say why."""
    served = {(o.workload, o.bucket) for o in cset.options}
    demand = bucket_demand(scenario)
    problems = []
    for workload in scenario.workloads:
        missing = [
            b for b in range(len(workload.buckets))
            if (workload.name, b) not in served and any((workload.name, b, p.name) in demand for p in scenario.periods)
        ]  # fmt: skip
        if missing:
            problems.append(_why_unserved(workload, missing, cset))
    if problems:
        raise InfeasiblePlanError(problems)


def _why_unserved(workload, missing: list[int], cset: CandidateSet) -> str:
    """In words: the latency limit below what the fastest fitting configuration reaches, or no fit, or no data."""
    what = "" if len(workload.buckets) == 1 else " (buckets " + ", ".join(
        f"{workload.buckets[b].isl_tokens}/{workload.buckets[b].osl_tokens}" for b in missing
    ) + ")"
    pruned = [p for p in cset.pruned if p.workload == workload.name]
    fastest = cset.fastest.get(workload.name, {})
    limits = (("TTFT", "ttft_ms", workload.slo.ttft_ms), ("ITL", "itl_ms", workload.slo.itl_ms), ("E2E", "e2e_ms", workload.slo.e2e_ms))
    below = [
        f"{name} {limit:g} ms is below the fastest candidate's {fastest[key].value_ms:,.0f} ms ({fastest[key].label})"
        for name, key, limit in limits
        if limit is not None and key in fastest and fastest[key].value_ms > limit
    ]  # fmt: skip
    if below:
        return f"workload {workload.name}{what}: " + "; ".join(below)
    if pruned and all(p.kind == "memory" for p in pruned):
        return f"workload {workload.name}{what}: does not fit in memory on any allowed system ({pruned[-1].system}: {pruned[-1].reason})"
    reasons = list(dict.fromkeys(f"{p.system}: {p.reason}" for p in pruned if p.kind != "memory"))
    reasons = reasons or list(dict.fromkeys(f"{p.system}: {p.reason}" for p in pruned))
    shown = "; ".join(reasons[:4]) + (f"; and {len(reasons) - 4} more" if len(reasons) > 4 else "")
    return f"workload {workload.name}{what}: no candidate can serve it ({shown or 'no system allowed'})"


def diagnose_limits(scenario: Scenario, cset: CandidateSet, catalog: Catalog, solver: str, time_limit_s: float) -> list[str]:
    """Which budget cannot be met: for each, the least it can be while demand is served and the other budgets
    hold, against its limit."""
    limits = scenario.limits
    checks = [
        ("power", "power budget", lambda m: _on_prem_sum(m, cset, catalog, "power_kw"), limits.power_kw, "kW"),
        ("rack", "rack-unit budget", lambda m: _on_prem_sum(m, cset, catalog, "rack_units"), limits.rack_units, "RU"),
        ("capex", "capex budget", lambda m: _on_prem_sum(m, cset, catalog, "capex_usd"), limits.capex_usd, "USD"),
    ]
    for gpu, available in sorted(limits.max_gpus.items()):
        for period in scenario.periods:
            checks.append((
                f"gpus:{gpu}",
                f"GPUs available of {gpu}" + (f" in period {period.name}" if len(scenario.periods) > 1 else ""),
                lambda m, g=gpu, p=period.name: pulp.lpSum(
                    [c.gpus_per_node * m.nodes(c, p) for c in cset.candidates if c.gpu == g]
                    + [catalog.systems[s].gpus_per_node * v for s, v in m.spares.items() if catalog.systems[s].gpu == g]
                ),
                available, "GPUs",
            ))  # fmt: skip
    problems = []
    for key, label, expression, limit, unit in checks:
        if limit is None:
            continue
        model = build_fleet_model(scenario, cset, catalog, skip=frozenset({key}))
        model.problem.setObjective(expression(model))
        outcome = solve_model(model, solver, time_limit_s)
        if outcome.status in ("optimal", "feasible"):
            least = pulp.value(model.problem.objective) or 0.0
            if least > limit + _TOLERANCE:
                problems.append(f"{label} {limit:,.6g} {unit} < {least:,.6g} {unit} needed at minimum")
    if not problems:
        model = build_fleet_model(scenario, cset, catalog, with_limits=False)
        if solve_model(model, solver, time_limit_s).status == "infeasible":
            problems.append(
                f"at most {limits.max_engine_variants} engine variants cannot serve every workload bucket"
                if limits.max_engine_variants is not None else "the workloads cannot be served together"
            )
        else:
            given = [label for _, label, _, limit, _ in checks if limit is not None]
            problems.append(
                f"the limits together ({', '.join(dict.fromkeys(given))}) cannot all be met at once: relax one of them"
            )
    return problems


def _read_plan(scenario, cset: CandidateSet, catalog: Catalog, model: FleetModel, solver: str, outcome: SolveOutcome) -> Plan:
    hours = {p.name: p.hours_per_year for p in scenario.periods}
    fixed = {key: int(round(var.value() or 0.0)) for key, var in model.fixed_nodes.items()}
    rented = {key: int(round(var.value() or 0.0)) for key, var in model.period_nodes.items()}
    spares = {s: int(round(var.value() or 0.0)) for s, var in model.spares.items()}
    routed = {key: max(0.0, var.value() or 0.0) for key, var in model.routed.items()}

    lines: list[PlanLine] = []
    for c in cset.candidates:
        if c.fixed and fixed.get(c.key, 0) > 0:
            n = fixed[c.key]
            lines.append(_line(c, n, "all", c.annual_cost_usd * n))
        elif not c.fixed:
            for period in scenario.periods:
                n = rented.get((c.key, period.name), 0)
                if n > 0:
                    lines.append(_line(c, n, period.name, c.usd_per_hour * hours[period.name] * n))
    for system_id, count in sorted(spares.items()):
        if count > 0:
            figures = model.spare_figures[system_id]
            system = catalog.systems[system_id]
            lines.append(PlanLine(
                site="on-prem", system=system_id, gpu=system.gpu, model="(spare)", tp=None, precision=None,
                max_batch=None, engine_isl=0, engine_osl=0, nodes=count, gpus=system.gpus_per_node * count,
                period="all", role="spare", annual_cost_usd=round(figures["annual_cost_usd"] * count, 2),
                capex_usd=round(figures["capex_usd"] * count, 2), power_kw=round(figures["power_kw"] * count, 6),
                cost_note=f"N+{scenario.limits.spare_nodes_per_system} spare",
            ))  # fmt: skip
    objective = sum(line.annual_cost_usd for line in lines)
    totals = _totals(scenario, cset, catalog, lines)
    workloads = tuple(_workload_result(w, scenario, cset, routed, fixed, rented) for w in scenario.workloads)
    return Plan(
        scenario=scenario.name, deployment=scenario.deployment, status=outcome.status, solver=solver,
        objective_usd_per_year=round(objective, 2), solve_seconds=round(outcome.seconds, 3), mip_gap=outcome.mip_gap,
        lines=tuple(lines), totals=totals, workloads=workloads,
        binding_limits=_binding_limits(scenario, totals, lines),
        candidates=cset.stats,
        periods=tuple(p.name for p in scenario.periods),
        routing=_routing(scenario, cset, routed),
    )  # fmt: skip


_ROLE = {"capex": "bought", "reserved": "reserved", "on-demand": "on-demand"}


def _routing(scenario: Scenario, cset: CandidateSet, routed: dict) -> tuple[Route, ...]:
    rate = {(o.workload, o.bucket, o.candidate): o.rps_per_node for o in cset.options}
    buckets = {w.name: w.buckets for w in scenario.workloads}
    order = {p.name: i for i, p in enumerate(scenario.periods)}
    routes = []
    for (workload, bucket, key, period), rps in sorted(routed.items(), key=lambda kv: (order[kv[0][3]], kv[0][:3])):
        if rps <= _TOLERANCE:
            continue
        c = cset.candidate(key)
        routes.append(Route(
            period=period, workload=workload, bucket_isl=buckets[workload][bucket].isl_tokens,
            bucket_osl=buckets[workload][bucket].osl_tokens, site=c.site, role=_ROLE[c.pricing], system=c.system, model=c.model,
            tp=c.tp, precision=c.precision, max_batch=c.max_batch, engine_isl=c.engine_isl, engine_osl=c.engine_osl,
            rps=round(rps, 9), rps_per_node=rate[(workload, bucket, key)],
        ))  # fmt: skip
    return tuple(routes)


def _line(c: Candidate, nodes: int, period: str, annual_cost: float) -> PlanLine:
    return PlanLine(
        site=c.site, system=c.system, gpu=c.gpu, model=c.model, tp=c.tp, precision=c.precision, max_batch=c.max_batch,
        engine_isl=c.engine_isl, engine_osl=c.engine_osl, nodes=nodes, gpus=c.gpus_per_node * nodes, period=period,
        role=_ROLE[c.pricing],
        annual_cost_usd=round(annual_cost, 2),
        capex_usd=round(c.capex_usd * nodes, 2), power_kw=round(c.power_kw * nodes, 6), cost_note=c.cost_note,
    )  # fmt: skip


def _totals(scenario: Scenario, cset: CandidateSet, catalog: Catalog, lines: list[PlanLine]) -> Totals:
    """On-prem and reserved nodes count once; on-demand cloud nodes at their peak over the periods."""
    fixed_lines = [line for line in lines if line.role != "on-demand"]
    nodes_by_system: dict[str, int] = defaultdict(int)
    for line in fixed_lines:
        nodes_by_system[line.system] += line.nodes
    peak_rented: dict[str, int] = defaultdict(int)
    peak_rented_gpus = 0
    for period in scenario.periods:
        rented: dict[str, int] = defaultdict(int)
        for line in lines:
            if line.role == "on-demand" and line.period == period.name:
                rented[line.system] += line.nodes
        for system_id, count in rented.items():
            peak_rented[system_id] = max(peak_rented[system_id], count)
        peak_rented_gpus = max(peak_rented_gpus, sum(catalog.systems[s].gpus_per_node * n for s, n in rented.items()))
    for system_id, count in peak_rented.items():
        nodes_by_system[system_id] += count
    costs = scenario.on_prem_costs
    capital = energy = maintenance = space = reserved = on_demand = 0.0
    for line in lines:
        if line.site == "on-prem" and costs is not None:
            system = catalog.systems[line.system]
            per_node_capex = line.capex_usd / line.nodes
            capital += per_node_capex / costs.amortization_years * line.nodes
            energy += line.power_kw * costs.utilization_power_factor * costs.pue * costs.usd_per_kwh * 8760
            maintenance += costs.maintenance_fraction_per_year * line.capex_usd
            space += (system.rack_units or 0) * line.nodes * costs.space_usd_per_rack_unit_per_year
        elif line.role == "reserved":
            reserved += line.annual_cost_usd
        else:
            on_demand += line.annual_cost_usd
    breakdown = CostBreakdown(
        round(capital, 2), round(energy, 2), round(maintenance, 2), round(space, 2), round(reserved, 2), round(on_demand, 2)
    )
    return Totals(
        nodes_by_system=dict(sorted(nodes_by_system.items())),
        gpus=sum(line.gpus for line in fixed_lines) + peak_rented_gpus,
        capex_usd=round(sum(line.capex_usd for line in fixed_lines), 2),
        power_kw=round(sum(line.power_kw for line in fixed_lines), 6),
        rack_units=sum((catalog.systems[line.system].rack_units or 0) * line.nodes for line in fixed_lines if line.site == "on-prem"),
        annual_cost_usd=round(sum(line.annual_cost_usd for line in lines), 2),
        cost_breakdown=breakdown,
    )  # fmt: skip


def _workload_result(workload, scenario: Scenario, cset: CandidateSet, routed: dict, fixed: dict, rented: dict) -> WorkloadResult:
    options = {(o.bucket, o.candidate): o for o in cset.options if o.workload == workload.name}
    users_of: dict[str, set] = defaultdict(set)
    for o in cset.options:
        users_of[o.candidate].add((o.workload, o.bucket))
    loads, assignments = [], {}
    for period in scenario.periods:
        demand = period.demand_rps[workload.name]
        capacity = 0.0
        for (bucket, key), option in options.items():
            rps = routed.get((workload.name, bucket, key, period.name), 0.0)
            if rps <= _TOLERANCE:
                continue
            candidate = cset.candidate(key)
            nodes = fixed.get(key, 0) if candidate.fixed else rented.get((key, period.name), 0)
            # a configuration only this bucket uses lends it all its nodes; shared ones, what was routed
            capacity += option.rps_per_node * nodes if len(users_of[key]) == 1 else rps
            assignments.setdefault((bucket, key), 0.0)
            assignments[(bucket, key)] = max(assignments[(bucket, key)], rps)
        loads.append(PeriodLoad(period.name, round(demand, 6), round(capacity, 6)))
    chosen = [_assignment(options[k], cset.candidate(k[1]), workload, rps) for k, rps in sorted(assignments.items())]
    worst = {
        name: max((getattr(a, name) for a in chosen if getattr(a, name) is not None), default=None)
        for name in ("ttft_ms", "itl_ms", "e2e_ms")
    }
    peak = max(loads, key=lambda load: load.demand_rps)
    return WorkloadResult(
        name=workload.name, model=workload.model, isl_tokens=workload.isl_tokens, osl_tokens=workload.osl_tokens,
        demand_rps=peak.demand_rps, demand_note=workload.demand_note, capacity_rps=peak.capacity_rps,
        ttft_ms=worst["ttft_ms"], itl_ms=worst["itl_ms"], e2e_ms=worst["e2e_ms"],
        provenance=",".join(sorted({a.provenance for a in chosen})) or "none",
        why="; ".join(a.why for a in chosen) or "no demand", assignments=tuple(chosen), periods=tuple(loads),
    )  # fmt: skip


def _assignment(option: Option, candidate: Candidate, workload, rps: float) -> Assignment:
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
    bucket = workload.buckets[option.bucket]
    why = (
        f"{rps:.4g} rps of {bucket.isl_tokens}/{bucket.osl_tokens} on {candidate.system} ({candidate.pricing}) at "
        f"{option.rps_per_node:.4g} rps/node = {rps / option.rps_per_node:.2f} nodes of load "
        f"[{point}; {perf.provenance}]"
    )
    return Assignment(
        system=candidate.system, site=candidate.site, pricing=candidate.pricing, tp=candidate.tp,
        precision=candidate.precision, max_batch=candidate.max_batch, engine_isl=candidate.engine_isl,
        engine_osl=candidate.engine_osl, bucket_isl=bucket.isl_tokens, bucket_osl=bucket.osl_tokens,
        rps=round(rps, 6), rps_per_node=round(option.rps_per_node, 6), concurrency=perf.concurrency,
        ttft_ms=None if perf.ttft_ms is None else round(perf.ttft_ms, 3),
        itl_ms=None if perf.itl_ms is None else round(perf.itl_ms, 3),
        e2e_ms=None if perf.e2e_ms is None else round(perf.e2e_ms, 3),
        provenance=perf.provenance, source=perf.source, why=why,
    )  # fmt: skip


def _binding_limits(scenario: Scenario, totals: Totals, lines: list[PlanLine]) -> tuple[str, ...]:
    """The budgets the plan uses up: what stops a cheaper answer."""
    limits = scenario.limits
    binding = []
    for label, used, limit, unit in (
        ("power budget", totals.power_kw, limits.power_kw, "kW"),
        ("rack-unit budget", totals.rack_units, limits.rack_units, "RU"),
        ("capex budget", totals.capex_usd, limits.capex_usd, "USD"),
    ):
        if limit is not None and used >= limit - _TOLERANCE * max(1.0, limit):
            binding.append(f"{label}: {used:,.6g} of {limit:,.6g} {unit} used")
    for gpu, available in sorted(limits.max_gpus.items()):
        for period in scenario.periods:
            used = sum(
                line.gpus for line in lines
                if line.gpu == gpu and (line.role != "on-demand" or line.period == period.name)
            )  # fmt: skip
            if used >= available:
                binding.append(f"GPUs of {gpu}: {used} of {available} used in period {period.name}")
                break
    if limits.max_engine_variants is not None:
        variants = {(l.model, l.gpu, l.tp, l.precision, l.max_batch, l.engine_isl, l.engine_osl) for l in lines if l.role != "spare"}
        if len(variants) >= limits.max_engine_variants:
            binding.append(f"engine variants: {len(variants)} of {limits.max_engine_variants}")
    return tuple(binding)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)
