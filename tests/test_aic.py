"""The aic perf source (aiconfigurator-core, the optional extra .[aic]).

Without the extra these tests are skipped (except the one that checks the message a user gets); `.ci/run`
installs the extra and runs this file once more.
"""

from __future__ import annotations

import importlib.util

from pathlib import Path

import pytest
import yaml

from planner.perf import PerfQuery
from helpers import SCENARIOS, write_scenario

INSTALLED = importlib.util.find_spec("aiconfigurator_core") is not None
needs_aic = pytest.mark.skipif(not INSTALLED, reason="the optional extra .[aic] (aiconfigurator-core) is not installed")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PLANNER_CACHE_DIR", str(tmp_path / "cache"))


def test_without_the_extra_asking_for_aic_says_how_to_get_it(cli):
    if INSTALLED:
        pytest.skip("the extra is installed: the tests below cover the source")
    code, out, err = cli("perf", "--model", "llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--tp", "1", "--precision", "fp8",
                         "--isl", "1024", "--osl", "128", "--perf-source", "aic")  # fmt: skip
    assert code == 2 and "pip install '.[aic]' in the planner checkout" in err and "Traceback" not in err
    # and everything else works as before: auto skips the package and falls through to the roofline
    # (700/300 is a point that no shipped table row, measured or estimated, covers)
    code, out, err = cli("perf", "--model", "llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--tp", "1", "--precision", "fp8",
                         "--isl", "700", "--osl", "300", "--perf-source", "auto")  # fmt: skip
    assert code == 0 and "provenance: modeled" in out


def _package_estimate(model_name, system, tp, gemm, kv, batch, isl, osl):
    """The package's own estimate, called as its `cli estimate` does (agg mode), independently of the adapter."""
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.config import RuntimeConfig
    from aiconfigurator_core.sdk.config_builders import build_model_config
    from aiconfigurator_core.sdk.models import get_model, resolve_context_fmha_by_data, resolve_nvfp4_for_system
    from aiconfigurator_core.sdk.perf_database import get_database_view, get_latest_database_version

    version = get_latest_database_version(system=system, backend="trtllm")
    database = get_database_view(system, "trtllm", version, allow_missing_data=False, database_mode="SILICON")
    config = build_model_config(tp, 1, 1, None, None, gemm, kv, None, None, None)
    resolve_context_fmha_by_data(config, model_name, database, "trtllm", is_context_role=True)
    resolve_nvfp4_for_system(config, system, model_name, backend_name="trtllm")
    summary = get_backend("trtllm").run_agg(get_model(model_name, config, "trtllm"), database,
                                            RuntimeConfig(isl=isl, osl=osl, batch_size=batch), ctx_tokens=isl)  # fmt: skip
    return summary.get_result_dict()


@needs_aic
def test_adapter_answer_equals_the_packages_own_estimate():
    from planner.perf import aic

    query = PerfQuery(model="llama-3.1-8b", gpu="H100-SXM-80GB", isl=1024, osl=128, concurrency=8)
    [point] = aic.aic_points(query, 80.0, 1, "fp8")
    reference = _package_estimate("meta-llama/Meta-Llama-3.1-8B", "h100_sxm", 1, "fp8", "fp8", 8, 1024, 128)
    assert point.ttft_ms == pytest.approx(float(reference["ttft"]), rel=1e-9)
    assert point.tpot_ms == pytest.approx(float(reference["tpot"]), rel=1e-9) and point.itl_ms is None  # it gives TPOT only
    assert point.output_tokens_per_s == pytest.approx(float(reference["tokens/s"]), rel=1e-9)
    assert point.request_throughput_rps == pytest.approx(float(reference["tokens/s"]) / 128, rel=1e-9)
    assert point.provenance.startswith(f"aic:{aic.package_version()}:trtllm:")


