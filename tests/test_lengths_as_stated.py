"""Requests are drawn and replayed as the scenario or trace states them (issue 48 items 1-2): the engine's built
lengths (ISL/OSL) shape its batch and clip nothing; a request is served up to the model's context, and only a prompt
beyond it is refused. More length spread never makes a verdict better."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from planner.scenario import Slo
from planner.simulate import FixedSteps
from planner.simulate.pools import RouteRun as _RouteRun, _length_caps, _trace_split
from planner.simulate.setups import EngineSetup
from planner.simulate.traffic import lognormal_lengths
from planner.simulate.options import SimulationOptions
from planner.simulate.settling import simulate_workload
from planner.simulate.verdicts import HOLDS, INCONCLUSIVE, MISSES

RANK = {HOLDS: 0, INCONCLUSIVE: 1, MISSES: 2}


def _route(isl=1000, osl=10, rps=20.0):
    return SimpleNamespace(rps=rps, bucket_isl=isl, bucket_osl=osl, engine_isl=isl, engine_osl=osl)


def _run(context=32768, kv_tokens=None, **route):
    return _RouteRun(_route(**route), EngineSetup(FixedSteps(1.0, 0.02, 1.0), 1, kv_tokens, 1, "toy"), context)


@pytest.mark.parametrize("cv", [0.6, 1.0, 2.0])
def test_spread_lengths_keep_the_stated_mean_within_the_context(cv):
    rng = np.random.default_rng(0)
    prompts = lognormal_lengths(2000, cv, 400_000, 8191, rng)  # Llama 3 8B: 8,192 tokens of context
    assert prompts.max() <= 8191 and prompts.mean() == pytest.approx(2000, rel=0.01)
    far = lognormal_lengths(2000, cv, 400_000, 10**9, rng)  # a context far away: the plain lognormal
    assert far.mean() == pytest.approx(2000, rel=0.02) and far.max() > 2 * 2000
    outputs = lognormal_lengths(200, cv, 400_000, 8192 - prompts, rng)
    assert (prompts + outputs).max() <= 8192


def test_the_engines_lengths_are_no_clip_but_a_stated_maximum_is():
    run = _run(context=8192)
    spec = SimpleNamespace(buckets=())
    assert _length_caps(spec, run) == (8191, float("inf"), 8192)  # not the bucket's 1000/10
    bucket = SimpleNamespace(isl_tokens=1000, osl_tokens=10, max_isl_tokens=4000, max_osl_tokens=64)
    assert _length_caps(SimpleNamespace(buckets=(bucket,)), run) == (4000, 64, 8192)
    # no context in the catalog: the engines' whole KV cache bounds a request
    assert _length_caps(spec, _run(context=None, kv_tokens=50_000))[2] == 50_000


def test_a_trace_is_replayed_as_it_is_up_to_the_context():
    isl = np.array([10, 999, 1001, 5000, 8191, 8192, 20_000])
    osl = np.array([5, 5, 5, 5000, 5, 5, 5])
    trace = SimpleNamespace(arrival_s=np.arange(len(isl), dtype=float), isl_tokens=isl, osl_tokens=osl, cached_tokens=None)
    served, refused = _trace_split(trace, [_run(context=8192)], np.random.default_rng(0))
    assert served.isl.tolist() == [10, 999, 1001, 5000, 8191]  # longer than the engine's 1000-token build: served
    assert served.osl.tolist() == [5, 5, 5, 3192, 1]  # an output stops where the context ends
    assert refused.isl.tolist() == [8192, 20_000] and refused.rejected.all()  # no room for one output token


def test_more_length_spread_never_improves_a_verdict():
    """One engine (prefill 1 ms + 0.02 ms a token) at 20 requests/s of 1,000-token prompts, TTFT P95 against 200
    ms: 101 ms at CV 0, 384 ms at CV 2. Each spread's verdict is at least as bad as the narrower one's."""
    ranks, figures = [], []
    for cv in (0.0, 0.5, 1.0, 2.0):
        done = simulate_workload([_run()], SimpleNamespace(slo=Slo(ttft_ms=200.0, percentile=95), buckets=()), 20.0,
                                 SimulationOptions(max_duration_s=600, length_cv=cv))  # fmt: skip
        (check,) = done.checks
        ranks.append(RANK[check.verdict])
        figures.append(check.simulated_ms)
    assert ranks == sorted(ranks) and ranks[0] == RANK[HOLDS] and ranks[-1] == RANK[MISSES], figures
    assert figures == sorted(figures)
