"""Hostile and careless input (issue 16): one clear exit-2 line, never a traceback, a hang or damage."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
import yaml
from helpers import SCENARIOS

EVIL = '=HYPERLINK("http://evil.example/","click")'


def evil_scenario(tmp_path):
    document = yaml.safe_load((SCENARIOS / "daily-hybrid.yaml").read_text())
    document["periods"][2]["name"] = EVIL  # the night: on-demand lines and the runs of bought nodes name it
    path = tmp_path / "evil.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_names_never_become_formulas_in_a_csv_bom(cli, tmp_path):
    out = tmp_path / "bom.csv"
    code, _, err = cli("bom", evil_scenario(tmp_path), "--format", "csv", "--out", out)
    assert code == 0, err
    cells = [cell for row in csv.reader(io.StringIO(out.read_text())) for cell in row]
    assert any(EVIL in cell for cell in cells)
    assert not [cell for cell in cells if cell.startswith(("=", "+", "-", "@"))]


def test_names_never_become_formulas_in_an_xlsx_bom(cli, tmp_path):
    from openpyxl import load_workbook

    out = tmp_path / "bom.xlsx"
    code, _, err = cli("bom", evil_scenario(tmp_path), "--format", "xlsx", "--out", out)
    assert code == 0, err
    workbook = load_workbook(out)
    found = 0
    for sheet in workbook.worksheets:
        for row in sheet.iter_rows():
            for cell in row:
                # the only formulas are the planner's own TOTAL sums over the lines, never a scenario's text
                own_total = sheet.title == "BOM" and row[0].value == "TOTAL" and cell.column > 1
                assert cell.data_type != "f" or own_total, f"{sheet.title}!{cell.coordinate} is a formula: {cell.value}"
                if cell.data_type == "f":
                    own = cell.value.replace('"on-demand"', '""')  # the one text the planner writes into a formula
                    assert EVIL not in cell.value and re.fullmatch(r"=[A-Z$0-9:(),*=<>\"+\-]+", own), cell.value
                found += isinstance(cell.value, str) and EVIL in cell.value
    assert found


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: x\nname: y\n", "line 2, column 1: malformed YAML: duplicate key 'name' (first on line 1)"),
        ("a: " + "[" * 200 + "]" * 200 + "\n", "document: nested more than 64 levels deep"),
        ("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{b}: &{b} [{', '.join(['*' + a] * 10)}]\n" for a, b in zip("abcdefg", "bcdefgh")) + "name: *h\n",
         "document: more than 200,000 values once its aliases (*name) are expanded"),
    ],
)
def test_yaml_that_is_ambiguous_or_explodes_is_refused(cli, tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, _, err = cli("validate", path)
    assert code == 2 and err.strip() == f"error: {path}: {message}"


def test_an_oversized_file_is_not_read(cli, tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("# " + "x" * (4 * 1024 * 1024) + "\n")
    code, _, err = cli("validate", path)
    assert code == 2 and "at most 4,194,304 are read" in err and len(err) < 300


def test_a_bad_value_is_quoted_short(cli, tmp_path):
    document = yaml.safe_load((SCENARIOS / "contact-center.yaml").read_text())
    document["workloads"][0]["peak_rps"] = ["x" * 100_000]
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump(document))
    code, _, err = cli("validate", path)
    assert code == 2 and len(err) < 400 and "..." in err


def test_a_byte_order_mark_is_read_as_nothing(cli, tmp_path):
    scenario = tmp_path / "bom.yaml"
    scenario.write_bytes(b"\xef\xbb\xbf" + (SCENARIOS / "contact-center.yaml").read_bytes())
    code, _, err = cli("validate", scenario)
    assert code == 0, err


def test_a_catalog_csv_saved_by_excel_with_a_byte_order_mark_loads(tmp_path):
    from helpers import make_catalog, node_row, on_prem_system

    from planner.catalog import load_catalog

    directory = make_catalog(tmp_path, [on_prem_system("sys-a", "H100-SXM-80GB", 300.0)],
                             [node_row("llama-3-8b", "H100-SXM-80GB", 1000, 100, 10.0)])  # fmt: skip
    table = directory / "benchmarks" / "test.csv"
    table.write_bytes(b"\xef\xbb\xbf" + table.read_bytes())
    (row,) = [r for r in load_catalog(directory).benchmarks if r.gpu == "H100-SXM-80GB" and r.model == "llama-3-8b" and r.per == "node"]
    assert row.source == "test fixture"


def _mutated(tmp_path, base: str, mutate) -> str:
    document = yaml.safe_load((SCENARIOS / base).read_text())
    mutate(document)
    path = tmp_path / "mutated.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("base", "mutate", "field"),
    [
        ("daily-hybrid.yaml", lambda d: d["workloads"][0].update(mean_rps=1e30), "workloads[0:assistant].mean_rps"),
        ("daily-hybrid.yaml", lambda d: d["periods"][0]["demand_factor"].update(assistant=1e308),
         "periods[0:business-hours].demand_factor.assistant"),
        ("contact-center.yaml", lambda d: d.update(limits={"headroom_fraction": 1e308}), "limits.headroom_fraction"),
        ("contact-center.yaml", lambda d: d["sites"]["on_prem"].update(usd_per_kwh=1e308), "sites.on_prem.usd_per_kwh"),
        ("contact-center.yaml", lambda d: d["sites"]["on_prem"].update(amortization_years=1e-300),
         "sites.on_prem.amortization_years"),
        ("contact-center.yaml", lambda d: d["sites"]["on_prem"].update(price_usd={"dgx-h100": 1e308}),
         "sites.on_prem.price_usd.dgx-h100"),
        ("contact-center.yaml", lambda d: d.update(limits={"spare_nodes_per_system": 10**15}), "limits.spare_nodes_per_system"),
        ("contact-center.yaml", lambda d: d.update(engine={"max_batch_ladder": [0]}), "engine.max_batch_ladder[0]"),
        ("contact-center.yaml", lambda d: d.update(engine={"max_batch_ladder": [-8]}), "engine.max_batch_ladder[0]"),
        ("contact-center.yaml", lambda d: d["workloads"][0].update(precisions=[]), "workloads[0:call-summaries].precisions"),
        ("contact-center.yaml", lambda d: d["workloads"][0].update(peak_rps=1e308), "workloads[0:call-summaries].peak_rps"),
    ],
)
def test_numbers_out_of_any_sane_range_are_refused_naming_the_field(cli, tmp_path, base, mutate, field):
    code, out, err = cli("plan", _mutated(tmp_path, base, mutate))
    assert code == 2, (out, err)
    assert err.startswith(f"error: {tmp_path / 'mutated.yaml'}: {field}") and len(err) < 400


@pytest.mark.parametrize(
    "args",
    [
        ("peak", "--mean-rps", "inf"), ("peak", "--mean-rps", "nan"), ("peak", "--mean-rps", "1e30"),
        ("users", "--rps", "nan"), ("simulate", str(SCENARIOS / "contact-center.yaml"), "--duration", "inf"),
        ("simulate", str(SCENARIOS / "contact-center.yaml"), "--duration", "1e9"),
        ("simulate", str(SCENARIOS / "contact-center.yaml"), "--seed", "-1"),
        ("plan", str(SCENARIOS / "contact-center.yaml"), "--time-limit", "nan"),
        ("sensitivity", str(SCENARIOS / "contact-center.yaml"), "--demand", "inf"),
    ],
)
def test_option_values_that_are_not_finite_or_sane_exit_2(cli, args):
    code, out, err = cli(*args)
    assert code == 2 and "Traceback" not in err + out


def test_workers_are_capped_at_the_cpu_count(monkeypatch):
    import planner.sweep as sweep

    monkeypatch.setattr(sweep.os, "cpu_count", lambda: 4)
    assert sweep.worker_count(100_000, 50) == 4
    assert sweep.worker_count(3, 2) == 2
    with pytest.raises(Exception):
        sweep.worker_count(0, 5)


def test_an_output_never_overwrites_an_input(cli, tmp_path):
    scenario = tmp_path / "cc.yaml"
    scenario.write_text((SCENARIOS / "contact-center.yaml").read_text())
    before = scenario.read_bytes()
    code, _, err = cli("bom", scenario, "--out", scenario)
    assert code == 2 and "is an input of this command" in err
    assert scenario.read_bytes() == before


def test_a_report_folder_must_be_new_empty_or_a_previous_report(cli, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    code, _, err = cli("report", SCENARIOS / "contact-center.yaml", "--out", folder)
    assert code == 2 and "--force" in err and (folder / "notes.txt").read_text() == "mine"
    report = tmp_path / "report"
    code, _, err = cli("report", SCENARIOS / "contact-center.yaml", "--out", report)
    assert code == 0, err
    # a previous report is what its manifest lists: a stale plot listed there goes, without --force
    manifest = report / ".planner-report-manifest.json"
    listed = json.loads(manifest.read_text())["files"]
    manifest.write_text(json.dumps({"files": [*listed, "curve-stale.png"]}))
    (report / "curve-stale.png").write_bytes(b"old plot")
    code, _, err = cli("report", SCENARIOS / "contact-center.yaml", "--out", report)
    assert code == 0, err
    assert not (report / "curve-stale.png").exists() and (report / "report.md").exists()
    assert not [p for p in report.iterdir() if p.name.endswith(".tmp")]
    # plots no report listed are someone else's: the folder is no previous report
    (report / "diagram.png").write_bytes(b"mine")
    code, _, err = cli("report", SCENARIOS / "contact-center.yaml", "--out", report)
    assert code == 2 and "--force" in err and (report / "diagram.png").read_bytes() == b"mine"


def test_workload_names_never_become_paths(cli, tmp_path):
    document = yaml.safe_load((SCENARIOS / "contact-center.yaml").read_text())
    document["workloads"][0]["name"] = "x/../../ESCAPED"
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(document))
    folder = tmp_path / "deep" / "report"
    code, _, err = cli("report", scenario, "--out", folder)
    assert code == 0, err
    written = {p.name for p in folder.iterdir()}
    assert "curve-x-ESCAPED.png" in written
    assert not list(tmp_path.rglob("ESCAPED*")) or all(p.parent == folder for p in tmp_path.rglob("*ESCAPED*"))


def test_a_failed_write_leaves_the_previous_file(tmp_path, monkeypatch):
    from planner.report import files

    target = tmp_path / "report.html"
    target.write_text("good")

    def broken_fsync(_):
        raise OSError("No space left on device")

    monkeypatch.setattr(files.os, "fsync", broken_fsync)
    with pytest.raises(OSError):
        files.write_text_atomic(target, "new" * 1000)
    assert target.read_text() == "good" and [p.name for p in tmp_path.iterdir()] == ["report.html"]


@pytest.mark.parametrize(
    ("file", "edit", "words"),
    [
        ("defaults.yaml", lambda d: d["defaults"]["words_per_token"].update(value=0), "words_per_token"),
        ("defaults.yaml", lambda d: d["defaults"]["peak_quantile"].update(value=1.5), "peak_quantile"),
        ("defaults.yaml", lambda d: d["defaults"]["amortization_years"].update(value=0), "amortization_years"),
        ("defaults.yaml", lambda d: d["defaults"]["pue"].update(value=-5), "pue"),
        ("gpus.yaml", lambda d: d["gpus"][0]["tflops_by_precision"].update(bf16=0), "tflops_by_precision"),
        ("gpus.yaml", lambda d: d["gpus"][0]["tflops_by_precision"].update(bf16=-3), "tflops_by_precision"),
    ],
)
def test_catalog_numbers_out_of_range_are_refused(tmp_path, file, edit, words):
    from helpers import make_catalog, node_row, on_prem_system

    from planner.catalog import load_catalog
    from planner.errors import PlannerInputError

    directory = make_catalog(tmp_path, [on_prem_system("sys-a", "H100-SXM-80GB", 300.0)],
                             [node_row("llama-3-8b", "H100-SXM-80GB", 1000, 100, 10.0)])  # fmt: skip
    document = yaml.safe_load((directory / file).read_text())
    edit(document)
    (directory / file).write_text(yaml.safe_dump(document, sort_keys=False))
    with pytest.raises(PlannerInputError) as error:
        load_catalog(directory)
    assert file in str(error.value) and words in str(error.value)


def test_a_benchmark_row_of_ten_billion_requests_per_second_is_refused(tmp_path):
    from helpers import make_catalog, node_row, on_prem_system

    from planner.catalog import load_catalog
    from planner.errors import PlannerInputError

    directory = make_catalog(tmp_path, [on_prem_system("sys-a", "H100-SXM-80GB", 300.0)],
                             [node_row("llama-3-8b", "H100-SXM-80GB", 1000, 100, 1e10)])  # fmt: skip
    with pytest.raises(PlannerInputError) as error:
        load_catalog(directory)
    assert "test.csv" in str(error.value) and "request_throughput_rps" in str(error.value)


VLLM_RUN = "vllm-infqps-concurrency1-Llama-3.1-8B-Instruct-20251002-101500.json"


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("max_concurrency", "eight", "max_concurrency: expected a finite number, got 'eight'"),
        ("max_concurrency", [8], "max_concurrency: expected a finite number, got [8]"),
        ("max_concurrency", 2.7, "max_concurrency: expected a whole number >= 1, got 2.7"),
        ("max_concurrency", -3, "max_concurrency: expected a whole number >= 1, got -3"),
        ("total_input_tokens", "NaN", "total_input_tokens: expected a finite number, got 'NaN'"),
        ("total_input_tokens", 1e30, "total_input_tokens: expected a finite number, got 1e+30"),
        ("total_input_tokens", 0, "isl"),
    ],
)
def test_damaged_vllm_results_are_refused_naming_the_field(cli, tmp_path, key, value, words):
    import json
    from pathlib import Path

    document = json.loads((Path(__file__).parent / "fixtures" / "ingest" / "vllm" / "sweep" / VLLM_RUN).read_text())
    document[key] = value
    path = tmp_path / "run.json"
    path.write_text(json.dumps(document))
    code, out, err = cli("ingest", "vllm", path, "--model", "llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--tp", "1", "--precision", "bf16")
    assert code == 2 and words in err and "Traceback" not in out + err, (out, err)


@pytest.mark.parametrize(
    ("rows", "words"),
    [
        (["0,100,10", "inf,100,10"], "not a finite time"),
        (["0,100,10", "1,100,10", "1000000000000,100,10"], "an outlier timestamp"),
    ],
)
def test_traces_with_impossible_times_are_refused(cli, tmp_path, rows, words):
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,input_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    code, out, err = cli("workload", "analyze", trace)
    assert code == 2 and words in err and len(err) < 400, (out, err)


@pytest.mark.parametrize("period", ["infh", "nanmin", "0s", "1e9d"])
def test_an_impossible_period_is_refused(cli, tmp_path, period):
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,input_tokens,output_tokens\n0,100,10\n5,100,10\n")
    code, _, err = cli("workload", "analyze", trace, "--period", period)
    assert code == 2 and "is not a period" in err


def test_simulating_a_plan_of_another_scenario_is_refused(cli, tmp_path):
    code, out, _ = cli("plan", SCENARIOS / "llama3-8b-assistant.yaml", "--json")
    saved = tmp_path / "other.json"
    saved.write_text(out)
    code, _, err = cli("simulate", SCENARIOS / "contact-center.yaml", "--plan", saved)
    assert code == 2 and "the plan is for scenario 'llama3-8b-assistant'" in err
    saved.write_text("{}")
    code, _, err = cli("simulate", SCENARIOS / "contact-center.yaml", "--plan", saved)
    assert code == 2 and "not a plan" in err


@pytest.mark.parametrize(
    "args",
    [
        ("perf", "--model", "llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--tp", "1000", "--isl", "100", "--osl", "100"),
        ("curve", "--model", "llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--tp", "16", "--precision", "fp8", "--isl", "100",
         "--osl", "100"),
        ("perf", "--model", "llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--tp", "1", "--isl", "100", "--osl", "100",
         "--concurrency", "1e30"),
    ],
)
def test_engine_shapes_beyond_a_node_are_refused(cli, args):
    code, out, err = cli(*args)
    assert code == 2 and "Traceback" not in out + err


def test_one_source_measuring_one_point_twice_differently_is_refused(tmp_path):
    from helpers import make_catalog, node_row, on_prem_system

    from planner.catalog import load_catalog
    from planner.errors import PlannerInputError

    rows = [node_row("llama-3-8b", "H100-SXM-80GB", 1000, 100, 10.0), node_row("llama-3-8b", "H100-SXM-80GB", 1000, 100, 50.0)]
    directory = make_catalog(tmp_path, [on_prem_system("sys-a", "H100-SXM-80GB", 300.0)], rows)
    with pytest.raises(PlannerInputError) as error:
        load_catalog(directory)
    assert "test.csv line 3" in str(error.value) and "test.csv line 2" in str(error.value)


def test_a_file_that_is_no_benchmark_table_is_quoted_only_briefly(tmp_path):
    from helpers import make_catalog, on_prem_system

    from planner.catalog import load_catalog
    from planner.errors import PlannerInputError

    directory = make_catalog(tmp_path, [on_prem_system("sys-a", "H100-SXM-80GB", 300.0)], [])
    secret = "TOPSECRET-token-abc123-" + "x" * 200
    (directory / "benchmarks" / "test.csv").write_text(f"source,model,gpu,gpus,per,{secret}\n")
    with pytest.raises(PlannerInputError) as error:
        load_catalog(directory)
    assert "unknown column" in str(error.value) and "x" * 40 not in str(error.value)


@pytest.mark.parametrize("value", ["8x", "four", 2.7, -1, [8]])
def test_a_damaged_genai_perf_concurrency_is_refused(cli, tmp_path, value):
    import json
    import shutil
    from pathlib import Path

    run = "meta-llama_Llama-3.1-8B-Instruct-openai-chat-concurrency1"
    source = Path(__file__).parent / "fixtures" / "ingest" / "genai-perf" / "new-layout" / run
    target = tmp_path / "run"
    shutil.copytree(source, target)
    export = target / "profile_export_genai_perf.json"
    document = json.loads(export.read_text())
    document["input_config"]["perf_analyzer"]["stimulus"]["concurrency"] = value
    export.write_text(json.dumps(document))
    code, out, err = cli("ingest", "genai-perf", export, "--model", "llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--tp", "1", "--precision", "bf16")
    assert code == 2 and "concurrency" in err and "Traceback" not in out + err, (out, err)


def test_workload_analyze_never_rewrites_its_base_scenario(cli, tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,input_tokens,output_tokens\n0,100,10\n5,100,10\n")
    base = tmp_path / "dh.yaml"
    base.write_text((SCENARIOS / "daily-hybrid.yaml").read_text())
    before = base.read_bytes()
    code, _, err = cli("workload", "analyze", trace, "--base", base, "--model", "llama-3-8b", "--out", base)
    assert code == 2 and "is an input of this command" in err and base.read_bytes() == before
