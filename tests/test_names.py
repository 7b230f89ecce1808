"""Names from the field: catalog aliases wherever an id is read, "did you mean" on a miss, and the architecture
facts of the models real files use (MoE totals, MLA latent cache, sliding-window layers)."""

from __future__ import annotations

import json

import pytest
import yaml
from helpers import SCENARIOS

from planner.api import plan_file
from planner.catalog import accelerator_count, load_catalog
from planner.errors import PlannerInputError
from planner.ingest import IngestOptions, ingest
from planner.perf.memory import memory_fit
from planner.perf.roofline import kv_bytes_per_token_per_gpu, model_shape

FIELD_NAMES = [
    ("model", "meta-llama/Llama-3.3-70B-Instruct", "llama-3.3-70b"),
    ("model", "Llama-3.3-70B-Instruct", "llama-3.3-70b"),
    ("model", "/models/meta-llama/Llama-3.3-70B-Instruct", "llama-3.3-70b"),
    ("model", "LLAMA-3.1-8B", "llama-3.1-8b"),
    ("model", "meta/llama3-8b-instruct", "llama-3-8b"),
    ("model", "Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"),
    ("model", "openai/gpt-oss-120b", "gpt-oss-120b"),
    ("model", "deepseek-ai/DeepSeek-R1", "deepseek-r1"),
    ("model", "meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama-4-scout"),
    ("gpu", "H100", "H100-SXM-80GB"),
    ("gpu", "h100", "H100-SXM-80GB"),
    ("gpu", "H100:8", "H100-SXM-80GB"),
    ("gpu", "A100", "A100-SXM-40GB"),  # SkyPilot's A100 is the 40 GB part
    ("gpu", "A100-80GB", "A100-SXM-80GB"),
    ("gpu", "h200_sxm", "H200-SXM-141GB"),
    ("gpu", "MI300X", "MI300X-192GB"),
    ("system", "p5.48xlarge", "aws-p5.48xlarge"),
]


@pytest.mark.parametrize("kind, name, expected", FIELD_NAMES)
def test_field_names_resolve_to_catalog_ids(catalog, kind, name, expected):
    assert catalog.resolve(kind, name) == expected


def test_ids_resolve_to_themselves_and_every_alias_names_one_entry(catalog):
    for kind, entries in (("model", catalog.models), ("gpu", catalog.gpus), ("system", catalog.systems)):
        for entry_id, entry in entries.items():
            assert catalog.resolve(kind, entry_id) == entry_id
            for alias in entry.aliases:
                assert catalog.resolve(kind, alias) == entry_id, (kind, alias)


def test_a_miss_says_did_you_mean_with_the_alias(catalog):
    with pytest.raises(PlannerInputError) as error:
        catalog.resolve("model", "meta-llama/Llama-3.3-70B-Instruc", "scenario.yaml", "workloads[0].model")
    message = str(error.value)
    assert error.value.file == "scenario.yaml" and error.value.field == "workloads[0].model"
    assert "Did you mean 'llama-3.3-70b'" in message and "planner catalog models" in message


def test_skypilot_counts():
    assert accelerator_count("H100:8") == 8 and accelerator_count("H100") is None and accelerator_count(" A100:4 ") == 4


def test_a_user_alias_naming_two_entries_is_refused(tmp_path):
    user = tmp_path / "lab"
    user.mkdir()
    (user / "gpus.yaml").write_text(yaml.safe_dump({"gpus": [{"id": "H200-SXM-141GB", "aliases": ["H100"], "source": "typo"}]}))
    with pytest.raises(PlannerInputError, match="'H100' already names"):
        load_catalog(user)


