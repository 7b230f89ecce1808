"""The fleet integer program (design.md, "The integer program"; docs/optimizer.md is the math of record).

A package by concern: `variables` (the hardware offers and `FleetModel`, the named variables), `model` (the
`define_*` and one `add_*` per constraint family), `billing` (racks and networks, rentals' start-up and minimum
billing), `solve` (the solvers), `packing` (units into nodes, plan lines), `balance` (the routes spread over the
pools after the solve), `decompose` (a large program's starting plan: year-round decisions from a relaxation, then
one program per period), `periods` (a large program split by period: its blocks, and a Lagrangian lower bound with
each period an integer program), `yearround` (a large program's lower bound by branch and bound over its year-round
decisions: stage 1 bounding boxes of them, the periods' own programs each point), `readback` (the Plan), `diagnose` (infeasibility and costly limits), `gaps` (what
the catalog's holes dropped); `plan` and `solve_candidates` here put them together.

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
g L[c]          start-up headroom: g L (demand growth per hour x start-up lead time) where c runs on nodes rented
                per period (on demand, spot), 0 on bought and reserved ones
s[h,t] >= 0     rentals of h in H_dem started in period t; y[h,t] >= 0 of them stopped at the end of their
                minimum-billing window K(t) (r(t) hours billed beyond their periods; planner.cloud.RentalDay)
R[s]   in Z>=0  racks of on-prem system s, q[s] nodes each (a rack-scale system is its own rack: none)
one[n] in {0,1}, L[n], S[n] in Z>=0   per site network n (fabric, front end): one switch, or leaves and spines
S[s]   in Z>=0  spare on-prem nodes of system s (N + k), with used[s] in {0,1}
use[v] in {0,1} engine variant v is built (only with a variant limit)
split[w] in {0,1} workload w is served by prefill and decode pools (only with fleet.disaggregated: auto)

minimize   sum_{h in H_fix} cost[h] N[h] + sum_{h in H_dem, t} usd_per_hour[h] h[t] M[h,t] + sum_s cost[s] S[s]
           + 365 sum_{h in H_dem} usd_per_hour[h] (L sum_t s[h,t] + sum_t r(t) y[h,t]) + racks and networks
subject to sum_{c in C_agg + C_pre} x[w,b,c,t] = d[w,t] s[w,b] (1 + H)    demand, every (w,b,t)
           sum_{c in C_pre} x[w,b,c,t] = sum_{c in C_dec} x[w,b,c,t]         prefill-decode flow, every (w,b,t)
           sum_{b, C_pre} x <= D[w,t] split[w];  sum_{b, C_agg} x <= D[w,t] (1 - split[w])   one way per workload
           sum_{(w,b)} x[w,b,c,t] (1 + g L[c]) / rho[w,b,c] <= U[c,t]      engine capacity, every (c,t)
           s[h,t] >= M[h,t] - M[h,t-1];  M[h,t] >= sum_{tau: t in K(tau)} s[h,tau] + sum_{tau: t*(tau) = t}
               (s[h,tau] - y[h,tau]);  y <= s                                  rentals, every (h,t) of H_dem
           q[s] R[s] >= N[s] + S[s]                                            racks of whole nodes, every s
           sum_{c on h} g[c] U[c,t] <= G[h] N[h]  (or G[h] M[h,t])         node room, every (h,t)
           sum power_kw (N + S) <= P;  sum rack_units (N + S) <= R;  sum capex_usd (N + S) <= K   budgets
           sum_{h on GPU g} G[h] (N[h] or M[h,t]) + spares of g <= A[g]                GPUs, every (g,t)
           sum_{h of s} N[h] <= B[s] used[s];  S[s] = k used[s]                        spares N + k
           sum_{c of v} U[c,t] <= B[v] use[v];  sum_v use[v] <= V                      engine variants
           sum_{h} G[h] (N[h] or M[h,t]) >= ceil(LP GPUs of t) per GPU-compatible pool  valid, see add_gpu_floor
           sum_{c of model m} U[c,t] >= ceil(sum_(w,b) of m d / max_c rho)        valid, see add_instance_floor
           sum_{c on spot} x[w,b,c,t] <= sigma d[w,t] s[w,b] (1 + H)            spot share, every (w,b,t)
           ports[n] = sum p[s] (N + S) <= P one[n] + (P/2) L[n]; L[n] <= B (1 - one[n]); 2 S[n] >= L[n]   networks

Each variable family and constraint family, with the function that builds it (planner/optimize/variables.py holds
the variables in `FleetModel`):
  N, M: define_node_variables        U: define_unit_variables        x: define_routing_variables
  demand: add_demand_constraints     flow: add_prefill_decode_flow   split, one way: add_serving_mode
  capacity: add_engine_capacity      node room: add_node_room        budgets: add_power_limit, add_rack_limit,
  add_capex_limit                    GPUs: add_gpu_availability      S, used: add_spare_nodes
  use: add_variant_limit             floors: add_gpu_floor, add_instance_floor                spot: add_spot_share
  s, y: add_rentals (billing.py)     R: add_racks (billing.py)       one, L, S: add_site_infrastructure (billing.py)
  objective: cost_expression

Counts are integers per hardware and per configuration, never one binary per node (symmetric binaries make CBC
crawl). design.md writes the demand constraint with >=; routing more than the demand never lowers the cost, and
equality makes x the requests/s actually sent to each configuration, which the report shows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from planner import deadline as command_deadline
from planner.candidates import CandidateSet, enumerate_candidates, price_leading_ahead
from planner.catalog import PRECISIONS, Catalog
from planner.errors import InfeasiblePlanError, PlannerInputError, SolverStoppedError
from planner.optimize.balance import balance_routing
from planner.optimize.diagnose import (
    check_every_workload_has_options,
    costly_limits,
    diagnose_limits,
    time_left_s,
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
    YEAR_ROUND_MIN_SECONDS,
    SolveOutcome,
    _cbc_bound,
    quiet_stdout,
    solve_model,
)
from planner.perf import plan_precisions
from planner.plan import Plan
from planner.scenario import Scenario

__all__ = [
    "SOLVERS", "FleetModel", "Hardware", "SolveOutcome", "build_fleet_model", "bucket_demand", "pack_nodes", "plan",
    "quiet_stdout", "solve_candidates", "solve_model", "_ROLE", "_cbc_bound", "_read_plan", "lower_formats",
    "precision_decisions",
]  # fmt: skip


def plan(
    scenario: Scenario,
    catalog: Catalog,
    solver: str | None = None,
    time_limit_s: float | None = None,
    progress: Callable[..., None] | None = None,
    price_alternatives: bool = True,
) -> Plan:
    """Size the fleet for `scenario`: the cheapest nodes that serve every workload's demand in every period
    within its limits. Raises InfeasiblePlanError with a diagnosis when no plan exists. Stated prefix caches, and
    formats the quality-keeping precision default left out (fp4), are priced by one more solve each, in what is left
    of the time limit: the plan says what they save (`price_alternatives=False`: neither, as a sweep's points,
    which record the cost alone). The fp4 comparison's leading curves are priced on the pricing workers while the
    plan's own solve runs (`price_leading_ahead`: the same curves its enumeration would price first, so the same
    figures); a solve that fails cancels them."""
    solver = solver or scenario.solver
    if solver not in SOLVERS:
        raise PlannerInputError("--solver", "solver", f"unknown solver '{solver}'; allowed: {', '.join(SOLVERS)}")
    limit = time_limit_s if time_limit_s is not None else scenario.time_limit_s
    cached = price_alternatives and any(w.prefix_cache is not None for w in scenario.workloads)
    lower = lower_formats(scenario, catalog) if price_alternatives else {}
    cset = enumerate_candidates(scenario, catalog, progress)
    if progress is not None:
        left = command_deadline.remaining_s()
        progress(0, None, f"solving the integer program ({solver}, at most {limit if left is None else max(0.0, min(limit, left)):.3g} s)")
    # the fp4 comparison's leading curves priced on the workers while the plan's solve runs on its own core
    ahead = price_leading_ahead(dataclasses.replace(scenario, lower_precisions=True), catalog) if lower and not _no_time_left() else None
    try:
        result = solve_candidates(scenario, cset, catalog, solver, time_limit_s)
    except BaseException:
        if ahead is not None:
            ahead.cancel()
        raise
    if ahead is not None:
        ahead.finish()
    # the cold and lower-precision re-plans: each solve under the solver's limit, as the plan's own, and all of it
    # within the command's --time-limit where one is given (never cut by how long pricing took: the same plan says
    # the same on a slower machine)
    if cached:
        result = _prefix_cache_saving(scenario, catalog, solver, limit, result)
    if lower:
        result = _precision_saving(scenario, catalog, solver, limit, result, lower)
    if price_alternatives and scenario.sizing == "closed-loop":
        result = _random_arrivals_sizing(scenario, catalog, solver, limit, result)
    return result


def _random_arrivals_sizing(scenario: Scenario, catalog: Catalog, solver: str, time_limit_s: float, result: Plan) -> Plan:
    """A plan sized by the course's method (closed loop) says what sizing for requests arriving at random gives:
    the scenario planned again with `perf.sizing: random-arrivals` (one more enumeration and solve)."""
    course = f"by it {_nodes(result)}, {result.objective_usd_per_year:,.0f} USD/year"
    comparison = "the plan for random arrivals"
    if (why := _not_made(comparison)) is not None:
        return dataclasses.replace(result, sizing_note=f"{course}; {why}")
    at_random = dataclasses.replace(scenario, sizing="random-arrivals")
    try:
        cset = enumerate_candidates(at_random, catalog)
        other = solve_candidates(at_random, cset, catalog, solver, time_limit_s, explain=False)
    except InfeasiblePlanError:
        return dataclasses.replace(result, sizing_note=f"{course}; under random arrivals no plan meets the limits")
    except (SolverStoppedError, command_deadline.TimeLimitError) as stopped:
        return dataclasses.replace(result, sizing_note=f"{course}; {_stopped(comparison, stopped)}")
    demand = "; ".join(f"{w.name} at {max(p.demand_rps for p in w.periods):,.4g} requests/s" for w in other.workloads)
    gap = "" if result.status == other.status == "optimal" else " (a solve stopped at its time limit: an estimate)"
    unmodeled = (f", {', '.join(cset.course_sized)} still by the course's method (no architecture to model random "
                 "arrivals with)" if cset.course_sized else "")  # fmt: skip
    return dataclasses.replace(result, sizing_note=(
        f"{course}; under random arrivals ({demand}): {_nodes(other)}, {other.objective_usd_per_year:,.0f} USD/year"
        f"{unmodeled}{gap} (perf.sizing: random-arrivals plans it)"))  # fmt: skip


def _nodes(plan: Plan) -> str:
    """'1 dgx-h100' / '2 dgx-h100 + 1 p5.48xlarge': the plan's nodes by system."""
    return " + ".join(f"{count} {system}" for system, count in sorted(plan.totals.nodes_by_system.items())) or "no nodes"


