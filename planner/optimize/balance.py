"""Routing after the solve: the requests/s spread over the pools in proportion to what they can serve.

The integer program prices nodes and units, never routes: at its optimum any routing that fits is as cheap, and the
solver returns a vertex, which fills one pool to its last request/s and leaves the slack on another (daily-hybrid
at P50: the night's summarize 21.6 rps on 9 rented nodes of 2.4, 9.4 on 4 bought ones; the rented pool, at 100%,
queues without bound in the simulator). `balance_routing` re-solves the routing alone as a linear program.
"""

from __future__ import annotations

from collections import defaultdict

import pulp

from planner.candidates import CandidateSet, unit_rate
from planner.optimize.diagnose import MIN_RESOLVE_S
from planner.optimize.model import FleetModel
from planner.optimize.solve import solve_model


def balance_routing(model: FleetModel, cset: CandidateSet, solver: str, time_limit_s: float) -> tuple[str, ...]:
    """Re-solve x with every other variable at its solved value (N, M, U, S, used, use, split, racks, switches),
    so that each pool (c,t) takes load in proportion to its capacity:

        load[c,t] = sum_(w,b) x[w,b,c,t] / rho[w,b,c]       units of c the routed requests keep busy
        minimize   sum_k z[k]
        subject to load[c,t] <= z[k] U*[c,t]                  every pool (c,t) of group k with U*[c,t] > 0
                   every row of the program that holds an x, the other variables at their solved values:
                   demand, prefill-decode flow, serving mode (split*), engine capacity load[c,t] <= U*[c,t]
                   (so load = 0 where U* = 0) and any cost term in x held at its solved value (none today:
                   cost_expression prices N, M, S and the site's racks and switches only)

    A group k is a set of pools linked by rows (a row holding x of pools p and q puts them in one group). Groups
    share no row and no variable, so the sum of the z[k] is least when each z[k] is its group's least maximum
    utilization load / U*: min-max per group, and over all pools. A bucket (w,b,t) on pools of one rate rho alone
    gets z = d[w,b,t] / (rho sum_c U*[c,t]) on each of them: exactly in proportion to capacity (the pools' loads
    add up to z sum U*, each at most z U*). Pools of a group below its maximum keep any split that fits (no
    second stage: the failing case needed none).
    The integers are unchanged, so are the plan's nodes and cost. When the LP cannot run or does not solve to
    optimality the program's own routes stay, and the returned warning says so; otherwise nothing is returned."""
    routing: dict[str, pulp.LpVariable] = {}  # by name: merged periods alias one x under several period names
    pool_of: dict[str, tuple[str, str]] = {}
    pools: dict[tuple[str, str], list] = defaultdict(list)
    rate = {(o.workload, o.bucket, o.candidate): unit_rate(o, cset.candidate(o.candidate)) for o in cset.options}
    for (workload, bucket, key, period), var in model.routed.items():
        if var.name not in routing:
            routing[var.name], pool_of[var.name] = var, (key, period)
            pools[(key, period)].append(var * (1.0 / rate[(workload, bucket, key)]))
    if not routing:
        return ()
    saved = {name: var.varValue for name, var in routing.items()}

    why = "no time left to re-solve them" if time_limit_s < MIN_RESOLVE_S else None
    if why is None:
        try:
            status = solve_model(FleetModel(_routing_lp(model, pool_of, pools)), solver, time_limit_s).status
            why = None if status == "optimal" else f"the routing LP ended {status}"
        except Exception as error:  # any failure keeps the program's routes: the plan stands without balancing
            why = f"the routing LP failed: {error}"
    if why is None:
        return ()
    for name, var in routing.items():
        var.varValue = saved[name]
    return (f"routes as the integer program left them, not spread over the pools in proportion to capacity ({why}): "
            "a pool may run fuller than it needs to (plan --verify simulates it)",)  # fmt: skip


def _solved(var: pulp.LpVariable) -> float:
    """A variable's solved value, integers rounded (the solver leaves them within its tolerance)."""
    value = var.varValue or 0.0
    return float(round(value)) if var.cat == pulp.LpInteger else value


def _routing_lp(model: FleetModel, pool_of: dict[str, tuple[str, str]], pools: dict[tuple[str, str], list]) -> pulp.LpProblem:
    """The LP of `balance_routing` over the program's own x variables (named in `pool_of`, with the pool of each;
    the solution is written into them)."""
    group = {pool: pool for pool in pools}  # union-find: the pools a row links

    def root(pool):
        while group[pool] != pool:
            group[pool] = group[group[pool]]
            pool = group[pool]
        return pool

    lp = pulp.LpProblem("balance_routing", pulp.LpMinimize)
    for name, row in model.problem.constraints.items():
        held = [(var, a) for var, a in row.items() if var.name in pool_of]
        if held:
            constant = row.constant + sum(a * _solved(var) for var, a in row.items() if var.name not in pool_of)
            lp += pulp.LpConstraint(pulp.LpAffineExpression(held), row.sense, name, rhs=-constant)
            for var, _ in held[1:]:
                group[root(pool_of[var.name])] = root(pool_of[held[0][0].name])
    spent = [(var, a) for var, a in model.problem.objective.items() if var.name in pool_of]
    if spent:  # a cost term in x: held where the program left it
        lp += pulp.LpAffineExpression(spent) == sum(a * (var.varValue or 0.0) for var, a in spent), "cost_held"
    peak = {k: pulp.LpVariable(f"z_{i}", lowBound=0) for i, k in enumerate(sorted({root(p) for p in pools}))}
    lp += pulp.lpSum(peak.values())
    for index, (pool, load) in enumerate(sorted(pools.items())):
        units = _solved(model.units[pool]) if pool in model.units else 0.0
        if units > 0:
            lp += pulp.lpSum(load) <= units * peak[root(pool)], f"balance_{index}"
    return lp
