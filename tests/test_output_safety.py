"""Outputs that never harm what they touch (issue 33): CSV cells never formulas whatever the pandas dtype, no output over any file a
command reads, `report --force` removes only what a report wrote, output files readable under the umask, a closed
stdout ends quietly, a folder is no output file, and the schema doc's example loads."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from helpers import INGEST_FIXTURES, ROOT, SCENARIOS

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
AIPERF = INGEST_FIXTURES / "genai-perf" / "aiperf"
AIPERF_RUN = "meta-llama_Llama-3.1-8B-Instruct-openai-chat-concurrency8"
H100_BF16 = ("--gpu", "H100", "--tp", "1", "--precision", "bf16")


def csv_cells(text: str) -> list[str]:
    return [cell for row in csv.reader(io.StringIO(text)) for cell in row]


def cloud_scenario(tmp_path, period: str = "all"):
    """The contact-center scenario (a copy) rented on AWS p5 for one period named `period`: its on-demand BOM
    line's period cell starts with that name."""
    document = yaml.safe_load((SCENARIOS / "contact-center.yaml").read_text())
    document["deployment"] = "cloud"
    document["sites"] = {"cloud": {"systems": ["aws-p5.48xlarge"]}}
    document["periods"] = [{"name": period, "hours_per_year": 8760}]
    path = tmp_path / "cloud.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def user_catalog(tmp_path, name: str = "lab", systems: list[dict] | None = None):
    """A user catalog folder layered over the shipped one (optionally overriding systems)."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "catalog.yaml").write_text(f"name: {name}\n")
    (folder / "systems.yaml").write_text(yaml.safe_dump({"systems": systems or []}, sort_keys=False))
    return folder


# ---- 1. CSV formula injection, whatever the dtype ----


@pytest.mark.parametrize("dtype", [object, "string", "str", "category"])
def test_every_text_cell_is_made_inert_whatever_its_dtype(dtype):
    from planner.spreadsheet import csv_safe_frame

    names = ["=HYPERLINK(1)", "+1", "-cmd", "@SUM(A1)", "\tx", "\rx", "a\r=HYPERLINK(2)", "ok"]
    frame = pd.DataFrame({"name": pd.Series(names, dtype=dtype), "count": [-1, 2, 3, 4, 5, 6, 7, 8],
                          "share": [-0.5, 0.1, 0, 1, 2, 3, 4, 4.5]})  # fmt: skip
    text = csv_safe_frame(frame).to_csv(index=False, lineterminator="\n")
    assert "\r" not in text  # a bare carriage return would start a new row in a spreadsheet: a cell "=HYPERLINK(2)"
    cells = list(csv.reader(io.StringIO(text)))
    assert [row[0] for row in cells[1:]] == ["'=HYPERLINK(1)", "'+1", "'-cmd", "'@SUM(A1)", "'\tx", "'\nx",
                                             "a\n=HYPERLINK(2)", "ok"]  # fmt: skip
    assert cells[1][1:] == ["-1", "-0.5"]  # numbers untouched


def test_a_period_named_like_a_formula_starts_no_csv_cell(cli, tmp_path):
    out = tmp_path / "bom.csv"
    code, _, err = cli("bom", cloud_scenario(tmp_path, "=HYPERLINK(1)"), "--out", out, "--progress", "none")
    assert code == 0, err
    cells = csv_cells(out.read_text())
    assert "'=HYPERLINK(1)" in cells  # the period cell itself, escaped (not a name in the middle of a cell)
    assert not [cell for cell in cells if cell.startswith(FORMULA_START)]


def test_a_catalog_system_name_like_a_formula_starts_no_csv_cell(cli, tmp_path):
    catalog = user_catalog(tmp_path, "evil", [{
        "id": "aws-p5.48xlarge", "name": "=HYPERLINK(2)", "notes": "=HYPERLINK(3)", "source": "=HYPERLINK(4)",
    }])  # fmt: skip
    out = tmp_path / "bom.csv"
    code, _, err = cli("bom", cloud_scenario(tmp_path), "--catalog", catalog, "--out", out, "--progress", "none")
    assert code == 0, err
    cells = csv_cells(out.read_text())
    assert "'=HYPERLINK(2)" in cells  # the description cell: the catalog's system name
    assert not [cell for cell in cells if cell.startswith(FORMULA_START)]


def test_benchmark_tables_written_by_ingest_escape_text_cells(catalog):
    from planner.catalog import benchmark_csv_text

    row = catalog.benchmarks[0].model_copy(update={"notes": "=HYPERLINK(5)", "source": "@SUM(1)"})
    rows = list(csv.DictReader(io.StringIO(benchmark_csv_text([row]))))
    assert rows[0]["notes"] == "'=HYPERLINK(5)" and rows[0]["source"] == "'@SUM(1)"
    assert rows[0]["gpus"] == str(row.gpus) and rows[0]["model"] == row.model  # numbers and ids as they were


# ---- 2 and 6. no output over an input, nor onto a folder ----


def assert_refused(result, flag: str, victim, before: bytes) -> None:
    code, out, err = result
    assert code == 2, (out, err)
    assert err.startswith(f"error: {flag}:") and "would overwrite" in err and "is an input of this command" in err, err
    assert victim.name in err and "Traceback" not in out + err
    assert victim.read_bytes() == before


def test_bom_never_overwrites_a_file_of_the_catalog_in_use(cli, tmp_path):
    catalog = user_catalog(tmp_path)
    victim = catalog / "systems.yaml"
    before = victim.read_bytes()
    result = cli("bom", SCENARIOS / "contact-center.yaml", "--out", victim, "--catalog", catalog)
    assert_refused(result, "--out", victim, before)


def test_bom_never_overwrites_a_file_of_the_scenarios_own_catalog(cli, tmp_path):
    catalog = user_catalog(tmp_path)
    document = yaml.safe_load((SCENARIOS / "contact-center.yaml").read_text())
    document["catalog"] = "lab"
    scenario = tmp_path / "cc.yaml"
    scenario.write_text(yaml.safe_dump(document, sort_keys=False))
    victim = catalog / "catalog.yaml"
    before = victim.read_bytes()
    assert_refused(cli("bom", scenario, "--out", victim), "--out", victim, before)


def test_an_output_through_a_symlink_never_overwrites_an_input(cli, tmp_path):
    catalog = user_catalog(tmp_path)
    victim = catalog / "systems.yaml"
    before = victim.read_bytes()
    link = tmp_path / "out.png"
    link.symlink_to(victim)
    result = cli("curve", "--model", "llama-3.1-8b", "--gpu", "H100", "--tp", "1", "--precision", "bf16", "--isl",
                 "1000", "--osl", "100", "--png", link, "--catalog", catalog)  # fmt: skip
    assert_refused(result, "--png", victim, before)


def test_curve_png_never_overwrites_a_catalog_file(cli, tmp_path):
    catalog = user_catalog(tmp_path)
    shutil.copy(ROOT / "catalogs" / "gpus.yaml", catalog / "gpus.yaml")
    victim = catalog / "gpus.yaml"
    before = victim.read_bytes()
    result = cli("curve", "--model", "llama-3.1-8b", "--gpu", "H100", "--tp", "1", "--precision", "bf16", "--isl",
                 "1000", "--osl", "100", "--png", victim, "--catalog", catalog)  # fmt: skip
    assert_refused(result, "--png", victim, before)


def test_sensitivity_and_workload_analyze_never_overwrite_a_catalog_file(cli, tmp_path):
    catalog = user_catalog(tmp_path)
    victim = catalog / "systems.yaml"
    before = victim.read_bytes()
    result = cli("sensitivity", SCENARIOS / "contact-center.yaml", "--out", victim, "--catalog", catalog)
    assert_refused(result, "--out", victim, before)
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,input_tokens,output_tokens\n0,100,10\n5,100,10\n")
    result = cli("workload", "analyze", trace, "--model", "llama-3.1-8b", "--out", victim, "--catalog", catalog)
    assert_refused(result, "--out", victim, before)


def test_sweep_plot_never_overwrites_the_scenario_the_sweep_varies(cli, tmp_path):
    (tmp_path / "sweeps").mkdir()
    shutil.copy(SCENARIOS / "sweeps" / "summarize-tpot.yaml", tmp_path / "sweeps" / "summarize-tpot.yaml")
    victim = tmp_path / "chat-and-summarize.yaml"
    shutil.copy(SCENARIOS / "chat-and-summarize.yaml", victim)
    before = victim.read_bytes()
    result = cli("sweep", tmp_path / "sweeps" / "summarize-tpot.yaml", "--plot", victim)
    assert_refused(result, "--plot", victim, before)


def test_ingest_never_overwrites_a_file_of_an_ingested_folder(cli, tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(AIPERF, runs)
    victim = runs / AIPERF_RUN / "profile_export_aiperf.json"
    before = victim.read_bytes()
    assert_refused(cli("ingest", "aiperf", runs, "--out", victim, *H100_BF16), "--out", victim, before)
    # a new table in a catalog folder is no input: the documented workflow still writes it
    catalog = user_catalog(tmp_path)
    table = catalog / "benchmarks" / "new.csv"
    code, _, err = cli("ingest", "aiperf", runs, "--out", table, "--catalog", catalog, *H100_BF16)
    assert code == 0 and table.exists(), err


def test_report_never_writes_over_its_scenario(cli, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    victim = folder / "report.md"
    shutil.copy(SCENARIOS / "contact-center.yaml", victim)
    before = victim.read_bytes()
    assert_refused(cli("report", victim, "--out", folder, "--force"), "--out", victim, before)


@pytest.mark.parametrize("command", [
    ("bom", str(SCENARIOS / "contact-center.yaml")),
    ("ingest", "aiperf", str(AIPERF), *H100_BF16),
])  # fmt: skip
def test_an_output_that_is_an_existing_folder_is_refused(cli, tmp_path, command):
    folder = tmp_path / "existing"
    folder.mkdir()
    code, out, err = cli(*command, "--out", folder)
    assert code == 2 and "--out" in err and "is a directory; give a file path" in err, (out, err)
    assert "Traceback" not in out + err and list(folder.iterdir()) == []


# ---- 3. report --force removes only what a report wrote ----


def test_report_force_keeps_foreign_files_and_replaces_its_own(cli, tmp_path):
    folder = tmp_path / "img"
    folder.mkdir()
    (folder / "keep.png").write_bytes(b"the team's diagram")
    code, _, err = cli("report", SCENARIOS / "contact-center.yaml", "--out", folder)
    assert code == 2 and "--force" in err  # a folder of someone's images is no previous report
    for _ in range(2):  # a second --force over the first report still works
        code, _, err = cli("report", SCENARIOS / "contact-center.yaml", "--out", folder, "--force",
                           "--progress", "none")  # fmt: skip
        assert code == 0, err
        assert (folder / "keep.png").read_bytes() == b"the team's diagram"
        listed = json.loads((folder / ".planner-report-manifest.json").read_text())["files"]
        assert "keep.png" not in listed and {"report.md", "report.html"} <= set(listed)
        assert all((folder / name).is_file() for name in listed)
    # a stale plot the manifest lists goes; a manifest naming a file outside the folder removes nothing there
    outside = tmp_path / "outside.png"
    outside.write_bytes(b"not the report's")
    (folder / "curve-stale.png").write_bytes(b"old plot")
    manifest = folder / ".planner-report-manifest.json"
    manifest.write_text(json.dumps({"files": [*listed, "curve-stale.png", "../outside.png", str(outside)]}))
    code, _, err = cli("report", SCENARIOS / "contact-center.yaml", "--out", folder, "--force", "--progress", "none")
    assert code == 0, err
    assert not (folder / "curve-stale.png").exists() and outside.read_bytes() == b"not the report's"
    assert (folder / "keep.png").exists()


# ---- 4. output files readable as the umask allows ----


@pytest.fixture()
def umask_022():
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_every_writer_creates_files_with_the_process_umask(cli, tmp_path, umask_022):
    from planner.report.files import write_text_atomic

    write_text_atomic(tmp_path / "a.txt", "x")
    assert mode(tmp_path / "a.txt") == 0o644
    code, _, err = cli("bom", SCENARIOS / "contact-center.yaml", "--format", "xlsx", "--out", tmp_path / "bom.xlsx")
    assert code == 0, err
    code, _, err = cli("report", SCENARIOS / "contact-center.yaml", "--out", tmp_path / "report", "--progress", "none")
    assert code == 0, err
    written = [tmp_path / "bom.xlsx", *(tmp_path / "report").iterdir()]
    assert any(p.suffix == ".png" for p in written)
    assert {p.name: mode(p) for p in written} == {p.name: 0o644 for p in written}
    os.umask(0o077)
    write_text_atomic(tmp_path / "a.txt", "y")  # an existing file gets the mode of a new one too
    assert mode(tmp_path / "a.txt") == 0o600


# ---- 5. a closed stdout ends quietly ----


@pytest.mark.skipif(not hasattr(signal, "SIGPIPE"), reason="POSIX pipes")
def test_a_closed_stdout_ends_with_sigpipe_not_exit_code_1():
    process = subprocess.Popen([sys.executable, "-m", "planner", "plan", str(SCENARIOS / "contact-center.yaml")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)  # fmt: skip
    process.stdout.close()  # the reader is gone before the plan is printed (`planner plan ... | head` after head)
    _, err = process.communicate(timeout=120)
    assert process.returncode in (-signal.SIGPIPE, 128 + signal.SIGPIPE), (process.returncode, err[-2000:])
    assert b"Traceback" not in err and b"BrokenPipe" not in err


@pytest.mark.skipif(shutil.which("bash") is None or not hasattr(signal, "SIGPIPE"), reason="needs bash")
def test_a_pipe_into_a_reader_that_stops_exits_141():
    command = f"set -o pipefail; {sys.executable} -m planner plan scenarios/contact-center.yaml --progress none | true"
    done = subprocess.run(["bash", "-c", command], cwd=ROOT, capture_output=True, timeout=120)
    assert done.returncode == 141 and b"Traceback" not in done.stderr, done.stderr[-2000:]


# ---- 7. the schema doc's example loads ----


def test_the_scenario_schema_example_loads(tmp_path):
    from planner.api import validate_file

    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "docs" / "scenario-schema.md").read_text(), re.S)
    assert blocks, "docs/scenario-schema.md has no yaml example"
    for index, block in enumerate(blocks):
        folder = tmp_path / f"example-{index}"
        (folder / "my-lab").mkdir(parents=True)  # the user catalog its `catalog:` line names
        (folder / "my-lab" / "catalog.yaml").write_text("name: my-lab\n")
        path = folder / "scenario.yaml"
        path.write_text(block)
        scenario = validate_file(path)  # the strict loader: a duplicate key, an unknown field or a bad value fails
        assert scenario.workloads