def _no_time_left() -> bool:
    """Whether the command's --time-limit leaves under a second (never without one: the solver's own limit is
    per solve, and pricing candidates never uses it up)."""
    left = command_deadline.remaining_s()
    return left is not None and left < 1.0


_PLAN_SO_FAR = "loading, candidate pricing and the solves before it"  # what used a --time-limit before a re-plan


def _not_made(comparison: str) -> str | None:
    """Why `comparison` (a re-plan the plan quotes: fp4, no prefix cache, random arrivals) is not made: the
    command's --time-limit leaves under a second; which limit, how much of it was used, and that the comparison
    was not made. None where it is to be made (always without a --time-limit)."""
    if not _no_time_left():
        return None
    return f"{comparison} was not made: {command_deadline.spent(_PLAN_SO_FAR)}; raise --time-limit to make it"


def _stopped(comparison: str, stopped: Exception) -> str:
    """Why `comparison` was not made when its own pricing or solve stopped: the command's --time-limit ran out
    (the stage it was in), or the solver's limit came before any plan."""
    if isinstance(stopped, command_deadline.TimeLimitError):
        return (f"{comparison} was not made: the command's --time-limit of {stopped.time_limit_s:g} s ran out while "
                f"{stopped.stage} for it; raise --time-limit to make it")
    return (f"{comparison} was not made: its solve ({stopped.solver}) found no plan within the solver's time limit of "
            f"{stopped.time_limit_s:g} s; raise --time-limit to make it")


