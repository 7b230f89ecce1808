"""Table lookup: exact rows first, honest misses otherwise, normalized to nodes."""

from __future__ import annotations

import json

import pytest

from planner.perf import PerfMiss, PerfQuery, estimate, limit_violation
from planner.scenario import Slo


def test_max_throughput_point_without_limits(catalog):
    result = estimate(PerfQuery("llama-3.3-70b", "H100-SXM-80GB", 5000, 500), catalog)
    assert result.concurrency == 100
    assert result.request_throughput_rps == pytest.approx(917.26 / 500)
    assert result.provenance == "measured"
    assert result.instances_per_node(8) == 4  # TP2 on an 8-GPU node
    assert result.rps_per_node(8) == pytest.approx(4 * 917.26 / 500)


def test_limits_select_the_operating_point(catalog):
    result = estimate(PerfQuery("llama-3.3-70b", "H100-SXM-80GB", 5000, 500, ttft_ms=700), catalog)
    assert result.concurrency == 25 and result.ttft_ms == 688.69


def test_limit_below_every_point_is_a_miss_with_reason(catalog):
    miss = estimate(PerfQuery("llama-3.3-70b", "H100-SXM-80GB", 5000, 500, ttft_ms=100), catalog)
    assert isinstance(miss, PerfMiss)
    assert "TTFT 406.77 ms > limit 100 ms" in miss.reason


def test_no_row_is_a_miss_on_data_alone_and_modeled_otherwise(catalog):
    query = PerfQuery("llama-3.3-70b", "H100-SXM-80GB", 4000, 300)
    miss = estimate(query, catalog, sources=("measured", "interpolated"))
    assert isinstance(miss, PerfMiss) and "no benchmark row" in miss.reason
    modeled = estimate(query, catalog)
    assert modeled.provenance == "modeled" and "roofline" in modeled.source


def test_bound_stated_by_source_meets_equal_or_looser_limits_only(catalog):
    result = estimate(PerfQuery("llama-3-8b", "H100-SXM-80GB", 2000, 200), catalog)
    assert result.ttft_ms is None and result.ttft_ms_bound == 500
    assert limit_violation(result, Slo(ttft_ms=500)) is None
    assert limit_violation(result, Slo(ttft_ms=800)) is None
    assert "only known to be below 500" in limit_violation(result, Slo(ttft_ms=400))
    assert "ITL not recorded" in limit_violation(result, Slo(itl_ms=50))
    assert "TPOT not recorded" in limit_violation(result, Slo(tpot_ms=50))


def test_node_rows_count_as_one_instance_per_node(catalog):
    result = estimate(PerfQuery("nemo-43b-gpt", "H100-SXM-80GB", 4667, 667, ttft_ms=3000), catalog)
    assert result.gpus_per_instance == 8 and result.rps_per_node(8) == 2.4
    assert result.e2e_ms == pytest.approx(2606 + 666 * 21.4)


def test_perf_json_keys(cli_json):
    document = cli_json("perf", "--model", "llama-3.3-70b", "--gpu", "H100-SXM-80GB", "--tp", "2",
                        "--precision", "fp8", "--isl", "5000", "--osl", "500", "--concurrency", "50")  # fmt: skip
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "concurrency", "request_throughput_rps", "output_tokens_per_s",
                "instances_per_node", "fits", "max_concurrency_by_memory", "provenance"):  # fmt: skip
        assert key in document
    assert document["output_tokens_per_s"] == 814.37 and document["fits"] is True
    assert document["instances_per_node"] == 4


def test_perf_miss_json_says_why(cli):
    code, out, err = cli("perf", "--model", "llama-3.1-70b", "--gpu", "L4-24GB", "--tp", "1", "--precision", "bf16",
                         "--isl", "100", "--osl", "100", "--json")  # fmt: skip
    document = json.loads(out)
    assert code == 1 and document["provenance"] == "none" and "does not fit" in document["reason"]
    assert err.startswith("no answer for llama-3.1-70b on L4-24GB, ISL 100 / OSL 100, TP1, bf16: at TP1 bf16, does not fit")


def test_perf_without_an_answer_says_why_in_one_line_and_exits_1(cli):
    code, out, err = cli("perf", "--model", "llama-3.1-405b", "--gpu", "H100", "--tp", "1", "--isl", "1000", "--osl", "100")
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("no answer for llama-3.1-405b on H100-SXM-80GB, ISL 1000 / OSL 100, TP1: at TP1 bf16, does "
                          "not fit: weights need 811.8 GB per GPU")  # fmt: skip
    assert "; at TP1 fp8, does not fit: weights need 405.9 GB per GPU" in err


def test_70b_bf16_does_not_fit_one_h100_and_fits_tp2(cli, cli_json):
    code, out, _ = cli("perf", "--model", "llama-3.1-70b", "--gpu", "H100-SXM-80GB", "--tp", "1", "--precision", "bf16",
                       "--isl", "2000", "--osl", "200", "--json")  # fmt: skip
    one = json.loads(out)
    assert code == 1
    assert one["provenance"] == "none" and "weights need 141.2 GB per GPU" in one["reason"]
    two = cli_json("perf", "--model", "llama-3.1-70b", "--gpu", "H100-SXM-80GB", "--tp", "2", "--precision", "bf16",
                   "--isl", "2000", "--osl", "200")  # fmt: skip
    assert two["fits"] is True and two["provenance"] == "modeled"
    # KV capacity: 2 x (72 - 70.6) GB free / (320 KiB x 2200 tokens) -> 3 sequences
    assert two["max_concurrency_by_memory"] == 3


def test_interpolation_over_concurrency(catalog):
    point = estimate(PerfQuery("llama-3.3-70b", "H100-SXM-80GB", 5000, 500, concurrency=10), catalog)
    assert point.provenance == "interpolated"
    assert 546.7 < point.ttft_ms < 688.69 and 21.83 < point.tpot_ms < 38.75
    assert 218.48 < point.output_tokens_per_s < 623.4


def test_interpolation_over_isl(catalog):
    point = estimate(PerfQuery("llama-3.1-8b", "H100-SXM-80GB", 1000, 128, tp=1, precision="fp8"), catalog)
    assert point.provenance == "interpolated"
    assert 3450 < point.output_tokens_per_s < 28312
    assert "ISL" in point.derivations[0]


def test_interpolated_points_between_measured_concurrencies_can_win_under_a_limit(catalog):
    # TTFT <= 760 ms lies between c25 (688.69) and c50 (834.51): a point in between beats c25
    point = estimate(PerfQuery("llama-3.3-70b", "H100-SXM-80GB", 5000, 500, ttft_ms=760), catalog)
    assert point.provenance == "interpolated" and 25 < point.concurrency < 50 and point.ttft_ms <= 760
