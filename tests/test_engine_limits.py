"""Batch, KV and token-budget limits as serving engines apply them (planner/perf/serving.py), the same in the
performance model, candidate enumeration and the simulator; and the open loop serving what the closed loop serves."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.catalog import load_catalog
from planner.perf import PerfQuery, best_points_by_cap, modeled_points
from planner.perf.checks import open_loop_sweep
from planner.perf.serving import (
    EngineSpec,
    engine_problem,
    instance_batch,
    instance_budget,
    running_limit,
    tokens_held,
    version_key,
)
from planner.perf.tables import instance_memory
from planner.perf.types import Layout
from planner.simulate import FixedSteps, Requests, ServingEngine, run

CATALOG = load_catalog()


# --- KV admission -------------------------------------------------------------------------------------------------
def test_tensorrt_llm_reserves_the_whole_sequence_and_paged_engines_half_the_output():
    assert tokens_held(1000, 32000, "trtllm") == 33000
    assert tokens_held(1000, 32000, "vllm") == tokens_held(1000, 32000, "sglang") == 17000
    kv = 6_200_000
    assert running_limit(kv, 1000, 32000, "trtllm") == kv // 33000
    assert running_limit(kv, 1000, 32000, "vllm") == kv // 17000
    memory = instance_memory(CATALOG, "deepseek-r1", "H200-SXM-141GB", 8, "fp8", 1000, 32000)
    assert memory.running_limit(1000, 32000, "trtllm") == int(memory.kv_token_capacity // 33000)
    assert memory.running_limit(1000, 32000, "vllm") > 1.9 * memory.running_limit(1000, 32000, "trtllm")


def _long_outputs(count=40, isl=20, osl=40):
    times = np.linspace(0.0, 0.05, count)
    return Requests(times, np.full(count, isl), np.full(count, osl))


def test_a_reserving_engine_never_preempts_and_never_holds_more_than_it_reserved():
    """60-token sequences in a 600-token cache: a reserving engine runs 10 at a time and preempts none; a paging one
    admits more at first, fills its cache and preempts."""
    reserving = ServingEngine(FixedSteps(1.0, 0.01, 1.0), max_batch=64, kv_tokens=600, kv_admission="reserve")
    most = []
    original = reserving._iterate

    def watched():
        most.append(len(reserving.running) + len(reserving.prefilling))
        original()

    reserving._iterate = watched
    finished = run([reserving], _long_outputs())
    assert reserving.preemptions == 0 and not np.isnan(finished.finish_s).any()
    assert max(most) <= 600 // 60 and reserving.reserved == 0
    paging = ServingEngine(FixedSteps(1.0, 0.01, 1.0), max_batch=64, kv_tokens=600)
    run([paging], _long_outputs())
    assert paging.preemptions > 0


# --- per attention-DP rank ----------------------------------------------------------------------------------------
def test_batch_caps_and_token_budgets_are_per_attention_dp_rank():
    assert instance_batch(64, 8) == 512 and instance_batch(64, 1) == 64
    assert instance_budget(8192, 8) == 65536
    query = PerfQuery("deepseek-r1", "B200-SXM-180GB", 1000, 1000, arrivals="poisson", engine="vllm")
    points = modeled_points(query, CATALOG, 1, "fp8", layout=Layout(1, 8, 8))
    assert not isinstance(points, str)
    best = best_points_by_cap(points, query, (64, 512))
    # a cap of 64 sequences per rank runs up to 512 on the instance's 8 ranks
    assert best[64].concurrency <= 512 and best[64].concurrency > 64
    assert best[512].request_throughput_rps >= best[64].request_throughput_rps


def test_a_budget_that_binds_fills_every_step_in_the_closed_loop():
    """The closed loop's throughput never asks more tokens of a step than the budget: at the largest batch its
    decoders and prompt tokens fill one (planner/perf/closed_loop.py, "Token budget")."""
    query = PerfQuery("qwen3-30b-a3b", "B200-SXM-180GB", 2000, 200, engine="trtllm")
    points = modeled_points(query, CATALOG, 8, "fp8")
    top = max(points, key=lambda p: p.request_throughput_rps)
    decoders = 199 * 8192 / (199 + 2000)
    tokens = decoders + top.request_throughput_rps / 1e3 * 2000 * top.tpot_ms
    assert tokens == pytest.approx(8192, rel=1e-6)


# --- engines and the GPUs they run on -----------------------------------------------------------------------------
def test_engines_run_only_on_their_vendors_gpus():
    assert engine_problem("trtllm", "cdna3") and engine_problem("atom", "hopper")
    assert engine_problem("vllm", "cdna4") is None and engine_problem("atom", "cdna4") is None
    miss = modeled_points(PerfQuery("llama-3.1-70b", "MI300X-192GB", 1000, 200, engine="trtllm"), CATALOG, 8, "fp8")
    assert isinstance(miss, str) and "NVIDIA" in miss


def test_engine_specs_parse_versions_and_order_them_as_releases():
    assert EngineSpec.parse("vllm") == EngineSpec("vllm") and EngineSpec.parse("vLLM@0.19") == EngineSpec("vllm", "0.19")
    for bad in ("tgi", "vllm@", "vllm@@1"):
        with pytest.raises(ValueError):
            EngineSpec.parse(bad)
    ordered = ["0.6.5", "0.9.2", "0.10.2", "0.19.0", "1.2.0rc6", "1.2.0", "nightly-dev"]
    assert sorted(reversed(ordered), key=version_key) == ordered


# --- the open loop serves what the closed loop serves --------------------------------------------------------------
def test_the_open_loop_serves_ninety_percent_of_the_closed_loop_dense_and_moe():
    """Under Poisson arrivals every engine (dense, MoE; TP, attention DP with EP; every serving engine) is answered
    at 90% of its closed-loop maximum when no limit is given, and its mean latencies there are no lower than the
    closed loop's at the same throughput. A mixture of experts' decode step rises by milliseconds per sequence at
    batch 1 (the experts it reads), which once stopped the fluid batch's Newton solve at the first step."""
    report = open_loop_sweep(CATALOG, ("mixtral-8x7b", "qwen3-30b-a3b", "deepseek-r1", "llama-3.1-70b"),
                             ("H200-SXM-141GB",), layouts=(Layout(2), Layout(8), Layout(1, 8, 8)),
                             lengths=((1000, 1000), (4000, 500)))  # fmt: skip
    assert report.curves > 40 and report.total_violations == 0, dict(report.violations)


