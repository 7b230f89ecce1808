"""The large-fleet warm start (planner/optimize/decompose.py) against the brute force of the fleet program.

On the brute-force test's random fleets (two periods, bought and rented nodes, limits and spares), forced on at any
size: the year-round stage's bound never exceeds the brute-force optimum, the two-stage plan satisfies every row of
the program and costs no less than that optimum, and the solve started from it still proves the optimum. Where a
unit is held all year (nodes not reconfigured) no split by period is exact and none is made. A solver that returns
nothing better than the start leaves the start, 'feasible', with the gap to the bound that was proven.
"""

from __future__ import annotations

import itertools
import math
import tempfile
from pathlib import Path
from unittest import mock

import pulp
import pytest
from fleet_brute_force import GPUS, brute_force, cases, scenario_document
from helpers import (
    cloud_system,
    instance_row,
    make_catalog,
    on_prem_system,
    write_scenario,
)
from hypothesis import HealthCheck, assume, given, settings

from planner.candidates import enumerate_candidates
from planner.catalog import load_catalog
from planner.errors import PlannerError
from planner.optimize import build_fleet_model, decompose, periods, solve, yearround
from planner.scenario import load_scenario


def _highs(problem, share: float = 1.0):
    return solve._solve_highs(problem, 30.0)


def _fleet(tmp: Path, case, reconfigure: bool, share: bool, market: bool = False):
    """The planner's program of a random fleet and its brute-force optimum; `market`: with the cloud's start-up
    and minimum billing (case[5]), which tie the periods through the rentals."""
    systems, rows, engines, demand, limits = case[:5]
    rentals = case[5] if market and len(case) > 5 else {}
    if not (tmp / "catalog").exists():
        make_catalog(tmp, systems, rows)
    catalog = load_catalog(tmp / "catalog")
    document = scenario_document(systems, demand, limits, reconfigure, share, rentals)
    scenario = load_scenario(write_scenario(tmp, document, f"{reconfigure}-{share}-{market}.yaml"), catalog)
    try:
        cset = enumerate_candidates(scenario, catalog)
        model = build_fleet_model(scenario, cset, catalog)
    except PlannerError:  # no engine serves a workload: nothing to start from
        return None, None
    return model, brute_force(systems, engines, demand, limits, reconfigure, share, catalog.defaults, rentals)


def _proven(problem, share: float = 1.0, cutoff: float | None = None):
    return solve._highs_proven(problem, 30.0, cutoff)


def _fleets_by_period(tmp: Path, case):
    """(model, brute-force optimum, partition) of each of the case's fleets (both switches, with and without the
    market's rentals) whose program splits by period."""
    for (reconfigure, share), market in itertools.product(itertools.product((True, False), repeat=2), (True, False)):
        model, expected = _fleet(tmp, case, reconfigure, share, market)
        if model is not None and expected is not None and periods.partition(model).blocks:
            yield model, expected, periods.partition(model)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_the_two_stage_plan_holds_and_the_started_solve_proves_the_brute_force_optimum(case):
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(decompose, "DECOMPOSE_MIN_INTEGERS", 0):
        for reconfigure, share in itertools.product((True, False), repeat=2):
            model, expected = _fleet(Path(tmp), case, reconfigure, share)
            if model is None:
                continue
            start = decompose.warm_start(model, _highs, lambda: 30.0)
            year_round_units = not reconfigure and any(
                len(decompose.period_of_variables(model)[u.name]) > 1 for u in model.units.values())
            if year_round_units and len(set(decompose.period_of_variables(model).values())) > 1:
                assert start is None  # a unit held all year ties the periods: no exact split
                continue
            if expected is None:
                assert start is None
                continue
            slack = 0.01 * (1 + len(model.hardware)) + 1e-6 * expected
            assert start is not None
            assert start.lower_bound is not None and start.lower_bound <= expected + slack
            assert start.objective >= expected - slack
            decompose.restore(model, start)
            assert decompose._holds(model)
            assert pulp.value(model.problem.objective) == pytest.approx(start.objective, rel=1e-9)
            outcome = solve.solve_model(model, "cbc", 60.0, warm_start=True)
            assert outcome.status == "optimal"
            assert pulp.value(model.problem.objective) == pytest.approx(expected, abs=slack)