@needs_aic
@pytest.mark.parametrize(
    "model, gpu, precision, words",
    [
        ("llama-2-70b", "H100-SXM-80GB", "bf16", "not mapped to an aiconfigurator model"),
        ("llama-3.1-8b", "L4-24GB", "bf16", "no measured trtllm database for l4"),
    ],
)
def test_unsupported_combinations_say_why(cli, model, gpu, precision, words):
    code, out, err = cli("perf", "--model", model, "--gpu", gpu, "--tp", "1", "--precision", precision,
                         "--isl", "1024", "--osl", "128", "--perf-source", "aic", "--json")  # fmt: skip
    assert code == 1 and err.startswith(f"no answer for {model} on {gpu}"), err  # no answer: exit 1, the JSON says why
    import json

    document = json.loads(out)
    assert document["provenance"] == "none" and words in document["reason"]


@needs_aic
def test_an_unsupported_precision_is_a_miss_with_the_packages_reason():
    from planner.perf import aic

    answer = aic.aic_points(PerfQuery(model="llama-3.1-8b", gpu="A100-SXM-80GB", isl=1024, osl=128), 80.0, 1, "fp8")
    assert isinstance(answer, str) and "MissingSystemFlopsError" in answer


@needs_aic
def test_cache_answers_again_without_calling_the_package(tmp_path):
    from planner.perf import aic

    query = PerfQuery(model="llama-3.1-8b", gpu="H100-SXM-80GB", isl=512, osl=64)
    cache = aic.EstimateCache(tmp_path / "estimates.sqlite")
    first = aic.aic_points(query, 80.0, 1, "bf16", batches=(1, 4), cache=cache)
    assert cache.calls == 2
    second = aic.aic_points(query, 80.0, 1, "bf16", batches=(1, 4), cache=cache)
    assert cache.calls == 2 and second == first
    reopened = aic.EstimateCache(tmp_path / "estimates.sqlite")  # persistent: a new process would not call either
    assert aic.aic_points(query, 80.0, 1, "bf16", batches=(1, 4), cache=reopened) == first and reopened.calls == 0


@needs_aic
def test_multi_workload_plan_and_report_with_aic(tmp_path, cli):
    document = yaml.safe_load((SCENARIOS / "chat-and-summarize.yaml").read_text())
    document["perf"] = {"source": "aic"}
    scenario = write_scenario(tmp_path, document)
    code, out, err = cli("report", scenario, "--out", tmp_path / "report")
    assert code == 0, err
    report = (tmp_path / "report" / "report.md").read_text()
    assert "aic:" in report
    code, out, err = cli("plan", SCENARIOS / "chat-and-summarize.yaml", "--perf-source", "aic", "--json")
    assert code == 0, err
    import json

    provenances = {a["provenance"] for w in json.loads(out)["workloads"] for a in w["assignments"]}
    assert provenances and all(p.startswith("aic:") for p in provenances)


@needs_aic
def test_tables_build_rows_carry_the_aic_provenance(tmp_path, cli):
    out = tmp_path / "aic.csv"
    code, stdout, err = cli("tables", "build", "--models", "llama-3.1-8b", "--gpus", "H100-SXM-80GB,L4-24GB", "--tp", "1",
                            "--precisions", "bf16", "--concurrency", "1,8", "--lengths", "512x64", "--out", out)  # fmt: skip
    assert code == 0, err
    from planner.catalog import load_benchmark_table

    rows = load_benchmark_table(out)
    assert [r.concurrency for r in rows] == [1, 8] and all(r.provenance.startswith("aic:") for r in rows)
    assert "skipped llama-3.1-8b on L4-24GB bf16: aic: no measured trtllm database for l4" in stdout


