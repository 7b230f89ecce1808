"""Issue 32: prefix caching in the performance model, the simulator and the plan. A workload states the prefix its
prompts share and the share of requests that find it cached; prefill work and TTFT drop by the cached part. Checked
against the simulator (requests drawn hit or miss at the rate, the engine computing only the uncached chunks) and
against the model without a cache."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from helpers import SCENARIOS
from planner.catalog import load_catalog
from planner.perf.roofline import step_ms
from planner.perf.types import PrefixCache, prompt_terms
from planner.simulate.against_model import EngineCase, model_at_rate, simulate_engine, usable_rate_rps
from planner.simulate.traffic import cached_prefixes

CATALOG = load_catalog()


@pytest.mark.parametrize("isl, prefix, hit", [(8000, 6000, 0.9), (2000, 1500, 0.5), (4000, 4000, 1.0), (300, 100, 0.2)])
def test_the_mean_prompt_matches_the_cached_work_term_by_term(isl, prefix, hit):
    """prompt_terms' (prompts, length) give exactly the expected linear tokens and causal attention of a mix of hits
    (ISL - P tokens computed, attending over ISL) and misses (ISL tokens)."""
    prompts, length, computed = prompt_terms(isl, PrefixCache(prefix, hit))
    cached = min(prefix, isl - 1)
    assert prompts * length == pytest.approx(hit * (isl - cached) + (1 - hit) * isl)
    assert prompts * length**2 == pytest.approx(hit * (isl**2 - cached**2) + (1 - hit) * isl**2)
    assert computed == pytest.approx(prompts * length)
    assert prompt_terms(isl, None) == (1.0, float(isl), float(isl))


def test_the_prefill_step_of_the_mean_prompt_lies_between_a_hit_and_a_miss():
    case = EngineCase.build(CATALOG, "llama-3.3-70b", "H100-SXM-80GB", 4, "fp8", 8000, 300)
    cold = float(step_ms(case.shape, case.eff, 0.0, 0.0, 1.0, 8000))
    mean = float(step_ms(case.shape, case.eff, 0.0, 0.0, *prompt_terms(8000, PrefixCache(6000, 0.9))[:2]))
    assert mean < cold
    warm = float(step_ms(case.shape, case.eff, 0.0, 0.0, *prompt_terms(8000, PrefixCache(6000, 1.0))[:2]))
    assert warm < mean


def test_a_cache_raises_the_rate_and_cuts_ttft_monotonically_in_the_hit_rate():
    case = EngineCase.build(CATALOG, "llama-3.3-70b", "H100-SXM-80GB", 4, "fp8", 8000, 300)
    rate = 0.5 * usable_rate_rps(case.shape, case.eff, 8000, 300, case.capacity)
    ttfts = [model_at_rate(case.shape, case.eff, 8000, 300, case.capacity, rate, 90.0,
                           cache=PrefixCache(6000, h) if h else None).ttft_ms for h in (0.0, 0.3, 0.6, 0.9)]  # fmt: skip
    assert all(a > b for a, b in zip(ttfts, ttfts[1:])), ttfts
    usable = [usable_rate_rps(case.shape, case.eff, 8000, 300, case.capacity, cache=PrefixCache(6000, h) if h else None)
              for h in (0.0, 0.9)]  # fmt: skip
    assert usable[1] > 1.5 * usable[0]


@pytest.mark.parametrize("model, tp, isl, osl, cache", [
    ("llama-3.3-70b", 4, 8000, 300, PrefixCache(6000, 0.8)),
    ("llama-3.1-8b", 1, 2000, 200, PrefixCache(1500, 0.8)),
    ("llama-3.1-8b", 1, 2000, 200, PrefixCache(2000, 1.0)),
])  # fmt: skip
def test_the_simulator_with_cached_prefixes_reproduces_the_model(model, tp, isl, osl, cache):
    """Requests drawn hit or miss at the rate, the engine computing only the uncached chunks (which attend to the
    cached part), against the model's mean prompt: mean TTFT, ITL and E2E within 10% at 30/60/85% load, except TTFT
    at 85% within 15%: hits and misses are prompts of very different work, and a queue of mixed prompts waits longer
    than one of their mean (seen: x1.11 for 80% hits of 6,000 of 8,000 tokens; docs/perf-model.md, "Prefix caching")."""
    case = EngineCase.build(CATALOG, model, "H100-SXM-80GB", tp, "fp8", isl, osl)
    usable = usable_rate_rps(case.shape, case.eff, isl, osl, case.capacity, case.token_budget, cache)
    for load in (0.3, 0.6, 0.85):
        rate = load * usable
        modeled = model_at_rate(case.shape, case.eff, isl, osl, case.capacity, rate, None, case.token_budget, cache)
        _, means = simulate_engine(case.shape, case.eff, isl, osl, case.capacity, case.kv_tokens, rate, 50.0, seed=1,
                                   token_budget=case.token_budget, cache=cache)  # fmt: skip
        tolerance = {"ttft_ms": 0.15 if load > 0.8 else 0.10, "itl_ms": 0.10, "e2e_ms": 0.10}
        off = {m: round(means[m] / getattr(modeled, m), 3) for m in tolerance
               if abs(means[m] / getattr(modeled, m) - 1) > tolerance[m]}  # fmt: skip
        assert not off, (case.label, cache, load, off)


def test_cached_prefixes_are_drawn_at_the_hit_rate_and_never_the_whole_prompt():
    rng = np.random.default_rng(0)
    isl = np.array([5000] * 50_000 + [300] * 50_000)
    cached = cached_prefixes(isl, PrefixCache(1000, 0.7), rng)
    assert np.mean(cached > 0) == pytest.approx(0.7, abs=0.01)
    assert set(np.unique(cached)) == {0, 299, 1000}
    assert cached_prefixes(isl, None, rng) is None


@pytest.fixture(scope="module")
def agent_plan(tmp_path_factory):
    from planner import api

    return api.plan_in_context(SCENARIOS / "agent-prefix-cache.yaml")


def test_the_plan_says_what_the_cache_saves(agent_plan, tmp_path):
    """The shipped agent scenario: planned with its cache, and once more cold; the saving is the difference of the
    two optimal plans, and the cold plan (the same file without prefix_cache) costs what the note says."""
    from planner import api

    plan = agent_plan.plan
    assert plan.prefix_cache_saving_usd_per_year > 0
    assert "prefix caching of agent saves" in plan.prefix_cache_note
    document = yaml.safe_load((SCENARIOS / "agent-prefix-cache.yaml").read_text())
    del document["workloads"][0]["prefix_cache"]
    cold_path = tmp_path / "cold.yaml"
    cold_path.write_text(yaml.safe_dump(document))
    cold = api.plan_in_context(cold_path).plan
    assert cold.prefix_cache_saving_usd_per_year is None and cold.prefix_cache_note == ""
    assert cold.objective_usd_per_year - plan.objective_usd_per_year == pytest.approx(plan.prefix_cache_saving_usd_per_year, abs=0.01)
    assert all("prefix cache assumed: 6,000 of 8,000 prompt tokens cached for 90% of requests" in a.source
               for w in plan.workloads for a in w.assignments)  # fmt: skip


def test_the_saving_is_in_the_json_and_the_text(cli, cli_json):
    out = cli_json("plan", SCENARIOS / "agent-prefix-cache.yaml")
    assert out["prefix_cache_saving_usd_per_year"] > 0
    json.dumps(out)
    code, out, _ = cli("plan", SCENARIOS / "agent-prefix-cache.yaml")
    assert code == 0 and "prefix caching of agent saves" in out


@pytest.mark.parametrize("block, message", [
    ({"prefix_tokens": 0, "hit_rate": 0.5}, "prefix_tokens"),
    ({"prefix_tokens": 100, "hit_rate": 1.5}, "hit_rate"),
    ({"prefix_tokens": 100}, "hit_rate"),
])  # fmt: skip
def test_a_bad_prefix_cache_block_is_refused_by_name(cli, tmp_path, block, message):
    document = yaml.safe_load((SCENARIOS / "agent-prefix-cache.yaml").read_text())
    document["workloads"][0]["prefix_cache"] = block
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(document))
    code, out, err = cli("validate", path)
    assert code == 2 and message in out + err and "Traceback" not in out + err


def test_block_hashes_give_each_request_its_cached_prefix(tmp_path):
    """A trace naming its prompts' block hashes (Mooncake's hash_ids): a request finds cached the leading blocks an
    earlier request had, at the trace's block size, never its whole prompt; `workload analyze` turns that into the
    workload's prefix_cache (mean cached tokens of a hit, share of hits)."""
    from planner.traces import load_trace
    from planner.workload_analysis import analyze_trace, workload_block

    rows = [  # 4-token blocks: [1, 2] shared by the later requests, [9] never again
        {"timestamp": 0, "input_length": 8, "output_length": 5, "hash_ids": [1, 2]},
        {"timestamp": 60, "input_length": 12, "output_length": 5, "hash_ids": [1, 2, 3]},
        {"timestamp": 120, "input_length": 4, "output_length": 5, "hash_ids": [9]},
        {"timestamp": 180, "input_length": 8, "output_length": 5, "hash_ids": [1, 2]},
        {"timestamp": 240, "input_length": 16, "output_length": 5, "hash_ids": [1, 7, 3, 4]},
    ]
    path = tmp_path / "hashes.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    trace = load_trace(path)
    assert trace.cached_tokens.tolist() == [0, 8, 0, 7, 4]  # whole prompt seen before: all but its last token
    analysis = analyze_trace(trace, period_s=60.0, engines=1)
    assert analysis.prefix_hit_rate == pytest.approx(0.6) and analysis.prefix_tokens == round((8 + 7 + 4) / 3)
    block = workload_block(analysis, "agent", "llama-3.1-8b")
    assert block["workloads"][0]["prefix_cache"] == {"prefix_tokens": 6, "hit_rate": 0.6}


def test_the_mooncake_trace_reads_its_hashes():
    from helpers import ROOT

    path = ROOT.parent / "shared" / "real" / "traces" / "mooncake_synthetic_trace.jsonl"
    if not path.is_file():
        pytest.skip("../shared/real is not present")
    from planner.traces import load_trace

    trace = load_trace(path, time_unit="ms")
    assert any("512-token blocks" in note for note in trace.notes)
    hits = trace.cached_tokens > 0
    assert 0.3 < hits.mean() < 0.6 and (trace.cached_tokens < trace.isl_tokens).all()
