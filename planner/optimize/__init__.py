"""The fleet integer program (design.md, "The integer program"; docs/optimizer.md is the math of record).

A package by concern: `model` (variables, one `add_*` per constraint family), `solve` (the solvers), `packing`
(units into nodes, plan lines), `readback` (the Plan), `diagnose` (infeasibility and costly limits); `plan` and
`solve_candidates` here put them together.

Hardware and configuration are separate decisions: integer nodes per hardware offer (what to buy or rent), and
integer engine units per configuration and period (what those nodes run), tied by the GPUs of each node.

Notations
---------
w, b            workload w and its length bucket b (share s[w,b] of w's requests)
t in T          periods, h[t] hours per year
h in H          hardware offers (site, pricing, system) with G[h] GPUs per node; H_fix: bought on-prem (capex) or
                reserved cloud, H_dem: on-demand cloud
c in C          configurations (an engine: model, layout, precision, max batch, engine ISL/OSL) on the nodes of
                h(c); C_agg aggregated engines, C_pre prefill-only and C_dec decode-only ones (disaggregated pools)
unit of c       g[c] GPUs holding k[c] instances of c. Nodes shared across models: the smallest slot of the
                node's chain (1, 2, 4, ... GPUs, then the whole node) that holds an instance; not shared: the whole
                node. Slot sizes divide each other and G[h], so GPUs counted per node always pack into nodes.
(w,b,c) in O    options: c serves bucket (w,b) within w's limits at rho[w,b,c] requests/s per unit
N[h]   in Z>=0  nodes of h in H_fix, the same in every period (bought once, or reserved for the year)
M[h,t] in Z>=0  nodes of h in H_dem rented in period t
U[c,t] in Z>=0  units of c running in period t (one U[c] for every period when c runs on H_fix and nodes are
                not reconfigured between periods)
x[w,b,c,t] >= 0 requests/s of bucket (w,b) routed to c in period t
d[w,t]          peak demand of w in period t; H the headroom fraction
S[s]   in Z>=0  spare on-prem nodes of system s (N + k), with used[s] in {0,1}
use[v] in {0,1} engine variant v is built (only with a variant limit)
split[w] in {0,1} workload w is served by prefill and decode pools (only with fleet.disaggregated: auto)

minimize   sum_{h in H_fix} cost[h] N[h] + sum_{h in H_dem, t} usd_per_hour[h] h[t] M[h,t] + sum_s cost[s] S[s]
subject to sum_{c in C_agg + C_pre} x[w,b,c,t] = d[w,t] s[w,b] (1 + H)    demand, every (w,b,t)
           sum_{c in C_pre} x[w,b,c,t] = sum_{c in C_dec} x[w,b,c,t]         prefill-decode flow, every (w,b,t)
           sum_{b, C_pre} x <= D[w,t] split[w];  sum_{b, C_agg} x <= D[w,t] (1 - split[w])   one way per workload
           sum_{(w,b)} x[w,b,c,t] / rho[w,b,c] <= U[c,t]                   engine capacity, every (c,t)
           sum_{c on h} g[c] U[c,t] <= G[h] N[h]  (or G[h] M[h,t])         node room, every (h,t)
           sum power_kw (N + S) <= P;  sum rack_units (N + S) <= R;  sum capex_usd (N + S) <= K   budgets
           sum_{h on GPU g} G[h] (N[h] or M[h,t]) + spares of g <= A[g]                GPUs, every (g,t)
           sum_{h of s} N[h] <= B[s] used[s];  S[s] = k used[s]                        spares N + k
           sum_{c of v} U[c,t] <= B[v] use[v];  sum_v use[v] <= V                      engine variants
           sum_{h} G[h] (N[h] or M[h,t]) >= ceil(LP GPUs of t) per GPU-compatible pool  valid, see add_gpu_floor

Counts are integers per hardware and per configuration, never one binary per node (symmetric binaries make CBC
crawl). design.md writes the demand constraint with >=; routing more than the demand never lowers the cost, and
equality makes x the requests/s actually sent to each configuration, which the report shows.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from planner import deadline as command_deadline
from planner.candidates import CandidateSet, enumerate_candidates
from planner.catalog import Catalog
from planner.errors import InfeasiblePlanError, PlannerInputError, SolverStoppedError
from planner.optimize.diagnose import (
    check_every_workload_has_options,
    costly_limits,
    diagnose_limits,
)
from planner.optimize.model import (
    FleetModel,
    Hardware,
    bucket_demand,
    build_fleet_model,
)
from planner.optimize.packing import _ROLE, pack_nodes
from planner.optimize.readback import _read_plan
from planner.optimize.solve import (
    SOLVERS,
    SolveOutcome,
    _cbc_bound,
    quiet_stdout,
    solve_model,
)
from planner.plan import Plan
from planner.scenario import Scenario

__all__ = [
    "SOLVERS", "FleetModel", "Hardware", "SolveOutcome", "build_fleet_model", "bucket_demand", "pack_nodes", "plan",
    "quiet_stdout", "solve_candidates", "solve_model", "_ROLE", "_cbc_bound", "_read_plan",
]  # fmt: skip


def plan(
    scenario: Scenario,
    catalog: Catalog,
    solver: str | None = None,
    time_limit_s: float | None = None,
    progress: Callable[..., None] | None = None,
) -> Plan:
    """Size the fleet for `scenario`: the cheapest nodes that serve every workload's demand in every period
    within its limits. Raises InfeasiblePlanError with a diagnosis when no plan exists."""
    solver = solver or scenario.solver
    if solver not in SOLVERS:
        raise PlannerInputError("--solver", "solver", f"unknown solver '{solver}'; allowed: {', '.join(SOLVERS)}")
    limit = time_limit_s if time_limit_s is not None else scenario.time_limit_s
    cached = any(w.prefix_cache is not None for w in scenario.workloads)
    started = time.monotonic() if cached else 0.0  # the cold re-plan gets what is left of the time limit
    cset = enumerate_candidates(scenario, catalog, progress)
    if progress is not None:
        left = command_deadline.remaining_s()
        progress(0, None, f"solving the integer program ({solver}, at most {limit if left is None else max(0.0, min(limit, left)):.3g} s)")
    result = solve_candidates(scenario, cset, catalog, solver, time_limit_s)
    if cached:
        result = _prefix_cache_saving(scenario, catalog, solver, limit - (time.monotonic() - started), result)
    return result


def _prefix_cache_saving(scenario: Scenario, catalog: Catalog, solver: str, time_left_s: float, result: Plan) -> Plan:
    """What the workloads' prefix caches save: the scenario planned again with every prompt prefilled whole (one
    more enumeration and solve, in what is left of the time limit)."""
    cold = dataclasses.replace(scenario, workloads=tuple(dataclasses.replace(w, prefix_cache=None) for w in scenario.workloads))
    names = ", ".join(w.name for w in scenario.workloads if w.prefix_cache is not None)
    if time_left_s < 1.0:
        return dataclasses.replace(result, prefix_cache_note=f"prefix caching of {names}: no time left to plan without it")
    try:
        without = solve_candidates(cold, enumerate_candidates(cold, catalog), catalog, solver, time_left_s)
    except InfeasiblePlanError:
        return dataclasses.replace(result, prefix_cache_note=(
            f"prefix caching of {names}: without it no plan meets the limits (the cache's hit rate is what makes the "
            "plan possible)"))  # fmt: skip
    except (SolverStoppedError, command_deadline.TimeLimitError):
        return dataclasses.replace(result, prefix_cache_note=f"prefix caching of {names}: the plan without it did not solve in time")
    saving = without.objective_usd_per_year - result.objective_usd_per_year
    gap = "" if result.status == without.status == "optimal" else " (a solve stopped at its time limit: an estimate)"
    return dataclasses.replace(result, prefix_cache_saving_usd_per_year=round(saving, 2), prefix_cache_note=(
        f"prefix caching of {names} saves {saving:,.0f} USD/year: without it the plan costs "
        f"{without.objective_usd_per_year:,.0f} USD/year ({without.totals.nodes} nodes against {result.totals.nodes}){gap}"))  # fmt: skip


def solve_candidates(
    scenario: Scenario, cset: CandidateSet, catalog: Catalog, solver: str | None = None, time_limit_s: float | None = None
) -> Plan:
    """The integer program over a candidate set already priced (the robust and sensitivity modes reuse one)."""
    solver = solver or scenario.solver
    time_limit_s = time_limit_s if time_limit_s is not None else scenario.time_limit_s
    deadline = command_deadline.monotonic_deadline(time_limit_s)  # the solve and its re-solves share it
    check_every_workload_has_options(scenario, cset)
    model = build_fleet_model(scenario, cset, catalog)
    outcome = solve_model(model, solver, time_limit_s)
    if outcome.status == "infeasible":
        raise InfeasiblePlanError(diagnose_limits(scenario, cset, catalog, solver, time_limit_s, deadline))
    if outcome.status == "stopped":
        command_deadline.check("solving the integer program")  # stopped by the command's limit: say that one
        raise SolverStoppedError(solver, time_limit_s)
    result = _read_plan(scenario, cset, catalog, model, solver, outcome)
    return dataclasses.replace(result, binding_limits=costly_limits(scenario, cset, catalog, solver, time_limit_s, result, deadline))