def test_a_scenario_written_with_field_names_plans_as_with_ids(tmp_path):
    document = yaml.safe_load((SCENARIOS / "llama3-8b-assistant.yaml").read_text())
    plain = plan_file(SCENARIOS / "llama3-8b-assistant.yaml")
    for workload in document["workloads"]:
        workload["model"] = {"llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct", "llama-3-8b": "meta/llama3-8b-instruct"}.get(
            workload["model"], workload["model"]
        )
    path = tmp_path / "named.yaml"
    path.write_text(yaml.safe_dump(document))
    named = plan_file(path)
    machine_time = {"solve_seconds"}
    assert {k: v for k, v in named.to_dict().items() if k not in machine_time} == {
        k: v for k, v in plain.to_dict().items() if k not in machine_time
    }


def test_ingest_gpu_with_a_count_is_a_whole_node_of_that_many(catalog):
    from helpers import INGEST_FIXTURES

    VLLM = INGEST_FIXTURES / "vllm"

    rows = ingest("vllm", [VLLM / "sweep"], IngestOptions(model="llama-3.1-8b", gpu="H100:8", tp=1, precision="bf16"), catalog).rows
    assert {(r.gpu, r.gpus, r.tp, r.per) for r in rows} == {("H100-SXM-80GB", 8, 1, "node")}
    assert "8 GPUs loaded (H100:8): 8 TP 1 engines behind one endpoint" in rows[0].notes


def test_ingest_file_model_and_option_must_agree(catalog):
    from helpers import INGEST_FIXTURES

    VLLM = INGEST_FIXTURES / "vllm"

    with pytest.raises(PlannerInputError, match="but --model says 'llama-3.1-70b'"):
        ingest("vllm", [VLLM / "sweep"], IngestOptions(model="llama-3.1-70b", gpu="H100", tp=8, precision="bf16"), catalog)
    rows = ingest("vllm", [VLLM / "sweep"], IngestOptions(gpu="H100", tp=1, precision="bf16"), catalog).rows
    assert {r.model for r in rows} == {"llama-3.1-8b"}  # from the file's meta-llama/Llama-3.1-8B-Instruct


# ---- architecture facts of the new models ----


def test_moe_shapes_reproduce_the_published_totals(catalog):
    """Weights the roofline holds (always-read + every expert + embedding and LM head) give the published total,
    and those a token multiplies by (always-read + top-k experts + LM head) the published active count, within 3%."""
    moe_models = [m for m in catalog.models.values() if m.moe is not None and m.ffn is not None and m.vocab is not None]
    assert len(moe_models) >= 8
    for model in moe_models:
        shape = model_shape(model)
        table = model.vocab * model.hidden
        total = shape.layers * (shape.attention_params + shape.experts * shape.mlp_params) + 2 * table
        active = shape.active_layer_params + table
        assert total == pytest.approx(model.params_b * 1e9, rel=0.03), model.id
        assert active == pytest.approx(model.moe.active_params_b * 1e9, rel=0.03), model.id


def test_deepseek_latent_cache_is_whole_on_every_gpu(catalog):
    deepseek = catalog.models["deepseek-v3"]
    assert deepseek.mla is not None and deepseek.moe.shared_experts == 1
    per_token = deepseek.layers * (deepseek.mla.kv_lora_rank + deepseek.mla.rope_head_dim) * 1.0  # fp8 cache
    assert deepseek.kv_bytes_per_token(1.0) == per_token == 61 * 576
    assert kv_bytes_per_token_per_gpu(deepseek, 8, 1.0) == per_token  # not split by TP
    h200 = catalog.gpus["H200-SXM-141GB"]
    fit = memory_fit(deepseek, h200, 8, "fp8", 4096, 0.1, kv_bytes_per_element=1.0)
    free_gb = h200.memory_gb * 0.9 - deepseek.params_b / 8
    assert fit.fits and fit.kv_token_capacity == pytest.approx(free_gb * 1e9 / per_token)


def test_sliding_window_layers_hold_no_long_context(catalog):
    oss = catalog.models["gpt-oss-120b"]
    assert oss.kv_layers == oss.layers // 2 and oss.checkpoint_precision == "fp4"
    assert oss.kv_bytes_per_token(2.0) == 2 * oss.kv_layers * oss.kv_heads * oss.head_dim * 2.0


