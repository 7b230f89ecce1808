"""Engine precisions apart from their weight formats: 4-bit weights with 16- or 8-bit compute (w4a16, w4a8), the
bytes a 4-bit checkpoint really stores (block scales, bf16 embeddings, gpt-oss's MXFP4 experts), one rule for memory
and the roofline's weight reads, which precisions a plan tries, and the KV cache one GPU keeps."""

from __future__ import annotations

import math
import re

import pytest

from planner.api import perf_point, plan_file
from planner.catalog import PRECISION_SPECS, PRECISIONS, compute_precision, load_catalog
from planner.catalog.weights import weight_gb
from planner.errors import PlannerInputError
from planner.perf import PerfQuery, model_precisions
from planner.perf.calibration import efficiency_for
from planner.perf.memory import memory_fit, weights_gb_per_gpu_of
from planner.perf.roofline import (
    EngineShape,
    decode_step_ms,
    kv_bytes_for,
    kv_bytes_per_token_per_gpu,
    model_shape,
    prefill_ms,
    weight_format,
)
from helpers import SCENARIOS, write_scenario

CATALOG = load_catalog()
H100 = "H100-SXM-80GB"


def shape(model: str, gpu: str, tp: int, precision: str) -> EngineShape:
    return EngineShape(CATALOG.models[model], CATALOG.gpus[gpu], tp, precision, kv_bytes_for(precision))


# --- the table of precisions ------------------------------------------------------------------------------------


def test_each_precision_says_its_weight_bytes_compute_and_kv_element():
    assert PRECISIONS == ("bf16", "fp16", "fp8", "fp4", "w4a16", "w4a8")
    assert {p: compute_precision(p) for p in PRECISIONS} == {
        "bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp4": "fp4", "w4a16": "bf16", "w4a8": "fp8"}  # fmt: skip
    assert {p: kv_bytes_for(p) for p in PRECISIONS} == {"bf16": 2, "fp16": 2, "fp8": 1, "fp4": 1, "w4a16": 2, "w4a8": 1}
    assert PRECISION_SPECS["w4a16"].weight_bits == PRECISION_SPECS["w4a8"].weight_bits == 4.25  # MXFP4
    assert PRECISION_SPECS["fp4"].weight_bits == 4.5  # NVFP4


def test_a_gpu_runs_a_weight_only_format_where_it_has_its_compute():
    assert CATALOG.gpus[H100].precisions == ("bf16", "fp16", "fp8", "w4a16", "w4a8")
    assert CATALOG.gpus["A100-SXM-80GB"].precisions == ("bf16", "fp16", "w4a16")  # no fp8 tensor cores
    assert "fp4" in CATALOG.gpus["B200-SXM-180GB"].precisions


# --- weight bytes: one rule for memory and the roofline ------------------------------------------------------------


def test_gpt_oss_weighs_what_its_mxfp4_checkpoint_does():
    """MXFP4 experts (4.25 bits), bf16 attention, router and embeddings: ~65 GB and ~13 GB published."""
    big, small = CATALOG.models["gpt-oss-120b"], CATALOG.models["gpt-oss-20b"]
    for precision in ("w4a16", "w4a8", "fp4"):
        assert 63 <= weight_gb(big, precision) <= 66
        assert 12.5 <= weight_gb(small, precision) <= 14
    assert weight_gb(big, "fp8") == pytest.approx(116.8)  # 8 and 16 bits: params x bytes, as always
    assert weight_gb(big, "bf16") == pytest.approx(233.6)


def test_dense_4_bit_weights_carry_scales_and_keep_bf16_embeddings():
    model = CATALOG.models["llama-3.3-70b"]
    stored = weight_format(model, "w4a16")
    arch = model_shape(model)
    assert stored.table_params == pytest.approx(2 * arch.lm_head_params)  # embedding table and LM head, untied
    expected = (model.params_b * 1e9 - stored.table_params) * 4.25 / 8 + stored.table_params * 2
    assert weight_gb(model, "w4a16") == pytest.approx(expected / 1e9)
    assert weight_gb(model, "fp4") > weight_gb(model, "w4a16") > model.params_b * 0.5  # NVFP4 4.5 bits > MXFP4 4.25
    assert weight_gb(model, "fp8") == pytest.approx(model.params_b)  # unchanged