def test_shipped_estimates_never_calibrate_and_yield_to_measurements(catalog, tmp_path):
    from planner.perf.calibration import calibration_rows
    from planner.perf.tables import matching_rows

    estimates = [r for r in catalog.benchmarks if r.table == "aic-llama.csv"]
    assert estimates and all(r.provenance.startswith("aic:") and not r.is_measurement for r in estimates)
    for architecture in ("hopper", "blackwell", "ampere", "ada"):
        assert all(r.is_measurement for r in calibration_rows(catalog, architecture))
    # a user's measurement of one engine (TP1 bf16) hides the estimates of that engine, not of the others
    from planner.catalog import load_catalog
    from helpers import BENCH_HEADER

    user = tmp_path / "lab"
    (user / "benchmarks").mkdir(parents=True)
    row = "our run,llama-3.1-8b,H100-SXM-80GB,1,1,bf16,1024,128,4,online,50,,8,,10.0,,instance,"
    (user / "benchmarks" / "ours.csv").write_text(BENCH_HEADER + "\n" + row + "\n")
    layered = load_catalog([user])
    query = PerfQuery(model="llama-3.1-8b", gpu="H100-SXM-80GB", isl=1024, osl=128)
    rows = matching_rows(layered, query)
    assert [r.source for r in rows if r.tp == 1 and r.precision == "bf16"] == ["our run"]
    assert any(not r.is_measurement for r in rows if r.tp == 2)


@needs_aic
def test_auto_answers_with_aic_where_the_roofline_would_extrapolate(catalog):
    from planner.perf import estimate

    # PCIe parts are calibrated at TP <= 2: an L40S engine at TP4 is beyond the roofline's timed range
    query = PerfQuery("llama-3.1-8b", "L40S-48GB", 1024, 128, tp=4, precision="bf16", concurrency=8)
    assert estimate(query, catalog).provenance == "extrapolated"
    assert estimate(query, catalog, sources=("measured", "interpolated", "modeled", "aic")).provenance.startswith("aic:")
    inside = PerfQuery("llama-3.1-8b", "L40S-48GB", 1024, 128, tp=1, precision="bf16", concurrency=8)
    assert estimate(inside, catalog, sources=("measured", "interpolated", "modeled", "aic")).provenance == "modeled (aic kernels)"


@needs_aic
def test_roofline_batch_one_decode_by_tp_tracks_the_packages_estimate(catalog):
    """An independent check of the all-reduce and fixed latencies: 70B fp8 on H100 at batch 1, TP 1-8."""
    from planner.perf import aic, estimate

    for tp in (1, 2, 4, 8):
        query = PerfQuery("llama-3.1-70b", "H100-SXM-80GB", 1024, 128, tp=tp, precision="fp8", concurrency=1)
        ours = estimate(query, catalog, sources=("modeled",))
        [theirs] = aic.aic_points(query, 80.0, tp, "fp8")
        assert ours.tpot_ms == pytest.approx(theirs.tpot_ms, rel=0.2), tp


