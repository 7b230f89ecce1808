"""Solving the fleet program: CBC (default), HiGHS or OR-Tools (SCIP), each to a relative gap of 0, with the
status and best bound read from the solver itself."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pulp

from planner import deadline
from planner.errors import PlannerInputError
from planner.optimize import decompose, periods, yearround
from planner.optimize.highs import BulkHiGHS
from planner.optimize.model import FleetModel
from planner.optimize.noise import cheaper, proven
from planner.workers import worker_count

SOLVERS = ("cbc", "highs", "ortools")


# CBC without `-threads`: its serial search, deterministic (the same inputs give the same plan). `-threads 1` made the
# CBC 2.10.3 that PuLP ships start one search thread whose hand-back sometimes waits out a 10 s timed wait (a
# futex, both threads asleep): 3 and 20 of 300 solves of moe-engines.yaml's 5-candidate program, in two runs, took
# 10 s instead of 0.01 s, and the first solve of `plan scenarios/moe-engines.yaml` 1 run in 5; without it none of
# 300 either run (benchmarks/cbc_stalls.py),
# and the same solutions on every program of the shipped scenarios and the what-if cases
CBC_THREADS = None


@dataclass(frozen=True)
class SolveOutcome:
    status: str  # optimal | feasible | infeasible | stopped (time limit before any plan)
    mip_gap: float | None  # (objective - best bound) / objective, as the solver's bound gives it
    seconds: float
    best_bound: float | None = None
    warm_start_s: float | None = None  # seconds spent on optimize/decompose.py's starting plan (None: none made)
    period_bound: periods.PeriodBound | None = None  # optimize/periods.py's Lagrangian bound (None: none made)
    year_round_bound: yearround.YearRoundBound | None = None  # optimize/yearround.py's bound (None: none made)


# `planner plan` searches the year-round decisions (optimize/yearround.py) of a large program given at least this
# long (the default limit): at 20 x 24 in 60 s HiGHS and CBC end at 4.35% with the search and 5.77% / 9.41% without
# it; in 120 s both at 0.65% (2026-12-03, its boxes cut off at the start's cost); 50 x 24 HiGHS 180 s 0.18% against
# 1.62%. Below it the start alone takes most of the time.
YEAR_ROUND_MIN_SECONDS = 60.0
# the search runs until this share of the solve's time (the solver from the start has the rest): at 20 x 24 neither
# HiGHS nor CBC ever improved the start or its bound in the time after the search, and at 120 s the search needs
# about 80 s after the start's 14 (three quarters left it 2 boxes short: CBC 1.97%)
YEAR_ROUND_SHARE = 0.9


def solve_model(model: FleetModel, solver: str, time_limit_s: float, warm_start: bool = False,
                period_bound: bool = False, year_round_bound: bool = False) -> SolveOutcome:
    """Solve with CBC (default), HiGHS or OR-Tools (SCIP) and read the status from the solver itself. Every
    solver runs to a relative gap of 0: 'optimal' means proven, a time-limit stop with a plan is 'feasible' with
    the gap computed from the solver's best bound, and one without a plan is 'stopped' (never 'infeasible').
    The command's `--time-limit` caps `time_limit_s` to what is left of it (planner.deadline).
    `warm_start`: a large program (optimize/decompose.py) first gets a whole plan from its year-round relaxation and
    one program per period, which CBC and HiGHS start from; the answer is never worse than that plan.
    `period_bound` (with `warm_start`): such a program first gets optimize/periods.py's proven bound (the periods'
    own integer programs, tied by LP duals), within a third of the time; the gap is to the highest proven bound.
    `year_round_bound` (with `warm_start`): after the start, optimize/yearround.py's search over the year-round
    decisions, until YEAR_ROUND_SHARE of the time; the solver is skipped where its bound already meets the start."""
    time_limit_s = deadline.solver_seconds(time_limit_s)
    started = time.perf_counter()
    if solver not in SOLVERS:
        raise PlannerInputError("--solver", "solver", f"unknown solver '{solver}'; allowed: {', '.join(SOLVERS)}")
    start, bound_by_period, bound_by_year = None, None, None
    if warm_start and solver in ("cbc", "highs") and decompose.worth_decomposing(model):
        if period_bound:
            bound_by_period = _period_bound(model, time_limit_s, started)
        # with workers, the start's point is floored on one while the start's periods are solved (yearround.EarlyFloors)
        part = periods.partition(model) if year_round_bound else None
        early = yearround.EarlyFloors(model, part, *_year_round_solve(time_limit_s, started)) \
            if year_round_bound and worker_count() > 1 else None  # fmt: skip
        try:
            start = _warm_start(model, time_limit_s, started, None if early is None else early.begin)
            if start is not None and year_round_bound:
                bound_by_year = _year_round_bound(model, part, start, time_limit_s, started, early and early.result())
        finally:
            if early is not None:
                early.close()
        if bound_by_year is not None and bound_by_year.plan is not None and cheaper(bound_by_year.plan[0], start.objective):
            cost, values = bound_by_year.plan  # a closed point held a cheaper plan: the solver starts from it
            start = dataclasses.replace(start, objective=cost, values=values)
    left = time_limit_s - (time.perf_counter() - started)
    proven_start = bound_by_year is not None and proven(start.objective, bound_by_year.lower_bound)
    if start is not None and (left < 1.0 or proven_start):  # the stages used the budget, or proved their plan
        status, bound = "stopped", None
    elif solver == "cbc":
        status, bound = _solve_cbc(model.problem, left) if start is None else _solve_cbc(model.problem, left, warm_start=True)
    elif solver == "highs":
        status, bound = _solve_highs(model.problem, left) if start is None else _solve_highs(model.problem, left, start.values)
    else:
        status, bound = _solve_ortools(model.problem, time_limit_s)
    if start is not None and status != "optimal":
        objective = pulp.value(model.problem.objective) if status == "feasible" else None
        if objective is None or objective > start.objective + 1e-6 * max(1.0, abs(start.objective)):
            decompose.restore(model, start)  # nothing better than the start: the start
        status = "feasible"
    if status == "feasible" and (start is not None or bound_by_period is not None):
        bounds = [b for b in (bound, start and start.lower_bound, bound_by_period and bound_by_period.lower_bound,
                              bound_by_year and bound_by_year.lower_bound) if b is not None]  # fmt: skip
        bound = max(bounds) if bounds else None
        objective = pulp.value(model.problem.objective) or 0.0
        if bound is not None and proven(objective, bound):
            status = "optimal"  # a decomposition bound meets the plan: proven
    gap = None
    if status == "optimal":
        gap = 0.0
    elif status == "feasible" and bound is not None:
        objective = pulp.value(model.problem.objective) or 0.0
        gap = relative_gap(objective, bound)
    return SolveOutcome(status, gap, time.perf_counter() - started, bound, start.seconds if start is not None else None,
                        bound_by_period, bound_by_year)  # fmt: skip


def _period_bound(model: FleetModel, time_limit_s: float, started: float) -> periods.PeriodBound | None:
    """optimize/periods.py's Lagrangian bound within a third of the solve's budget (its blocks by HiGHS whatever
    the chosen solver, as the warm start's)."""
    budget_end = started + time_limit_s / 3

    def seconds_left() -> float:
        return budget_end - time.perf_counter()

    def solve_block(problem: pulp.LpProblem, share: float = 1.0) -> tuple[float, bool] | None:
        return _highs_lower_bound(problem, max(seconds_left() * share, 0.1))

    return periods.lagrangian_bound(model, periods.partition(model), _highs_lp, solve_block, seconds_left)


def _year_round_solve(time_limit_s: float, started: float):
    """The year-round search's (solve, seconds_left): HiGHS with a proven bound, until YEAR_ROUND_SHARE of the
    solve's budget."""
    budget_end = started + time_limit_s * YEAR_ROUND_SHARE

    def seconds_left() -> float:
        return budget_end - time.perf_counter()

    def solve(problem: pulp.LpProblem, share: float = 1.0, cutoff: float | None = None) -> tuple[str, float | None]:
        return _highs_proven(problem, max(seconds_left() * share, 0.1), cutoff)

    return solve, seconds_left


def _year_round_bound(model: FleetModel, part: periods.Partition, start: decompose.WarmStart, time_limit_s: float,
                      started: float, plan_floors: tuple | None = None) -> yearround.YearRoundBound | None:
    """optimize/yearround.py's bound, until YEAR_ROUND_SHARE of the solve's budget, cut off at the start's cost and
    begun from its stage 1 (the start's year-round decisions), a split's bounds on as many forked workers as
    planner.workers.worker_count (PLANNER_WORKERS); `plan_floors`: the start's point's floor bounds, made early
    (yearround.EarlyFloors). The start's plan is put back afterwards."""
    solve, seconds_left = _year_round_solve(time_limit_s, started)
    root = None
    if start.lower_bound is not None:
        root = (start.lower_bound, {name: round(value) for name, value in start.values.items() if name not in part.block_of})
    try:
        return yearround.year_round_bound(model, part, solve, seconds_left, start.objective, root, _highs_lp,
                                          root_is_plan=root is not None, workers=worker_count(), plan_floors=plan_floors)
    finally:
        decompose.restore(model, start)


def _warm_start(model: FleetModel, time_limit_s: float, started: float,
                after_stage_one=None) -> decompose.WarmStart | None:
    """optimize/decompose.py's plan within half the solve's budget. Its stages are solved by HiGHS whatever the
    chosen solver (a period's program that HiGHS closes in a second can hold CBC a minute: measured on
    benchmarks/solver_scale.py); the chosen solver then starts from the plan they make."""
    budget_end = started + time_limit_s / 2

    def seconds_left() -> float:
        return budget_end - time.perf_counter()

    def solve(problem: pulp.LpProblem, share: float = 1.0) -> tuple[str, float | None]:
        return _solve_highs(problem, max(seconds_left() * share, 0.1))

    return decompose.warm_start(model, solve, seconds_left, after_stage_one)


def relative_gap(objective: float, bound: float) -> float:
    """(objective - bound) / |objective|, unrounded but for float noise (6 significant digits)."""
    gap = max(0.0, objective - bound) / max(abs(objective), 1e-9)
    return float(f"{gap:.6g}")


_PULP_STATUS = {
    pulp.LpSolutionOptimal: "optimal",
    pulp.LpSolutionIntegerFeasible: "feasible",
    pulp.LpSolutionInfeasible: "infeasible",
    pulp.LpSolutionUnbounded: "infeasible",
}


def _pulp_status(problem: pulp.LpProblem) -> str:
    """The solution status, falling back on the problem status: CBC reports an integer-infeasible MIP as
    'no solution found' with problem status 'infeasible'."""
    if problem.sol_status in _PULP_STATUS:
        return _PULP_STATUS[problem.sol_status]
    return "infeasible" if problem.status == pulp.LpStatusInfeasible else "stopped"


def _solve_cbc(problem: pulp.LpProblem, time_limit_s: float, warm_start: bool = False) -> tuple[str, float | None]:
    """CBC; `warm_start`: it starts from the variables' current values."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "cbc.log"
        problem.solve(pulp.PULP_CBC_CMD(
            msg=False, timeLimit=time_limit_s, threads=CBC_THREADS, logPath=str(log), gapRel=0.0, warmStart=warm_start,
        ))  # fmt: skip
        log_text = log.read_text(errors="replace") if log.exists() else ""
    status = _pulp_status(problem)
    if status == "stopped" and "Problem is infeasible" in log_text:
        status = "infeasible"
    return status, _cbc_bound(log_text) if status == "feasible" else None


def _cbc_bound(log_text: str) -> float | None:
    """CBC's best bound on an early stop, from its summary ('Lower bound: ...'), or its last progress line
    ('best possible ...'). Its own 'Gap:' line is rounded to whole hundredths, so the gap is computed from this."""
    found = re.findall(r"^Lower bound:\s+([0-9.eE+-]+)", log_text, flags=re.MULTILINE)
    if found:
        return float(found[-1])
    found = re.findall(r"best possible\s+([0-9.eE+-]+)", log_text)
    return float(found[-1]) if found else None


@contextlib.contextmanager
def quiet_stdout():
    """Discard what a native library prints on file descriptor 1 (HiGHS' banner comes before any option can
    silence it), so `--json` output stays one JSON document and the terminal stays clean."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no real stdout (embedded use): nothing to guard
        yield
        return
    try:
        with open(os.devnull, "w") as sink:
            os.dup2(sink.fileno(), 1)
        yield
    finally:
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL(None).fflush(None)
        os.dup2(saved, 1)
        os.close(saved)


class _HiGHSFrom(BulkHiGHS):
    """HiGHS handed a starting plan (variable name -> value) before it runs."""

    def __init__(self, start: dict[str, float], **options):
        super().__init__(**options)
        self.start = start

    def callSolver(self, lp):
        import highspy

        solution = highspy.HighsSolution()
        solution.col_value = [float(self.start.get(var.name, 0.0)) for var in self.columns]  # in column order
        solution.value_valid = True
        lp.solverModel.setSolution(solution)
        super().callSolver(lp)


def _solve_highs(problem: pulp.LpProblem, time_limit_s: float, start: dict[str, float] | None = None) -> tuple[str, float | None]:
    options = dict(msg=False, timeLimit=time_limit_s, threads=1, gapRel=0.0)
    with quiet_stdout():
        problem.solve(BulkHiGHS(**options) if start is None else _HiGHSFrom(start, **options))
    status = _pulp_status(problem)
    highs = getattr(problem, "solverModel", None)
    bound = None
    if highs is not None and status == "feasible":
        value = highs.getInfo().mip_dual_bound
        bound = float(value) if math.isfinite(value) else None
    return status, bound


def _solve_ortools(problem: pulp.LpProblem, time_limit_s: float) -> tuple[str, float | None]:
    """OR-Tools' SCIP on the same model exported as MPS, in a child process (see planner/ortools_worker.py);
    values are written back into the PuLP variables."""
    with tempfile.TemporaryDirectory() as tmp:
        mps, out = Path(tmp) / "fleet.mps", Path(tmp) / "result.json"
        problem.writeMPS(str(mps))
        completed = subprocess.run(
            [sys.executable, "-m", "planner.ortools_worker", str(mps), str(time_limit_s), str(out)],
            capture_output=True, text=True, timeout=time_limit_s + 120, check=False,
        )  # fmt: skip
        if completed.returncode != 0 or not out.exists():
            raise RuntimeError(f"OR-Tools worker failed: {completed.stderr.strip()[-2000:]}")
        result = json.loads(out.read_text())
    status = result["status"]
    if status in ("optimal", "feasible"):
        for var in problem.variables():
            var.varValue = result["values"].get(var.name, 0.0)
    elif status not in ("infeasible",):
        status = "stopped"
    bound = result["bound"] if status == "feasible" and result.get("bound") is not None else None
    return status, bound


def _highs_lp(problem: pulp.LpProblem) -> str:
    """The LP relaxation by HiGHS (integrality ignored, the categories kept), with its row duals in constraint.pi."""
    with quiet_stdout():
        problem.solve(BulkHiGHS(msg=False, mip=False, threads=1))
    return "optimal" if problem.status == pulp.LpStatusOptimal else "stopped"


# a cutoff is handed to HiGHS this much (relative) above the cost it stands for: HiGHS prunes at its objective bound
# within its own tolerances, so only "nothing below cutoff x (1 + this)" is read as "nothing below the cutoff"
CUTOFF_SLACK = 1e-6


def _highs_proven(problem: pulp.LpProblem, time_limit_s: float, cutoff: float | None = None) -> tuple[str, float | None]:
    """HiGHS within the time limit: the status (optimal, feasible, infeasible or stopped) and a proven lower bound on
    the problem's optimum: the optimum itself, or HiGHS' dual bound where it stopped first (None: none proven).
    `cutoff`: only a plan below it is sought (HiGHS' objective bound: the branches above it pruned at once); where
    there is none the status is 'cut off' and the bound the cutoff itself (no plan of the problem costs less).
    HiGHS then may still report 'optimal', a plan above the cutoff and a dual bound at that plan's cost, above the
    problem's optimum (measured: 119 of 924 random programs cut off below their optimum): only "nothing below the
    cutoff" is proven, so such an end is read as cut off, and no bound it gives is taken above the cutoff."""
    options = {} if cutoff is None else {"objective_bound": cutoff + CUTOFF_SLACK * max(1.0, abs(cutoff))}
    solver = BulkHiGHS(msg=False, timeLimit=max(time_limit_s, 0.1), threads=1, gapRel=0.0, **options)
    with quiet_stdout():
        problem.solve(solver)
    highs = getattr(problem, "solverModel", None)
    if highs is None:
        return "stopped", None
    status = highs.getModelStatus()
    if cutoff is not None and status in (highspy_status("kInfeasible"), highspy_status("kObjectiveBound")):
        return "cut off", cutoff  # nothing below the cutoff (an empty problem included: it holds no plan either)
    integer = any(v.cat == pulp.LpInteger for v in solver.columns)
    dual = highs.getInfo().mip_dual_bound if integer else -math.inf
    if status == highspy_status("kOptimal"):
        value = pulp.value(problem.objective) or 0.0
        if cutoff is not None and value >= cutoff:  # the plan it ends with is no plan below the cutoff: cut off
            return "cut off", cutoff
        return "optimal", (min(value, dual) if integer and math.isfinite(dual) else value)
    if status == highspy_status("kInfeasible"):
        return "infeasible", None
    solved = "feasible" if _pulp_status(problem) == "feasible" else "stopped"
    bound = float(dual) if integer and math.isfinite(dual) else None
    if bound is not None and cutoff is not None:  # the branches pruned at the cutoff are bounded by it alone
        bound = min(bound, cutoff)
    return solved, bound


def _highs_lower_bound(problem: pulp.LpProblem, time_limit_s: float) -> tuple[float, bool] | None:
    """A proven lower bound on the problem's optimum by HiGHS within the time limit, and whether it is the optimum:
    the optimum itself, or HiGHS' dual bound where it stopped first (None: none proven, or no plan exists)."""
    status, bound = _highs_proven(problem, time_limit_s)
    return None if bound is None else (bound, status == "optimal")


def highspy_status(name: str):
    import highspy

    return getattr(highspy.HighsModelStatus, name)
