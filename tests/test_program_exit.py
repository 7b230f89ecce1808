"""The `planner` program as a process (planner/cli/__init__.py `main`): it tunes the garbage collector for a short
command (young collections less often, no full collection at exit), and what it writes and prints must be what the
same command gives in-process (`app`, as every other test runs it), byte for byte."""

from __future__ import annotations

import gc
import subprocess
import sys

from helpers import ROOT, SCENARIOS, invoke

from planner import cli


def run_program(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "planner", *map(str, args)], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_the_program_writes_the_same_files_as_the_command_in_process(tmp_path):
    for name in ("program", "in-process"):
        (tmp_path / name).mkdir()
    program = run_program("bom", SCENARIOS / "contact-center.yaml", "--format", "xlsx", "--out", tmp_path / "program" / "bom.xlsx")
    assert program.returncode == 0, program.stderr
    in_process = invoke("bom", SCENARIOS / "contact-center.yaml", "--format", "xlsx", "--out", tmp_path / "in-process" / "bom.xlsx")
    assert in_process.exit_code == 0, in_process.output
    assert (tmp_path / "program" / "bom.xlsx").read_bytes() == (tmp_path / "in-process" / "bom.xlsx").read_bytes()


def test_the_program_prints_the_same_plan_as_the_command_in_process():
    program = run_program("plan", SCENARIOS / "contact-center.yaml", "--json")
    assert program.returncode == 0, program.stderr
    in_process = invoke("plan", SCENARIOS / "contact-center.yaml", "--json")
    program_lines, in_process_lines = ([line for line in text.splitlines() if "solve_seconds" not in line]
                                       for text in (program.stdout, in_process.stdout))  # fmt: skip
    assert program_lines == in_process_lines


def test_bad_input_still_exits_2_with_one_line_and_no_traceback(tmp_path):
    scenario = tmp_path / "bad.yaml"
    scenario.write_text((SCENARIOS / "contact-center.yaml").read_text().replace("peak_rps: 31", "peak_rps: -31"))
    program = run_program("plan", scenario)
    assert program.returncode == 2
    assert "Traceback" not in program.stderr and "peak_rps" in program.stderr


def test_main_collects_less_often_and_freezes_what_is_left_at_its_end(monkeypatch):
    threshold = gc.get_threshold()
    monkeypatch.setattr(sys, "argv", ["planner", "--version"])
    seen = {}
    monkeypatch.setattr(cli, "app", lambda: seen.setdefault("threshold", gc.get_threshold()))
    monkeypatch.setattr(cli, "_one_command_app", lambda argv: None)
    monkeypatch.setattr(cli, "_default_sigpipe", lambda: None)  # SIGPIPE's default would end pytest on a closed pipe
    try:
        cli.main()
        assert seen["threshold"][0] == cli.GEN0_THRESHOLD and seen["threshold"][1:] == threshold[1:]
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
