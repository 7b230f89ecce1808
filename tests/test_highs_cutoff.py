"""A program handed to HiGHS with a cutoff (planner/optimize/solve.py `_highs_proven`, as the year-round search solves
its boxes, points and closings): the bound it returns is never above the program's optimum, and it reads 'cut off'
exactly where nothing costs less than the cutoff. HiGHS itself, cut off below the optimum, may end 'optimal' with a
plan above the cutoff and a dual bound at that plan's cost, above the optimum: read as such, a box or a point would be
bounded above what it holds."""

from __future__ import annotations

import numpy as np
import pulp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.optimize import solve

# around the optimum, where HiGHS' pruning at its objective bound decides the end: below it by up to 5%, above by 1%
FRACTIONS = (0.95, 0.99, 0.999, 0.9999, 1.0001, 1.001, 1.01)


def _covering_program(seed: int) -> pulp.LpProblem:
    """A random covering program (min cost, rows of capacity >= demand), mostly integer, always feasible."""
    rng = np.random.default_rng(seed)
    problem = pulp.LpProblem("cover", pulp.LpMinimize)
    variables = [pulp.LpVariable(f"x{i}", 0, [3, 20, None][int(rng.integers(0, 3))],
                                 pulp.LpInteger if rng.random() < 0.8 else pulp.LpContinuous)
                 for i in range(int(rng.integers(5, 25)))]  # fmt: skip
    variables[0].upBound = None  # in every row, unbounded: every row can be covered
    problem += pulp.lpSum(float(rng.uniform(1, 10)) * var for var in variables)
    for _ in range(int(rng.integers(3, 12))):
        row = [float(rng.uniform(0, 5)) * var for var in variables if rng.random() < 0.6]
        problem += pulp.lpSum(row + [5.0 * variables[0]]) >= float(rng.uniform(20, 150))
    return problem


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_bound_found_under_a_cutoff_is_never_above_the_optimum(seed):
    problem = _covering_program(seed)
    status, optimum = solve._highs_proven(problem, 30.0)
    assert status == "optimal"
    noise = 1e-7 * max(1.0, abs(optimum))
    for fraction in FRACTIONS:
        cutoff = optimum * fraction
        status, bound = solve._highs_proven(problem, 30.0, cutoff)
        assert bound is not None and bound <= optimum + noise, (fraction, status, bound, optimum)
        if cutoff < optimum - noise:  # nothing below the cutoff
            assert (status, bound) == ("cut off", cutoff)
        elif cutoff > optimum + noise:  # the optimum itself is below it
            assert status == "optimal" and bound == pytest.approx(optimum, rel=1e-7)
