"""Solve an MPS model with OR-Tools (SCIP) in a process of its own.

OR-Tools bundles its own HiGHS, whose symbols clash with highspy's when both load into one process (PuLP loads
highspy), so `planner.optimize` runs this module as a child process:

    python -m planner.ortools_worker MODEL.mps TIME_LIMIT_S RESULT.json

RESULT.json: {"status": optimal|feasible|infeasible|no-solution, "objective": float|null, "bound": float|null,
"values": {variable name: value}}.
"""

from __future__ import annotations

import json
import sys


def solve(mps_path: str, time_limit_s: float) -> dict:
    from ortools.linear_solver.python import model_builder

    model = model_builder.Model()
    model.import_from_mps_file(mps_path)
    solver = model_builder.Solver("scip")
    solver.set_time_limit_in_seconds(time_limit_s)
    result = solver.solve(model)
    statuses = model_builder.SolveStatus
    status = {
        statuses.OPTIMAL: "optimal",
        statuses.FEASIBLE: "feasible",
        statuses.INFEASIBLE: "infeasible",
        statuses.UNBOUNDED: "infeasible",
    }.get(result, "no-solution")
    document = {"status": status, "objective": None, "bound": None, "values": {}}
    if status in ("optimal", "feasible"):
        variables = model.get_variables()
        document["values"] = {v.name: float(x) for v, x in zip(variables, solver.values(variables))}
        document["objective"] = float(solver.objective_value)
        document["bound"] = float(solver.best_objective_bound)
    return document


def main(argv: list[str]) -> int:
    mps_path, time_limit_s, out_path = argv[0], float(argv[1]), argv[2]
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(solve(mps_path, time_limit_s), handle)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