def _joined(precisions) -> str:
    return ", ".join(p or "unstated by its benchmark row" for p in precisions) or "none"


def _in_order(precisions) -> tuple:
    """Precisions in the catalog's order (bf16, fp16, fp8, fp4, w4a16, w4a8), an unstated one (None) last."""
    order = {p: i for i, p in enumerate(PRECISIONS)}
    return tuple(sorted(set(precisions), key=lambda p: order.get(p, len(order))))


def _workload_gpus(scenario: Scenario, catalog: Catalog) -> list[str]:
    return sorted({catalog.systems[offer.system].gpu for offer in scenario.offers})


def lower_formats(scenario: Scenario, catalog: Catalog) -> dict[str, tuple[str, ...]]:
    """Per workload that names no `precisions:`, the formats its default (the quality-keeping ones:
    planner.perf.plan_precisions) leaves out on its allowed GPUs (fp4 where the GPU has fp4 tensor cores), in the
    catalog's order; workloads with none are left out. Empty in the re-plan that allows them."""
    if scenario.lower_precisions:
        return {}
    out = {}
    for workload in scenario.workloads:
        if workload.precisions is not None:
            continue
        left_out = [p for gpu in _workload_gpus(scenario, catalog)
                    for p in plan_precisions(catalog, gpu, workload.model, lower=True)
                    if p not in plan_precisions(catalog, gpu, workload.model)]  # fmt: skip
        if left_out:
            out[workload.name] = _in_order(left_out)
    return out