def test_tied_embeddings_count_one_table():
    model = CATALOG.models["qwen3-4b"]  # 4.0 B with one vocabulary x hidden table shared by input and output
    stored = weight_format(model, "w4a16")
    assert stored.table_params == pytest.approx(model_shape(model).lm_head_params)


def test_memory_and_the_roofline_read_the_same_bytes():
    """At a batch that touches every expert, one step reads every layer weight once: with the embedding table and LM
    head at their bytes, what memory holds (but for the norms and attention sinks the roofline does not read:
    under 0.1%)."""
    for model, precision in (("gpt-oss-120b", "w4a16"), ("llama-3.1-8b", "w4a8"), ("llama-3.1-8b", "fp4"),
                             ("mixtral-8x7b", "fp8")):  # fmt: skip
        engine = shape(model, "B200-SXM-180GB" if precision == "fp4" else H100, 1, precision)
        arch, stored = engine.arch, engine.weights
        read = arch.layers * (arch.attention_params * engine.layer_bytes_per_param
                              + arch.mlp_params_read(1e9) * engine.expert_bytes_per_param)  # fmt: skip
        held = weights_gb_per_gpu_of(CATALOG.models[model], precision, 1) * 1e9
        assert read + stored.table_params * stored.tables == pytest.approx(held, rel=1e-3)


# --- the roofline at a weight-only precision ----------------------------------------------------------------------


def test_w4a16_decode_at_batch_one_is_bound_by_its_4_bit_weights():
    eff = efficiency_for(CATALOG, "hopper")
    bf16, w4a16 = shape("llama-3.3-70b", H100, 2, "bf16"), shape("llama-3.3-70b", H100, 2, "w4a16")
    step_bf16, step_w4 = decode_step_ms(bf16, eff, 1, 1000), decode_step_ms(w4a16, eff, 1, 1000)
    assert step_w4 < 0.5 * step_bf16
    # what it saves is the layer weights' read: 2 B less 4.25 bits each, over TP 2 at the calibrated bandwidth (the
    # LM head stays bf16; kernels, all-reduces and the KV read cost both the same)
    saved = w4a16.arch.layer_params_read(1.0) * (2 - 4.25 / 8) / 2
    saved_ms = saved / (CATALOG.gpus[H100].mem_bw_tb_per_s * 1e12 * eff.bandwidth) * 1e3
    assert step_bf16 - step_w4 == pytest.approx(saved_ms, rel=0.02)


def test_w4a16_is_no_faster_than_bf16_where_compute_bound():
    eff = efficiency_for(CATALOG, "hopper")
    bf16, w4a16 = shape("llama-3.1-8b", H100, 1, "bf16"), shape("llama-3.1-8b", H100, 1, "w4a16")
    big_bf16, big_w4 = prefill_ms(bf16, eff, 8192, 4), prefill_ms(w4a16, eff, 8192, 4)
    # the same bf16 tensor rate: its fewer bytes hide under the compute (the calibrated smoothmax is soft, k = 1.37,
    # and leaves the weight read 0.06% of this 32,768-token step)
    assert big_w4 >= big_bf16 * 0.995
    # w4a8 multiplies at the fp8 rate: faster than bf16 there
    assert prefill_ms(shape("llama-3.1-8b", H100, 1, "w4a8"), eff, 8192, 4) < 0.8 * big_bf16
    assert w4a16.peak_flops == bf16.peak_flops and eff.layer_latency_us("w4a16") == eff.layer_latency_us("bf16")
    assert eff.gemm("w4a8") == eff.gemm("fp8") and eff.attention("w4a8") == eff.attention("fp8")


# --- gpt-oss-120b on one H100 -------------------------------------------------------------------------------------


