"""Ingesting benchmark results (vllm bench serve, genai-perf, GuideLLM) into catalog rows, and planning with them.

Fixtures under tests/fixtures/ingest/<tool>/ are shaped from each tool's own exporter source (FORMAT.md there).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from planner.api import plan_file
from planner.catalog import load_benchmark_table, load_catalog
from planner.errors import PlannerInputError
from planner.ingest import IngestOptions, ingest
from helpers import INGEST_FIXTURES, write_scenario

FIXTURES = INGEST_FIXTURES
VLLM = FIXTURES / "vllm"
H100 = "H100-SXM-80GB"


def options(**overrides) -> IngestOptions:
    values = dict(model="llama-3.1-8b", gpu=H100, tp=1, precision="bf16")
    values.update(overrides)
    return IngestOptions(**values)


# ---- vllm bench serve ----


def test_vllm_sweep_directory_gives_one_row_per_concurrency(catalog):
    result = ingest("vllm", [VLLM / "sweep"], options(), catalog)
    assert [row.concurrency for row in result.rows] == [1, 8, 32]
    assert {(row.isl, row.osl) for row in result.rows} == {(1024, 128)}
    c8 = result.rows[1]
    raw = json.loads(next((VLLM / "sweep").glob("*concurrency8-*")).read_text())
    assert c8.ttft_ms == raw["median_ttft_ms"] and c8.tpot_ms == raw["median_tpot_ms"] and c8.statistic == "median"
    assert c8.request_throughput_rps == raw["request_throughput"] and c8.output_tokens_per_s == raw["output_throughput"]
    assert c8.source.startswith("vllm bench serve") and "concurrency8" in c8.source
    assert "meta-llama/Llama-3.1-8B-Instruct" in c8.notes and "latencies: median" in c8.notes
    assert (c8.gpus, c8.tp, c8.per) == (1, 1, "instance")


def test_vllm_statistic_choice_and_missing_percentile(catalog):
    result = ingest("vllm", [VLLM / "sweep" / next(p.name for p in (VLLM / "sweep").glob("*concurrency8-*"))],
                    options(statistic="p90"), catalog)  # fmt: skip
    raw = json.loads(next((VLLM / "sweep").glob("*concurrency8-*")).read_text())
    assert result.rows[0].ttft_ms == raw["p90_ttft_ms"]
    with pytest.raises(PlannerInputError) as error:  # the c1 run recorded only p99
        ingest("vllm", [next((VLLM / "sweep").glob("*concurrency1-*"))], options(statistic="p90"), catalog)
    assert error.value.field == "p90_ttft_ms" and "p99_ttft_ms" in str(error.value)


@pytest.mark.parametrize(
    "name, field, words",
    [
        ("missing_ttft.json", "median_ttft_ms", "missing key 'median_ttft_ms'"),
        ("truncated.json", "line 1", "not valid JSON"),
        ("genai_perf_instead.json", "model_id", "missing key 'model_id'"),
    ],
)
def test_vllm_malformed_files_name_the_missing_key(catalog, name, field, words):
    with pytest.raises(PlannerInputError) as error:
        ingest("vllm", [VLLM / "malformed" / name], options(), catalog)
    assert error.value.field == field and words in str(error.value)


def test_rate_driven_run_gets_littles_law_concurrency(tmp_path, catalog):
    raw = json.loads(next((VLLM / "sweep").glob("*concurrency8-*")).read_text())
    raw.update(max_concurrency=None, request_rate=8.0)
    path = tmp_path / "rate.json"
    path.write_text(json.dumps(raw))
    row = ingest("vllm", [path], options(), catalog).rows[0]
    assert row.concurrency == round(raw["request_throughput"] * raw["mean_e2el_ms"] / 1000)
    assert "Little's law" in row.notes


def test_options_are_checked_against_the_catalog(catalog):
    with pytest.raises(PlannerInputError, match="unknown model 'llama-9b'"):
        ingest("vllm", [VLLM / "sweep"], options(model="llama-9b"), catalog)
    with pytest.raises(PlannerInputError, match="does not support fp4"):
        ingest("vllm", [VLLM / "sweep"], options(precision="fp4"), catalog)
    with pytest.raises(PlannerInputError, match="required"):
        ingest("vllm", [VLLM / "sweep"], options(gpu=None), catalog)


def test_node_option_measures_a_whole_system(catalog):
    row = ingest("vllm", [VLLM / "sweep"], options(gpu=None, node="dgx-h100"), catalog).rows[0]
    assert (row.gpu, row.gpus, row.per) == (H100, 8, "node")


def test_cli_writes_a_table_the_catalog_loader_reads(tmp_path, cli):
    out = tmp_path / "my-lab" / "benchmarks" / "vllm.csv"
    code, stdout, err = cli("ingest", "vllm", VLLM / "sweep", "--model", "llama-3.1-8b", "--gpu", H100, "--tp", "1", "--precision", "bf16", "--out", out)
    assert code == 0, err
    assert f"--catalog {tmp_path / 'my-lab'}" in stdout
    rows = load_benchmark_table(out)
    assert [r.concurrency for r in rows] == [1, 8, 32]


def test_cli_bad_file_exits_2_and_writes_nothing(tmp_path, cli):
    out = tmp_path / "rows.csv"
    code, stdout, err = cli("ingest", "vllm", VLLM / "malformed" / "truncated.json", "--model", "llama-3.1-8b",
                            "--gpu", H100, "--tp", "1", "--precision", "bf16", "--out", out)  # fmt: skip
    assert code == 2 and "truncated.json" in err and "Traceback" not in err
    assert not out.exists()


def test_same_files_same_bytes(catalog):
    first = ingest("vllm", [VLLM / "sweep"], options(), catalog).csv_text()
    assert first == ingest("vllm", [VLLM / "sweep"], options(), catalog).csv_text()


# ---- the loop: ingest, then plan with the user's rows ----


def _scenario(tmp_path: Path) -> Path:
    document = {
        "name": "byo-llama-8b",
        "workloads": [{
            "name": "chat", "model": "llama-3.1-8b", "isl_tokens": 1024, "osl_tokens": 128, "peak_rps": 30,
            "precisions": ["bf16"], "slo": {"ttft_ms": 300, "itl_ms": 20},
        }],
        "sites": {"on_prem": {"systems": ["dgx-h100"]}},
        "engine": {"tp_ladder": [1]},  # the engine the user measured (other TPs have shipped aic estimates)
    }  # fmt: skip
    return write_scenario(tmp_path, document)


def test_planning_with_ingested_rows_switches_provenance_to_them(tmp_path, catalog):
    scenario = _scenario(tmp_path)
    before = plan_file(scenario)
    # without the user's rows: the shipped aic estimates (or the roofline), never a measurement
    assert all(a.provenance == "modeled" or a.provenance.startswith("aic:") for w in before.workloads for a in w.assignments)

    user = tmp_path / "my-lab"
    (user / "benchmarks").mkdir(parents=True)
    (user / "catalog.yaml").write_text("name: my-lab\n")
    (user / "benchmarks" / "vllm-sweep.csv").write_text(ingest("vllm", [VLLM / "sweep"], options(), catalog).csv_text())
    after = plan_file(scenario, [user])
    assignments = [a for w in after.workloads for a in w.assignments]
    # the user's rows, or the roofline anchored on them beyond their last concurrency
    assert assignments and all(a.provenance in ("measured", "interpolated", "modeled") for a in assignments)
    assert all("[my-lab] vllm bench serve" in a.source for a in assignments)
    assert load_catalog([user]).layers == ("shipped", "my-lab")


def test_fixture_directories_are_not_modified(tmp_path, catalog):
    copy = tmp_path / "sweep"
    shutil.copytree(VLLM / "sweep", copy)
    ingest("vllm", [copy], options(), catalog)
    assert sorted(p.name for p in copy.iterdir()) == sorted(p.name for p in (VLLM / "sweep").iterdir())


# ---- genai-perf / AIPerf ----

GENAI = FIXTURES / "genai-perf"


def test_genai_perf_new_layout_sweep(catalog):
    result = ingest("genai-perf", [GENAI / "new-layout"], options(), catalog)
    assert [row.concurrency for row in result.rows] == [1, 8, 32]
    assert {(row.isl, row.osl) for row in result.rows} == {(2048, 128)}
    run_dir = next((GENAI / "new-layout").glob("*-concurrency8"))
    raw = json.loads((run_dir / "profile_export_genai_perf.json").read_text())
    c8 = result.rows[1]
    assert c8.ttft_ms == raw["time_to_first_token"]["p50"] and c8.tpot_ms == raw["inter_token_latency"]["p50"]
    assert c8.request_throughput_rps == raw["request_throughput"]["avg"]
    assert c8.output_tokens_per_s == raw["output_token_throughput"]["avg"]
    assert c8.source == f"genai-perf (version not recorded): {run_dir.name}/profile_export_genai_perf.json"
    # a directory holding both exports is read once, from the JSON
    assert len(result.rows) == len(list((GENAI / "new-layout").glob("*/profile_export_genai_perf.json")))


@pytest.mark.parametrize("layout", ["old-layout", "old-layout-0.0.8"])
def test_genai_perf_old_flat_layout(catalog, layout):
    raw = json.loads((GENAI / layout / "profile_export_genai_perf.json").read_text())
    row = ingest("genai-perf", [GENAI / layout], options(statistic="mean"), catalog).rows[0]
    assert row.concurrency == raw["input_config"]["concurrency"] == 16
    assert row.ttft_ms == raw["time_to_first_token"]["avg"] and "latencies: mean" in row.notes


def test_genai_perf_analyze_sweep_reads_concurrency_from_the_run_directory(catalog):
    rows = ingest("genai-perf", [GENAI / "analyze-sweep"], options(), catalog).rows
    assert [row.concurrency for row in rows] == [8, 16, 32]
    assert all("directory's name" in row.notes for row in rows)


def test_aiperf_export_names_its_version(catalog):
    row = ingest("genai-perf", [GENAI / "aiperf"], options(), catalog).rows[0]
    assert row.source.startswith("aiperf (0.13.0)") and row.concurrency == 8


def test_non_streaming_run_records_no_latencies(catalog):
    row = ingest("genai-perf", [GENAI / "non-streaming"], options(), catalog).rows[0]
    assert row.ttft_ms is None and row.tpot_ms is None and row.itl_ms is None and "non-streaming" in row.notes


def test_genai_perf_csv_with_quoted_numbers(tmp_path, catalog):
    run = tmp_path / "meta-llama_Llama-3.1-8B-Instruct-openai-chat-concurrency32"
    run.mkdir()
    shutil.copy(GENAI / "csv" / "profile_export_genai_perf.csv", run)
    row = ingest("genai-perf", [run], options(), catalog).rows[0]
    assert row.concurrency == 32 and row.isl == 2048  # "2,047.98" read as 2047.98
    assert row.ttft_ms == 245.18 and row.output_tokens_per_s == 1688.48  # quoted "1,688.48"
    json_row = ingest("genai-perf", [GENAI / "new-layout"], options(), catalog).rows[-1]
    assert row.request_throughput_rps == pytest.approx(json_row.request_throughput_rps, abs=0.01)


def test_genai_perf_csv_without_concurrency_needs_the_option(catalog):
    path = GENAI / "csv" / "profile_export_genai_perf_0.0.8.csv"
    with pytest.raises(PlannerInputError, match="records no concurrency"):
        ingest("genai-perf", [path], options(), catalog)
    row = ingest("genai-perf", [path], options(concurrency=16), catalog).rows[0]
    assert row.concurrency == 16 and row.tpot_ms == 11.53


def test_rate_run_gets_littles_law_concurrency(catalog):
    row = ingest("genai-perf", [GENAI / "malformed" / "no_concurrency.json"], options(), catalog).rows[0]
    assert "Little's law" in row.notes and row.concurrency >= 1


@pytest.mark.parametrize(
    "name, field, words",
    [
        ("missing_ttft.json", "time_to_first_token", "missing key 'time_to_first_token'"),
        ("not_json.json", "line 1", "not valid JSON"),
    ],
)
def test_genai_perf_malformed_files(catalog, name, field, words):
    with pytest.raises(PlannerInputError) as error:
        ingest("genai-perf", [GENAI / "malformed" / name], options(), catalog)
    assert error.value.field == field and words in str(error.value)


def test_a_vllm_file_is_not_a_genai_perf_export(tmp_path, catalog):
    source = next((VLLM / "sweep").glob("*concurrency8-*"))
    target = tmp_path / "profile_export_genai_perf.json"
    shutil.copy(source, target)
    with pytest.raises(PlannerInputError) as error:
        ingest("genai-perf", [target], options(), catalog)
    assert error.value.field == "input_config" and "missing key 'input_config'" in str(error.value)


def test_concurrency_option_needs_a_single_run(catalog):
    with pytest.raises(PlannerInputError, match="applies to one run"):
        ingest("genai-perf", [GENAI / "new-layout"], options(concurrency=4), catalog)


# ---- GuideLLM ----

GUIDELLM = FIXTURES / "guidellm"


def test_guidellm_report_gives_one_row_per_benchmark(catalog):
    report = json.loads((GUIDELLM / "benchmarks.json").read_text())
    rows = ingest("guidellm", [GUIDELLM / "benchmarks.json"], options(), catalog).rows
    assert len(rows) == len(report["benchmarks"])
    assert {(row.isl, row.osl) for row in rows} == {(512, 256)}
    first = report["benchmarks"][0]
    synchronous = next(row for row in rows if "strategy synchronous" in row.notes)
    metrics = first["metrics"]
    assert synchronous.concurrency == 1
    assert synchronous.ttft_ms == metrics["time_to_first_token_ms"]["successful"]["median"]
    assert synchronous.tpot_ms == metrics["inter_token_latency_ms"]["successful"]["median"]
    assert synchronous.request_throughput_rps == metrics["requests_per_second"]["successful"]["mean"]
    assert synchronous.source == "guidellm (0.8.1): guidellm/benchmarks.json"
    # rate-driven strategies take the measured mean concurrency
    for benchmark in report["benchmarks"][1:]:
        expected = round(benchmark["metrics"]["request_concurrency"]["successful"]["mean"])
        assert any(row.concurrency == max(1, expected) for row in rows)


def test_guidellm_percentile_statistic(catalog):
    report = json.loads((GUIDELLM / "benchmarks.json").read_text())
    row = next(r for r in ingest("guidellm", [GUIDELLM / "benchmarks.json"], options(statistic="p95"), catalog).rows
               if r.concurrency == 1)  # fmt: skip
    assert row.ttft_ms == report["benchmarks"][0]["metrics"]["time_to_first_token_ms"]["successful"]["percentiles"]["p95"]


@pytest.mark.parametrize(
    "name, field, words",
    [
        ("no_metrics.json", "benchmarks[0].metrics", "missing key 'metrics'"),
        ("empty_benchmarks.json", "benchmarks", "holds no benchmarks"),
        ("wrong_tool.json", "benchmarks", "missing key 'benchmarks'"),
    ],
)
def test_guidellm_malformed_reports(catalog, name, field, words):
    with pytest.raises(PlannerInputError) as error:
        ingest("guidellm", [GUIDELLM / "malformed" / name], options(), catalog)
    assert error.value.field == field and words in str(error.value)


def test_guidellm_yaml_report(tmp_path, catalog):
    import yaml

    report = json.loads((GUIDELLM / "benchmarks.json").read_text())
    (tmp_path / "benchmarks.yaml").write_text(yaml.safe_dump(report))
    def numbers(rows):
        return [(r.concurrency, r.isl, r.osl, r.ttft_ms, r.tpot_ms, r.itl_ms, r.request_throughput_rps, r.output_tokens_per_s) for r in rows]

    from_yaml = ingest("guidellm", [tmp_path], options(), catalog).rows
    from_json = ingest("guidellm", [GUIDELLM / "benchmarks.json"], options(), catalog).rows
    assert numbers(from_yaml) == numbers(from_json) and from_yaml[0].source.endswith("benchmarks.yaml")


def test_guidellm_legacy_layout(catalog):
    report = json.loads((GUIDELLM / "old" / "benchmarks.json").read_text())
    rows = ingest("guidellm", [GUIDELLM / "old"], options(), catalog).rows
    assert len(rows) == len(report["benchmarks"])
    first = report["benchmarks"][0]
    assert first["worker"]["backend_model"] in rows[0].notes  # the model from the 0.3 layout
    synchronous = next(row for row in rows if "strategy synchronous" in row.notes)
    assert synchronous.ttft_ms == first["metrics"]["time_to_first_token_ms"]["successful"]["median"]
    assert synchronous.source == "guidellm (version not recorded): old/benchmarks.json"


@pytest.mark.parametrize(
    "tool, path, isl, osl",
    [
        ("vllm", VLLM / "sweep", 1024, 128),
        ("genai-perf", GENAI / "new-layout", 2048, 128),
        ("guidellm", GUIDELLM / "benchmarks.json", 512, 256),
    ],
)
def test_cli_loop_ingest_then_plan_on_the_users_rows(tmp_path, cli, tool, path, isl, osl):
    catalog_dir = tmp_path / "my-lab"
    code, out, err = cli("ingest", tool, path, "--model", "llama-3.1-8b", "--gpu", H100, "--tp", "1", "--precision", "bf16",
                         "--out", catalog_dir / "benchmarks" / f"{tool}.csv")  # fmt: skip
    assert code == 0, err
    document = {
        "name": "loop", "catalog": "my-lab",
        "workloads": [{"name": "chat", "model": "llama-3.1-8b", "isl_tokens": isl, "osl_tokens": osl, "peak_rps": 20,
                       "precisions": ["bf16"], "slo": {"ttft_ms": 1000, "itl_ms": 60}}],
        "sites": {"on_prem": {"systems": ["dgx-h100"]}}, "engine": {"tp_ladder": [1]},
    }  # fmt: skip
    scenario = write_scenario(tmp_path, document)
    code, out, err = cli("plan", scenario, "--json")
    assert code == 0, err
    assignments = [a for w in json.loads(out)["workloads"] for a in w["assignments"]]
    # the user's rows, or the roofline anchored on them beyond their last concurrency
    assert assignments and all(a["provenance"] in ("measured", "interpolated", "modeled") for a in assignments)
    assert all(f"[{catalog_dir}] {tool}" in a["source"] or f"[{catalog_dir}] vllm bench serve" in a["source"]
               for a in assignments)  # fmt: skip


def _vllm_run(rate, ttft_of_isl) -> dict:
    """A `vllm bench serve --save-result --save-detailed` document of 200 requests with prompts of 50-900 tokens."""
    lengths = [50 + (i * 37) % 850 for i in range(200)]
    ttfts = [ttft_of_isl(isl, i) / 1e3 for i, isl in enumerate(lengths)]  # vLLM records seconds
    return {
        "model_id": "meta-llama/Llama-3.3-70B-Instruct", "completed": 200, "duration": 60.0, "request_rate": rate,
        "max_concurrency": None, "total_input_tokens": sum(lengths), "total_output_tokens": 200 * 200,
        "request_throughput": 3.3, "output_throughput": 660.0, "median_ttft_ms": 60.0, "median_tpot_ms": 25.0,
        "median_itl_ms": 25.0, "mean_ttft_ms": 60.0, "mean_tpot_ms": 25.0, "mean_e2el_ms": 5000.0,
        "input_lens": lengths, "output_lens": [200] * 200, "ttfts": ttfts,
    }  # fmt: skip


@pytest.mark.parametrize(("rate", "ttft_of_isl", "cached"), [
    (4.0, lambda isl, i: 40 + (i * 7919) % 50, True),  # TTFT unrelated to the prompt: the prefix cache answered
    (4.0, lambda isl, i: 20 + 0.12 * isl + (i * 7919) % 50, False),  # a cold prefill: TTFT grows with the prompt
    ("inf", lambda isl, i: 40 + (i * 7919) % 50, False),  # everything sent at once: TTFT is the queue, not judged
])  # fmt: skip
def test_vllm_runs_served_from_the_prefix_cache_keep_no_ttft(tmp_path, catalog, rate, ttft_of_isl, cached):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_vllm_run(rate, ttft_of_isl)))
    options = IngestOptions(model="llama-3.3-70b", gpu="H100-SXM-80GB", tp=8, precision="bf16")
    (row,) = ingest("vllm", [path], options, catalog).rows
    assert (row.ttft_ms is None) == cached
    assert ("prefix cache" in row.notes) == cached
    assert row.tpot_ms == 25.0 and row.request_throughput_rps == 3.3  # the rest of the run is kept either way


def test_a_structure_of_the_wrong_type_is_refused_naming_its_field(tmp_path, catalog):
    """A mapping given as a list or a text (AIPerf `models`, GuideLLM `strategy`) names the field, not a Python
    AttributeError."""
    report = json.loads((GUIDELLM / "benchmarks.json").read_text())
    report["benchmarks"][0]["config"]["strategy"] = "sweep"
    (tmp_path / "guidellm").mkdir()
    (tmp_path / "guidellm" / "benchmarks.json").write_text(json.dumps(report))
    with pytest.raises(PlannerInputError) as error:
        ingest("guidellm", [tmp_path / "guidellm" / "benchmarks.json"], options(), catalog)
    assert error.value.field == "benchmarks[0].config.strategy" and "AttributeError" not in str(error.value)
    source = GENAI / "aiperf" / "meta-llama_Llama-3.1-8B-Instruct-openai-chat-concurrency8"
    target = tmp_path / "aiperf" / source.name
    target.mkdir(parents=True)
    export = json.loads((source / "profile_export_aiperf.json").read_text())
    export["input_config"]["models"] = ["meta-llama/Llama-3.1-8B-Instruct"]
    (target / "profile_export_aiperf.json").write_text(json.dumps(export))
    with pytest.raises(PlannerInputError) as error:
        ingest("genai-perf", [target / "profile_export_aiperf.json"], options(), catalog)
    assert error.value.field == "input_config.models" and "AttributeError" not in str(error.value)
