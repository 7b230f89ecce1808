"""Diagnosis: why no plan exists (a bucket nothing can serve, or the budget that cannot be met, by how much), and
which limits cost money in a plan that exists (re-solved without each)."""

from __future__ import annotations

import time
from collections import defaultdict

import pulp

from planner.candidates import CandidateSet
from planner.catalog import Catalog
from planner.errors import InfeasiblePlanError
from planner.metrics import LABELS
from planner.metrics import limits as metric_limits
from planner.optimize.model import (
    _TOLERANCE,
    _on_prem_sum,
    bucket_demand,
    build_fleet_model,
    gpus_in_use,
)
from planner.optimize.readback import _limit_usage
from planner.optimize.solve import solve_model
from planner.plan import Plan
from planner.scenario import Scenario

MIN_RESOLVE_S = 0.2  # a re-solve given less than this is not started


def check_every_workload_has_options(scenario: Scenario, cset: CandidateSet) -> None:
    """A bucket with demand that no candidate can serve makes the plan infeasible before any solve: say why."""
    stages: dict[tuple[str, int], set] = defaultdict(set)
    for o in cset.options:
        stages[(o.workload, o.bucket)].add(cset.candidate(o.candidate).stage)
    # served aggregated, or by both pools (a prefill pool without a decode pool serves nothing)
    served = {cell for cell, s in stages.items() if "aggregated" in s or {"prefill", "decode"} <= s}
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
    at = f" at P{workload.slo.percentile:g}"
    below = [
        f"{LABELS[key]}{at} {limit:g} ms is below the fastest candidate's {fastest[key].value_ms:,.0f} ms ({fastest[key].label})"
        for key, limit in metric_limits(workload.slo)
        if key in fastest and fastest[key].value_ms > limit
    ]  # fmt: skip
    if below:
        return f"workload {workload.name}{what}: " + "; ".join(below)
    if pruned and all(p.kind == "memory" for p in pruned):
        return f"workload {workload.name}{what}: does not fit in memory on any allowed system ({pruned[-1].system}: {pruned[-1].reason})"
    reasons = list(dict.fromkeys(f"{p.system}: {p.reason}" for p in pruned if p.kind != "memory"))
    reasons = reasons or list(dict.fromkeys(f"{p.system}: {p.reason}" for p in pruned))
    shown = "; ".join(reasons[:4]) + (f"; and {len(reasons) - 4} more" if len(reasons) > 4 else "")
    return f"workload {workload.name}{what}: no candidate can serve it ({shown or 'no system allowed'})"


def time_left_s(deadline: float | None, time_limit_s: float) -> float:
    """Seconds a re-solve may take: what is left of the command's time limit (`deadline`, time.monotonic()), or the
    whole limit where no deadline is set."""
    return time_limit_s if deadline is None else min(time_limit_s, deadline - time.monotonic())


def diagnose_limits(scenario: Scenario, cset: CandidateSet, catalog: Catalog, solver: str, time_limit_s: float,
                    deadline: float | None = None) -> list[str]:  # fmt: skip
    """Which budget cannot be met: for each, the least it can be while demand is served and the other budgets
    hold, against its limit. Re-solves share what is left of the time limit before `deadline`."""
    limits = scenario.limits
    checks = [
        ("power", "power budget", lambda m: _on_prem_sum(m, "power_kw"), limits.power_kw, "kW"),
        ("rack", "rack-unit budget", lambda m: _on_prem_sum(m, "rack_units"), limits.rack_units, "RU"),
        ("capex", "capex budget", lambda m: _on_prem_sum(m, "capex_usd"), limits.capex_usd, "USD"),
    ]
    for gpu, available in sorted(limits.max_gpus.items()):
        for period in scenario.periods:
            checks.append((
                f"gpus:{gpu}",
                f"GPUs available of {gpu}" + (f" in period {period.name}" if len(scenario.periods) > 1 else ""),
                lambda m, g=gpu, p=period.name: gpus_in_use(m, catalog, g, p),
                available, "GPUs",
            ))  # fmt: skip
    problems, stopped = [], False
    for key, label, expression, limit, unit in checks:
        if limit is None:
            continue
        if time_left_s(deadline, time_limit_s) < MIN_RESOLVE_S:
            stopped = True
            continue
        model = build_fleet_model(scenario, cset, catalog, skip=frozenset({key}))
        model.problem.setObjective(expression(model))
        outcome = solve_model(model, solver, time_left_s(deadline, time_limit_s))
        stopped = stopped or outcome.status in ("stopped", "feasible")
        if outcome.status == "optimal":
            least = pulp.value(model.problem.objective) or 0.0
            if least > limit + _TOLERANCE:
                problems.append(f"{label} {limit:,.6g} {unit} < {least:,.6g} {unit} needed at minimum")
        elif outcome.status == "feasible" and outcome.best_bound is not None and outcome.best_bound > limit + _TOLERANCE:
            # a re-solve stopped by its time limit proves only its bound
            problems.append(f"{label} {limit:,.6g} {unit} < {outcome.best_bound:,.6g} {unit}, a lower bound on what is "
                            "needed (the re-solve stopped at its time limit)")
    if not problems:
        model = build_fleet_model(scenario, cset, catalog, with_limits=False)
        left = time_left_s(deadline, time_limit_s)
        status = solve_model(model, solver, left).status if left >= MIN_RESOLVE_S else "stopped"
        if status == "stopped" or (stopped and status != "infeasible"):
            problems.append(f"the diagnosis stopped at its time limit of {time_limit_s:g} s: raise --time-limit to learn "
                            "which limit is too tight")
        elif status == "infeasible":
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


def costly_limits(scenario: Scenario, cset: CandidateSet, catalog: Catalog, solver: str, time_limit_s: float, plan: Plan,
                  deadline: float | None = None) -> tuple[str, ...]:  # fmt: skip
    """The limits that cost money: for each budget the scenario sets, the plan re-solved without it; the budget
    is binding when that optimum is cheaper (whether or not the plan used it up exactly: a power cap can force
    a dearer mix and still leave a few kW unused). Where a re-solve cannot prove its optimum, or for the engine-
    variant limit, or where the time limit (`deadline`) leaves no time to re-solve, a budget counts as binding when
    the plan uses it up."""
    binding = []
    for label, skip in _limit_usage(scenario, plan.totals, plan.lines, plan.instances):
        if skip is None or plan.status != "optimal":
            if label.endswith("used up"):
                binding.append(label)
            continue
        left = time_left_s(deadline, time_limit_s)
        if left < MIN_RESOLVE_S:
            if label.endswith("used up"):
                binding.append(label)
            continue
        model = build_fleet_model(scenario, cset, catalog, skip=frozenset({skip}))
        outcome = solve_model(model, solver, left)
        cheaper = pulp.value(model.problem.objective) if outcome.status == "optimal" else None
        if cheaper is not None and cheaper < plan.objective_usd_per_year - max(0.01, 1e-7 * plan.objective_usd_per_year):
            binding.append(f"{label}; without it the plan costs {plan.objective_usd_per_year - cheaper:,.0f} USD/year less")
        elif cheaper is None and label.endswith("used up"):
            binding.append(label)
    return tuple(binding)