def test_gpt_oss_120b_runs_on_one_h100_at_w4a16():
    answer = perf_point(PerfQuery("gpt-oss-120b", H100, 1000, 500, tp=1, precision="w4a16", concurrency=16))
    assert answer.result is not None, answer.reason
    memory = answer.result.memory
    assert 63 <= memory.weights_gb_per_gpu <= 66 and memory.max_concurrency_by_memory > 0
    assert answer.result.output_tokens_per_s > 0 and answer.result.provenance == "modeled"  # gpt-oss w4a16 timed
    # at fp8 its 116.8 GB do not fit one GPU, and Hopper has no fp4 tensor cores
    assert perf_point(PerfQuery("gpt-oss-120b", H100, 1000, 500, tp=1, precision="fp8", concurrency=16)).result is None
    with pytest.raises(PlannerInputError, match="does not support fp4; allowed: bf16, fp16, fp8, w4a16, w4a8"):
        perf_point(PerfQuery("gpt-oss-120b", H100, 1000, 500, tp=1, precision="fp4"))


def test_an_unknown_precision_is_refused_naming_the_allowed(cli, tmp_path):
    code, _, err = cli("perf", "--model", "gpt-oss-120b", "--gpu", "H100", "--precision", "int4", "--isl", "100",
                       "--osl", "10")  # fmt: skip
    assert code == 2 and "unknown precision 'int4'; allowed: bf16, fp16, fp8, fp4, w4a16, w4a8" in err
    document = _gpt_oss_scenario()
    document["workloads"][0]["precisions"] = ["mxfp4"]
    with pytest.raises(PlannerInputError) as error:
        plan_file(write_scenario(tmp_path, document))
    assert all(name in str(error.value) for name in PRECISIONS)


def _gpt_oss_scenario() -> dict:
    return {
        "name": "gpt-oss-on-hopper", "deployment": "on-prem",
        "workloads": [{"name": "chat", "model": "gpt-oss-120b", "isl_tokens": 1000, "osl_tokens": 300,
                       "peak_rps": 20, "slo": {"ttft_ms": 2000, "tpot_ms": 50}}],
        "sites": {"on_prem": {"systems": ["dgx-h100"]}},
    }  # fmt: skip


def test_a_scenario_of_gpt_oss_120b_on_dgx_h100_plans(tmp_path):
    result = plan_file(write_scenario(tmp_path, _gpt_oss_scenario()))
    assert result.status == "optimal"
    precisions = {line.precision for line in result.lines if line.model == "gpt-oss-120b"}
    assert precisions and precisions <= {"w4a16", "w4a8", "fp8", "bf16"}


# --- which precisions a plan tries ------------------------------------------------------------------------------


def test_weight_only_formats_are_tried_for_a_model_shipped_in_4_bits_only():
    assert model_precisions(CATALOG, H100, "gpt-oss-120b") == ("bf16", "fp8", "w4a16", "w4a8")
    assert model_precisions(CATALOG, "A100-SXM-80GB", "gpt-oss-120b") == ("bf16", "w4a16")
    assert model_precisions(CATALOG, "B200-SXM-180GB", "gpt-oss-120b") == ("bf16", "fp8", "fp4")  # fp4 as ever
    assert model_precisions(CATALOG, H100, "llama-3.3-70b") == ("bf16", "fp8")  # the search does not grow
    # unless the workload names them
    assert model_precisions(CATALOG, H100, "llama-3.3-70b", ("w4a16", "fp8")) == ("fp8", "w4a16")
    assert model_precisions(CATALOG, "A100-SXM-80GB", "llama-3.3-70b", ("w4a8",)) == ()  # no fp8 on Ampere


def test_a_workload_naming_w4a16_gets_it_for_a_bf16_model(tmp_path):
    document = _gpt_oss_scenario()
    document["workloads"][0].update(model="llama-3.3-70b", precisions=["w4a16"], peak_rps=5)
    result = plan_file(write_scenario(tmp_path, document))
    assert result.status == "optimal" and {line.precision for line in result.lines} == {"w4a16"}


