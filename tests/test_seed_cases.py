"""Golden tests: the worked cases of the seeds (shared/reference/seed_cases.md), from shipped files only."""

from __future__ import annotations

import math

import pytest

from planner.api import plan_file
from planner.catalog import load_catalog
from planner.catalog.weights import weight_gb
from planner.perf.memory import memory_fit
from planner.requirements import words_to_tokens

from helpers import SCENARIOS


def test_c1_contact_center_needs_13_dgx_h100(cli_json):
    plan = cli_json("plan", SCENARIOS / "contact-center.yaml")
    assert plan["status"] == "optimal"
    assert plan["mip_gap"] == 0.0
    assert plan["totals"]["nodes_by_system"] == {"dgx-h100": 13}
    assert plan["totals"]["gpus"] == 104
    (workload,) = plan["workloads"]
    assert workload["isl_tokens"] == 4667 and workload["osl_tokens"] == 667  # 3500 / 500 words at 0.75
    assert workload["demand_rps"] == 31
    assert workload["ttft_ms"] == 2606
    assert workload["tpot_ms"] == 21.4
    assert workload["provenance"] == "measured"
    assert workload["capacity_rps"] == pytest.approx(13 * 2.4)
    # 12 nodes would fall short: 12 x 2.4 = 28.8 < 31
    assert 12 * 2.4 < workload["demand_rps"] <= workload["capacity_rps"]


def test_c1_generation_time_of_500_tokens_is_10_7_s():
    # the seed's own arithmetic: 21.4 ms per token x 500 tokens = 10.7 s
    assert 21.4 * 500 == pytest.approx(10_700)


def test_c2_users_from_70_7_rps(cli_json):
    answer = cli_json("users", "--rps", "70.7", "--hours", "8", "--requests-per-user", "3")
    assert answer["requests_per_day"] == pytest.approx(2_036_160)
    assert round(answer["requests_per_day"] / 1e6, 2) == 2.04
    assert answer["daily_active_users"] == 678_720
    assert round(answer["daily_active_users"], -3) == 679_000


def test_c2_token_volumes_are_computed_not_copied(cli_json):
    answer = cli_json("users", "--rps", "70.7", "--hours", "8", "--requests-per-user", "3")
    # the slide prints 4.2 B in / 261 M out, which its own inputs do not give
    assert answer["requests_per_day"] * 2000 == pytest.approx(4.07232e9)
    assert answer["requests_per_day"] * 200 == pytest.approx(4.07232e8)


def test_c2_assistant_scenario_fits_one_dgx_h100():
    plan = plan_file(SCENARIOS / "llama3-8b-assistant.yaml")
    assert plan.status == "optimal"
    assert plan.totals.nodes_by_system == {"dgx-h100": 1}
    (workload,) = plan.workloads
    assert workload.demand_rps == pytest.approx(70.7)
    assert workload.capacity_rps == pytest.approx(70.7)


def test_c3_prefill_of_3500_tokens_equals_about_99_generated_tokens(cli_json):
    point = cli_json(
        "perf", "--model", "llama-2-70b", "--gpu", "H100-SXM-80GB", "--tp", "4", "--precision", "fp16",
        "--isl", "3500", "--concurrency", "8",
    )  # fmt: skip
    assert point["provenance"] == "measured"
    assert point["ttft_ms"] == 2600 and point["tpot_ms"] == 26.8
    assert point["instances_per_node"] == 2  # 8 GPUs / TP4
    # "a 3500-token input takes ~2.6 s, the same as generating 99 tokens at 26.8 ms"
    assert point["ttft_ms"] / point["tpot_ms"] == pytest.approx(99, rel=0.03)


@pytest.mark.parametrize(("mean", "quantile", "peak"), [(64, 0.95, 77), (7, 0.95, 12)])
def test_c4_poisson_peak(cli_json, mean, quantile, peak):
    assert cli_json("peak", "--mean-rps", str(mean), "--quantile", str(quantile))["peak_rps"] == peak