def test_a_solver_with_nothing_better_leaves_the_start_with_its_proven_gap(monkeypatch):
    monkeypatch.setattr(decompose, "DECOMPOSE_MIN_INTEGERS", 0)
    monkeypatch.setattr(solve, "_solve_cbc", lambda problem, limit, warm_start=False: ("stopped", None))
    systems = [on_prem_system("sys-0", GPUS[0], 120_000.0, power_kw=6), cloud_system("cloud-0", GPUS[0], 6)]
    engines = [("sys-0", "llama-3-8b", GPUS[0], 1, 3.0), ("sys-0", "llama-2-70b", GPUS[0], 4, 1.5)]
    rows = [instance_row(model, gpu, tp, rps) for (_, model, gpu, tp, rps) in engines]
    engines += [("cloud-0", *e[1:]) for e in engines]
    demand = {"chat": [2.0, 9.0], "batch": [1.0, 4.0]}
    with tempfile.TemporaryDirectory() as tmp:
        model, expected = _fleet(Path(tmp), (systems, rows, engines, demand, {}), True, True)
        outcome = solve.solve_model(model, "cbc", 60.0, warm_start=True)
    assert outcome.warm_start_s is not None
    objective = pulp.value(model.problem.objective)
    assert objective >= expected - 0.05
    assert outcome.best_bound is not None and outcome.best_bound <= expected + 0.05
    if outcome.status == "optimal":  # only where a proven bound (here stage 1's) meets the start
        assert objective - outcome.best_bound <= 1e-6 * objective + 1e-6
        assert objective == pytest.approx(expected, abs=0.05)
    else:
        assert outcome.status == "feasible"
        assert outcome.mip_gap == solve.relative_gap(objective, outcome.best_bound)
    assert decompose._holds(model)
    monkeypatch.undo()
    monkeypatch.setattr(decompose, "DECOMPOSE_MIN_INTEGERS", 0)
    monkeypatch.setattr(solve, "_solve_cbc", lambda problem, limit, warm_start=False: ("stopped", None))
    with tempfile.TemporaryDirectory() as tmp:  # with the period bound: proven where it meets the start
        model, expected = _fleet(Path(tmp), (systems, rows, engines, demand, {}), True, True)
        outcome = solve.solve_model(model, "cbc", 60.0, warm_start=True, period_bound=True)
    assert outcome.period_bound is not None and outcome.period_bound.lower_bound <= expected + 0.05
    objective = pulp.value(model.problem.objective)
    if outcome.status == "optimal":
        assert objective == pytest.approx(expected, abs=0.05)
    else:
        assert outcome.status == "feasible" and outcome.best_bound <= expected + 0.05



