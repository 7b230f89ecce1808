"""A PuLP problem handed to HiGHS in bulk. PuLP's own HiGHS interface adds every column and row by a call of its own
and walks the problem's constraints for its variables three times a solve, which at 20 x 24 (57,593 variables, 7,139
rows) costs about a second a solve where HiGHS takes one for the LP, and the large-fleet strategy
(optimize/decompose.py, optimize/yearround.py) solves programs of that size some fifty times. Here the variables are
collected once, the columns, the rows (one sparse matrix, row-wise) and the integer columns go in as arrays in PuLP's
own order, so HiGHS gets the same model, and the solution is read back as PuLP's interface reads it (values, reduced
costs, slacks, row duals, status); tests/test_highs_bulk.py compares the two."""

from __future__ import annotations

import math

import numpy as np
import pulp
from pulp import constants

# HiGHS' model status -> PuLP's (status, solution status), as pulp.HiGHS reads it; the stops PuLP's table lacks (a
# solution or memory limit, HiGHS' own interrupt) read as the time limit does
_SOLVED = (constants.LpStatusOptimal, constants.LpSolutionOptimal)
_STOPPED = (constants.LpStatusOptimal, constants.LpSolutionIntegerFeasible)
_NONE = (constants.LpStatusNotSolved, constants.LpSolutionNoSolutionFound)
_INFEASIBLE = (constants.LpStatusInfeasible, constants.LpSolutionInfeasible)
_STATUS = {
    "kOptimal": _SOLVED, "kInfeasible": _INFEASIBLE, "kUnboundedOrInfeasible": _INFEASIBLE,
    "kUnbounded": (constants.LpStatusUnbounded, constants.LpSolutionUnbounded),
    "kObjectiveBound": _STOPPED, "kObjectiveTarget": _STOPPED, "kInterrupt": _STOPPED, "kTimeLimit": _STOPPED,
    "kIterationLimit": _STOPPED, "kSolutionLimit": _STOPPED, "kMemoryLimit": _STOPPED, "kHighsInterrupt": _STOPPED,
}  # fmt: skip
_LIMITS = ("kTimeLimit", "kIterationLimit", "kSolutionLimit", "kMemoryLimit", "kHighsInterrupt")  # no plan: not solved


class _StaleColumns(Exception):
    """The kept columns of a problem lack a variable its objective or rows name."""


def _columns(lp: pulp.LpProblem) -> list:
    """The problem's variables in PuLP's order (`lp.variables()`), kept on the problem between solves: PuLP collects
    them by walking every row, 0.1 s a solve at 20 x 24, where the large-fleet search solves the same program some
    fifty times with other bounds. The kept list is used while PuLP has registered no variable since (it registers a
    row's variables as the row is added) and is checked against every variable the objective and rows name as they
    are handed over (`BulkHiGHS.buildSolverModel`); where one is missing it is collected again."""
    kept = getattr(lp, "_bulk_columns", None)
    if kept is not None and len(getattr(lp, "_variables", ())) == len(kept):
        return kept
    lp._bulk_columns = list(lp.variables())
    return lp._bulk_columns


class BulkHiGHS(pulp.HiGHS):
    """pulp.HiGHS with the model handed over in arrays (module docstring); every option as pulp.HiGHS'. `columns`:
    the problem's variables in HiGHS' column order, once built (a subclass's callSolver may read it)."""

    columns: list | None = None

    def actualSolve(self, lp: pulp.LpProblem, callback=None):
        self.createAndConfigureSolver(lp)
        self.columns = _columns(lp)
        try:
            self.buildSolverModel(lp)
        except _StaleColumns:  # a variable the kept columns lack: PuLP's own collection, and the model built again
            lp._bulk_columns = None
            self.createAndConfigureSolver(lp)
            self.columns = _columns(lp)
            self.buildSolverModel(lp)
        self.callSolver(lp)
        status, solution_status = self.findSolutionValues(lp)
        for var in self.columns:
            var.modified = False
        for constraint in lp._constraints.values():
            constraint.modifier = False
        lp.assignStatus(status, solution_status)
        return status

    def buildSolverModel(self, lp: pulp.LpProblem) -> None:
        import highspy

        inf = highspy.kHighsInf
        highs, variables = lp.solverModel, self.columns
        for index, var in enumerate(variables):
            var.index = index
        count = len(variables)
        sign = -1.0 if lp.sense == constants.LpMaximize else 1.0
        cost = np.zeros(count)
        try:  # every variable named is one of the columns (kept ones are checked here, before HiGHS gets anything)
            for var, coefficient in lp.objective.items():
                if variables[var.index] is not var:
                    raise _StaleColumns
                cost[var.index] = sign * coefficient
            starts, columns, values, row_lower, row_upper = [], [], [], [], []
            for index, constraint in enumerate(lp._constraints.values()):
                constraint.index = index
                starts.append(len(columns))
                for var, coefficient in constraint.items():
                    if variables[var.index] is not var:
                        raise _StaleColumns
                    if coefficient != 0:
                        columns.append(var.index)
                        values.append(coefficient)
                low, up = constraint.getLb(), constraint.getUb()
                row_lower.append(-inf if low is None else low)
                row_upper.append(inf if up is None else up)
        except (AttributeError, IndexError) as unknown:  # a variable never given an index, or another problem's
            raise _StaleColumns from unknown
        if count:
            highs.addVars(count, np.array([-inf if v.lowBound is None else v.lowBound for v in variables], dtype=float),
                          np.array([inf if v.upBound is None else v.upBound for v in variables], dtype=float))  # fmt: skip
            highs.changeColsCost(count, np.arange(count, dtype=np.int32), cost)
        if row_lower:
            highs.addRows(len(row_lower), np.array(row_lower, dtype=float), np.array(row_upper, dtype=float), len(columns),
                          np.array(starts, dtype=np.int32), np.array(columns, dtype=np.int32), np.array(values, dtype=float))  # fmt: skip
        if self.mip:
            integers = np.array([v.index for v in variables if v.cat == constants.LpInteger], dtype=np.int32)
            if len(integers):
                highs.changeColsIntegrality(len(integers), integers, np.full(len(integers), highspy.HighsVarType.kInteger))

    def findSolutionValues(self, lp: pulp.LpProblem) -> tuple[int, int]:
        """PuLP's (status, solution status); values, reduced costs, slacks and row duals set as pulp.HiGHS sets them."""
        highs = lp.solverModel
        solution = highs.getSolution()
        for var, value, reduced in zip(self.columns, list(solution.col_value), list(solution.col_dual)):
            var.varValue, var.dj = value, reduced
        for constraint, row, dual in zip(lp._constraints.values(), list(solution.row_value), list(solution.row_dual)):
            slack = constraint.constant + row  # PuLP keeps the constant on the left-hand side
            constraint.slack = -slack if constraint.sense == constants.LpConstraintLE else slack
            constraint.pi = dual
        name = highs.getModelStatus().name
        if name in _LIMITS and highs.getObjectiveValue() == math.inf:
            return _NONE
        return _STATUS.get(name, _NONE)
