"""A warm start for large fleets: the year-round decisions from a relaxation, then every period as its own program.

Bought and reserved nodes N[h] (with the spares, racks and switches that follow them, and any other decision not
indexed by a period) and the rentals' starts (s[h,t] >= M[h,t] - M[h,t-1], minimum billing: optimize/billing.py)
are the only things that tie the periods together; given them, each period t is a program of its own in U[., t],
M[., t], x[., ., ., t] and its rentals' s[., t], y[., t] (optimize/periods.py's `partition`). Branch and bound on
the whole program must close the rounding gaps of every period at once and, at 20 workloads x 24 periods, finds
neither a good plan nor a proof in a minute (docs/optimizer.md, "Scale"). So, for a program at least `DECOMPOSE_MIN_INTEGERS` integers large:

1. **Year-round stage**: the program with every period variable relaxed (U, M continuous) and the year-round
   integers kept, solved to optimality. It is a relaxation of the whole program, so its optimum is a valid lower
   bound on the plan's cost.
2. **Period stage**: the year-round decisions fixed at that solution, each period's rows (those whose variables
   all belong to one period, given the year-round ones) solved as its own integer program, in day order: a row
   tying periods (a rental's start after the period before it) joins the program of the last of its periods,
   with the others' values fixed.
3. The fleet they make is a whole plan (every row holds); it is handed to the solver as its starting plan, and the
   solver improves it and raises the bound in the time left. Its answer is never worse than this start: a solver
   stopped before it finds a better plan returns this one, 'feasible' with the gap to the best bound known.

Exact in what it claims: the starting plan satisfies every row of the program and its cost is recomputed from the
program's objective; the gap is against a proven bound (the solver's, or stage 1's, whichever is higher)."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass

import pulp

from planner.optimize import periods
from planner.optimize.periods import period_of_variables
from planner.optimize.model import FleetModel

DECOMPOSE_MIN_INTEGERS = 1500  # smaller programs close by branch and bound alone (every shipped scenario does)
_FEASIBILITY = 1e-6


@dataclass(frozen=True)
class WarmStart:
    """A whole plan from the two stages: its cost (the program's objective at it), the proven lower bound of the
    year-round stage (None when that stage was stopped) and the seconds it took."""

    objective: float
    lower_bound: float | None
    seconds: float
    periods: int
    values: dict  # variable name -> value, the whole plan (to restore it if the solver returns nothing better)


def worth_decomposing(model: FleetModel) -> bool:
    """Large enough that branch and bound alone struggles, with more than one period and some year-round integer."""
    variables = model.problem.variables()
    integers = sum(1 for v in variables if v.cat == pulp.LpInteger)
    if integers < DECOMPOSE_MIN_INTEGERS:
        return False
    return len(set(period_of_variables(model).values())) > 1 and bool(model.fixed_nodes)


def relax_periods(model: FleetModel, part: periods.Partition, solve) -> tuple[str, float | None, float | None]:
    """Stage 1: every integer of a period's block relaxed (`part.variables`: U, M, x and the rentals' s, y, read off
    the model's tables by periods.partition, not by PuLP's walk of every row: 0.1 s at 20 x 24, where the year-round
    search relaxes the periods for each of its boxes), solved; the categories are restored whatever happens.
    Returns the status, the objective at the solution found (None: none) and the bound `solve` returned."""
    relaxed = [v for v in part.variables if v.cat == pulp.LpInteger]
    for var in relaxed:
        var.cat = pulp.LpContinuous
    try:
        status, bound = solve(model.problem)
    finally:
        for var in relaxed:
            var.cat = pulp.LpInteger
    value = pulp.value(model.problem.objective) if status in ("optimal", "feasible") else None
    return status, value, bound


def period_problem(name: str, constraints: list, objective: list, fixed: dict[str, float]) -> pulp.LpProblem:
    """One period's rows with the year-round variables replaced by their values."""
    problem = pulp.LpProblem(name, pulp.LpMinimize)
    problem += pulp.lpSum(coefficient * var for var, coefficient in objective)
    for index, constraint in enumerate(constraints):
        expression = pulp.LpAffineExpression([(v, c) for v, c in constraint.items() if v.name not in fixed])
        constant = constraint.constant + sum(c * fixed[v.name] for v, c in constraint.items() if v.name in fixed)
        problem += pulp.LpConstraint(expression + constant, constraint.sense, name=f"r{index}")
    return problem


