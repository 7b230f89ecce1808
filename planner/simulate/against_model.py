"""One engine under Poisson arrivals, simulated and modeled, metric by metric (docs/metrics.md): the check of the
simulator against the performance model at steady state (`benchmarks/model_vs_sim.py`, `tests/test_metrics.py`).

The model's figures at a rate come from the closed-loop steady state at the concurrency whose throughput is that
rate; the simulator runs one `ServingEngine` on the same roofline step costs (`steps.RooflineSteps`) and the same
per-request overhead.
"""

from __future__ import annotations

import numpy as np

from planner.perf.roofline import DEFAULT_TOKEN_BUDGET, Efficiency, EngineShape, SteadyState, steady_state_curve
from planner.simulate.balance import run
from planner.simulate.engines import ServingEngine
from planner.simulate.stats import gap_arrays, request_latencies, weighted_percentile
from planner.simulate.steps import RooflineSteps
from planner.simulate.traffic import Requests, poisson_arrivals


def highest_rate_rps(shape: EngineShape, eff: Efficiency, isl: int, osl: int, capacity: int) -> float:
    """The engine's highest modeled throughput up to its KV capacity."""
    curve = steady_state_curve(shape, eff, isl, osl, np.linspace(1, capacity, 200), capacity)
    return max(s.request_throughput_rps for s in curve)


def model_at_rate(shape: EngineShape, eff: Efficiency, isl: int, osl: int, capacity: int, rate_rps: float,
                  percentile: float | None, token_budget: int = DEFAULT_TOKEN_BUDGET) -> SteadyState:  # fmt: skip
    """The steady state whose throughput is `rate_rps` (bisection on a continuous concurrency), latencies at
    `percentile` (None: means)."""
    low, high = 1.0, float(capacity)
    for _ in range(60):
        middle = (low + high) / 2
        below = steady_state_curve(shape, eff, isl, osl, [middle], capacity)[0].request_throughput_rps < rate_rps
        low, high = (middle, high) if below else (low, middle)
    return steady_state_curve(shape, eff, isl, osl, [low], capacity, percentile, token_budget)[0]


def simulate_engine(shape: EngineShape, eff: Efficiency, isl: int, osl: int, capacity: int, kv_tokens: float | None,
                    rate_rps: float, percentile: float, seed: int = 0, token_budget: int = DEFAULT_TOKEN_BUDGET,
                    requests_wanted: float = 15_000) -> tuple[dict[str, float], dict[str, float]]:  # fmt: skip
    """(percentile, mean) of each metric (ttft_ms, tpot_ms, itl_ms, e2e_ms) of one engine simulated under Poisson
    arrivals at `rate_rps`, the first tenth of the run left out."""
    duration = max(300.0, requests_wanted / rate_rps)
    arrivals = poisson_arrivals(rate_rps, duration, np.random.default_rng(seed))
    requests = Requests(arrivals, np.full(len(arrivals), isl), np.full(len(arrivals), osl))
    engine = ServingEngine(RooflineSteps(shape, eff), capacity, kv_tokens, token_budget, eff.ttft_overhead_ms)
    run([engine], requests, "round-robin", seed)
    window = (0.1 * duration, duration)
    done = (requests.arrival_s >= window[0]) & ~np.isnan(requests.finish_s)
    latencies = request_latencies(requests, done)
    _, gap_ms, gap_tokens = gap_arrays(engine.gaps, window)
    per_request = {"ttft_ms": latencies["TTFT"], "tpot_ms": latencies["TPOT"], "e2e_ms": latencies["E2E"]}
    at = {m: float(np.percentile(v, percentile)) for m, v in per_request.items()}
    at["itl_ms"] = weighted_percentile(gap_ms, gap_tokens, [percentile])[0]
    means = {m: float(v.mean()) for m, v in per_request.items()}
    means["itl_ms"] = float(np.average(gap_ms, weights=gap_tokens))
    return at, means
