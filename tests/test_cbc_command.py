"""The command line CBC runs with: its serial search, no `-threads` (benchmarks/cbc_stalls.py: with `-threads 1`
the CBC PuLP ships now and then waits out a 10 s timed wait between its two threads: 20 of 300 solves of a
5-candidate program), and the same solution as with it."""

from __future__ import annotations

import subprocess

import pulp

from planner.optimize import solve


def _small_program() -> pulp.LpProblem:
    problem = pulp.LpProblem("fleet", pulp.LpMinimize)
    nodes = {name: pulp.LpVariable(f"N_{name}", lowBound=0, cat="Integer") for name in ("a", "b", "c")}
    problem += 7 * nodes["a"] + 5 * nodes["b"] + 3 * nodes["c"]
    problem += 8 * nodes["a"] + 5 * nodes["b"] + 2 * nodes["c"] >= 23
    problem += nodes["c"] <= 3
    return problem


def test_cbc_runs_without_threads_and_solves_to_the_same_optimum(monkeypatch):
    commands = []
    popen = subprocess.Popen

    def recorded(args, *rest, **kwargs):
        commands.append(list(args))
        return popen(args, *rest, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", recorded)
    problem = _small_program()
    status, bound = solve._solve_cbc(problem, 30.0)
    assert len(commands) == 1 and commands[0][0].endswith("cbc"), commands
    assert "-threads" not in commands[0] and "-sec" in commands[0], commands[0]
    assert status == "optimal" and bound is None
    ours = {v.name: v.varValue for v in problem.variables()}
    threaded = _small_program()
    threaded.solve(pulp.PULP_CBC_CMD(msg=False, timeLimit=30, threads=1, gapRel=0.0))
    assert ours == {v.name: v.varValue for v in threaded.variables()}
    best = min(7 * a + 5 * b + 3 * c for a in range(4) for b in range(6) for c in range(4) if 8 * a + 5 * b + 2 * c >= 23)
    assert pulp.value(problem.objective) == best  # every count that could be cheaper, tried