NEW_MODELS = ("qwen3-4b", "qwen3-8b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-20b", "gpt-oss-120b",
              "deepseek-v3", "deepseek-r1", "llama-4-scout", "llama-4-maverick")  # fmt: skip
NEW_GPUS = ("A100-SXM-40GB", "RTX-PRO-6000-96GB", "RTX-5090-32GB", "GB200-186GB", "B300-SXM-288GB", "MI300X-192GB",
            "MI325X-256GB", "MI355X-288GB")  # fmt: skip


def test_the_models_and_gpus_real_files_use_are_there_with_their_sources(catalog):
    for model_id in NEW_MODELS:  # architecture from the published config, each named
        model = catalog.models[model_id]
        assert "config.json" in model.source and None not in (model.layers, model.hidden, model.kv_heads, model.head_dim)
    for gpu_id in NEW_GPUS:  # datasheet figures (aiconfigurator's system files cite the datasheet)
        gpu = catalog.gpus[gpu_id]
        assert "datasheet" in gpu.source or "specifications" in gpu.source or "aiconfigurator" in gpu.source, gpu_id
        assert gpu.memory_gb > 0 and gpu.mem_bw_tb_per_s > 0 and "bf16" in gpu.tflops_by_precision


# ---- a workload without latency limits ----


def test_a_workload_without_limits_is_planned_with_a_loud_warning(tmp_path, cli):
    document = yaml.safe_load((SCENARIOS / "llama3-8b-assistant.yaml").read_text())
    for workload in document["workloads"]:
        workload.pop("slo", None)
    path = tmp_path / "no-slo.yaml"
    path.write_text(yaml.safe_dump(document))
    plan = plan_file(path)
    assert len(plan.warnings) == len(document["workloads"])
    assert all("has no latency limits" in w and "maximum throughput" in w for w in plan.warnings)
    assert all(("TTFT" in w) == (r.ttft_ms is not None) for w, r in zip(plan.warnings, plan.workloads))
    code, out, err = cli("plan", path, "--json")
    assert code == 0 and json.loads(out)["warnings"] == list(plan.warnings) and "warning: workload" in err
    code, out, err = cli("plan", path)
    assert code == 0 and "warning:" in out and "has no latency limits" in out
    limited = plan_file(SCENARIOS / "llama3-8b-assistant.yaml")
    assert limited.warnings == ()


# ---- what paths and model ids state of the engine ----


@pytest.mark.parametrize(
    "path, names, model, expected",
    [
        ("runs/x_tp4_quant-fp8_benchmarks.json", ["Qwen/Qwen3-30B-A3B"], "qwen3-30b-a3b", "fp8"),
        ("runs/x_tp4_quant-none_benchmarks.json", ["openai/gpt-oss-20b"], "gpt-oss-20b", "fp4"),  # MXFP4 checkpoint
        ("runs/x_tp4_quant-none_benchmarks.json", ["Qwen/Qwen3-30B-A3B-FP8"], "qwen3-30b-a3b", "fp8"),  # the FP8 release
        ("runs/x_tp4_quant-none_benchmarks.json", ["Qwen/Qwen3-30B-A3B"], "qwen3-30b-a3b", "bf16"),
        ("c8/profile_export_aiperf.json", ["qwen3.6-nvfp4", "nvidia/Qwen3.6-35B-A3B-NVFP4"], "qwen3.6-35b-a3b", "fp4"),
        ("runs/serving_tp8_pp1_qps_4.json", ["meta-llama/Llama-3.3-70B-Instruct"], "llama-3.3-70b", None),
    ],
)
def test_stated_precision(catalog, path, names, model, expected):
    from pathlib import Path

    from planner.ingest import stated_precision

    assert stated_precision(Path(path), names, catalog.models[model])[0] == expected


