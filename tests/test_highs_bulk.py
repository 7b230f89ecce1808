"""The bulk hand-over to HiGHS (planner/optimize/highs.py) gives HiGHS the model PuLP's own interface gives it, and
reads back what PuLP's reads: the same columns, rows and integer columns, and after a solve the same values,
reduced costs, slacks, row duals and status, on random programs of every row sense, both objective senses, free and
bounded variables, empty rows and zero coefficients; infeasible, unbounded and stopped programs read as PuLP's do."""

from __future__ import annotations

import numpy as np
import pulp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.optimize.highs import BulkHiGHS
from planner.optimize.solve import quiet_stdout


def _program(seed: int, integer: bool, maximize: bool) -> pulp.LpProblem:
    rng = np.random.default_rng(seed)
    problem = pulp.LpProblem("random", pulp.LpMaximize if maximize else pulp.LpMinimize)
    count = int(rng.integers(2, 9))
    variables = []
    for index in range(count):
        low = [None, 0, float(rng.integers(-3, 1))][int(rng.integers(0, 3))]
        up = [None, float(rng.integers(2, 9))][int(rng.integers(0, 2))]
        if maximize and up is None:
            up = 10.0  # keep a maximum bounded
        if not maximize and low is None:
            low = -10.0  # and a minimum
        cat = pulp.LpInteger if integer and rng.random() < 0.6 else pulp.LpContinuous
        variables.append(pulp.LpVariable(f"v{index}", low, up, cat))
    problem += pulp.lpSum(float(rng.normal()) * var for var in variables) + float(rng.normal())
    for row in range(int(rng.integers(1, 7))):
        chosen = [var for var in variables if rng.random() < 0.6]
        expression = pulp.lpSum(float(np.round(rng.normal(), 2)) * var for var in chosen) + 0 * variables[0]
        bound = float(np.round(rng.uniform(-2, 6), 2))
        sense = int(rng.integers(0, 3))
        problem += (expression <= bound + 4) if sense == 0 else (expression >= bound - 4) if sense == 1 else (expression == bound / 4)
    problem += pulp.LpConstraint(pulp.LpAffineExpression(), pulp.LpConstraintLE, "empty_row", 1.0)
    return problem


def _solve(problem: pulp.LpProblem, solver: pulp.LpSolver) -> dict:
    with quiet_stdout():
        problem.solve(solver)
    lp = problem.solverModel.getLp()
    found = {
        "status": problem.status, "solution": problem.sol_status,
        "model": (list(lp.col_cost_), list(lp.col_lower_), list(lp.col_upper_), list(lp.row_lower_), list(lp.row_upper_),
                  lp.a_matrix_.format_, list(lp.a_matrix_.start_), list(lp.a_matrix_.index_), list(lp.a_matrix_.value_),
                  list(lp.integrality_)),
        "values": {v.name: (v.varValue, v.dj) for v in problem.variables()},
        "rows": {name: (c.slack, c.pi) for name, c in problem.constraints.items()},
    }  # fmt: skip
    return found


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.booleans(), st.booleans(), st.booleans())
def test_the_bulk_hand_over_builds_and_reads_what_pulps_own_does(seed, integer, maximize, mip):
    ours = _solve(_program(seed, integer, maximize), BulkHiGHS(msg=False, mip=mip, threads=1))
    theirs = _solve(_program(seed, integer, maximize), pulp.HiGHS(msg=False, mip=mip, threads=1))
    assert ours == theirs


def test_infeasible_and_unbounded_programs_read_as_pulps_do():
    def infeasible():
        problem = pulp.LpProblem("infeasible", pulp.LpMinimize)
        x = pulp.LpVariable("x", 0, 1, pulp.LpInteger)
        problem += x
        problem += x >= 2
        return problem

    def unbounded():
        problem = pulp.LpProblem("unbounded", pulp.LpMinimize)
        x = pulp.LpVariable("x")
        problem += x
        problem += x <= 3
        return problem

    for make in (infeasible, unbounded):
        ours, theirs = make(), make()
        with quiet_stdout():
            ours.solve(BulkHiGHS(msg=False, threads=1))
            theirs.solve(pulp.HiGHS(msg=False, threads=1))
        assert (ours.status, ours.sol_status) == (theirs.status, theirs.sol_status)
        assert ours.status != pulp.LpStatusOptimal


def test_a_program_stopped_by_a_limit_with_a_plan_reads_as_a_plan_not_proven():
    """A 4-row knapsack stopped by HiGHS' node limit (deterministic, unlike a time limit) ends with status
    kSolutionLimit, which PuLP's own reader has no entry for (a KeyError): read as a time-limit stop, a plan found
    and not proven, its values those of HiGHS' plan."""
    rng = np.random.default_rng(0)
    problem = pulp.LpProblem("knapsack", pulp.LpMaximize)
    items = [pulp.LpVariable(f"x{i}", 0, 1, pulp.LpInteger) for i in range(40)]
    for _ in range(4):
        weights = rng.integers(100, 1000, len(items))
        problem += pulp.lpSum(float(w) * x for w, x in zip(weights, items)) <= float(weights.sum() // 2)
    problem += pulp.lpSum(float(rng.integers(100, 1000)) * x for x in items)
    with quiet_stdout():
        problem.solve(BulkHiGHS(msg=False, threads=1, mip_max_nodes=1, presolve="off"))
    assert problem.solverModel.getModelStatus().name == "kSolutionLimit"
    assert (problem.status, problem.sol_status) == (pulp.LpStatusOptimal, pulp.LpSolutionIntegerFeasible)
    assert pulp.value(problem.objective) == pytest.approx(-problem.solverModel.getObjectiveValue())
    assert all(row.valid(1e-9) for row in problem.constraints.values())


def _changes():
    """Ways a program solved once changes before its next solve: (name, change(problem, new variable))."""
    def row_added(problem, new):
        problem += pulp.lpSum(problem.variables()[:2]) + new <= 9, "added"

    def row_changed_in_place(problem, new):  # PuLP registers nothing: the kept columns lack `new`
        next(iter(problem.constraints.values())).addInPlace(1.5 * new)

    def objective_replaced(problem, new):  # nor here
        problem.setObjective(problem.objective + 0.5 * new)

    def bounds_only(problem, new):  # the kept columns hold: only a bound moved
        problem.variables()[0].upBound = 1.0

    return [row_added, row_changed_in_place, objective_replaced, bounds_only]


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10**6), st.booleans(), st.booleans())
def test_a_program_solved_again_after_a_change_is_handed_over_as_pulps_own(seed, integer, maximize):
    """The columns kept on a problem between solves (highs._columns) never hand over a stale model: after each change
    a program solved once can meet before its next solve, the bulk hand-over builds and reads what PuLP's does."""
    for change in _changes():
        found = []
        for solver in (BulkHiGHS(msg=False, threads=1), pulp.HiGHS(msg=False, threads=1)):
            problem = _program(seed, integer, maximize)
            _solve(problem, solver)
            change(problem, pulp.LpVariable("new", 0, 4))
            found.append(_solve(problem, solver))
        assert found[0] == found[1], change.__name__