def warm_start(model: FleetModel, solve, seconds_left, after_stage_one=None) -> WarmStart | None:
    """The two-stage plan (module docstring), or None where the program does not split by period, a stage finds
    no plan, or the time runs out. `solve(problem, share)` solves a PuLP problem within `share` of the time left and
    returns (status, bound); `seconds_left()` is what remains of the budget. Periods tied by rentals (a start
    s[h,t] >= M[h,t] - M[h,t-1], minimum billing) are solved in day order, each with the rows that tie it to the
    periods already solved, at their values: every row is in the program of the last of its periods.
    `after_stage_one(fixed)`: called with the year-round values once stage 1 has fixed them, before the periods are
    solved (optimize/yearround.py's EarlyFloors)."""
    started = time.perf_counter()
    part = periods.partition(model)
    if not part.disjoint:  # a unit held all year: no split by period is exact
        return None
    period_of = part.block_of
    stage_status, lower_bound, _ = relax_periods(model, part, solve)
    if stage_status not in ("optimal", "feasible") or seconds_left() <= 0:
        return None
    fixed = {}
    for var in model.problem.variables():
        if var.name not in period_of:
            value = var.varValue or 0.0
            fixed[var.name] = float(round(value)) if var.cat == pulp.LpInteger else value
    if after_stage_one is not None:
        after_stage_one(dict(fixed))
    linking: dict[frozenset[str], list] = defaultdict(list)  # each linking row with the last of its blocks
    position = {block: index for index, block in enumerate(part.blocks)}
    decided = dict(period_of)  # the block whose program decides each period variable
    in_rows = {v.name for block in part.blocks for constraint in part.rows[block] for v in constraint}
    for constraint in part.linking:
        last = max((period_of[v.name] for v in constraint if v.name in period_of), key=position.__getitem__)
        linking[last].append(constraint)
        for var in constraint:  # a start in no row of its own period (h00's, after h23) is decided with its row
            if var.name in period_of and var.name not in in_rows and position[last] > position[decided[var.name]]:
                decided[var.name] = last
    objective: dict[frozenset[str], list] = defaultdict(list)
    total = model.problem.objective.constant
    for var, coefficient in model.problem.objective.items():
        if var.name in period_of:
            objective[decided[var.name]].append((var, coefficient))
        else:
            total += coefficient * fixed[var.name]
    for index, block in enumerate(part.blocks):
        if seconds_left() <= 0:
            return None
        problem = period_problem(f"period_{index}", part.rows[block] + linking[block], objective[block], fixed)
        status, _ = solve(problem, 1.0 / (len(part.blocks) - index))  # a fair share of what is left per period
        if status not in ("optimal", "feasible"):
            return None
        fixed.update({var.name: var.varValue or 0.0 for var in problem.variables()})
        total += pulp.value(problem.objective) or 0.0
    for var in model.problem.variables():
        if var.name in fixed:
            var.varValue = fixed[var.name]
        elif var.varValue is None:
            var.varValue = 0.0
    if not _holds(model):
        return None
    values = {var.name: var.varValue for var in model.problem.variables()}
    exact = pulp.value(model.problem.objective)
    if exact is None or not math.isclose(exact, total, rel_tol=1e-6, abs_tol=1e-3):  # every cost term in one stage
        return None
    return WarmStart(exact, lower_bound if stage_status == "optimal" else None, time.perf_counter() - started,
                     len(part.blocks), values)  # fmt: skip


def _holds(model: FleetModel) -> bool:
    """Every row of the whole program holds at the variables' values (integers whole, within tolerance)."""
    for var in model.problem.variables():
        value = var.varValue
        if var.cat == pulp.LpInteger and abs(value - round(value)) > _FEASIBILITY:
            return False
        if (var.lowBound is not None and value < var.lowBound - _FEASIBILITY) or (
                var.upBound is not None and value > var.upBound + _FEASIBILITY):
            return False
    for constraint in model.problem.constraints.values():
        value = constraint.value()
        scale = max(1.0, abs(constraint.constant))
        if constraint.sense == pulp.LpConstraintEQ and abs(value) > _FEASIBILITY * scale * 10:
            return False
        if constraint.sense == pulp.LpConstraintLE and value > _FEASIBILITY * scale * 10:
            return False
        if constraint.sense == pulp.LpConstraintGE and value < -_FEASIBILITY * scale * 10:
            return False
    return True


def restore(model: FleetModel, start: WarmStart) -> None:
    """Put the warm start's plan back into the variables (the solver returned nothing better)."""
    for var in model.problem.variables():
        var.varValue = start.values.get(var.name, 0.0)
