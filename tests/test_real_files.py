"""Real benchmark outputs and traces as users have them (`../shared/real/`, SOURCES.md there says what a correct
reader gets). They are their owners' data: read from where they are, never copied here; every test skips when the
folder is absent (a user's clone has none). PLANNER_REAL_DIR points elsewhere."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import REAL_DIR

from planner.catalog import load_benchmark_table
from planner.errors import PlannerInputError
from planner.ingest import IngestOptions, ingest
from planner.traces import load_trace

REAL = REAL_DIR
BENCH = REAL / "bench"
TRACES = REAL / "traces"
pytestmark = pytest.mark.skipif(not (REAL / "SOURCES.md").is_file(), reason=f"no real files at {REAL}")

# the runs at 4 and 16 requests/s replayed prompts the one at 1 request/s had put in vLLM's prefix cache: their TTFT
# (49.5 and 58.1 ms in the files) does not grow with the prompt (corr 0.08, 0.14; 0.94 at 1 request/s), so their rows
# keep no TTFT; the run at rate inf is not judged (its TTFT is its place in the queue)
VLLM_RUNS = {"01": (56.4, 24.5, "request-rate", 1.0), "04": (None, 27.3, "request-rate", 4.0),
             "16": (None, 31.7, "request-rate", 16.0), "inf": (349.8, 37.0, "max-throughput", None)}  # fmt: skip
GENAI_CONCURRENCY = (1, 2, 5, 10, 50, 100, 250)
AIPERF_RUNS = {"chatbot/c8": (8, "online", None), "agent/c16": (16, "online", None), "chatbot/r1.0": (None, "request-rate", 1.0)}
GUIDELLM = {  # file name part -> (catalog model, TP, precision)
    "Qwen3-4B-Thinking-2507_tp4_quant-fp8": ("qwen3-4b-2507", 4, "fp8"),
    "Qwen3-4B-Thinking-2507_tp2_quant-fp8": ("qwen3-4b-2507", 2, "fp8"),
    "Qwen3-30B-A3B_tp4_quant-fp8": ("qwen3-30b-a3b", 4, "fp8"),
    "gpt-oss-20b_tp4_quant-none": ("gpt-oss-20b", 4, "fp4"),
}


def _one(paths, tool="vllm", **options):
    values = {"gpu": "A100", "precision": "bf16"} if tool == "vllm" else {}
    values.update(options)
    return ingest(tool, paths, IngestOptions(**values), _catalog())


def _catalog():
    from planner.catalog import load_catalog

    return load_catalog()


# ---- vllm bench serve: Llama 3.3 70B TP8 on Azure ND96asr_v4 (8 x A100 40GB), request-rate runs ----


@pytest.mark.parametrize("qps", sorted(VLLM_RUNS))
def test_vllm_run_by_name_reads_what_sources_says(qps):
    ttft, tpot, kind, rate = VLLM_RUNS[qps]
    path = BENCH / "vllm" / f"llama70b_tp8_qps_{qps}.json"
    result = _one([path])
    (row,) = result.rows
    raw = json.loads(path.read_text())
    assert round(raw["total_input_tokens"] / raw["completed"]) == 213 == row.isl
    assert (row.ttft_ms if ttft is None else round(row.ttft_ms, 1)) == ttft and round(row.tpot_ms, 1) == tpot
    assert ("prefix cache" in row.notes) == (ttft is None)
    assert row.run_kind == kind and (row.model, row.tp, row.gpus, row.gpu) == ("llama-3.3-70b", 8, 8, "A100-SXM-40GB")
    assert "TP 8 from the path" in row.notes and "model llama-3.3-70b from the file's 'meta-llama/Llama-3.3-70B-Instruct'" in row.notes
    if rate is not None:
        assert f"offered {rate:g} rps" in row.notes and "Little's law" in row.notes
        # Little's law on means: the mean in flight is rps x mean E2E, whatever latency statistic is reported
        mean_e2e_s = (raw["mean_ttft_ms"] + (raw["total_output_tokens"] / raw["completed"] - 1) * raw["mean_tpot_ms"]) / 1000
        assert row.concurrency == max(1, round(raw["request_throughput"] * mean_e2e_s))
        assert _one([path], statistic="p99").rows[0].concurrency == row.concurrency
    else:
        assert row.concurrency is None


def test_vllm_directory_skips_the_summary_table_beside_the_runs():
    result = _one([BENCH / "vllm"])
    assert sorted(r.run_kind for r in result.rows) == ["max-throughput"] + ["request-rate"] * 3
    assert any("benchmark_results_tp8.json" in s and "summary table" in s for s in result.skipped)
    assert any(n.startswith("skipped") for n in result.notes)


def test_vllm_summary_table_named_alone_is_refused_with_the_reason():
    with pytest.raises(PlannerInputError, match="summary table.*not a run"):
        _one([BENCH / "vllm" / "benchmark_results_tp8.json"])


def test_vllm_precision_is_required_and_the_shape_must_fit(tmp_path):
    path = BENCH / "vllm" / "llama70b_tp8_qps_04.json"
    with pytest.raises(PlannerInputError) as error:
        _one([path], precision=None)
    assert error.value.field == "precision" and "required" in str(error.value)
    with pytest.raises(PlannerInputError, match="says TP 8"):  # the option contradicts the path
        _one([path], tp=1)
    shutil.copy(path, tmp_path / "run.json")  # a name that states no TP
    with pytest.raises(PlannerInputError) as error:
        _one([tmp_path / "run.json"])
    assert error.value.field == "tp" and "give --tp" in str(error.value)
    with pytest.raises(PlannerInputError, match="141 GB of weights.*more than the 40 GB"):
        _one([tmp_path / "run.json"], tp=1)


# ---- genai-perf: NIM Llama 3 8B, one run per concurrency ----


def test_genai_perf_directory_gives_the_concurrencies_of_the_folder_names():
    result = _one([BENCH / "genai-perf" / "fdorado"], tool="genai-perf", gpu="H100", tp=1, precision="bf16")
    assert [r.concurrency for r in result.rows] == list(GENAI_CONCURRENCY)
    assert {r.model for r in result.rows} == {"llama-3-8b"}  # 'meta/llama3-8b-instruct', NIM's served name
    for row in result.rows:
        folder = row.source.split(": ")[1].split("/")[0]
        assert folder == f"c{row.concurrency}"


@pytest.mark.parametrize("concurrency", GENAI_CONCURRENCY)
def test_genai_perf_run_by_name(concurrency):
    path = BENCH / "genai-perf" / "fdorado" / f"c{concurrency}" / "profile_export_genai_perf.json"
    (row,) = _one([path], tool="genai-perf", gpu="H100", tp=1, precision="bf16").rows
    raw = json.loads(path.read_text())
    assert row.concurrency == concurrency and row.run_kind == "online"
    assert row.ttft_ms == raw["time_to_first_token"]["p50"] and row.tpot_ms == raw["inter_token_latency"]["p50"]


@pytest.mark.parametrize("concurrency", GENAI_CONCURRENCY)
def test_genai_perf_csv_export_by_name_agrees_with_the_json(concurrency):
    folder = BENCH / "genai-perf" / "fdorado" / f"c{concurrency}"
    options = {"tool": "genai-perf", "gpu": "H100", "tp": 1, "precision": "bf16"}
    with pytest.raises(PlannerInputError, match="records no model name; give --model"):
        _one([folder / "profile_export_genai_perf.csv"], **options)
    (row,) = _one([folder / "profile_export_genai_perf.csv"], model="meta/llama3-8b-instruct", **options).rows
    (json_row,) = _one([folder / "profile_export_genai_perf.json"], **options).rows
    assert row.concurrency == concurrency and f"read from the run directory's name 'c{concurrency}'" in row.notes
    assert row.ttft_ms == pytest.approx(json_row.ttft_ms, abs=0.01) and row.tpot_ms == pytest.approx(json_row.tpot_ms, abs=0.01)
    assert row.request_throughput_rps == pytest.approx(json_row.request_throughput_rps, abs=0.01)


def test_genai_perf_streaming_not_recorded_but_evident_is_kept(tmp_path):
    raw = json.loads((BENCH / "genai-perf" / "fdorado" / "c50" / "profile_export_genai_perf.json").read_text())
    del raw["input_config"]["streaming"]
    (tmp_path / "c50").mkdir()
    path = tmp_path / "c50" / "profile_export_genai_perf.json"
    path.write_text(json.dumps(raw))
    (row,) = _one([path], tool="genai-perf", gpu="H100", tp=1, precision="bf16").rows
    assert row.ttft_ms == raw["time_to_first_token"]["p50"] and row.tpot_ms == raw["inter_token_latency"]["p50"]
    assert "streaming not recorded; streamed" in row.notes


# ---- AIPerf 0.10: phases without `kind`, a Poisson rate run; Qwen3.6 35B-A3B NVFP4 on an RTX 5090 ----


@pytest.mark.parametrize("run", sorted(AIPERF_RUNS))
def test_aiperf_runs_record_their_concurrency_or_rate(run):
    concurrency, kind, rate = AIPERF_RUNS[run]
    (row,) = _one([BENCH / "aiperf" / "5090" / run / "profile_export_aiperf.json"], tool="aiperf", gpu="RTX5090", tp=1).rows
    assert row.run_kind == kind
    if concurrency is not None:
        assert row.concurrency == concurrency
    else:
        assert f"offered {rate:g} rps" in row.notes and "poisson" in row.notes
    # the served name 'qwen3.6-nvfp4' is the user's own; the tokenizer's Hugging Face id names the model and its precision
    assert (row.model, row.precision, row.gpu) == ("qwen3.6-35b-a3b", "fp4", "RTX-5090-32GB")


def test_aiperf_directory_and_tp_required(cli):
    folder = BENCH / "aiperf"
    code, out, err = cli("ingest", "aiperf", folder, "--gpu", "RTX5090")
    assert code == 2 and "--tp" in err and "Traceback" not in err
    code, out, err = cli("ingest", "aiperf", folder, "--gpu", "RTX5090", "--tp", "1")
    assert code == 0, err
    assert out.count("aiperf (0.10.0)") == 3


# ---- GuideLLM 0.5: *_benchmarks.json, model, TP and quantization in the file names ----


def test_guidellm_directory_finds_every_report_with_its_engine():
    # the reports do not record the GPU; B200 runs every precision their names state (gpt-oss: MXFP4 experts)
    result = _one([BENCH / "guidellm"], tool="guidellm", gpu="B200")
    assert len({r.source for r in result.rows}) == 4
    for part, (model, tp, precision) in GUIDELLM.items():
        rows = [r for r in result.rows if part in r.source]
        assert rows and all((r.model, r.tp, r.precision) == (model, tp, precision) for r in rows), part


def test_guidellm_four_request_run_is_flagged():
    path = next((BENCH / "guidellm").glob("*1856*tp4*_benchmarks.json"))
    result = _one([path], tool="guidellm", gpu="H100")
    assert any("rests on 4 completed requests" in w for w in result.warnings)
    assert any("request throughput x OSL" in w for w in result.warnings)


@pytest.mark.parametrize("part", sorted(GUIDELLM))
def test_guidellm_report_by_name(part, tmp_path, cli):
    path = next((BENCH / "guidellm").glob(f"*{part}_benchmarks.json"))
    out = tmp_path / "lab" / "benchmarks" / "g.csv"
    code, stdout, err = cli("ingest", "guidellm", path, "--gpu", "B200", "--out", out)
    assert code == 0, err
    model, tp, precision = GUIDELLM[part]
    assert all((r.model, r.tp, r.precision) == (model, tp, precision) for r in load_benchmark_table(out))


def test_guidellm_checkpoint_precision_the_gpu_lacks_asks_how_it_ran():
    path = next((BENCH / "guidellm").glob("*gpt-oss-20b_tp4_quant-none_benchmarks.json"))
    with pytest.raises(PlannerInputError, match="says fp4, which H100-SXM-80GB has no tensor format for: give --precision"):
        _one([path], tool="guidellm", gpu="H100")
    (row,) = _one([path], tool="guidellm", gpu="H100", precision="bf16").rows  # MXFP4 weights run dequantized
    assert row.precision == "bf16" and "bf16 from --precision (the checkpoint ships fp4" in row.notes
    with pytest.raises(PlannerInputError, match="says fp8"):  # an explicit quant-fp8 is not overridden
        _one([next((BENCH / "guidellm").glob("*Qwen3-30B-A3B_tp4_quant-fp8_benchmarks.json"))], tool="guidellm",
             gpu="H100", precision="bf16")  # fmt: skip


def test_a_directory_of_mixed_runs_ingests_what_applies_and_skips_the_rest_with_a_line_each():
    # the docs' example: on H100 the fp4 gpt-oss checkpoint cannot say how it ran; the three other reports ingest
    result = _one([BENCH / "guidellm"], tool="guidellm", gpu="H100")
    assert len({r.source for r in result.rows}) == 3
    (skipped,) = result.skipped
    assert "gpt-oss-20b" in skipped and "says fp4, which H100-SXM-80GB has no tensor format for" in skipped
    assert any(note.startswith("skipped ") and "gpt-oss-20b" in note for note in result.notes)


# ---- traces ----


def test_azure_conversation_trace_mean_rate():
    trace = load_trace(TRACES / "AzureLLMInferenceTrace_conv.csv")
    assert trace.clock == "datetime"
    assert round((trace.requests - 1) / trace.duration_s, 2) == 5.53


def test_azure_code_trace_reads():
    trace = load_trace(TRACES / "AzureLLMInferenceTrace_code.csv")
    assert trace.clock == "datetime" and trace.requests > 1000 and trace.isl_tokens.min() >= 0


def test_mooncake_milliseconds_are_not_read_as_seconds():
    path = TRACES / "mooncake_synthetic_trace.jsonl"
    with pytest.raises(PlannerInputError) as error:
        load_trace(path)
    message = str(error.value)
    assert "read as seconds the trace spans 11.8 days" in message and "in ms 17.0 min" in message and "--time-unit" in message
    trace = load_trace(path, time_unit="ms")
    assert 0.5 < trace.requests / trace.duration_s < 10 and trace.duration_s < 3 * 3600
    assert "numeric timestamps read in ms" in trace.notes


def test_workload_analyze_on_mooncake_asks_for_the_unit(cli):
    code, out, err = cli("workload", "analyze", TRACES / "mooncake_synthetic_trace.jsonl")
    assert code == 2 and "--time-unit" in err and "Traceback" not in err
    code, out, err = cli("workload", "analyze", TRACES / "mooncake_synthetic_trace.jsonl", "--time-unit", "ms")
    assert code == 0, err
    assert "periods" not in out.split("Scenario block")[1] and len(out.splitlines()) < 200


def test_ingested_rate_runs_answer_and_anchor_the_perf_model(tmp_path, cli, cli_json):
    lab = tmp_path / "lab"
    code, _, err = cli("ingest", "vllm", BENCH / "vllm", "--gpu", "A100", "--precision", "bf16", "--out", lab / "benchmarks" / "v.csv")
    assert code == 0, err
    query = ("perf", "--model", "meta-llama/Llama-3.3-70B-Instruct", "--gpu", "A100", "--tp", "8", "--precision", "bf16",
             "--isl", "213", "--osl", "214", "--catalog", lab, "--percentile", "50")  # fmt: skip
    # the rows hold the runs' medians (ingest's default statistic): they answer at P50
    at_run = cli_json(*query, "--concurrency", "18")
    assert at_run["provenance"].startswith("measured") and at_run["tpot_ms"] == pytest.approx(27.3485, abs=1e-3)
    assert at_run["statistic"] == "median" and at_run["itl_ms"] == pytest.approx(27.1927, abs=1e-3)  # vLLM's own ITL
    between = cli_json(*query, "--concurrency", "30")
    assert between["provenance"] == "interpolated" and any(d.startswith("anchored on 4 rows") for d in between["derivations"])
    assert 27.3485 < between["tpot_ms"] < 31.6757  # between the runs at 18 and 43 in flight
    # means are not what the rows measured: the roofline anchored on the medians answers, not the rows
    mean = cli_json(*query[:-2], "--concurrency", "18")
    assert mean["statistic"] == "mean" and not mean["provenance"].startswith("measured")
