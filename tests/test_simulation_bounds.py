"""Simulation bounded in memory (issue 33, cause 5): one run of a pool holds at most MAX_RUN_REQUESTS requests.
Settling starts within the request budget whatever the rate; a duration the user fixes beyond it is refused by
name; a trace longer than it replays its first requests and says so."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import SCENARIOS

from planner.simulate import settling as verify


def test_the_first_run_fits_the_request_budget_at_any_rate():
    """At 50,000 requests/s the first run was 300 s (15 million requests, MemoryError at 3 GiB)."""
    assert verify._first_duration(50_000.0, 50_000.0, 1_000_000) == pytest.approx(20.0)
    assert verify._first_duration(10.0, 10.0, 1_000_000) == 600.0  # about 6,000 requests, as before
    for rate in np.geomspace(0.01, 1e6, 40):
        assert verify._first_duration(rate, rate, 1_000_000) * rate <= 1_000_000 * (1 + 1e-9)


def test_a_duration_beyond_the_budget_is_refused_by_name(cli):
    # chat-and-summarize routes 170 chat requests/s: a day would be 14.7 million requests in one run
    code, out, err = cli("simulate", SCENARIOS / "chat-and-summarize.yaml", "--duration", "86400")
    assert code == 2, (out, err)
    assert "--duration" in err and "at most 4,000,000" in err and "Traceback" not in err


def test_a_trace_longer_than_a_run_replays_its_first_requests_and_says_so(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(verify, "MAX_RUN_REQUESTS", 1_000)
    rng = np.random.default_rng(3)
    arrivals = np.cumsum(rng.exponential(1 / 20.0, 3_000))
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,input_tokens,output_tokens\n" + "".join(
        f"{t:.4f},{int(i)},{int(o)}\n" for t, i, o in zip(arrivals, rng.integers(100, 2000, 3_000), rng.integers(10, 300, 3_000))))
    code, out, err = cli("simulate", SCENARIOS / "llama3-8b-assistant.yaml", "--trace", trace, "--json")
    assert code == 0, err
    (item,) = json.loads(out)["workloads"]
    assert item["requests_simulated"] == 1_000
    assert "the first 1,000 of its 3,000 requests replayed" in item["note"]