def test_the_open_loop_check_fails_on_a_refusal():
    """The sweep's refusal check can fail: a 90% load of the closed loop's maximum, asked at 120%, is refused."""
    report = open_loop_sweep(CATALOG, ("mixtral-8x7b",), ("H100-SXM-80GB",), layouts=(Layout(2),),
                             lengths=((1000, 250),), engines=("vllm",), load=1.2)  # fmt: skip
    assert report.violations["open_loop_refused"]


def test_mixtral_on_vllm_is_answered_near_its_closed_loop_maximum():
    """The issue's case: Mixtral TP2 fp8 on H100 with vLLM was refused above a quarter of its closed-loop maximum."""
    query = PerfQuery("mixtral-8x7b", "H100-SXM-80GB", 1000, 250, engine="vllm")
    closed = max(p.request_throughput_rps for p in modeled_points(query, CATALOG, 2, "fp8"))
    opened = modeled_points(dataclasses.replace(query, rate_rps=0.9 * closed), CATALOG, 2, "fp8")
    assert not isinstance(opened, str) and opened[0].request_throughput_rps == pytest.approx(0.9 * closed)


# --- tensor splits engines accept ---------------------------------------------------------------------------------
@pytest.mark.parametrize("model, gpu, tp, answered", [
    ("deepseek-r1", "GB200-186GB", 36, False),  # 128 heads over 36 GPUs (aiconfigurator's sample labels runs so)
    ("deepseek-r1", "GB200-186GB", 32, True),
    ("llama-4-scout", "GB200-186GB", 16, False),  # 40 heads over 16
    ("llama-4-scout", "GB200-186GB", 8, True),
    ("qwen3-235b-a22b", "H100-SXM-80GB", 8, True),  # 4 KV heads replicated twice over 8 GPUs
])  # fmt: skip
def test_a_tensor_split_engines_refuse_is_refused_naming_the_heads(model, gpu, tp, answered):
    query = PerfQuery(model, gpu, 1024, 256, concurrency=16)
    points = modeled_points(query, CATALOG, tp, "fp8", layout=Layout(tp))
    if answered:
        assert not isinstance(points, str), points
    else:
        heads = CATALOG.models[model].heads
        assert isinstance(points, str) and f"{heads} attention heads" in points and f"over {tp} GPUs" in points