def _runs(result: Plan) -> dict[str, tuple]:
    """Per workload, the precisions of the routes that carry its requests (None: a benchmark row states none)."""
    runs: dict[str, list] = {}
    for route in result.routing:
        if route.rps > 0:
            runs.setdefault(route.workload, []).append(route.precision)
    return {name: _in_order(precisions) for name, precisions in runs.items()}


def precision_decisions(scenario: Scenario, catalog: Catalog, result: Plan) -> dict[str, dict]:
    """The precision decision per workload (scenario order), as the plan's `workload_precisions`: `runs`, the
    precisions its routes run at (null: a benchmark row that states none); `allowed`, those it was allowed on its
    GPUs; `basis`, why: `asked` (its `precisions:`, or `--precisions`), `default` (the quality-keeping formats:
    bf16 and fp8, and a 4-bit checkpoint's own format) or `lower` (the re-plan that prices the formats the default
    leaves out); `left_out`, those formats; `note`, all of it in one line ("chat: fp8 (allowed: bf16, fp8;
    default: ...)")."""
    runs = _runs(result)
    left_out = lower_formats(dataclasses.replace(scenario, lower_precisions=False), catalog)
    out = {}
    for workload in scenario.workloads:
        requested = tuple(workload.precisions) if workload.precisions is not None else None
        allowed = _in_order(p for gpu in _workload_gpus(scenario, catalog)
                            for p in plan_precisions(catalog, gpu, workload.model, requested, scenario.lower_precisions))  # fmt: skip
        basis = "asked" if requested is not None else "lower" if scenario.lower_precisions else "default"
        omitted = left_out.get(workload.name, ()) if basis == "default" else ()
        if basis == "asked":
            why = "asked for (precisions:)"
        elif basis == "lower":
            why = "the default and the lower formats, to price them"
        else:
            four_bit = catalog.models[workload.model].checkpoint_precision == "fp4"
            why = "default: the quality-keeping formats" + (", with the 4-bit checkpoint's own" if four_bit else "")
            if omitted:
                why += f"; {_joined(omitted)} only where asked"
        chosen = runs.get(workload.name, ())
        out[workload.name] = {
            "runs": list(chosen), "allowed": list(allowed), "basis": basis, "left_out": list(omitted),
            "note": f"{workload.name}: {_joined(chosen) if chosen else 'no requests routed'} "
                    f"(allowed: {_joined(allowed)}; {why})",
        }  # fmt: skip
    return out


def _precision_saving(scenario: Scenario, catalog: Catalog, solver: str, time_limit_s: float, result: Plan,
                      lower: dict[str, tuple[str, ...]]) -> Plan:  # fmt: skip
    """What the formats the default leaves out (fp4) would save: the scenario planned again with them allowed to
    every workload that names no `precisions:` (one more enumeration, its curves mostly kept from the plan's, and a
    solve under the solver's time limit, within the command's).
    A figure and a note, never a plan: the quality trade is the user's to make (`precisions:`)."""
    allowed = dataclasses.replace(scenario, lower_precisions=True)
    formats = _joined(_in_order(p for formats in lower.values() for p in formats))
    what = f"allowing {formats} ({', '.join(lower)})"
    comparison = f"the {formats} comparison ({', '.join(lower)})"
    if (why := _not_made(comparison)) is not None:
        return dataclasses.replace(result, precision_note=why)
    try:
        cheaper = solve_candidates(allowed, enumerate_candidates(allowed, catalog), catalog, solver, time_limit_s, explain=False)
    except InfeasiblePlanError:
        return dataclasses.replace(result, precision_note=f"{what}: no plan meets the limits with it either")
    except (SolverStoppedError, command_deadline.TimeLimitError) as stopped:
        return dataclasses.replace(result, precision_note=_stopped(comparison, stopped))
    saving = result.objective_usd_per_year - cheaper.objective_usd_per_year
    gap = "" if result.status == cheaper.status == "optimal" else " (a solve stopped at its time limit: an estimate)"
    runs = _runs(cheaper)
    running = "; ".join(f"{name} at {_joined(runs.get(name, ()))}" for name in lower)
    nodes = f"{cheaper.totals.nodes} node{'s' if cheaper.totals.nodes != 1 else ''} against {result.totals.nodes}"
    if saving < 0.5:
        note = (f"{what} would save nothing: the plan with it costs {cheaper.objective_usd_per_year:,.0f} USD/year "
                f"({nodes}; {running}){gap}")  # fmt: skip
    else:
        note = (f"{what} would save {saving:,.0f} USD/year ({nodes}): the plan with it costs "
                f"{cheaper.objective_usd_per_year:,.0f} USD/year ({running}){gap}; it trades model quality: name "
                f"{formats} in precisions: (or --precisions) to plan with it")  # fmt: skip
    return dataclasses.replace(result, precision_saving_usd_per_year=round(saving, 2), precision_note=note)


