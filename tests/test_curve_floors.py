"""Curves left unpriced by their floor (planner/candidates/bounds.py, `curve_floors`): a piece of the ladder at the
floor decides as the whole curve does, and only that piece is solved; forked workers leave the same curves as one
process; a kept floor that is damaged is a miss."""

from __future__ import annotations

from collections import Counter

import pytest
from helpers import write_scenario
from test_bound_pruning import _document

import planner.candidates as candidates_module
from planner.candidates import _dominated_curves, enumerate_candidates
from planner.candidates.builder import CandidateBuilder
from planner.candidates.curves import price_curve, price_curve_above
from planner.catalog import load_catalog
from planner.perf import engine_curve
from planner.perf.curve_cache import CurveCache
from planner.perf.fit_cache import write_entry
from planner.scenario import load_scenario


@pytest.fixture
def bounded(tmp_path, monkeypatch):
    """The bounds scenario (two models, two engines, bought and rented nodes), its catalog, and the floors of the
    curves its first pass leaves to price."""
    monkeypatch.setenv("PLANNER_CACHE_DIR", "off")
    catalog = load_catalog()
    scenario = load_scenario(write_scenario(tmp_path, _document()), catalog)
    floors = _dominated_curves(scenario, catalog, None)[1]
    assert len(floors) >= 5, "too few floors: the tests do not test them"
    return scenario, catalog, floors


def test_a_floors_piece_decides_as_the_whole_curve_does(bounded, monkeypatch):
    """At each curve's floor and at floors below and above it: where the piece says the asks use no point above the
    floor, the whole curve (priced to its reach) has none, and only that piece was solved; else the curve is the
    whole one, point for point."""
    scenario, catalog, floors = bounded
    builder = CandidateBuilder(scenario, catalog)
    solved = []
    solve = engine_curve.open_loop_points
    outcomes = Counter()
    for key, floor in floors.items():
        reach = builder.reach(key)
        whole = price_curve(builder.context, key, reach)
        for at in (0.0, floor / 4, floor / 2, floor, floor * 2, floor * 8):
            monkeypatch.setattr(engine_curve, "open_loop_points", lambda *a: solved.append(a) or solve(*a))
            solved.clear()
            found = price_curve_above(builder.context, key, reach, at)
            monkeypatch.setattr(engine_curve, "open_loop_points", solve)
            if found is None:
                assert not whole.used_above(reach, at)
                assert len(solved) <= 1  # the piece at the floor alone (none where every rate is below it)
                outcomes["left on its piece" if solved else "left, every rate below the floor"] += 1
            else:
                assert found == whole
                outcomes["priced"] += 1
    assert outcomes["left on its piece"] >= 3 and outcomes["priced"] >= 3, outcomes


def test_forked_workers_leave_the_curves_one_process_leaves(tmp_path, monkeypatch):
    from planner.workers import can_fork

    if not can_fork():
        pytest.skip("no fork on this platform")
    monkeypatch.setenv("PLANNER_CACHE_DIR", "off")
    path = write_scenario(tmp_path, _document())
    left = {}
    settle = candidates_module._settle_floors

    def noted(builder, progress):
        count = settle(builder, progress)
        left[workers] = (count, frozenset(builder.unpriced))
        return count

    monkeypatch.setattr(candidates_module, "_settle_floors", noted)
    found = {}
    for workers in ("1", "2"):
        monkeypatch.setenv("PLANNER_WORKERS", workers)
        catalog = load_catalog()
        found[workers] = enumerate_candidates(load_scenario(path, catalog), catalog)
    assert left["1"] == left["2"] and left["1"][0] > 0
    assert found["1"].candidates == found["2"].candidates and found["1"].stats == found["2"].stats


@pytest.mark.parametrize("payload", [{"floor_rps": -1.0}, {"floor_rps": "3"}, {"floor_rps": float("nan")},
                                     {"floor_rps": 3}, {"floor_rps": 2.0, "more": 1}, [2.0], None])
def test_a_kept_floor_that_is_not_one_is_a_miss(tmp_path, payload):
    store = CurveCache(tmp_path, "base")
    key, reach = ("some", "curve"), ("asks",)
    store.put_unused_floor(key, reach, 12.5)
    assert store.get_unused_floor(key, reach) == (True, 12.5)
    assert store.get_unused_floor(key, ("other asks",)) == (False, None)
    floor_key = ("unused floor", *key, reach)
    write_entry(store._path(floor_key), repr(floor_key), payload)  # sealed as the planner seals: read, then refused
    assert store.get_unused_floor(key, reach) == (False, None)
    store._path(floor_key).write_text("not json")
    assert store.get_unused_floor(key, reach) == (False, None)


def test_curves_priced_here_before_the_enumeration_show_their_own_progress(tmp_path, monkeypatch):
    """With one process the first pass prices its leading curves, then the curves with a floor are settled, before
    the enumeration: each under a bar of its own that counts to its total."""
    monkeypatch.setenv("PLANNER_CACHE_DIR", "off")
    monkeypatch.setenv("PLANNER_WORKERS", "1")
    catalog = load_catalog()
    scenario = load_scenario(write_scenario(tmp_path, _document()), catalog)
    calls = []
    enumerate_candidates(scenario, catalog, progress=lambda done, total, label=None: calls.append((done, total, label)))
    stages = [label for _, _, label in calls if label]
    assert "leading engine curves here" in stages[0] and "at their floor" in stages[1], stages
    for stage in stages[:2]:
        start = next(i for i, (_, _, label) in enumerate(calls) if label == stage)
        total = calls[start][1]
        assert total > 0 and [done for done, _, _ in calls[start + 1 : start + 1 + total]] == list(range(1, total + 1))
