"""An engine's curve priced only as far along its rates as the workloads asking for it can use (planner/perf/reach.py):
the points are the whole curve's prefix, every best point per batch cap is the same, and the candidates a scenario
gets are the same as from whole curves."""

from __future__ import annotations

import dataclasses

import pytest

from planner import candidates
from planner.candidates import builder as candidate_builder
from planner.api.planning import scenario_catalog, validate_file
from planner.perf import layers
from planner.perf.reach import PricedCurve, Reach
from planner.perf.types import Layout, PerfQuery
from planner.scenario.resolved import Slo
from helpers import SCENARIOS, write_scenario

CAPS = (8, 32, 64, 128, 256)
ENGINES = [  # (query, layout, precision, percentile): dense and MoE, TP and expert-parallel, both open-source engines
    (PerfQuery("llama-3.1-8b", "H100-SXM-80GB", 1500, 300, arrivals="poisson", engine="vllm"), Layout(1), "fp8", 95.0),
    (PerfQuery("llama-3.1-70b", "B200-SXM-180GB", 4000, 500, arrivals="poisson", engine="sglang"), Layout(4), "fp8", 50.0),
    (PerfQuery("qwen3-30b-a3b", "H100-SXM-80GB", 2000, 400, arrivals="poisson", engine="vllm"), Layout(1, 2, 2), "bf16", 99.0),
    (PerfQuery("mixtral-8x7b", "MI300X-192GB", 1000, 200, arrivals="poisson", engine="vllm"), Layout(2), "fp8", 95.0),
]  # fmt: skip


