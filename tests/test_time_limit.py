"""`--time-limit` bounds the whole command (issue 33): candidate pricing, every solve and the simulation check one
deadline (planner.deadline); past it the command stops with exit code 4, names the stage and writes nothing."""

from __future__ import annotations

import json
import pickle
import time

import numpy as np
import pytest
from helpers import SCENARIOS

from planner import deadline
from planner.api import plan_in_context, scenario_catalog
from planner.candidates import CANDIDATE_STAGE, enumerate_candidates
from planner.deadline import TimeLimitError
from planner.scenario import load_scenario
from planner.simulate import FixedSteps, Requests, ServingEngine, run
from planner.simulate.balance import BALANCERS, SIMULATION_STAGE

PAST = 1e-9  # a limit that has passed by the first check


def test_the_deadline_nests_and_restores():
    assert deadline.remaining_s() is None
    deadline.check("anything")  # no limit: never raises
    with deadline.time_limit(100.0):
        assert 99.0 < deadline.remaining_s() <= 100.0
        with deadline.time_limit(1000.0):  # a later deadline inside keeps the earlier one
            assert deadline.remaining_s() <= 100.0
        with deadline.time_limit(PAST):
            time.sleep(0.001)
            with pytest.raises(TimeLimitError, match="while stage x"):
                deadline.check("stage x")
        assert deadline.remaining_s() > 99.0
        assert deadline.solver_seconds(5.0) == 5.0  # the solver's own limit when it is the shorter
        assert 99.0 < deadline.solver_seconds(500.0) <= 100.0
    assert deadline.remaining_s() is None
    assert deadline.solver_seconds(500.0) == 500.0


def test_the_error_survives_a_process_boundary():
    error = pickle.loads(pickle.dumps(TimeLimitError("simulating the plan", 3.0)))
    assert isinstance(error, TimeLimitError) and (error.stage, error.time_limit_s) == ("simulating the plan", 3.0)
    assert "3 s while simulating the plan" in str(error) and "nothing was written" in str(error)


def test_candidate_pricing_stops_at_the_deadline(monkeypatch):
    path = SCENARIOS / "daily-hybrid.yaml"
    catalog = scenario_catalog(path)
    scenario = load_scenario(path, catalog)
    for workers in ("1", "2"):  # in this process, and on forked workers (the error comes back as itself)
        monkeypatch.setenv("PLANNER_WORKERS", workers)
        with deadline.time_limit(PAST), pytest.raises(TimeLimitError) as caught:
            enumerate_candidates(scenario, catalog)
        assert caught.value.stage == CANDIDATE_STAGE


@pytest.mark.parametrize("balancer", BALANCERS)
@pytest.mark.parametrize("workers", ["1", "2"])
def test_every_balancer_stops_the_simulation_at_the_deadline(monkeypatch, balancer, workers):
    """25,000 requests: round-robin on two processes forks (the workers inherit the deadline and stop themselves)."""
    monkeypatch.setenv("PLANNER_WORKERS", workers)
    n = 25_000
    arrivals = np.sort(np.random.default_rng(1).uniform(0, 500, n))
    requests = Requests(arrivals, np.full(n, 200), np.full(n, 20))
    engines = [ServingEngine(FixedSteps(2.0, 0.01, 8.0, 0.02), 16) for _ in range(4)]
    with deadline.time_limit(PAST), pytest.raises(TimeLimitError) as caught:
        run(engines, requests, balancer)
    assert caught.value.stage == SIMULATION_STAGE
    run([ServingEngine(FixedSteps(2.0, 0.01, 8.0, 0.02), 16) for _ in range(4)], requests, balancer)  # no limit: runs


def test_a_solve_is_not_started_past_the_deadline():
    path = SCENARIOS / "llama3-8b-assistant.yaml"
    with deadline.time_limit(PAST), pytest.raises(TimeLimitError):
        plan_in_context(path)


def test_the_cli_stops_with_exit_4_and_names_the_stage(cli):
    code, out, err = cli("plan", SCENARIOS / "daily-hybrid.yaml", "--time-limit", "0.001", "--json")
    assert code == 4, err
    document = json.loads(out)
    assert document["status"] == "stopped" and document["stage"] == CANDIDATE_STAGE
    assert document["time_limit_s"] == 0.001
    assert "reached its time limit of 0.001 s while pricing candidates" in err and "Traceback" not in err


def test_a_stopped_command_writes_nothing(cli, tmp_path):
    out = tmp_path / "bom.csv"
    code, _, err = cli("bom", SCENARIOS / "daily-hybrid.yaml", "--format", "csv", "--out", out, "--time-limit", "0.001")
    assert code == 4, err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_verify_past_the_deadline_stops_in_the_simulation(cli, monkeypatch):
    """The plan solves well within the limit; the simulation then finds the deadline passed (the clock is moved on
    once the plan is made, so the test does not depend on the machine's speed)."""
    from planner import api

    made = api.plan_file

    def plan_then_age(*args, **kwargs):
        result = made(*args, **kwargs)
        deadline._deadline = time.monotonic() - 1.0  # the CLI's time_limit() puts back what it found
        return result

    monkeypatch.setattr(api, "plan_file", plan_then_age)
    code, out, err = cli("plan", SCENARIOS / "llama3-8b-assistant.yaml", "--verify", "--time-limit", "600", "--json")
    assert code == 4, err
    assert json.loads(out)["stage"] == SIMULATION_STAGE
    assert deadline.remaining_s() is None  # the CLI's limit ends with the command