def test_naming_the_default_precisions_keeps_rows_that_state_none(tmp_path):
    """A benchmark row that states no precision ran the checkpoint as published (its `checkpoint_precision`): the
    golden case's rows state none, so naming bf16 and fp8 (the documented default) plans the same 13 DGX H100, and
    naming fp8 alone leaves those bf16 rows out."""
    import yaml

    from planner.errors import InfeasiblePlanError

    document = yaml.safe_load((SCENARIOS / "contact-center.yaml").read_text())
    default = plan_file(SCENARIOS / "contact-center.yaml")
    for precisions in (["bf16", "fp8"], ["bf16"]):
        document["workloads"][0]["precisions"] = precisions
        named = plan_file(write_scenario(tmp_path, document, f"{'-'.join(precisions)}.yaml"))
        assert named.totals.nodes == default.totals.nodes == 13
        assert named.objective_usd_per_year == default.objective_usd_per_year
    document["workloads"][0]["precisions"] = ["fp8"]
    with pytest.raises(InfeasiblePlanError):
        plan_file(write_scenario(tmp_path, document, "fp8.yaml"))


# --- the KV cache one GPU keeps -----------------------------------------------------------------------------------


def test_kv_capacity_replicates_a_kv_head_where_tp_exceeds_them():
    """Qwen3-235B-A22B has 4 KV heads: at TP8 each GPU keeps one whole head (2 GPUs per head), not half of one."""
    model, gpu = CATALOG.models["qwen3-235b-a22b"], CATALOG.gpus["H200-SXM-141GB"]
    assert model.kv_heads == 4
    fit = memory_fit(model, gpu, 8, "fp8", 2000, 0.1, kv_bytes_for("fp8"))
    per_gpu = 2 * model.cache_layers * 1 * model.head_dim * 1.0
    assert kv_bytes_per_token_per_gpu(model, 8, 1.0) == per_gpu
    free = (gpu.memory_gb * 0.9 - fit.weights_gb_per_gpu) * 1e9
    assert fit.kv_token_capacity == pytest.approx(free / per_gpu)
    even_split = free / (model.kv_bytes_per_token(1.0) / 8)
    assert fit.kv_token_capacity == pytest.approx(even_split / 2)
    assert fit.max_concurrency_by_memory == math.floor(free / per_gpu / 2000)
    # where TP divides the KV heads, the capacity is the even split as before
    four = memory_fit(model, gpu, 4, "fp8", 2000, 0.1, kv_bytes_for("fp8"))
    free4 = (gpu.memory_gb * 0.9 - four.weights_gb_per_gpu) * 1e9
    assert four.kv_token_capacity == pytest.approx(free4 / (model.kv_bytes_per_token(1.0) / 4))


def test_fp16_asked_for_alone_is_modeled(catalog):
    """fp16 runs at the bf16 rate, so bf16 stands for both by default; asked for by name it is planned as itself
    (it got no candidate at all before: issue 33)."""
    from planner.perf.layers import model_precisions

    assert "fp16" not in model_precisions(catalog, "H100-SXM-80GB", "llama-3.1-8b")
    assert model_precisions(catalog, "H100-SXM-80GB", "llama-3.1-8b", ("fp16",)) == ("fp16",)


# --- precision is a stated decision (issue 34): the default keeps quality, the plan says what fp4 would save -------

P95 = "chat-and-code-p95.yaml"  # Llama 3.3 70B on DGX B200: planned at fp4 before the default kept quality


def _precisions_of(plan) -> set:
    """Every precision the plan runs: its lines (a line of nodes running several configurations states what they have
    in common, its `runs` the rest), instances, routes and the workloads' assignments."""
    lines = {line.precision for line in plan.lines if line.precision is not None}
    lines |= {p for line in plan.lines for p in PRECISIONS if f" {p} " in f" {line.runs} "}
    return (lines | {i.precision for i in plan.instances} | {r.precision for r in plan.routing}
            | {a.precision for w in plan.workloads for a in w.assignments})