def test_stated_tp_and_pipeline_parallelism():
    from pathlib import Path

    from planner.ingest import stated_tp

    assert stated_tp(Path("01_tp8_pp1/serving_x_tp8_pp1_qps_01.json"))[0] == 8
    assert stated_tp(Path("results/stp3/run.json"))[0] is None  # 'stp3' is not a TP
    with pytest.raises(PlannerInputError, match="pipeline parallelism 2"):
        stated_tp(Path("runs/x_tp4_pp2_qps_1.json"))
    from planner.ingest import stated_precision

    llama2 = load_catalog().models["llama-2-70b"]
    # 4-bit integer weights run dequantized in 16-bit GEMMs (Marlin): w4a16; an 8-bit integer format has no precision
    assert stated_precision(Path("run.json"), ["TheBloke/Llama-2-70B-AWQ"], llama2)[0] == "w4a16"
    assert stated_precision(Path("run.json"), ["Qwen/Llama-2-70B-GPTQ-Int4"], llama2)[0] == "w4a16"
    with pytest.raises(PlannerInputError, match="no\\s+precision for .*allowed: bf16, fp16, fp8, fp4, w4a16, w4a8"):
        stated_precision(Path("run.json"), ["RedHatAI/Llama-2-70B-quantized.w8a8"], llama2)


def test_a_user_row_naming_the_model_by_alias_replaces_the_shipped_row(tmp_path, catalog):
    shipped = next(r for r in catalog.benchmarks if r.model == "llama-3.1-8b" and r.gpu == "H100-SXM-80GB" and r.is_measurement)
    header = "source,model,gpu,gpus,tp,precision,isl,osl,concurrency,run_kind,request_throughput_rps,per"
    cells = [shipped.gpus, shipped.tp or "", shipped.precision or "", shipped.isl or "", shipped.osl or "",
             shipped.concurrency or "", shipped.run_kind, 1.0, shipped.per]  # fmt: skip
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "ours.csv").write_text(
        f"{header}\nour lab,meta-llama/Llama-3.1-8B-Instruct,H100," + ",".join(map(str, cells)) + "\n"
    )
    rows = [r for r in load_catalog(tmp_path).benchmarks if r.point_key == shipped.point_key]
    assert [(r.source, r.model, r.gpu) for r in rows] == [("our lab", "llama-3.1-8b", "H100-SXM-80GB")]


def test_a_price_override_may_name_its_system_by_alias(tmp_path):
    document = yaml.safe_load((SCENARIOS / "llama3-8b-assistant.yaml").read_text())
    site = document["sites"]["on_prem"]
    system = site["systems"][0]
    alias = next(a for a in load_catalog().systems[system].aliases)
    site["price_usd"] = {alias: 123_456.0}
    path = tmp_path / "priced.yaml"
    path.write_text(yaml.safe_dump(document))
    lines = [line for line in plan_file(path).lines if line.system == system]
    assert lines and all(line.capex_usd == pytest.approx(123_456.0 * line.nodes) for line in lines)


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"moe": {"experts": 8, "experts_per_token": 2, "active_params_b": 50}}, "exceeds params_b"),
        ({"moe": {"experts": 2, "experts_per_token": 8, "active_params_b": 5}}, "exceeds experts"),
        ({"kv_layers": 40}, "exceeds layers"),
        ({"mla": {"kv_lora_rank": 0, "rope_head_dim": 64}}, "greater than 0"),
    ],
)
def test_impossible_architecture_facts_are_refused(tmp_path, cli, fields, words):
    entry = {"id": "odd-model", "params_b": 10, "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
             "head_dim": 128, "source": "a test", **fields}  # fmt: skip
    (tmp_path / "models.yaml").write_text(yaml.safe_dump({"models": [entry]}))
    code, out, err = cli("catalog", "models", "--catalog", tmp_path)
    assert code == 2 and "models.yaml" in err and words in err and "Traceback" not in err, err