def _prefix_cache_saving(scenario: Scenario, catalog: Catalog, solver: str, time_limit_s: float, result: Plan) -> Plan:
    """What the workloads' prefix caches save: the scenario planned again with every prompt prefilled whole (one
    more enumeration, and a solve under the solver's time limit, within the command's)."""
    cold = dataclasses.replace(scenario, workloads=tuple(dataclasses.replace(w, prefix_cache=None) for w in scenario.workloads))
    names = ", ".join(w.name for w in scenario.workloads if w.prefix_cache is not None)
    comparison = f"the comparison without prefix caching of {names}"
    if (why := _not_made(comparison)) is not None:
        return dataclasses.replace(result, prefix_cache_note=why)
    try:
        without = solve_candidates(cold, enumerate_candidates(cold, catalog), catalog, solver, time_limit_s, explain=False)
    except InfeasiblePlanError:
        return dataclasses.replace(result, prefix_cache_note=(
            f"prefix caching of {names}: without it no plan meets the limits (the cache's hit rate is what makes the "
            "plan possible)"))  # fmt: skip
    except (SolverStoppedError, command_deadline.TimeLimitError) as stopped:
        return dataclasses.replace(result, prefix_cache_note=_stopped(comparison, stopped))
    saving = without.objective_usd_per_year - result.objective_usd_per_year
    gap = "" if result.status == without.status == "optimal" else " (a solve stopped at its time limit: an estimate)"
    return dataclasses.replace(result, prefix_cache_saving_usd_per_year=round(saving, 2), prefix_cache_note=(
        f"prefix caching of {names} saves {saving:,.0f} USD/year: without it the plan costs "
        f"{without.objective_usd_per_year:,.0f} USD/year ({without.totals.nodes} nodes against {result.totals.nodes}){gap}"))  # fmt: skip


def solve_candidates(
    scenario: Scenario, cset: CandidateSet, catalog: Catalog, solver: str | None = None, time_limit_s: float | None = None,
    explain: bool = True,
) -> Plan:
    """The integer program over a candidate set already priced (the robust and sensitivity modes reuse one).
    `explain=False`: no re-solves to find the binding limits (an alternative a plan only quotes the cost of)."""
    solver = solver or scenario.solver
    time_limit_s = time_limit_s if time_limit_s is not None else scenario.time_limit_s
    deadline = command_deadline.monotonic_deadline(time_limit_s)  # the solve and its re-solves share it
    check_every_workload_has_options(scenario, cset)
    model = build_fleet_model(scenario, cset, catalog)
    outcome = solve_model(model, solver, time_limit_s, warm_start=True,
                          year_round_bound=time_limit_s >= YEAR_ROUND_MIN_SECONDS)  # fmt: skip
    if outcome.status == "infeasible":
        raise InfeasiblePlanError(diagnose_limits(scenario, cset, catalog, solver, time_limit_s, deadline))
    if outcome.status == "stopped":
        command_deadline.check("solving the integer program")  # stopped by the command's limit: say that one
        raise SolverStoppedError(solver, time_limit_s)
    # the routes spread over the pools in proportion to capacity, the integers as solved (optimize/balance.py)
    unbalanced = balance_routing(model, cset, solver, time_left_s(deadline, time_limit_s))
    result = _read_plan(scenario, cset, catalog, model, solver, outcome)
    course = tuple(
        f"{name}: sized by the course's method (a closed-loop benchmark row read at the limits) although requests "
        f"arrive at random: {next(w.model for w in scenario.workloads if w.name == name)} has no architecture the model can run them "
        "through; plan --verify simulates the row's engine under random arrivals" for name in cset.course_sized)  # fmt: skip
    result = dataclasses.replace(result, warnings=result.warnings + unbalanced + course, sizing=scenario.sizing,
                                 perf_sources=tuple(scenario.perf_sources),
                                 workload_precisions=precision_decisions(scenario, catalog, result))
    if not explain:
        return result
    return dataclasses.replace(result, binding_limits=costly_limits(scenario, cset, catalog, solver, time_limit_s, result, deadline))
