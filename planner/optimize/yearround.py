"""A proven lower bound for large fleets by the year-round decisions: branch and bound over the year-round integers
that the periods' rows name, stage 1 (optimize/decompose.py) bounding each box of them and the periods' own integer
programs each single point (docs/optimizer.md, "Large fleets").

Z: the year-round variables that a row of some period names (bought and reserved nodes N[h]; spares S[s] and
split[w], use[v] where the program has them). Every other year-round variable (racks, switches) sits in rows of
year-round variables alone. Given Z the periods are tied only by the rentals' rows (starts, minimum billing).

- **box bound**: for a box B of values of Z, stage 1 within B (every period integer relaxed, the year-round integers
  kept) is a relaxation of the program restricted to Z in B: its optimum, or HiGHS' dual bound where it stopped, is a
  lower bound on every plan with Z in B;
- **point bound**: Z fixed at z and the rows r that tie periods (a_r x + k_r >= 0, <= 0 or = 0) priced by multipliers
  pi_r of the valid sign, what is left splits into the year-round rows (racks, switches for those nodes) and one
  integer program per period, each solved alone; with x_b the variables of period b and y the other year-round ones,
      P(z) = c0 + c_Z z - sum_r pi_r k_r + min_y {c'_y y : year-round rows} + sum_b min_{x_b} {c'_b x_b : rows of b},
      c' = c - sum_r pi_r a_r,
  is a lower bound on every plan with Z = z (weak duality; every cost term is in exactly one program), and so is
  any proven bound of each program (HiGHS' dual bound where one stopped). pi: the duals of the LP relaxation with
  Z = z (`solve_lp`), or 0 (the rows dropped);
- **search**: the box of the lowest bound is split at the point z* of its stage-1 solution into the point z* (bound:
  the larger of P(z*) and the box's) and the boxes that first differ from z* in coordinate i (Z_j = z*_j for j < i,
  and Z_i <= z*_i - 1 or Z_i >= z*_i + 1), which with z* cover the box exactly. A box at or above `cutoff` (the
  cost of a plan in hand) is not split: nothing in it is cheaper. Its stage 1 is solved with that cutoff (HiGHS'
  objective bound): where nothing in the box is cheaper, it ends as soon as that is proven, its bound the cutoff.

- **closing a point**: a point whose P(z) stays below `cutoff` once every box is settled is solved whole, Z fixed
  at z, with a *floor* row per program: for period b, sum of c_v v over the variables in b's own rows >= F_b, the
  proven lower bound of b's program with the rows tying periods dropped (every plan with Z = z satisfies b's rows,
  so none is cut off; likewise the year-round rows' program). The point of the plan in hand skips P(z), which
  cannot reach the cutoff there: its floors, summed with c0 + c_Z z, bound it until it is closed. Branch and bound
  then starts where each period's rounding is already closed and has only the rows tying periods left to settle: at
  20 x 24 it proves the start's point in about 40 s, where the program without the floors had not in 200 s
  (docs/optimizer.md). Solved with the cutoff: its bound is the optimum at z, or the cutoff where nothing at z is
  cheaper; a plan below the cutoff is kept (`YearRoundBound.plan`) and lowers the cutoff.

The pieces (points, and boxes not split) cover every value of Z, so the lowest of their bounds is a proven lower
bound on the program's optimum whenever the search stops. A box whose solve proves nothing keeps its parent's bound,
which holds for it too; an empty box (stage 1 infeasible in it) holds no plan and drops out."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import math
import multiprocessing
import time
from collections import defaultdict
from dataclasses import dataclass, field

import pulp

from planner.optimize.decompose import period_problem, relax_periods
from planner.optimize.noise import cheaper
from planner.optimize.periods import YEAR_ROUND, Partition, clipped_dual
from planner.optimize.variables import FleetModel

BOX_SHARE = 0.5  # of the time left, at most, for one box's stage 1 (a point's programs share what is left)
FLOOR_SHARE = 0.5  # of the time left, at most, for a closed point's floors (its whole program gets the rest)
_FORKED = None  # the search's arguments, which forked workers inherit (never pickled): see `_Tasks`
_EARLY = None  # the arguments of the plan in hand's floors made early, which its forked worker inherits: `EarlyFloors`


@dataclass(frozen=True)
class YearRoundBound:
    """The bound and how far the search got: boxes bounded by stage 1, points by their periods' programs (`closed`
    of them solved whole), pieces still below the cutoff when it stopped (0: none; the bound is then the cutoff or a
    point's), and its seconds; `plan`: (cost, values) of a plan below the cutoff a closed point found (None: none)."""

    lower_bound: float
    boxes: int
    points: int
    open: int
    seconds: float
    closed: int = 0
    plan: tuple[float, dict] | None = field(default=None, repr=False)


def branching_variables(model: FleetModel, part: Partition) -> list[pulp.LpVariable] | None:
    """Z (module docstring) in name order; None where one of them is not integer (no search by points covers it)."""
    named = {}
    for constraint in [row for block in part.blocks for row in part.rows[block]] + part.linking:
        for var in constraint:
            if var.name not in part.block_of:
                named[var.name] = var
    if any(var.cat != pulp.LpInteger for var in named.values()):
        return None
    return [named[name] for name in sorted(named)]


def box_bound(model: FleetModel, part: Partition, variables: list, box: dict, solve) -> tuple[str, float | None, dict | None]:
    """Stage 1 with each variable of Z within box[name] = (low, up): its status, proven bound and the point of Z it
    found (None: none). The variables' bounds and categories are restored whatever happens. `solve` may cut the box
    off (status 'cut off', the bound its cutoff: no plan in the box costs less)."""
    saved = [(var.lowBound, var.upBound) for var in variables]
    try:
        for var in variables:
            var.lowBound, var.upBound = box[var.name]
        status, value, bound = relax_periods(model, part, solve)
        if bound is None and status == "optimal":
            bound = value
        found = status in ("optimal", "feasible") and all(var.varValue is not None for var in variables)
        point = {var.name: round(var.varValue) for var in variables} if found else None
    finally:
        for var, (low, up) in zip(variables, saved):
            var.lowBound, var.upBound = low, up
    return status, bound, point


def point_bound(model: FleetModel, part: Partition, point: dict, solve, seconds_left, solve_lp=None,
                cutoff: float = math.inf, fixed: list | None = None) -> float | None:
    """P(z) of the module docstring for z = point (math.inf where no plan has it), or None where a program proves
    no bound or the time runs out. With `solve_lp` (the LP relaxation with its row duals in constraint.pi, as
    optimize/periods.py's), the rows tying periods are not dropped but priced: with Z fixed at z, their LP duals pi_r
    (clipped to the valid sign) add c0' = sum_r pi_r b_r and take sum_r pi_r a_r off the costs (weak duality, as
    periods.py's bound; pi = 0 is the dropped rows).
    With `solve_lp` and a finite `cutoff` the programs' LP relaxations are solved first (each a lower bound on its
    program), the programs then in order of falling LP value, and the sum stops as soon as the programs solved and
    the others' relaxations reach the cutoff: that partial sum is a lower bound on every plan with Z = z, and at the
    cutoff it is all the search needs (a point above the plan in hand holds nothing cheaper). Each program is then
    solved with the cutoff that is left to it (the cutoff less the programs solved and the others' relaxations):
    where it is cut off (`solve`'s status 'cut off', its bound that cutoff: nothing cheaper) the sum reaches the
    cutoff, proven without the program's optimum. `fixed`: the variables of Z (`branching_variables`), where known."""
    cost = dict(model.problem.objective.items())  # variable -> cost (c', once the rows tying periods are priced)
    total = model.problem.objective.constant
    if solve_lp is not None:
        total += _price_linking_rows(model, part, point, solve_lp, cost, fixed)
    by_block: dict[frozenset[str], list] = defaultdict(list)
    year_round = []
    for var, coefficient in cost.items():
        if var.name in part.block_of:
            by_block[part.block_of[var.name]].append((var, coefficient))
        elif var.name in point:
            total += coefficient * point[var.name]
        else:
            year_round.append((var, coefficient))
    programs = [period_problem("year_round", part.rows[YEAR_ROUND], year_round, point)]
    programs += [period_problem(f"period_{i}", part.rows[b], by_block[b], point) for i, b in enumerate(part.blocks)]
    relaxed = [-math.inf] * len(programs)
    by_cutoff = solve_lp is not None and math.isfinite(cutoff)
    if by_cutoff:
        for index, problem in enumerate(programs):
            value = _relaxation(problem, solve_lp)
            if value == math.inf:
                return math.inf  # a program without even a relaxed plan: no plan has Z = z
            relaxed[index] = value
        order = sorted(range(len(programs)), key=lambda i: -relaxed[i])
        programs, relaxed = [programs[i] for i in order], [relaxed[i] for i in order]
        if (reached := total + sum(relaxed)) >= cutoff:
            return reached  # the relaxations alone reach the cutoff
    for index, problem in enumerate(programs):
        if seconds_left() <= 0:
            return None
        share = 1.0 / (len(programs) - index)
        if by_cutoff:  # only a value that keeps the sum below the cutoff is sought: its program is cut off above it
            status, bound = solve(problem, share, cutoff=cutoff - total - sum(relaxed[index + 1:]))
        else:
            status, bound = solve(problem, share)
        if status == "infeasible":
            return math.inf
        if status == "cut off":  # nothing at or below its cutoff: P(z) >= the cutoff (said so, whatever the float noise)
            return max(cutoff, total + bound + sum(relaxed[index + 1:]))
        if bound is None:
            return None
        total += max(bound, relaxed[index])
        if (reached := total + sum(relaxed[index + 1:])) >= cutoff:
            return reached  # the cutoff is reached: the rest need not be solved whole
    return total


def _relaxation(problem: pulp.LpProblem, solve_lp) -> float:
    """The optimum of a program's LP relaxation (every variable continuous; categories restored): a lower bound on
    the program's; math.inf where it is infeasible, -inf where the LP ends otherwise (no bound)."""
    integers = [var for var in problem.variables() if var.cat == pulp.LpInteger]
    for var in integers:
        var.cat = pulp.LpContinuous
    try:
        status = solve_lp(problem)
    finally:
        for var in integers:
            var.cat = pulp.LpInteger
    if status == "optimal":
        return pulp.value(problem.objective) or 0.0
    return math.inf if problem.status == pulp.LpStatusInfeasible else -math.inf


def _price_linking_rows(model: FleetModel, part: Partition, point: dict, solve_lp, cost: dict,
                        fixed: list | None = None) -> float:
    """The LP relaxation with Z fixed at the point; each linking row's dual pi_r (0 where the LP has no optimum)
    taken off the costs (cost[var] -= pi_r a_{r,v}); returns sum_r pi_r b_r. `fixed`: Z's variables, where known."""
    variables = fixed if fixed is not None else [var for var in model.problem.variables() if var.name in point]
    saved = [(var.lowBound, var.upBound) for var in variables]
    try:
        for var in variables:
            var.lowBound = var.upBound = point[var.name]
        if solve_lp(model.problem) != "optimal":
            return 0.0
    finally:
        for var, (low, up) in zip(variables, saved):
            var.lowBound, var.upBound = low, up
    constant = 0.0
    for constraint in part.linking:
        pi = clipped_dual(constraint)
        if pi == 0.0:
            continue
        constant += pi * -constraint.constant
        for var, coefficient in constraint.items():
            cost[var] = cost.get(var, 0.0) - pi * coefficient
    return constant


def year_round_bound(model: FleetModel, part: Partition, solve, seconds_left, cutoff: float = math.inf,
                     root: tuple[float, dict] | None = None, solve_lp=None, root_is_plan: bool = False,
                     workers: int = 1, plan_floors: tuple[dict, list | float] | None = None) -> YearRoundBound | None:
    """The search of the module docstring, lowest box first, until every box left is at or above `cutoff` or the
    time runs out, then the points left below it closed; None where Z is not all integer or the whole box proves
    nothing. `solve(problem, share, cutoff)` solves a PuLP problem within `share` of the time left and returns
    (status, proven lower bound or None); a box's stage 1 is cut off at `cutoff` (status 'cut off', its bound the
    cutoff: a box with nothing cheaper than the plan in hand needs no optimum, and HiGHS prunes what lies above at
    once); `root`: stage 1's optimum over the whole box and its point, where already solved (the warm start's);
    `solve_lp`: points price the rows tying periods by their LP duals (`point_bound`) rather than drop them;
    `root_is_plan`: root's point is that of the plan in hand, whose P(z) cannot reach the cutoff (that plan is one of
    the point's), so it is bounded by its floors alone (`point_floors`) and closed with them; `workers`: processes
    that bound a split box's point and children side by side (forked; 1: all here), one of them flooring and closing
    the plan in hand's point meanwhile, from its first split, rather than after the boxes; the next split waits for
    the children alone, a point's P(z) being needed only once every box is settled. The boxes and points are
    the same whatever their number but for where the time runs out (each bound is a pure function of its box or
    point); the plan's point closed first can find a plan that spares another point's closing, or make one more.
    `plan_floors`: (point, `floor_bounds` at it), made while the start was (`EarlyFloors`), used where the point is
    the plan in hand's."""
    started = time.perf_counter()
    variables = branching_variables(model, part)
    if variables is None or not part.blocks:
        return None
    whole = {var.name: (var.lowBound, var.upBound) for var in variables}
    boxes = points = 0
    if root is None:
        status, bound, point = box_bound(model, part, variables, whole, lambda p: solve(p, BOX_SHARE))
        boxes += 1
        if bound is None:
            return None
        root = (bound, point)
    point = None if root[1] is None else {var.name: root[1][var.name] for var in variables}  # Z alone is fixed
    plan_point = point if root_is_plan and math.isfinite(cutoff) else None
    box_cutoff = cutoff if math.isfinite(cutoff) else None  # no plan in hand: every box solved to its optimum
    order = itertools.count()
    heap = [(root[0], next(order), whole, point)]
    pieces: list[float] = []  # bounds of the pieces no longer split
    to_close: list[tuple[int, dict, list | None]] = []  # (index in pieces, point, its floors) below the cutoff
    settling: list[tuple] = []  # (index in pieces, point, its floors, its P(z), the call that waits for it) per split
    closed, plan, closing = 0, None, None  # closing: (index in pieces, its result) of the plan's point on a worker
    with _Tasks((model, part, variables, solve, seconds_left, solve_lp, cutoff, box_cutoff), workers) as tasks:
        while heap and heap[0][0] < cutoff and seconds_left() > 0:
            bound, _, box, point = heapq.heappop(heap)
            if point is None:  # nothing to split it at
                pieces.append(bound)
                continue
            children, fixed = [], {}
            for var in variables:
                low, up = box[var.name]
                z = point[var.name]
                for child_range in ((low, z - 1), (z + 1, up)):
                    if None not in child_range and child_range[0] > child_range[1]:
                        continue
                    children.append(box | fixed | {var.name: child_range})
                fixed[var.name] = (z, z)
            # the children's stage 1 and the point's bound, on the workers where there are several (the same results as
            # one after the other: each is a pure function of its box or point, within the time left). Only the boxes
            # decide the next split, so the search waits for them alone; the point's P(z) is taken when every box is
            # settled (one process: here, before the boxes, in the order it always had)
            floors, value = None, None
            known = (plan_floors[1],) if plan_floors is not None and plan_floors[0] == point else ()  # its floor bounds
            if point == plan_point and tasks.pool is not None:  # its floors and closing on a worker, from now on
                closing = (len(pieces), tasks.start([("close", point, *known)]))
            # the point first: the longer task, it runs beside the boxes, and the search's last one is then a short box
            bounding = None if point == plan_point else tasks.start([("point", point)])
            pending = tasks.start([("box", child) for child in children])
            if point == plan_point and tasks.pool is None:
                floors, value = point_floors(model, part, point, solve, seconds_left, *known)
            if bounding is not None and tasks.pool is None:
                value, bounding = bounding()[0], None
            results = pending()
            points += 1
            pieces.append(bound)
            settling.append((len(pieces) - 1, point, floors, value, bounding))
            for child, found in zip(children, results):
                if found is None:  # no time left to solve it
                    heapq.heappush(heap, (bound, next(order), child, None))
                    continue
                status, child_bound, child_point = found
                boxes += 1
                if status == "infeasible":
                    continue
                heapq.heappush(heap, (bound if child_bound is None else max(bound, child_bound), next(order), child, child_point))
        for index, point, floors, value, bounding in settling:  # each point's bound: P(z) where it was solved
            if bounding is not None:
                value = bounding()[0]
            pieces[index] = pieces[index] if value is None else max(pieces[index], value)
            if cheaper(pieces[index], cutoff) and (value is not None or floors is not None):
                to_close.append((index, point, floors))
        if closing is not None:  # the plan in hand's point, floored and closed on a worker meanwhile (as below)
            floored, proven_at, cheaper_plan, tried = closing[1]()[0]
            closed += tried
            if cheaper_plan is not None and cheaper(cheaper_plan[0], cutoff):
                plan, cutoff = cheaper_plan, cheaper_plan[0]
            pieces[closing[0]] = max([pieces[closing[0]]] + [b for b in (floored, proven_at) if b is not None])
    if not any(entry[0] < cutoff for entry in heap):  # every box settled: close the points left below the cutoff
        for index, point, floors in sorted(to_close, key=lambda entry: pieces[entry[0]]):
            if not cheaper(pieces[index], cutoff) or seconds_left() <= 0:
                continue
            if floors is None:
                floors, value = point_floors(model, part, point, solve, seconds_left)
                if value is not None:
                    pieces[index] = max(pieces[index], value)
                if not cheaper(pieces[index], cutoff):
                    continue
            value, found = close_point(model, part, point, floors, solve, seconds_left, box_cutoff if plan is None else plan[0])
            closed += 1
            if found is not None and cheaper(found[0], cutoff):
                plan, cutoff = found, found[0]
            if value is not None:
                pieces[index] = max(pieces[index], value)
    bounds = pieces + [entry[0] for entry in heap]
    if not bounds:
        return None
    open_pieces = sum(1 for entry in heap if entry[0] < cutoff) + sum(1 for index, *_ in to_close if cheaper(pieces[index], cutoff))
    open_pieces += closing is not None and cheaper(pieces[closing[0]], cutoff)
    return YearRoundBound(min(bounds), boxes, points, open_pieces, time.perf_counter() - started, closed, plan)


def point_floors(model: FleetModel, part: Partition, point: dict, solve, seconds_left,
                 bounds: list | None = None) -> tuple[list, float | None]:
    """The floor rows of a point (module docstring, "closing a point"), one per program with a proven bound, and
    the lower bound they make on every plan with Z = point: c0 + c_Z z + the floors (the rows tying periods dropped;
    math.inf where a program has no plan; None where a program proves nothing or the time runs out). `bounds`: the
    programs' bounds where `floor_bounds` already has them (a worker's, while the start was being made)."""
    programs, total, outside = _floor_programs(model, part, point)
    if bounds is None:
        bounds = floor_bounds(model, part, point, solve, seconds_left)
    if bounds == math.inf:
        return [], math.inf
    floors = []
    for (_, _, terms), bound in zip(programs, bounds):
        if bound is None or not math.isfinite(bound):
            total = None
            continue
        floors.append(pulp.LpAffineExpression(terms) >= bound)
        if total is not None:
            total += bound
    if len(bounds) < len(programs) or outside:  # the time ran out; a cost outside the floors could be negative
        total = None
    return floors, total


def floor_bounds(model: FleetModel, part: Partition, point: dict, solve, seconds_left) -> list | float:
    """The proven bound of each of a point's floor programs (`_floor_programs`, in their order; None where one proves
    nothing), cut short where the time runs out; math.inf where one has no plan. Numbers alone: a forked worker hands
    them back."""
    programs, _, _ = _floor_programs(model, part, point)
    count = 1 + len(part.blocks)
    bounds = []
    for index, key, terms in programs:
        if seconds_left() <= 0:
            break
        status, bound = solve(period_problem(f"floor_{index}", part.rows[key], terms, point), FLOOR_SHARE / (count - index))
        if status == "infeasible":
            return math.inf
        bounds.append(bound)
    return bounds


def _floor_programs(model: FleetModel, part: Partition, point: dict) -> tuple[list, float, bool]:
    """A point's floor programs: (index, key, cost terms) of each program (the year-round rows', then each
    period's) with costed variables of its own; c0 + c_Z z; and whether a cost no program covers could be negative."""
    variables = {var.name: var for var in model.problem.variables()}
    cost = {var.name: coefficient for var, coefficient in model.problem.objective.items()}
    programs = []
    covered = set(point)
    for index, key in enumerate([YEAR_ROUND, *part.blocks]):
        own = sorted({var.name for row in part.rows[key] for var in row
                      if var.name not in point and part.block_of.get(var.name) == key and cost.get(var.name)})  # fmt: skip
        covered.update(own)
        if own:
            programs.append((index, key, [(variables[name], cost[name]) for name in own]))
    constant = model.problem.objective.constant + sum(cost.get(name, 0.0) * value for name, value in point.items())
    return programs, constant, any(coefficient < 0 for name, coefficient in cost.items() if name not in covered)


def close_point(model: FleetModel, part: Partition, point: dict, floors: list, solve, seconds_left,
                cutoff: float | None) -> tuple[float | None, tuple[float, dict] | None]:
    """A point solved whole with its floor rows (module docstring, "closing a point"): the proven lower bound on
    every plan with Z = point (math.inf where there is none; the cutoff where nothing is cheaper; None where nothing
    is proven) and (cost, values) of the plan found where it is below `cutoff` (None: none). The model is left as
    it was but for its variables' values."""
    if seconds_left() <= 0:
        return None, None
    variables = {var.name: var for var in model.problem.variables()}
    whole = pulp.LpProblem("point", pulp.LpMinimize)
    whole += model.problem.objective
    for name, row in model.problem.constraints.items():
        whole.addConstraint(row, name)
    for index, row in enumerate(floors):
        whole.addConstraint(row, f"floor_{index}")
    fixed = [variables[name] for name in point]
    saved = [(var.lowBound, var.upBound) for var in fixed]
    try:
        for var in fixed:
            var.lowBound = var.upBound = point[var.name]
        status, bound = solve(whole, 1.0, cutoff=cutoff)
        found = None
        if status in ("optimal", "feasible"):
            value = pulp.value(whole.objective) or 0.0
            if cutoff is None or value < cutoff:
                found = (value, {var.name: var.varValue for var in model.problem.variables()})
    finally:
        for var, (low, up) in zip(fixed, saved):
            var.lowBound, var.upBound = low, up
    if status == "infeasible":
        return math.inf, None
    return bound, found


class EarlyFloors:
    """The plan in hand's floor bounds (`floor_bounds`), made on a forked worker while the start's periods are solved:
    the start's year-round point is stage 1's, known before its period stage, which runs on one core and leaves the
    other idle (at 20 x 24 the floors and that stage take about 6 s each). `begin(fixed)`, decompose.warm_start's
    call once stage 1 has fixed the year-round values, forks the worker; `result()` waits for (point, bounds), None
    where none was begun or the worker failed, and `close()` ends the worker (both any number of times)."""

    def __init__(self, model: FleetModel, part: Partition, solve, seconds_left):
        self.arguments = (model, part, solve, seconds_left)
        self.pool, self.future, self.point = None, None, None

    def begin(self, fixed: dict[str, float]) -> None:
        variables = branching_variables(*self.arguments[:2])
        if variables is None or "fork" not in multiprocessing.get_all_start_methods():
            return
        global _EARLY
        self.point = {var.name: round(fixed[var.name]) for var in variables}
        _EARLY = (*self.arguments, self.point)
        _quiet_solver_threads()
        from concurrent.futures import ProcessPoolExecutor

        self.pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"))
        self.future = self.pool.submit(_early_floor_bounds)

    def result(self) -> tuple[dict, list | float] | None:
        from concurrent.futures.process import BrokenProcessPool

        if self.future is None:
            return None
        try:
            return self.point, self.future.result()
        except BrokenProcessPool:  # a worker killed (memory): the search floors the point itself
            return None
        finally:
            self.close()

    def close(self) -> None:
        global _EARLY
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool, self.future, _EARLY = None, None, None


def _early_floor_bounds() -> list | float:
    model, part, solve, seconds_left, point = _EARLY
    return floor_bounds(model, part, point, solve, seconds_left)


class _Tasks:
    """The bounds of one split (module docstring, "search"): each child box's stage 1 ("box", its box) and the
    point's P(z) ("point", z), and on workers the plan in hand's point floored and closed ("close", z), solved here
    one after the other, or on `workers` forked processes that inherit the
    search's arguments (`_FORKED`; nothing but the tasks and their small results is pickled). `start(tasks)` hands
    them out and returns a call that waits for their results, in the tasks' order (a box's: None where no time was
    left to solve it), so the caller can work meanwhile."""

    def __init__(self, arguments: tuple, workers: int):
        self.arguments, self.pool = arguments, None
        if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
            global _FORKED
            _FORKED = arguments
            _quiet_solver_threads()
            from concurrent.futures import ProcessPoolExecutor

            self.pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))

    def __enter__(self) -> _Tasks:
        return self

    def __exit__(self, *exc) -> None:
        global _FORKED
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            _FORKED = None

    def start(self, tasks: list[tuple[str, dict]]):
        if self.pool is None:
            return lambda: [_bound(task, self.arguments) for task in tasks]
        futures = [self.pool.submit(_forked_bound, task) for task in tasks]

        def results() -> list:
            from concurrent.futures.process import BrokenProcessPool

            out = []
            for task, future in zip(tasks, futures):
                try:
                    out.append(future.result())
                except BrokenProcessPool:  # a worker killed (memory): the rest here
                    out.append(_bound(task, self.arguments))
            return out

        return results


