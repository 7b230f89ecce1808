"""Curves left unpriced because a bound shows every candidate of theirs dominated (planner/candidates/bounds.py):
the ceiling bounds every point of its curve, the optimum is the one the enumeration without the bound finds, the
curves left are never priced, and a kept ceiling that is damaged is a miss."""

from __future__ import annotations

import json

import pytest
from helpers import write_scenario

import planner.candidates as candidates_module
import planner.candidates.builder as builder_module
from planner.candidates import bounds, enumerate_candidates
from planner.candidates.builder import CandidateBuilder
from planner.candidates.curves import curve_asks
from planner.catalog import load_catalog
from planner.optimize import solve_candidates
from planner.perf.curve_cache import CurveCache
from planner.perf.fit_cache import write_entry
from planner.scenario import load_scenario


def _document(shared: bool = True) -> dict:
    """Llama 3.1 8B chat and a Qwen3 30B-A3B (MoE) agent, vLLM and SGLang, a DGX H100 bought or H200 nodes rented,
    two periods: 60-odd open-loop curves, small models (fast to price whole)."""
    return {
        "name": "bounds", "metrics_version": 2, "deployment": "hybrid",
        "workloads": [
            {"name": "chat", "model": "llama-3.1-8b", "isl_tokens": 1000, "osl_tokens": 200, "peak_rps": 30,
             "engines": ["vllm", "sglang"], "slo": {"percentile": 95, "ttft_ms": 1000, "tpot_ms": 40}},
            {"name": "agent", "model": "qwen3-30b-a3b", "isl_tokens": 3000, "osl_tokens": 300, "peak_rps": 8,
             "engines": ["vllm"], "slo": {"percentile": 90, "ttft_ms": 3000, "tpot_ms": 60}},
        ],
        "periods": [
            {"name": "day", "hours_per_year": 3000, "demand_factor": {"chat": 1.0, "agent": 1.0}},
            {"name": "night", "hours_per_year": 5760, "demand_factor": {"chat": 0.3, "agent": 0.5}},
        ],
        "sites": {"on_prem": {"systems": ["dgx-h100"]}, "cloud": {"systems": ["aws-p5en.48xlarge"]}},
        "fleet": {"share_nodes_across_models": shared, "reconfigure_between_periods": shared},
    }  # fmt: skip


@pytest.fixture(scope="module")
def priced(tmp_path_factory):
    """Per fleet policy: the scenario, its catalog, its candidates with and without the bound, the curves the
    bound left unpriced by their ceilings and how many it left by their floors."""
    out = {}
    original, settle = bounds.unpriced_curves, candidates_module._settle_floors
    for shared in (True, False):
        path = write_scenario(tmp_path_factory.mktemp("bounds"), _document(shared))
        catalog = load_catalog()
        scenario = load_scenario(path, catalog)
        left, below = [], []

        def noted(*args, left=left):
            left.append(original(*args))
            return left[-1]

        def settled(*args, below=below):
            below.append(settle(*args))
            return below[-1]

        bounds.unpriced_curves, candidates_module._settle_floors = noted, settled
        try:
            out[shared] = (scenario, catalog, enumerate_candidates(scenario, catalog, bound_pruning=False),
                           enumerate_candidates(scenario, catalog), left[0], below[-1])  # fmt: skip
        finally:
            bounds.unpriced_curves, candidates_module._settle_floors = original, settle
    return out


@pytest.mark.parametrize("shared", [True, False], ids=["shared-nodes", "one-configuration-per-node"])
def test_bound_pruning_keeps_the_optimum(priced, shared):
    scenario, catalog, whole, bounded, left, below_floor = priced[shared]
    assert left and below_floor, "the bound left no curve unpriced, by its ceiling or floor: the test does not test it"
    assert whole.stats.generated == bounded.stats.generated
    assert whole.stats.pruned_memory == bounded.stats.pruned_memory
    assert {c.key for c in bounded.candidates} <= {c.key for c in whole.candidates}
    with_bound = solve_candidates(scenario, bounded, catalog, explain=False)
    without = solve_candidates(scenario, whole, catalog, explain=False)
    assert with_bound.status == without.status == "optimal"
    assert with_bound.objective_usd_per_year == pytest.approx(without.objective_usd_per_year, rel=1e-9)


def test_ceiling_bounds_every_point_of_its_curve(priced):
    scenario, catalog, _, _, _, _ = priced[True]
    builder = CandidateBuilder(scenario, catalog)
    keys = list(dict.fromkeys(ask.key for ask in curve_asks(builder)))
    ceilings = bounds.curve_ceilings(builder, keys)
    bounded = [key for key in keys if ceilings[key] is not None]
    assert len(bounded) >= 24
    for key in bounded:
        points = builder.priced(key).points  # the whole enumeration priced them (module fixture): kept here
        if isinstance(points, str):
            continue
        assert max(p.request_throughput_rps for p in points) <= ceilings[key]