def _limits(whole) -> list[Slo]:
    """Limits that cut the curve early, midway and late, on each metric, and one that no point meets."""
    out = []
    for share in (0.1, 0.5, 0.9):
        point = whole[int(share * (len(whole) - 1))]
        out += [Slo(ttft_ms=point.ttft_ms * 1.001), Slo(itl_ms=point.itl_ms * 1.001),
                Slo(ttft_ms=point.ttft_ms * 1.001, tpot_ms=point.tpot_ms * 1.001), Slo(e2e_ms=point.e2e_ms * 1.001)]  # fmt: skip
    return out + [Slo(ttft_ms=whole[0].ttft_ms * 0.5), Slo()]


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: f"{e[0].model}-{e[0].gpu}-{e[1].label}-{e[0].engine}")
def test_a_curve_priced_to_its_reach_is_the_whole_curves_prefix_and_answers_the_same(catalog, engine):
    query, layout, precision, percentile = engine
    whole = layers.modeled_points(query, catalog, layout.tp, precision, percentile, layout=layout)
    assert not isinstance(whole, str) and len(whole) > 8
    cut_somewhere = False
    for limits in _limits(whole):
        for caps in ((max(CAPS),), (32,)):
            reach = Reach(tuple((limits, cap) for cap in caps))
            priced = layers.priced_points(query, catalog, layout.tp, precision, percentile, layout=layout, reach=reach)
            points = priced.points
            assert points == whole[: len(points)], "a prefix of the whole curve, point for point"
            if priced.complete:
                assert points == whole
            else:
                cut_somewhere = True
                assert reach.refuses(points[-1]) and not any(reach.refuses(p) for p in points[:-1])
            asked = dataclasses.replace(query, **{m: getattr(limits, m) for m in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")})
            served = tuple(c for c in CAPS if c <= max(caps))  # the caps a reach of these asks is priced for
            assert layers.best_points_by_cap(points, asked, served) == layers.best_points_by_cap(whole, asked, served)
    assert cut_somewhere


def test_a_plan_sizes_an_engine_below_the_first_rate_its_limits_refuse(catalog):
    """A curve that dips back under a limit after crossing it (an MoE step amortizing as batches grow, a chain's
    grid near saturation) is not trusted past the crossing: the best point lies before it."""
    query, layout, precision, percentile = ENGINES[0]
    whole = layers.modeled_points(query, catalog, layout.tp, precision, percentile, layout=layout)
    limit = whole[5].ttft_ms * 1.001
    dipped = [dataclasses.replace(p, ttft_ms=limit * 2) if i == 3 else p for i, p in enumerate(whole)]
    dipped = [dataclasses.replace(p, ttft_ms=min(p.ttft_ms, limit)) if i > 3 else p for i, p in enumerate(dipped)]
    asked = dataclasses.replace(query, ttft_ms=limit)
    best = layers.best_points_by_cap(dipped, asked, (max(CAPS),))[max(CAPS)]
    assert best == whole[2]
    everything = layers.best_points_by_cap(whole, dataclasses.replace(query, ttft_ms=whole[-1].ttft_ms * 10), (max(CAPS),))
    assert everything[max(CAPS)] == max((p for p in whole if layers.within_cap(p, max(CAPS))), key=lambda p: p.request_throughput_rps)
    refused = layers.best_points_by_cap(whole, dataclasses.replace(query, ttft_ms=whole[0].ttft_ms / 2), (max(CAPS),))
    assert refused[max(CAPS)].startswith("no modeled point meets the limits; at the lowest concurrency")


def test_a_kept_curve_serves_the_limits_its_points_reach_and_no_looser_ones(catalog):
    query, layout, precision, percentile = ENGINES[0]
    whole = layers.modeled_points(query, catalog, layout.tp, precision, percentile, layout=layout)
    tight, loose = Reach(((Slo(ttft_ms=whole[4].ttft_ms * 1.001), 256),)), Reach(((Slo(ttft_ms=whole[9].ttft_ms * 1.001), 256),))
    cut = layers.priced_points(query, catalog, layout.tp, precision, percentile, layout=layout, reach=tight)
    assert not cut.complete and len(cut.points) == 6
    assert cut.serves(tight) and not cut.serves(loose) and not cut.serves(None)
    assert (tight | loose).asks == tight.asks + loose.asks
    further = layers.priced_points(query, catalog, layout.tp, precision, percentile, layout=layout, reach=tight | loose)
    assert len(further.points) == 11 and further.serves(tight) and further.serves(loose)
    assert PricedCurve(whole).serves(loose) and PricedCurve("does not fit").serves(loose)


# a KV cache of a few 16,000-token sequences: the ladder's upper rates all find the cache full
SMALL_CACHE = (PerfQuery("llama-4-scout", "H200-SXM-141GB", 16000, 500, arrivals="poisson", engine="sglang"), Layout(1), "fp8", 90.0)


@pytest.mark.parametrize("engine", [*ENGINES, SMALL_CACHE], ids=lambda e: f"{e[0].model}-{e[0].gpu}-{e[1].label}-{e[0].engine}")
def test_a_ladder_ends_at_its_first_rate_the_engine_cannot_serve_and_no_later_rate_is_served(catalog, engine, monkeypatch):
    """Each rate of the ladder solved on its own: those the engine serves within its KV capacity come first, none
    after one it does not (so ending the ladder there leaves out no point), and the curve is exactly those, priced
    in no more pieces than reach the first rate it does not serve."""
    from planner.perf import engine_curve, modeled_engine

    query, layout, precision, percentile = engine
    model = modeled_engine.modeled_engine(query, catalog, layout.tp, precision, None, True, layout)
    rates = modeled_engine.open_loop_rates(query, model)
    served = [bool(modeled_engine.open_loop_points(query, model, percentile, [rate])[0]) for rate in rates]
    assert served == sorted(served, reverse=True), "no rate served after one that is not"
    pieces = []
    solve = modeled_engine.open_loop_points
    monkeypatch.setattr(engine_curve, "open_loop_points", lambda q, e, p, at: pieces.append(at) or solve(q, e, p, at))
    points = layers.modeled_points(query, catalog, layout.tp, precision, percentile, layout=layout)
    assert [p.request_throughput_rps for p in points] == pytest.approx([r for r, ok in zip(rates, served) if ok], rel=1e-12)
    chunks = modeled_engine.rate_chunks(rates)
    ends = next((i for i, chunk in enumerate(chunks) if not all(served[rates.index(r)] for r in chunk)), len(chunks) - 1)
    assert pieces == chunks[: ends + 1]
    if engine is SMALL_CACHE:
        assert 0 < served.count(True) < len(rates) // 2 and len(pieces) < len(chunks) // 2


def _options(scenario, catalog) -> tuple:
    """The options of the scenario's candidates, and its candidate counts but those pruned for latency or dominated
    (a curve left unpriced by its floor, which only a reach can settle, counts its candidates dominated where
    pricing it whole finds them missing the limits, and gives no reason: planner/candidates/bounds.py)."""
    found = candidates.enumerate_candidates(scenario, catalog)
    stats = found.stats
    return ({(o.workload, o.bucket, o.candidate): (o.rps_per_node, o.perf) for o in found.options},
            (stats.generated, stats.pruned_memory, stats.kept, stats.options))  # fmt: skip


MOE = {
    "name": "moe-reach", "metrics_version": 2, "perf": {"source": "model"},
    "workloads": [{"name": "chat", "model": "qwen3-30b-a3b", "isl_tokens": 2000, "osl_tokens": 300, "peak_rps": 30,
                   "engines": ["vllm", "sglang"], "slo": {"ttft_ms": 800, "itl_ms": 40}},
                  {"name": "agent", "model": "qwen3-30b-a3b", "isl_tokens": 6000, "osl_tokens": 500, "peak_rps": 5,
                   "engines": ["sglang"], "slo": {"percentile": 99, "ttft_ms": 4000, "tpot_ms": 60}}],
    "sites": {"on_prem": {"systems": ["dgx-h100"]}},
}  # fmt: skip


@pytest.mark.parametrize("name", ["chat-and-code-p95", "moe"])
def test_a_scenario_gets_the_same_candidates_from_curves_priced_to_their_reach(name, tmp_path, monkeypatch):
    """Today's pricing (every curve whole) against pricing to each curve's reach, on a shipped scenario of dense
    models at P95 and on MoE engines (expert-parallel layouts, two engines, two limit sets on shared curves): every
    option, rate and point the same."""
    monkeypatch.setenv("PLANNER_CACHE_DIR", "off")
    monkeypatch.setenv("PLANNER_WORKERS", "1")
    path = SCENARIOS / f"{name}.yaml" if name != "moe" else write_scenario(tmp_path, MOE)
    scenario = validate_file(path)
    reached = _options(scenario, scenario_catalog(path))
    monkeypatch.setattr(candidate_builder, "curve_reaches", lambda builder: {})  # no reach: every curve priced whole
    whole = _options(scenario, scenario_catalog(path))
    assert reached == whole and reached[0]