def test_c4_peak_is_above_the_mean_by_the_seed_margins(cli_json):
    assert cli_json("peak", "--mean-rps", "64")["peak_rps"] / 64 - 1 == pytest.approx(0.20, abs=0.01)
    assert cli_json("peak", "--mean-rps", "7")["peak_rps"] / 7 - 1 == pytest.approx(0.71, abs=0.01)


def test_c5_weight_memory_by_precision():
    model = load_catalog().models["llama-3.1-70b"]
    assert weight_gb(model, "fp16") == pytest.approx(141.2)  # 70.6 B params x 2 bytes ("70B -> 140 GB")
    assert weight_gb(model, "fp8") == pytest.approx(weight_gb(model, "bf16") / 2)
    # 4 bits: NVFP4's 4.5 bits per layer weight (an fp8 scale per 16) and the embedding table and LM head in bf16
    # (docs/perf-model.md, "Precisions"): 42.7 GB, not a quarter of bf16's
    tables = 2 * 128256 * 8192
    assert weight_gb(model, "fp4") == pytest.approx(((70.6e9 - tables) * 4.5 / 8 + tables * 2) / 1e9)
    assert weight_gb(model, "bf16") / 4 < weight_gb(model, "fp4") < weight_gb(model, "bf16") / 3


def test_c5_kv_bytes_per_token():
    models = load_catalog().models
    assert models["llama-3.1-8b"].kv_bytes_per_token(2) == 128 * 1024
    assert models["llama-3.1-70b"].kv_bytes_per_token(2) == 320 * 1024
    assert models["nemo-43b-gpt"].kv_bytes_per_token(2) is None  # not published: not guessed


def test_c5_70b_needs_tensor_parallelism_on_h100():
    catalog = load_catalog()
    model, gpu = catalog.models["llama-3.1-70b"], catalog.gpus["H100-SXM-80GB"]
    reserve = catalog.defaults.memory_reserve_fraction.value
    assert not memory_fit(model, gpu, 1, "bf16", 4096, reserve).fits
    two = memory_fit(model, gpu, 2, "bf16", 4096, reserve)
    four = memory_fit(model, gpu, 4, "bf16", 4096, reserve)
    assert two.fits and four.fits
    # what is left after the weights holds the KV cache, which bounds the batch
    free_gb = 4 * 80 * (1 - reserve) - 141.2
    assert four.max_concurrency_by_memory == math.floor(free_gb * 1e9 / (320 * 1024 * 4096))
    assert four.max_concurrency_by_memory > two.max_concurrency_by_memory


def test_c6_offline_workload_has_no_latency_limit(cli, tmp_path):
    from helpers import write_scenario

    path = write_scenario(tmp_path, {
        "name": "batch", "workloads": [{
            "name": "nightly", "model": "llama-3.1-8b", "isl_tokens": 128, "osl_tokens": 128, "peak_rps": 10,
            "mode": "offline", "slo": {"ttft_ms": 500},
        }],
        "sites": {"on_prem": {"systems": ["dgx-h100"]}},
    })  # fmt: skip
    code, _, err = cli("validate", path)
    assert code == 2 and "offline" in err


def test_c6_offline_workload_uses_max_throughput_rows(tmp_path):
    from helpers import write_scenario

    path = write_scenario(tmp_path, {
        "name": "batch", "workloads": [{
            "name": "nightly", "model": "llama-3.1-8b", "isl_tokens": 128, "osl_tokens": 128, "peak_rps": 1000,
            "mode": "offline",
        }],
        "sites": {"on_prem": {"systems": ["dgx-h100"]}},
    })  # fmt: skip
    plan = plan_file(path)
    # TensorRT-LLM max-throughput row: 28312 output tokens/s per TP1 instance / 128 tokens = 221.2 rps; 8 per node
    per_node = 8 * 28312 / 128
    assert plan.totals.nodes_by_system == {"dgx-h100": math.ceil(1000 / per_node)}


def test_words_to_tokens_matches_seed_rounding():
    assert words_to_tokens(3500) == 4667
    assert words_to_tokens(500) == 667
    assert words_to_tokens(3000) == 4000