def _bound(model):
    def block(problem, share=1.0):
        return solve._highs_lower_bound(problem, 30.0)

    return periods.lagrangian_bound(model, periods.partition(model), solve._highs_lp, block, lambda: 30.0)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_the_period_bound_and_the_large_fleet_strategy_give_the_brute_force_optimum(case):
    """optimize/periods.py's Lagrangian bound never exceeds the brute-force optimum, with the market's rentals
    tying the periods or not; the whole large-fleet strategy forced on (bound, start in day order, started solve)
    proves the optimum: status optimal at the brute-force cost, by either solver."""
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(decompose, "DECOMPOSE_MIN_INTEGERS", 0):
        for (reconfigure, share), market in itertools.product(itertools.product((True, False), repeat=2), (True, False)):
            model, expected = _fleet(Path(tmp), case, reconfigure, share, market)
            if model is None:
                continue
            bound = _bound(model)
            if expected is None or not periods.partition(model).blocks:  # no plan, or no demand: nothing to split
                continue
            slack = 0.01 * (1 + len(model.hardware)) + 1e-6 * expected
            assert bound is not None
            assert bound.lp_bound <= bound.lower_bound + slack  # integer blocks never lower it
            assert bound.lower_bound <= expected + slack
            for solver in ("cbc", "highs"):
                model, _ = _fleet(Path(tmp), case, reconfigure, share, market)
                forced = decompose.worth_decomposing(model)
                outcome = solve.solve_model(model, solver, 60.0, warm_start=True, period_bound=True)
                assert (outcome.period_bound is not None) == forced
                assert outcome.status == "optimal"
                assert pulp.value(model.problem.objective) == pytest.approx(expected, abs=slack)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_a_partition_holds_each_variable_of_its_blocks_once_the_model_s_own(case):
    """periods.partition's `variables` (what stage 1 relaxes) are the program's variables that `block_of` names,
    each once, the very objects of the program: as PuLP's walk of every row finds them."""
    with tempfile.TemporaryDirectory() as tmp:
        for (reconfigure, share), market in itertools.product(itertools.product((True, False), repeat=2), (True, False)):
            model, _ = _fleet(Path(tmp), case, reconfigure, share, market)
            if model is None:
                continue
            part = periods.partition(model)
            walked = {var.name: var for var in model.problem.variables()}
            names = [var.name for var in part.variables]
            assert len(names) == len(set(names))
            assert set(names) == set(part.block_of)
            assert all(walked.get(var.name) is var for var in part.variables)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_the_year_round_bound_never_exceeds_the_brute_force_optimum_and_proves_it(case):
    """optimize/yearround.py's search over the year-round decisions, cut off at the brute-force optimum: its bound
    is never above that optimum nor below stage 1's (its first box), with the market's rentals tying the periods or
    not; the whole strategy with it (start, search, started solve) ends optimal at the brute-force cost."""
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(decompose, "DECOMPOSE_MIN_INTEGERS", 0):
        for (reconfigure, share), market in itertools.product(itertools.product((True, False), repeat=2), (True, False)):
            model, expected = _fleet(Path(tmp), case, reconfigure, share, market)
            if model is None or expected is None:
                continue
            part = periods.partition(model)
            if not part.blocks:  # no demand: nothing to split
                continue
            slack = 0.01 * (1 + len(model.hardware)) + 1e-6 * expected
            stage_one = decompose.relax_periods(model, part, _highs)[1]
            bound = yearround.year_round_bound(model, part, lambda p, share=1.0, cutoff=None: solve._highs_proven(p, 30.0, cutoff),
                                               lambda: 30.0, cutoff=expected + slack, solve_lp=solve._highs_lp)  # fmt: skip
            dropped = yearround.year_round_bound(model, part, lambda p, share=1.0, cutoff=None: solve._highs_proven(p, 30.0, cutoff),
                                                 lambda: 30.0, cutoff=expected + slack)  # fmt: skip
            for found in (bound, dropped):  # rows tying periods priced by LP duals, or dropped
                assert found is not None and found.open == 0
                assert stage_one - slack <= found.lower_bound <= expected + slack
                # every point left below the cutoff is closed (solved whole with its periods' floors): the search
                # proves the optimum itself, and a plan it finds is a plan of the program, at the optimum's cost
                assert found.lower_bound >= expected - slack
                if found.plan is not None:
                    assert found.plan[0] == pytest.approx(expected, abs=slack)
            for solver in ("cbc", "highs"):
                model, _ = _fleet(Path(tmp), case, reconfigure, share, market)
                outcome = solve.solve_model(model, solver, 60.0, warm_start=True, year_round_bound=True)
                assert outcome.status == "optimal"
                assert pulp.value(model.problem.objective) == pytest.approx(expected, abs=slack)
                if outcome.year_round_bound is not None:
                    assert outcome.year_round_bound.lower_bound <= expected + slack


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_the_year_round_search_on_forked_workers_ends_as_it_does_in_one_process(case):
    """The search's bounds of a split (the point's and the children boxes') solved side by side on two forked
    workers: each task's result is the one solved here, to the last bit, in the tasks' order (each is a pure function
    of its box or point), and the whole search ends with the same bound, boxes, points and closings."""
    highs = _proven
    closings = []

    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(decompose, "DECOMPOSE_MIN_INTEGERS", 0):
        for model, expected, part in _fleets_by_period(Path(tmp), case):
            variables = yearround.branching_variables(model, part)
            whole = {var.name: (var.lowBound, var.upBound) for var in variables}
            _, _, point = yearround.box_bound(model, part, variables, whole, highs)
            tasks = [("point", point), ("box", whole)]
            tasks += [("box", whole | {var.name: (point[var.name] + 1, var.upBound)}) for var in variables]
            arguments = (model, part, variables, highs, lambda: 30.0, solve._highs_lp, expected * 1.05, None)
            with yearround._Tasks(arguments, 1) as here, yearround._Tasks(arguments, 2) as forked:
                assert forked.pool is not None
                assert forked.start(tasks)() == here.start(tasks)()
            found = [yearround.year_round_bound(model, part, highs, lambda: 30.0, cutoff=expected * 1.05 + 0.01,
                                                solve_lp=solve._highs_lp, workers=workers) for workers in (1, 2)]  # fmt: skip
            alone, on_two = found
            assert alone is not None and on_two is not None
            assert (on_two.lower_bound, on_two.boxes, on_two.points, on_two.open, on_two.closed) == \
                (alone.lower_bound, alone.boxes, alone.points, alone.open, alone.closed)  # fmt: skip
            # from the start (its point the root, a plan in hand 5% dearer at it, so there is a point to close), whose
            # point is floored and closed on a worker while the boxes are bounded
            start = decompose.warm_start(model, lambda p, share=1.0: solve._solve_highs(p, 30.0), lambda: 30.0)
            if start is None or start.lower_bound is None:
                continue
            root = (start.lower_bound, {name: round(value) for name, value in start.values.items() if name not in part.block_of})
            found = [yearround.year_round_bound(model, part, highs, lambda: 30.0, start.objective * 1.05 + 0.01, root,
                                                solve._highs_lp, root_is_plan=True, workers=workers) for workers in (1, 2)]  # fmt: skip
            decompose.restore(model, start)
            alone, on_two = found
            if alone is None:
                continue
            closings.append(on_two.closed)
            # the same boxes and points; the plan's point closed at once on a worker, not after the boxes, so at most
            # one closing more (the plan it finds lowers the cutoff before the other points are closed), the same
            # plan, and the same bound to within the closings' tolerance
            assert (on_two.boxes, on_two.points, on_two.open) == (alone.boxes, alone.points, alone.open)
            assert alone.closed <= on_two.closed <= alone.closed + 1
            assert (on_two.plan is None) == (alone.plan is None)
            if alone.plan is not None:
                assert on_two.plan[0] == pytest.approx(alone.plan[0], rel=1e-9)
            assert on_two.lower_bound == pytest.approx(alone.lower_bound, rel=1e-6)
        assert not closings or any(closings)  # a plan's point was closed (on a worker) in some fleet


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_floors_made_on_a_worker_during_the_start_are_the_search_s_own(case):
    """yearround.EarlyFloors, begun by the warm start once stage 1 has fixed the year-round values, floors the start's
    point on a forked worker while the periods are solved: its point is the one the search starts from, its bounds
    are those the search makes itself, and the search handed them ends as it does without them."""
    highs = _proven
    made = 0
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(decompose, "DECOMPOSE_MIN_INTEGERS", 0):
        for model, _, part in _fleets_by_period(Path(tmp), case):
            early = yearround.EarlyFloors(model, part, highs, lambda: 30.0)
            try:
                start = decompose.warm_start(model, lambda p, share=1.0: solve._solve_highs(p, 30.0), lambda: 30.0,
                                             early.begin)  # fmt: skip
                found = early.result()
            finally:
                early.close()
            if start is None or start.lower_bound is None or found is None:
                continue
            root = (start.lower_bound, {name: round(value) for name, value in start.values.items() if name not in part.block_of})
            variables = yearround.branching_variables(model, part)
            point, bounds = found
            assert point == {var.name: root[1][var.name] for var in variables}
            assert bounds == yearround.floor_bounds(model, part, point, highs, lambda: 30.0)
            searches = [yearround.year_round_bound(model, part, highs, lambda: 30.0, start.objective * 1.05 + 0.01, root,
                                                   solve._highs_lp, root_is_plan=True, workers=2, plan_floors=given)
                        for given in (None, found)]  # fmt: skip
            decompose.restore(model, start)
            made += 1
            without, handed = searches
            assert (handed.boxes, handed.points, handed.open, handed.closed) == \
                (without.boxes, without.points, without.open, without.closed)  # fmt: skip
            assert handed.lower_bound == pytest.approx(without.lower_bound, rel=1e-9)
    assume(made > 0)  # a draw whose start has no bound checks nothing: hypothesis fails where every draw is such


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(case=cases())
def test_a_point_s_programs_cut_off_at_what_is_left_of_the_cutoff_bound_it_as_when_solved_whole(case):
    """yearround.point_bound with a plan in hand: each period's program is cut off at what the cutoff leaves it (the
    programs solved and the others' relaxations taken off). Below the cutoff its P(z) is the one of the programs
    solved whole; at or above it, a bound between the cutoff and that P(z); and a program is cut off in some fleet
    (the path is taken)."""
    cut_off = 0

    def counted(problem, share: float = 1.0, cutoff: float | None = None):
        nonlocal cut_off
        status, bound = _proven(problem, share, cutoff)
        cut_off += status == "cut off"
        return status, bound

    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(decompose, "DECOMPOSE_MIN_INTEGERS", 0):
        for model, _, part in _fleets_by_period(Path(tmp), case):
            variables = yearround.branching_variables(model, part)
            whole = {var.name: (var.lowBound, var.upBound) for var in variables}
            _, _, point = yearround.box_bound(model, part, variables, whole, _proven)
            if point is None:
                continue
            whole_programs = yearround.point_bound(model, part, point, _proven, lambda: 30.0, solve._highs_lp)
            assert whole_programs is not None
            # Z's variables handed over (as the search does) rather than found by PuLP's walk: the same P(z), to the bit
            assert yearround.point_bound(model, part, point, _proven, lambda: 30.0, solve._highs_lp,
                                         fixed=variables) == whole_programs  # fmt: skip
            for scale in (0.9, 0.99, 0.999, 1.01):
                cutoff = whole_programs * scale if math.isfinite(whole_programs) else 1e6
                found = yearround.point_bound(model, part, point, counted, lambda: 30.0, solve._highs_lp, cutoff)
                noise = 1e-6 * abs(whole_programs) + 1e-6 if math.isfinite(whole_programs) else 0.0
                if whole_programs < cutoff:
                    assert found == pytest.approx(whole_programs, rel=1e-9, abs=1e-6)
                else:
                    assert cutoff - noise <= found <= whole_programs + noise
    assume(cut_off > 0)
