"""`planner plan --verify --repair`: add the cheapest capacity until no simulated latency limit is conclusively missed.

The optimizer sizes on steady-state averages; the simulator may find a workload missing its limit in a period
(queueing at high utilization, token-gap stalls). Each round raises the demand the optimizer must serve for every
workload and period with a conclusive miss (a check whose verdict is `misses`: the interval's lower end above the
limit; or requests of the window refused or left unfinished) to the capacity the plan gave it plus one instance of
its smallest engine, re-solves (the cheapest plan that adds that capacity, wherever it is cheapest) and simulates
again, until no conclusive miss remains or `max_rounds` pass.

Inconclusive checks (the interval still straddles the limit after the simulator's extra seeds) are reported and never
repaired: capacity bought on a statistical coin toss is cost without evidence. When only they remain, the repair
stops and says so (`Repair.stopped`, `Repair.inconclusive`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from planner.simulate.verdicts import HOLDS, INCONCLUSIVE, MISSES, overall_verdict
from planner.simulate.wording import describe_check, unserved


@dataclass(frozen=True)
class RepairStep:
    round: int
    workload: str
    period: str
    why: str  # the conclusive misses: metric, simulated value and interval vs limit (or requests not served)
    demand_rps_before: float
    demand_rps_after: float
    added: str = ""  # what was added: the demand to size for, and the nodes of the re-solved plan
    misses: tuple = ()  # the LimitChecks that missed conclusively
    capacity_rps: float = 0.0  # what the plan gave the workload in the period before the round
    instance_rps: float = 0.0  # one instance of its smallest engine
    nodes_before: dict = field(default_factory=dict)  # nodes by system of the plan before and after the round
    nodes_after: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Repair:
    plan: object  # the repaired Plan
    checks: tuple  # its simulation (planner.simulate.WorkloadCheck)
    steps: tuple[RepairStep, ...]
    original_annual_cost_usd: float
    original_nodes: int
    all_ok: bool  # every simulated check holds
    verdict: str = HOLDS  # of the final checks: holds | misses | inconclusive | not simulated
    stopped: str = ""  # why the repair stopped
    inconclusive: tuple[str, ...] = ()  # checks reported but not repaired: 'workload (period): TTFT P50 ...'


def _why(check) -> tuple[str, tuple]:
    """The conclusive misses of a workload check, as words and as the LimitChecks."""
    missed = tuple(c for c in check.checks if c.verdict == MISSES)
    words = [describe_check(c, getattr(check, "extra_seeds", 0)) for c in missed]
    lost = unserved(check)
    if lost:
        words.append(f"{lost} (the engines did not serve them)")
    return "; ".join(words) or "requests not served", missed


def _inconclusive(checks) -> tuple[str, ...]:
    return tuple(
        f"{w.workload} ({w.period}): {describe_check(c, w.extra_seeds)}" + (f"; {w.seeds_note}" if w.seeds_note else "")
        for w in checks if w.verdict == INCONCLUSIVE for c in w.checks if c.verdict == INCONCLUSIVE
    )  # fmt: skip


def _nodes(nodes: dict) -> str:
    return ", ".join(f"{system} {count}" for system, count in sorted(nodes.items())) or "none"


def _nodes_change(before: dict, after: dict) -> str:
    systems = sorted(set(before) | set(after))
    changed = [f"{s} {before.get(s, 0)} -> {after.get(s, 0)}" for s in systems if before.get(s, 0) != after.get(s, 0)]
    return ", ".join(changed) or f"no new nodes ({_nodes(after)}: the instances were rearranged)"


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


def _at_scenario_demand(plan, scenario):
    """The repaired plan as the scenario reads it: its routes at the scenario's demand (`_at_demand`), and each
    workload's demand the scenario's in every period, its capacity what the repaired fleet gives (the plan was
    solved for raised demand; the repair steps say by how much)."""
    plan = _at_demand(plan, scenario)
    demand = {(w, p.name): rate for p in scenario.periods for w, rate in p.demand_rps.items()}
    workloads = []
    for result in plan.workloads:
        periods = tuple(dataclasses.replace(load, demand_rps=round(demand[(result.name, load.period)], 6))
                        for load in result.periods)  # fmt: skip
        peak = max(periods, key=lambda load: load.demand_rps) if periods else None
        workloads.append(result if peak is None else dataclasses.replace(
            result, periods=periods, demand_rps=peak.demand_rps, capacity_rps=peak.capacity_rps))  # fmt: skip
    return dataclasses.replace(plan, workloads=tuple(workloads))


def _stopped(checks, rounds: int, max_rounds: int) -> str:
    verdict = overall_verdict(checks)
    after = f" after {rounds} round{'s' if rounds != 1 else ''}" if rounds else ""
    if verdict == MISSES:
        return f"conclusive misses remain after {max_rounds} rounds (the last plan is shown)"
    if verdict == INCONCLUSIVE:
        return (f"no conclusive miss{' remains' if rounds else ''}{after}; only inconclusive checks remain, "
                "reported and not repaired (their intervals straddle the limits)")  # fmt: skip
    return f"every simulated limit holds{after}"


def repair_plan(plan, scenario, catalog, simulate, solve, max_rounds: int = 8) -> Repair:
    """`simulate(plan, scenario)` -> checks; `solve(scenario)` -> Plan. Returns the first plan with no conclusive miss
    (or the last one tried), with what was raised, why, and why it stopped."""
    original = scenario
    checks = simulate(plan, scenario)
    steps: list[RepairStep] = []
    original_cost, original_nodes = plan.totals.annual_cost_usd, plan.totals.nodes
    rounds = 0
    for number in range(1, max_rounds + 1):
        failing = [c for c in checks if c.verdict == MISSES]  # inconclusive checks are never repaired
        if not failing:
            break
        rounds = number
        periods = {p.name: p for p in scenario.periods}
        raised = []
        for check in failing:
            result = next(w for w in plan.workloads if w.name == check.workload)
            capacity = next((p.capacity_rps for p in result.periods if p.period == check.period), check.rate_rps)
            step_rps = min((r.rps_per_instance or r.rps_per_node) for r in plan.routing
                           if r.workload == check.workload and r.period == check.period)  # fmt: skip
            period = periods[check.period]
            before = period.demand_rps[check.workload]
            after = max(before, capacity) + step_rps
            periods[check.period] = dataclasses.replace(period, demand_rps={**period.demand_rps, check.workload: after})
            raised.append((check, before, after, capacity, step_rps))
        scenario = dataclasses.replace(scenario, periods=tuple(periods[p.name] for p in scenario.periods))
        nodes_before, cost_before = dict(plan.totals.nodes_by_system), plan.totals.annual_cost_usd
        plan = solve(scenario)
        nodes_after, cost_after = dict(plan.totals.nodes_by_system), plan.totals.annual_cost_usd
        for check, before, after, capacity, step_rps in raised:
            why, missed = _why(check)
            added = (f"demand to size for {before:,.4g} -> {after:,.4g} rps (the plan's capacity {capacity:,.4g} + one "
                     f"{step_rps:,.4g} rps instance); re-solved: {_nodes_change(nodes_before, nodes_after)}, "
                     f"{cost_after - cost_before:+,.0f} USD/year")  # fmt: skip
            steps.append(RepairStep(number, check.workload, check.period, why, before, after, added, missed, capacity,
                                    step_rps, nodes_before, nodes_after))  # fmt: skip
        checks = simulate(_at_demand(plan, original), original)
    if steps:
        plan = _at_scenario_demand(plan, original)
    return Repair(plan, tuple(checks), tuple(steps), original_cost, original_nodes,
                  all(c.ok for c in checks if c.ok is not None), overall_verdict(checks),
                  _stopped(checks, rounds, max_rounds), _inconclusive(checks))  # fmt: skip