def test_curves_left_unpriced_are_never_priced(tmp_path, monkeypatch):
    path = write_scenario(tmp_path, _document())
    catalog = load_catalog()
    scenario = load_scenario(path, catalog)
    priced_keys = []
    original = builder_module.price_curve

    def counting(context, key, reach=None):
        priced_keys.append(key)
        return original(context, key, reach)

    monkeypatch.setenv("PLANNER_WORKERS", "1")  # every curve priced in this process, where it is counted
    monkeypatch.setattr(builder_module, "price_curve", counting)
    unpriced = {}
    original_dominated = CandidateBuilder.count_unpriced

    def noting(self, workload, offer, layout, precision, engines):
        unpriced[(workload.name, offer.system, layout, precision, self.engine)] = True
        return original_dominated(self, workload, offer, layout, precision, engines)

    monkeypatch.setattr(CandidateBuilder, "count_unpriced", noting)
    enumerate_candidates(scenario, catalog)
    assert unpriced, "the bound left no curve unpriced: the test does not test it"
    keys = CandidateBuilder(scenario, catalog)
    asked = {ask.key: (ask.workload.name, ask.offer.system, ask.key[1], ask.key[2], ask.key[0].engine)
             for ask in curve_asks(keys)}  # fmt: skip
    left = {key for key, where in asked.items() if where in unpriced}
    assert left and not left & set(priced_keys)
    assert len(priced_keys) == len(set(priced_keys))  # each curve priced once


@pytest.mark.parametrize("payload", [{"ceiling": -1.0}, {"ceiling": "3"}, {"ceiling": 0.0}, {"ceiling": 3},
                                     {"ceiling": 2.0, "more": 1}, [2.0]])
def test_a_kept_ceiling_that_is_not_one_is_a_miss(tmp_path, payload):
    store = CurveCache(tmp_path, "base")
    key = ("some", "curve")
    store.put_ceiling(key, 12.5)
    assert store.get_ceiling(key) == (True, 12.5)
    store.put_ceiling(key, None)
    assert store.get_ceiling(key) == (True, None)
    ceiling_key = ("ceiling", *key)
    write_entry(store._path(ceiling_key), repr(ceiling_key), payload)  # sealed as the planner seals: read, then refused
    assert store.get_ceiling(key) == (False, None)
    store._path(ceiling_key).write_text("not json")
    assert store.get_ceiling(key) == (False, None)


def test_a_kept_ladder_is_the_one_computed_afresh(catalog):
    """modeled_engine.open_loop_rates keeps an unanchored engine's ladder (the bound reads it before its curve is
    priced): each kept ladder is the one computed with nothing kept, for engines that differ in each thing it reads
    (lengths, prefix cache, precision, layout, GPU)."""
    import planner.perf.modeled_engine as modeled
    from planner.perf import PerfQuery
    from planner.perf.open_loop_laws import _RATE_FREE
    from planner.perf.types import Layout, PrefixCache

    def ladders():
        return [key for key in _RATE_FREE if key.startswith("('ladder'")]

    variants = []
    for (isl, osl), cache, precision, layout, gpu in (
        ((2000, 300), None, "fp8", Layout(2), "H200-SXM-141GB"), ((4000, 300), None, "fp8", Layout(2), "H200-SXM-141GB"),
        ((2000, 600), None, "fp8", Layout(2), "H200-SXM-141GB"),
        ((2000, 300), PrefixCache(1500, 0.6), "fp8", Layout(2), "H200-SXM-141GB"),
        ((2000, 300), None, "bf16", Layout(2), "H200-SXM-141GB"), ((2000, 300), None, "fp8", Layout(4), "H200-SXM-141GB"),
        ((2000, 300), None, "fp8", Layout(2), "H100-SXM-80GB"),
    ):  # fmt: skip
        query = PerfQuery("qwen3-30b-a3b", gpu, isl, osl, layout.tp, precision, arrivals="poisson", prefix_cache=cache)
        engine = modeled.modeled_engine(query, catalog, layout.tp, precision, None, True, layout)
        assert not isinstance(engine, str) and engine.anchors is None
        variants.append((query, engine))
    _RATE_FREE.clear()
    kept = [modeled.open_loop_rates(q, e) for q, e in variants]
    assert [modeled.open_loop_rates(q, e) for q, e in variants] == kept  # read back
    assert len(ladders()) == len(variants) and len({tuple(k) for k in kept}) == len(variants)
    for (query, engine), ladder in zip(variants, kept):
        _RATE_FREE.clear()
        assert modeled.open_loop_rates(query, engine) == ladder


def test_ceilings_solved_on_a_forked_worker_are_those_solved_here(tmp_path, monkeypatch):
    """bounds._ceilings solves every other ceiling on a forked worker: the same ceilings as one process solves, and
    this process then holds the same ladders (the rate-free arrays the pricing workers it forks next read)."""
    from planner.perf.open_loop_laws import _RATE_FREE
    from planner.workers import can_fork

    if not can_fork():
        pytest.skip("no fork on this platform")
    catalog = load_catalog()
    scenario = load_scenario(write_scenario(tmp_path, _document()), catalog)
    builder = CandidateBuilder(scenario, catalog)
    keys = list(dict.fromkeys(ask.key for ask in curve_asks(builder)))
    assert len(keys) >= 8
    monkeypatch.setattr(bounds, "CEILING_FORK_MIN", 2)
    monkeypatch.setenv("PLANNER_WORKERS", "1")
    _RATE_FREE.clear()
    alone = bounds._ceilings(builder.context, keys)
    held_alone = dict(_RATE_FREE)
    monkeypatch.setenv("PLANNER_WORKERS", "2")
    _RATE_FREE.clear()
    import planner.perf.open_loop_laws as laws

    handed, keep = [], laws.keep_rate_free
    monkeypatch.setattr(laws, "keep_rate_free", lambda found: (handed.append(len(found)), keep(found)))
    forked = bounds._ceilings(builder.context, keys)
    assert handed and handed[0] > 0  # the worker solved its half and handed its ladders back
    assert forked == alone and any(value is not None for value in alone)
    assert set(_RATE_FREE) == set(held_alone)
    assert all((_RATE_FREE[key] == array).all() and not _RATE_FREE[key].flags.writeable for key, array in held_alone.items())