def _forked_bound(task: tuple[str, dict]):
    return _bound(task, _FORKED)


def _bound(task: tuple[str, dict], arguments: tuple):
    """One task of `_Tasks`: a box's (status, bound, point) by stage 1 (None: no time left), or a point's P(z)."""
    model, part, variables, solve, seconds_left, solve_lp, cutoff, box_cutoff = arguments
    kind, values, *known = task  # known: a closing's floor bounds, where made before
    if kind == "point":
        if seconds_left() <= 0:
            return None
        return point_bound(model, part, values, solve, seconds_left, solve_lp, cutoff, variables)
    if kind == "close":  # the plan in hand's point: its floors' bound, its closing's, a cheaper plan, whether closed
        floors, value = point_floors(model, part, values, solve, seconds_left, *known)
        if (value is not None and not cheaper(value, cutoff)) or seconds_left() <= 0:
            return value, None, None, False
        return (value, *close_point(model, part, values, floors, solve, seconds_left, box_cutoff), True)
    if seconds_left() <= 0:
        return None
    return box_bound(model, part, variables, values, lambda problem: solve(problem, BOX_SHARE, cutoff=box_cutoff))


def _quiet_solver_threads() -> None:
    """HiGHS' worker threads stopped before a fork (a forked child would inherit a scheduler whose threads it lacks)."""
    with contextlib.suppress(ImportError):
        import highspy

        highspy.Highs.resetGlobalScheduler(True)
