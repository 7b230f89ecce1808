"""`planner plan --verify --repair`: add the cheapest capacity until the simulated latency limits hold.

The optimizer sizes on steady-state averages; the simulator may find a workload missing its limit in a period
(queueing at high utilization, token-gap stalls). Each round raises the demand the optimizer must serve for every
failing workload and period to the capacity the plan gave it plus one instance of its smallest engine, re-solves
(the cheapest plan that adds that capacity, wherever it is cheapest) and simulates again, until every verdict
holds or `max_rounds` pass.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class RepairStep:
    round: int
    workload: str
    period: str
    why: str  # the failed checks
    demand_rps_before: float
    demand_rps_after: float


@dataclass(frozen=True)
class Repair:
    plan: object  # the repaired Plan
    checks: tuple  # its simulation (planner.simulate.WorkloadCheck)
    steps: tuple[RepairStep, ...]
    original_annual_cost_usd: float
    original_nodes: int
    all_ok: bool


def _failed(check) -> str:
    missed = [f"{c.metric} P{c.percentile:g} {c.simulated_ms:,.0f} ms (95% up to {c.ci_high_ms or c.simulated_ms:,.0f}) > {c.limit_ms:g} ms"
              for c in check.checks if not c.ok]  # fmt: skip
    return "; ".join(missed) or "requests left unfinished"


def _at_demand(plan, scenario):
    """The plan with its routes scaled back to the scenario's demand: the repaired fleet is simulated under the
    traffic it must serve, not under the raised demand it was sized for."""
    demand = {(w, p.name): rate for p in scenario.periods for w, rate in p.demand_rps.items()}
    routed: dict[tuple, float] = {}
    for route in plan.routing:
        routed[(route.workload, route.period)] = routed.get((route.workload, route.period), 0.0) + route.rps
    routes = tuple(
        dataclasses.replace(r, rps=r.rps * demand[(r.workload, r.period)] / routed[(r.workload, r.period)])
        if routed[(r.workload, r.period)] > 0 else r
        for r in plan.routing
    )  # fmt: skip
    return dataclasses.replace(plan, routing=routes)


def repair_plan(plan, scenario, catalog, simulate, solve, max_rounds: int = 8) -> Repair:
    """`simulate(plan, scenario)` -> checks; `solve(scenario)` -> Plan. Returns the first plan whose checks all pass
    (or the last one tried), with what was raised and why."""
    original = scenario
    checks = simulate(plan, scenario)
    steps: list[RepairStep] = []
    original_cost, original_nodes = plan.totals.annual_cost_usd, plan.totals.nodes
    for number in range(1, max_rounds + 1):
        failing = [c for c in checks if c.ok is False]
        if not failing:
            break
        periods = {p.name: p for p in scenario.periods}
        for check in failing:
            result = next(w for w in plan.workloads if w.name == check.workload)
            capacity = next((p.capacity_rps for p in result.periods if p.period == check.period), check.rate_rps)
            step_rps = min((r.rps_per_instance or r.rps_per_node) for r in plan.routing
                           if r.workload == check.workload and r.period == check.period)  # fmt: skip
            period = periods[check.period]
            before = period.demand_rps[check.workload]
            after = max(before, capacity) + step_rps
            periods[check.period] = dataclasses.replace(period, demand_rps={**period.demand_rps, check.workload: after})
            steps.append(RepairStep(number, check.workload, check.period, _failed(check), before, after))
        scenario = dataclasses.replace(scenario, periods=tuple(periods[p.name] for p in scenario.periods))
        plan = solve(scenario)
        checks = simulate(_at_demand(plan, original), original)
    return Repair(plan, tuple(checks), tuple(steps), original_cost, original_nodes,
                  all(c.ok for c in checks if c.ok is not None))  # fmt: skip