@pytest.fixture(scope="module")
def p95_plan():
    from helpers import SCENARIOS

    return plan_file(SCENARIOS / P95)


def test_the_default_keeps_quality_and_names_a_4_bit_checkpoints_own_format():
    from planner.perf import keeps_quality, plan_precisions

    b200 = "B200-SXM-180GB"
    assert plan_precisions(CATALOG, b200, "llama-3.3-70b") == ("bf16", "fp8")  # no fp4 unless asked
    assert plan_precisions(CATALOG, b200, "llama-3.3-70b", lower=True) == ("bf16", "fp8", "fp4")  # the saving re-plan
    assert plan_precisions(CATALOG, b200, "llama-3.3-70b", ("fp4",)) == ("fp4",)  # asked for
    assert plan_precisions(CATALOG, H100, "llama-3.3-70b") == ("bf16", "fp8")
    # gpt-oss ships MXFP4 experts: its own 4-bit format is no quality loss, on Blackwell (fp4) or Hopper (w4a16/w4a8)
    assert plan_precisions(CATALOG, b200, "gpt-oss-120b") == ("bf16", "fp8", "fp4")
    assert plan_precisions(CATALOG, H100, "gpt-oss-120b") == ("bf16", "fp8", "w4a16", "w4a8")
    assert plan_precisions(CATALOG, "A100-SXM-80GB", "gpt-oss-120b") == ("bf16", "w4a16")
    assert [keeps_quality(CATALOG, "llama-3.3-70b", p) for p in ("bf16", "fp16", "fp8", "fp4", "w4a16", "w4a8", None)] == [
        True, True, True, False, False, False, True]  # a row that states no precision keeps its place  # fmt: skip
    assert all(keeps_quality(CATALOG, "gpt-oss-120b", p) for p in PRECISIONS)


def test_a_scenario_without_precisions_never_plans_fp4(p95_plan):
    assert p95_plan.status == "optimal"
    running = _precisions_of(p95_plan)
    assert running and "fp4" not in running and running <= {"bf16", "fp8"}
    for name in ("chat", "code"):
        decision = p95_plan.workload_precisions[name]
        assert decision["basis"] == "default" and decision["allowed"] == ["bf16", "fp8"]
        assert decision["left_out"] == ["fp4"] and set(decision["runs"]) <= {"bf16", "fp8"} and decision["runs"]
        assert decision["note"].startswith(f"{name}: {', '.join(decision['runs'])} (allowed: bf16, fp8; default: ")
        assert "fp4 only where asked" in decision["note"]
    assert list(p95_plan.workload_precisions) == ["chat", "code"]  # scenario order


def test_the_plan_states_what_fp4_would_save(p95_plan, tmp_path):
    """One more solve with fp4 allowed: on the shipped demand fp8 fits the same node (a saving of 0, said so); at
    three times the demand fp4 saves a node."""
    from helpers import SCENARIOS

    assert p95_plan.precision_saving_usd_per_year is not None and p95_plan.precision_saving_usd_per_year >= 0
    assert p95_plan.precision_note.startswith("allowing fp4 (chat, code) would save ")
    text = (SCENARIOS / P95).read_text().replace("peak_rps: 12", "peak_rps: 36").replace("peak_rps: 6", "peak_rps: 18")
    busier = tmp_path / "busier.yaml"
    busier.write_text(text)
    result = plan_file(busier)
    saving = result.precision_saving_usd_per_year
    assert "fp4" not in _precisions_of(result) and saving is not None and saving > 0
    assert result.precision_note.startswith(f"allowing fp4 (chat, code) would save {saving:,.0f} USD/year (")
    nodes = re.search(r"\((\d+) nodes? against (\d+)\)", result.precision_note)
    assert nodes and int(nodes.group(1)) < int(nodes.group(2)) == result.totals.nodes
    assert "chat at fp4" in result.precision_note  # what the re-plan ran: the quality trade it rests on
    # and the table says it under "Precision"
    from rich.console import Console

    from planner.report.text import print_plan

    console = Console(record=True, width=200)
    print_plan(result, console)
    shown = console.export_text()
    assert "Precision" in shown and result.workload_precisions["chat"]["note"] in shown
    assert f"would save {saving:,.0f} USD/year" in shown


