"""Every `--json` command that solves prints one JSON document on stdout, with every solver, read from the real
file descriptor (a native solver printing its banner on fd 1 slips past in-process capture)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import SCENARIOS

SOLVING_COMMANDS = {
    "plan": ["plan", str(SCENARIOS / "contact-center.yaml")],
    "compare": ["compare", str(SCENARIOS / "daily-hybrid.yaml")],
    "simulate": ["simulate", str(SCENARIOS / "contact-center.yaml"), "--duration", "30"],
    "sensitivity": ["sensitivity", str(SCENARIOS / "contact-center.yaml"), "--throughput", "1,0.8", "--demand", "1"],
}


def run_planner(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.parametrize("solver", ["cbc", "highs", "ortools"])
@pytest.mark.parametrize("command", sorted(SOLVING_COMMANDS))
def test_json_stdout_is_one_document(command, solver):
    completed = run_planner(*SOLVING_COMMANDS[command], "--solver", solver, "--json")
    assert completed.returncode == 0, completed.stderr
    document = json.loads(completed.stdout)  # fails on any banner or log line around the document
    assert isinstance(document, dict) and document


def test_infeasible_json_plan_is_a_json_diagnosis(tmp_path):
    scenario = (SCENARIOS / "contact-center.yaml").read_text()
    path = tmp_path / "tight.yaml"
    path.write_text(scenario.replace("sites:", "limits:\n  power_kw: 1\nsites:", 1))
    completed = run_planner("plan", str(path), "--json", "--solver", "highs")
    assert completed.returncode == 1
    document = json.loads(completed.stdout)
    assert document["status"] == "infeasible"
    assert any("power budget 1 kW <" in line for line in document["diagnosis"])
    assert "infeasible" in completed.stderr


def test_a_time_limit_stop_without_a_plan_has_its_own_status_and_exit_code(cli, monkeypatch):
    import planner.optimize as optimize

    monkeypatch.setattr(optimize.solve, "_solve_cbc", lambda problem, limit: ("stopped", None))
    code, out, err = cli("plan", SCENARIOS / "contact-center.yaml", "--time-limit", "120", "--json")
    assert code == 4
    document = json.loads(out)
    assert document["status"] == "stopped" and document["time_limit_s"] == 120 and document["solver"] == "cbc"
    assert "raise --time-limit" in err and "infeasible" not in err
