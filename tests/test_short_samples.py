"""Verdicts from few values (issue 48 item 6): a trace or run with fewer than 200 requests in its window is judged on
the requests there are, its percentile the sample's own and its 95% interval the distribution-free one of the order
statistics; that interval covers the true percentile at least 95% of the time."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from planner.scenario import Slo
from planner.simulate import FixedSteps
from planner.simulate.pools import RouteRun as _RouteRun
from planner.simulate.setups import EngineSetup
from planner.simulate.stats import order_statistic_interval
from planner.simulate.options import SimulationOptions
from planner.simulate.settling import simulate_workload
from planner.simulate.verdicts import HOLDS, INCONCLUSIVE, MISSES


@pytest.mark.parametrize("n", [20, 60, 150])
@pytest.mark.parametrize("percentile", [50.0, 90.0, 95.0])
def test_the_order_statistic_interval_covers_the_true_percentile_at_least_95_percent_of_the_time(n, percentile):
    rng = np.random.default_rng(7)
    truth = -np.log(1 - percentile / 100)  # the exponential law's percentile (rate 1)
    draws, covered = 2000, 0
    for _ in range(draws):
        low, high = order_statistic_interval(rng.exponential(1.0, n), percentile)
        covered += low <= truth <= high
    assert covered / draws >= 0.95 - 3 * np.sqrt(0.95 * 0.05 / draws)  # >= 95% less the draws' own noise


def test_weights_repeat_a_value_as_token_counts_do():
    values, weights = np.array([3.0, 1.0, 2.0]), np.array([10, 40, 50])
    repeated = np.repeat(values, weights)
    assert order_statistic_interval(values, 50.0, weights) == order_statistic_interval(repeated, 50.0)


def test_an_interval_the_sample_cannot_close_is_open_at_that_end():
    low, high = order_statistic_interval(np.arange(1.0, 101.0), 99.0)  # P99 of 100 values: no upper bound
    assert np.isfinite(low) and high == np.inf


def _trace(count: int):
    arrival = np.arange(count, dtype=float) * 0.5  # 2 requests/s
    return SimpleNamespace(arrival_s=arrival, isl_tokens=np.full(count, 500), osl_tokens=np.full(count, 20), cached_tokens=None)


def _run():
    route = SimpleNamespace(rps=2.0, bucket_isl=500, bucket_osl=20, engine_isl=500, engine_osl=20)
    return _RouteRun(route, EngineSetup(FixedSteps(1.0, 0.02, 1.0), 8, None, 1, "toy"), 32768)


@pytest.mark.parametrize(("limit_ms", "percentile", "expected"), [
    (2000.0, 50.0, HOLDS),  # far within its limit: inconclusive before, for want of 200 requests to batch
    (2000.0, 95.0, HOLDS),
    (5.0, 50.0, MISSES),
    (2000.0, 99.0, INCONCLUSIVE),  # 120 values bound no P99 from above
])  # fmt: skip
def test_a_short_trace_is_judged_on_the_requests_it_has(limit_ms, percentile, expected):
    workload = SimpleNamespace(name="chat", slo=Slo(ttft_ms=limit_ms, percentile=percentile), buckets=())
    done = simulate_workload([_run()], workload, 2.0, SimulationOptions(trace=_trace(120), trace_workload="chat"))
    (check,) = done.checks
    assert check.verdict == expected, check
    assert check.ci_low_ms is not None and (check.ci_high_ms is not None) == (percentile < 99)
    assert "order statistics" in done.seeds_note
