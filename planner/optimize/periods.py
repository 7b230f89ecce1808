"""A proven lower bound for large fleets: the program split into its periods by Lagrangian decomposition, each period
solved as an integer program (docs/optimizer.md, "Large fleets").

Branch and bound on the whole program must close the rounding of every period at once (the periods' gaps add up,
and branching in one period raises no other period's bound), so at 20 workloads x 24 periods its bound stays near the
LP relaxation. Split instead:

- **blocks**: every period variable (U[c,t], M[h,t], x[w,b,c,t], and the rental starts s[h,t], y[h,t]) belongs
  to the block of its period (a period merged with equal ones, or a unit held all year, is one block); every
  other variable is year-round (Y: N[h], spares, racks, switches, split[w], use[v]).
- **rows**: a row whose period variables lie in one block b is a row of b; its year-round variables v are
  replaced in b by a copy v_b (same bounds and kind), tied by v_b = v. A row of year-round variables alone stays
  in the year-round block. A row whose period variables lie in two or more blocks (rental starts
  s[h,t] >= M[h,t] - M[h,t-1], minimum billing) links blocks.
- **Lagrangian**: with multipliers pi_r for the linking rows a_r z (>=, <=, =) b_r (pi_r >= 0, <= 0, free) and
  lambda_{b,v} for the copies (free),
      L(pi, lambda) = c0 + sum_r pi_r b_r
                      + min_Y  sum_{v in Y} (c_v - sum_b lambda_{b,v} - sum_r pi_r a_{r,v}) v        (year-round rows)
                      + sum_b min  sum_{v in b} (c_v - sum_r pi_r a_{r,v}) v + sum_v lambda_{b,v} v_b  (rows of b)
  is a lower bound on the program's optimum for any such multipliers (weak duality: each min is over a set that
  contains the program's own solutions). Each min is an integer program of one period, which branch and bound
  closes alone; a block stopped by its time limit contributes its own proven bound (HiGHS' dual bound).
- **multipliers**: the LP relaxation's row duals: pi_r for a linking row, and lambda_{b,v} = sum over the rows r of b
  of a_{r,v} pi_r (a copy's reduced cost in b is then zero). With every block relaxed L equals the LP bound; with
  every block integer it is at least as high, by each period's own rounding gap.

Exact in what it claims: the bound holds whatever the multipliers' quality (only their signs matter, and they are
clipped to the valid sign), and a block without a proven bound makes no bound at all (None)."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass, field

import pulp

from planner.optimize.variables import FleetModel

YEAR_ROUND = None  # the block key of the year-round variables and rows


@dataclass
class Partition:
    """The program's variables and rows by block (module docstring): `block_of` maps a period variable's name to
    its block (a frozenset of period names; absent: year-round), `rows` the rows of each block (YEAR_ROUND: rows of
    year-round variables alone), `linking` the rows that tie two or more period blocks, `blocks` in day order,
    `variables` the variables `block_of` names, each once (what a relaxation of the periods relaxes:
    decompose.relax_periods)."""

    block_of: dict[str, frozenset[str]]
    blocks: list[frozenset[str]]
    rows: dict[frozenset[str] | None, list] = field(default_factory=dict)
    linking: list = field(default_factory=list)
    variables: list[pulp.LpVariable] = field(default_factory=list)

    @property
    def disjoint(self) -> bool:
        """No period in two blocks (a unit held all year shares every period's block): each block is a period."""
        return sum(len(b) for b in self.blocks) == len(set().union(*self.blocks)) if self.blocks else True


def _indexed_by_period(model: FleetModel) -> list:
    """(key, variable) of U, M and x, each key ending in its period."""
    return list(model.units.items()) + list(model.period_nodes.items()) + list(model.routed.items())


def period_of_variables(model: FleetModel) -> dict[str, frozenset[str]]:
    """The period(s) each period-indexed variable belongs to (a period merged with equal ones stands for all of
    them, so its variables carry all their names); variables absent are year-round."""
    names: dict[str, set[str]] = defaultdict(set)
    for (*_, period), var in _indexed_by_period(model):
        names[var.name].add(period)
    return {name: frozenset(members) for name, members in names.items()}


def partition(model: FleetModel) -> Partition:
    """Blocks of U, M, x by the period(s) each variable stands for (merged periods carry all their names), and the
    rentals' s[h,t], y[h,t] in the block of t; then every row by the blocks of its period variables."""
    order: dict[str, int] = {}
    held: dict[str, pulp.LpVariable] = {}
    for (*_, period), var in _indexed_by_period(model):
        order.setdefault(period, len(order))
        held.setdefault(var.name, var)
    block_of = period_of_variables(model)
    blocks = sorted(set(block_of.values()), key=lambda b: (min(order[p] for p in b), sorted(b)))
    block_with = {p: b for b in blocks for p in b}
    for variables in (model.starts, model.stops_short):
        for (_, period), var in variables.items():
            if period in block_with:
                block_of[var.name] = block_with[period]
                held.setdefault(var.name, var)
    part = Partition(block_of, blocks, {b: [] for b in [YEAR_ROUND, *blocks]}, variables=list(held.values()))
    for constraint in model.problem.constraints.values():
        touched = {block_of[v.name] for v in constraint if v.name in block_of}
        if len(touched) > 1:
            part.linking.append(constraint)
        else:
            part.rows[touched.pop() if touched else YEAR_ROUND].append(constraint)
    return part


@dataclass(frozen=True)
class PeriodBound:
    """The Lagrangian bound and how it was reached: the LP relaxation's value, the bound, the blocks solved to
    optimality (of all blocks, the year-round one included), and the seconds taken."""

    lower_bound: float
    lp_bound: float
    blocks_optimal: int
    blocks: int
    seconds: float


def clipped_dual(constraint) -> float:
    """The row's dual, clipped to the sign that keeps the Lagrangian a lower bound (>= rows 0 or more, <= rows 0
    or less); HiGHS' row duals of a minimisation have these signs at an optimum."""
    pi = constraint.pi or 0.0
    if not math.isfinite(pi):
        return 0.0
    if constraint.sense == pulp.LpConstraintGE:
        return max(pi, 0.0)
    if constraint.sense == pulp.LpConstraintLE:
        return min(pi, 0.0)
    return pi


def lagrangian_bound(model: FleetModel, part: Partition, solve_lp, solve_block, seconds_left) -> PeriodBound | None:
    """The bound of the module docstring, or None where the LP has no optimum, a block has no proven bound, or
    the time runs out. `solve_lp(problem)` solves the LP relaxation (row duals in constraint.pi) and returns its
    status; `solve_block(problem, share)` solves one block's integer program within `share` of the time left and
    returns its proven lower bound (None: none); `seconds_left()` is what remains of the budget."""
    started = time.perf_counter()
    if not part.blocks or solve_lp(model.problem) != "optimal":
        return None
    lp_value = pulp.value(model.problem.objective)
    objective = dict(model.problem.objective.items())
    adjusted: dict[str, float] = defaultdict(float)  # c_v - sum_r pi_r a_{r,v}, by variable name
    variables = {v.name: v for v in model.problem.variables()}
    for name, var in variables.items():
        adjusted[name] = objective.get(var, 0.0)
    constant = model.problem.objective.constant
    for constraint in part.linking:
        pi = clipped_dual(constraint)
        if pi == 0.0:
            continue
        constant += pi * -constraint.constant  # pi_r b_r, the row being expression + constant (sense) 0
        for var, coefficient in constraint.items():
            adjusted[var.name] -= pi * coefficient
    total, optimal = constant, 0
    year_round_cost = dict(adjusted)
    problems = []
    members: dict[frozenset[str], list] = defaultdict(list)
    for name, block in part.block_of.items():
        if name in variables:
            members[block].append(variables[name])
    for index, block in enumerate(part.blocks):
        problem, copies = _block_problem(f"block_{index}", part.rows[block], part.block_of, members[block], adjusted)
        for name, (copy, multiplier) in copies.items():
            year_round_cost[name] -= multiplier
        problems.append(problem)
    year_round = [v for name, v in variables.items() if name not in part.block_of]
    problem = pulp.LpProblem("year_round", pulp.LpMinimize)
    problem += pulp.lpSum(year_round_cost[v.name] * v for v in year_round)
    for index, constraint in enumerate(part.rows[YEAR_ROUND]):
        problem += pulp.LpConstraint(pulp.LpAffineExpression(list(constraint.items())) + constraint.constant,
                                     constraint.sense, name=f"r{index}")  # fmt: skip
    problems.append(problem)
    for index, problem in enumerate(problems):
        if seconds_left() <= 0:
            return None
        bound = solve_block(problem, 1.0 / (len(problems) - index))
        if bound is None or not math.isfinite(bound[0]):
            return None
        total += bound[0]
        optimal += bound[1]
    return PeriodBound(total, lp_value, optimal, len(problems), time.perf_counter() - started)


def _block_problem(name: str, rows: list, block_of: dict, members: list, adjusted: dict):
    """Block b's program: its rows with every year-round variable v replaced by a copy v_b, the objective
    sum_{v in b} adjusted[v] v + sum lambda_{b,v} v_b with lambda_{b,v} = sum_{r of b} a_{r,v} pi_r. Returns the
    problem and the copies (name -> (copy, lambda))."""
    copies: dict[str, tuple[pulp.LpVariable, float]] = {}
    own = {var.name: var for var in members}  # every variable of b, in a row of b or not
    multipliers: dict[str, float] = defaultdict(float)
    problem = pulp.LpProblem(name, pulp.LpMinimize)
    for index, constraint in enumerate(rows):
        pi = constraint.pi or 0.0
        terms = []
        for var, coefficient in constraint.items():
            if var.name in block_of:
                terms.append((var, coefficient))
                continue
            if var.name not in copies:
                copy = pulp.LpVariable(f"{var.name}__{name}", var.lowBound, var.upBound, var.cat)
                copies[var.name] = (copy, 0.0)
            multipliers[var.name] += coefficient * (pi if math.isfinite(pi) else 0.0)
            terms.append((copies[var.name][0], coefficient))
        expression = pulp.LpAffineExpression(terms) + constraint.constant
        problem += pulp.LpConstraint(expression, constraint.sense, name=f"r{index}")
    copies = {n: (copy, multipliers[n]) for n, (copy, _) in copies.items()}
    problem += pulp.lpSum([adjusted[n] * v for n, v in own.items()] + [m * copy for copy, m in copies.values()])
    return problem, copies