@needs_aic
def test_the_shipped_step_table_holds_the_packages_own_iteration_times(catalog):
    from planner.perf import aic

    from planner.perf.types import Layout

    tables = {Path(t.path).name: t.frame for t in catalog.steps}
    for name, picks in (("aic-steps.csv", [0, 40, 400, 900, 1500]), ("aic-moe-steps.csv", [0, 100, 300, 600, 900])):
        for row in tables[name].iloc[picks].itertuples():
            if aic.database_version(aic.SYSTEM_NAMES[row.gpu], aic.DEFAULT_BACKEND) is None:
                continue
            layout = Layout(row.tp, row.dp, row.ep)  # the package's batch and prompts are per attention-DP rank
            live = aic.step_ms(row.model, row.gpu, row.tp, row.precision, row.decode_batch // row.dp,
                               row.decode_context_tokens, row.prefill_prompts // row.dp, row.prefill_isl, layout=layout)  # fmt: skip
            assert live.error is None and live.ttft_ms == pytest.approx(row.time_ms, rel=1e-4), (name, row)


@needs_aic
def test_engine_classes_bring_the_measured_serving_rows_closer():
    """The shipped engine classes against aiconfigurator-core's measured serving rows (silicon_sample.csv): for
    every class fitted (not the reference), on the rows of its current release line, the median |error| of output
    tokens/s per GPU is no worse than the reference roofline's, and the signed median is within 20% (the reference
    was 20-80% optimistic on SGLang/vLLM MoE; vLLM 0.12 on Hopper dense is the widest, -18%: its rows are Llama 3.1
    8B at TP4-8 with 100 output tokens, whose 7-9 ms TPOT two scales cannot reach while fitting the others).
    In-sample: the held-out errors are the classes' stated expected_error."""
    import statistics
    import sys
    from pathlib import Path

    from planner.catalog import load_catalog
    from planner.perf.calibration import efficiency_for
    from planner.perf.engines import engine_classes, scaled

    spec = importlib.util.spec_from_file_location(
        "engine_classes", Path(__file__).resolve().parent.parent / "benchmarks" / "calibration" / "engine_classes.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["engine_classes"] = module
    spec.loader.exec_module(module)
    catalog = load_catalog()
    cases, _ = module.cases(catalog)
    checked = 0
    for key, cls in engine_classes().items():
        if (cls.engine, cls.kind) == module.REFERENCE or "silicon_sample.csv" not in cls.source:
            continue  # the reference; or a class of the shared reference files (AMD: tests/test_reference_rows.py)
        rows = [c for c in cases if (c.engine, c.architecture, c.kind) == key]
        lines = dict(module.line_groups(rows))
        group = [c for c in rows if c.line in lines.get(cls.release_line, ())]
        if len(group) < module.MIN_VERSION_ROWS:
            continue  # its current line's rows are the public ones
        base = efficiency_for(catalog, key[1])
        before = [e["throughput"] for c in group if (e := c.errors(base))]
        after = [e["throughput"] for c in group if (e := c.errors(scaled(base, cls)))]
        assert statistics.median(map(abs, after)) <= statistics.median(map(abs, before)) + 0.02, key
        assert abs(statistics.median(after)) <= 0.20, (key, statistics.median(after))
        checked += 1
    assert checked >= 6


@needs_aic
def test_stated_expected_error_covers_most_measured_rows():
    """Every answer's expected_error (its class's held-out band) against aiconfigurator-core's measured serving rows
    within one node: the stated throughput band covers at least 70% of the rows' errors, for dense models and for
    mixtures of experts alike (a quarter of the rows, every fourth)."""
    from planner.catalog import load_catalog
    from planner.perf.engines import engine_error

    spec = importlib.util.spec_from_file_location(
        "silicon_accuracy", Path(__file__).resolve().parent.parent / "benchmarks" / "silicon_accuracy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    catalog = load_catalog()
    rows = [r for r in module.silicon_rows() if r["mode"] == "agg" and module.layout_of(r).gpus <= 8][::4]
    covered: dict[str, list[bool]] = {"dense": [], "moe": []}
    for row in rows:
        answer = module.ask(row, catalog)
        if isinstance(answer, str):
            continue
        band = engine_error(catalog, answer["model"], answer["gpu"], answer["engine"]).throughput
        covered[answer["kind"]].append(abs(answer["throughput"]) <= band)
    for kind, hits in covered.items():
        assert len(hits) >= 100, kind
        assert sum(hits) / len(hits) >= 0.7, (kind, sum(hits) / len(hits))


@needs_aic
def test_aic_answers_moe_models_at_the_querys_engine_and_layout():
    """`--perf-source aic` maps MoE models and the package's other backends: gpt-oss-120b at w4a16 on one H100 with
    vLLM, and DeepSeek-R1 DEP8 with SGLang, whose per-rank batch is the instance's concurrency / DP."""
    from planner.perf import aic
    from planner.perf.types import Layout

    query = PerfQuery("gpt-oss-120b", "H100-SXM-80GB", 1024, 256, concurrency=16, engine="vllm")
    [point] = aic.aic_points(query, 80.0, 1, "w4a16")
    assert point.engine == "vllm" and ":vllm:" in point.provenance and point.output_tokens_per_s > 0
    dep = PerfQuery("deepseek-r1", "H200-SXM-141GB", 1024, 256, concurrency=64, engine="sglang", layout=Layout(1, 8, 8))
    answer = aic.aic_points(dep, 141.0, 1, "fp8")
    assert not isinstance(answer, str), answer
    [point] = answer
    assert point.concurrency == 64 and point.gpus_per_instance == 8 and (point.dp, point.ep) == (8, 8)
    assert "batch 8 per DP rank" in point.source and ":sglang:" in point.provenance
