"""CBC's stalls: how often one solve of a small fleet program takes 10 s instead of a hundredth of one, with CBC's
`-threads 1` (what the planner passed until 2026-12-05) and without it (its serial search, what it passes now).

The CBC 2.10.3 that PuLP ships, given `-threads 1`, starts one search thread; now and then the hand-back between the
two threads misses and both sleep until a 10 s timed wait runs out (both threads in a futex wait, 0.01 CPU-s used).
The program solved is the first one of `plan SCENARIO` (default scenarios/moe-engines.yaml, 5 candidates), written
as MPS by PuLP and solved by the CBC binary PuLP runs, --runs times each way, each run cut at --stall-s; the
solutions of the two ways are compared once.
Run:  python benchmarks/cbc_stalls.py [--scenario scenarios/moe-engines.yaml] [--runs 300] [--stall-s 1]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

import pulp

from planner.candidates import enumerate_candidates
from planner.catalog import load_catalog
from planner.optimize import build_fleet_model
from planner.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent


def first_program(scenario_path: str) -> pulp.LpProblem:
    catalog = load_catalog()
    scenario = load_scenario(ROOT / scenario_path, catalog)
    return build_fleet_model(scenario, enumerate_candidates(scenario, catalog), catalog).problem


def stalls(cbc: str, mps: Path, options: list[str], runs: int, stall_s: float) -> tuple[int, float]:
    """Runs of `cbc mps options` cut at stall_s, and the median wall seconds of the others."""
    stalled, walls = 0, []
    for _ in range(runs):
        started = time.perf_counter()
        try:
            subprocess.run([cbc, str(mps), *options, "-solve"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=stall_s, check=False)  # fmt: skip
            walls.append(time.perf_counter() - started)
        except subprocess.TimeoutExpired:
            stalled += 1
    walls.sort()
    return stalled, walls[len(walls) // 2] if walls else float("nan")


def same_solution(problem: pulp.LpProblem) -> bool:
    """The program solved through PuLP with `-threads 1` and without: the same values of every variable."""
    found = []
    for threads in (1, None):
        problem.solve(pulp.PULP_CBC_CMD(msg=False, timeLimit=60, threads=threads, gapRel=0.0))
        found.append((problem.status, {v.name: v.varValue for v in problem.variables()}))
    return found[0] == found[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="scenarios/moe-engines.yaml")
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--stall-s", type=float, default=1.0)
    args = parser.parse_args()
    problem = first_program(args.scenario)
    cbc = pulp.PULP_CBC_CMD().path
    with tempfile.TemporaryDirectory() as tmp:
        mps = Path(tmp) / "fleet.mps"
        problem.writeMPS(str(mps))
        print(f"{args.scenario}: {len(problem.variables())} variables, {len(problem.constraints)} constraints; "
              f"{args.runs} runs each way, a run past {args.stall_s:g} s counted as stalled")  # fmt: skip
        for label, options in (("-threads 1", ["-sec", "60", "-threads", "1", "-ratio", "0"]),
                               ("no -threads (the planner's)", ["-sec", "60", "-ratio", "0"])):  # fmt: skip
            stalled, median = stalls(cbc, mps, options, args.runs, args.stall_s)
            print(f"  {label:30} stalled {stalled:4d} of {args.runs}   median of the others {median * 1000:.1f} ms")
    print(f"the same solution both ways: {same_solution(problem)}")


if __name__ == "__main__":
    main()