def test_fp4_asked_for_is_planned_with_no_saving_solve(monkeypatch):
    import planner.optimize as optimize
    from planner.scenario import ScenarioOverrides
    from helpers import SCENARIOS

    calls = []
    enumerate_candidates = optimize.enumerate_candidates
    monkeypatch.setattr(optimize, "enumerate_candidates", lambda *a, **k: calls.append(a) or enumerate_candidates(*a, **k))
    result = plan_file(SCENARIOS / P95, overrides=ScenarioOverrides(precisions=("fp4",)))
    assert _precisions_of(result) == {"fp4"} and len(calls) == 1  # one enumeration: no re-plan to price fp4
    assert result.precision_saving_usd_per_year is None and result.precision_note == ""
    for name in ("chat", "code"):
        decision = result.workload_precisions[name]
        assert decision["basis"] == "asked" and decision["allowed"] == decision["runs"] == ["fp4"]
        assert decision["left_out"] == [] and decision["note"] == f"{name}: fp4 (allowed: fp4; asked for (precisions:))"


def test_gpt_oss_keeps_its_checkpoint_format_on_h100_without_being_asked():
    from planner.scenario import ScenarioOverrides
    from helpers import SCENARIOS

    result = plan_file(SCENARIOS / "moe-engines.yaml", overrides=ScenarioOverrides(systems=("dgx-h100",)))
    assert result.status == "optimal" and _precisions_of(result) & {"w4a16", "w4a8"}
    decision = result.workload_precisions["assistant"]
    assert decision["basis"] == "default" and decision["allowed"] == ["bf16", "fp8", "w4a16", "w4a8"]
    assert decision["left_out"] == [] and "with the 4-bit checkpoint's own" in decision["note"]
    assert result.precision_saving_usd_per_year is None and result.precision_note == ""  # nothing left out


def test_the_plan_json_carries_the_decision_and_a_saved_plan_with_it_is_an_input(p95_plan, cli, tmp_path):
    import json

    from planner.report.json_out import dumps, plan_document
    from helpers import SCENARIOS

    document = json.loads(dumps(plan_document(p95_plan)))
    assert {"workload_precisions", "precision_saving_usd_per_year", "precision_note"} <= set(document)
    assert document["workload_precisions"]["chat"]["left_out"] == ["fp4"]
    assert document["precision_note"] == p95_plan.precision_note
    assert dumps(plan_document(p95_plan)) == dumps(plan_document(p95_plan))  # deterministic
    scenario = SCENARIOS / P95
    saved = tmp_path / "plan.json"
    saved.write_text(json.dumps(document))
    code, out, err = cli("bom", scenario, "--plan", saved, "--format", "md")
    assert code == 0, err
    code, out, err = cli("simulate", scenario, "--plan", saved, "--duration", "30", "--json")
    assert code == 0 and json.loads(out)["workloads"], err
    # a plan saved before these fields is read as it is
    for field in ("workload_precisions", "precision_saving_usd_per_year", "precision_note"):
        del document[field]
    saved.write_text(json.dumps(document))
    code, out, err = cli("bom", scenario, "--plan", saved, "--format", "md")
    assert code == 0, err
    # a field of the wrong type is refused, named
    for field, value, named in (("precision_note", 5, "precision_note"),
                                ("precision_saving_usd_per_year", "a lot", "precision_saving_usd_per_year"),
                                ("workload_precisions", {"chat": {"runs": "fp8"}}, "workload_precisions.chat.runs")):  # fmt: skip
        saved.write_text(json.dumps(document | {field: value}))
        code, _, err = cli("bom", scenario, "--plan", saved, "--format", "md")
        assert code == 2 and named in err, err
