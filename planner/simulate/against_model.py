"""One engine under Poisson arrivals, simulated and modeled, metric by metric (docs/metrics.md): the check of the
simulator against the performance model at steady state (`benchmarks/model_vs_sim.py`, `tests/test_metrics.py`).

The model's figures at a rate are the open-loop steady state (planner/perf/open_loop.py), what a plan's instance
is sized with; the simulator runs one `ServingEngine` on the same roofline step costs (`steps.RooflineSteps`), the
same KV cache and the same per-request overhead. Load is a share of the engine's usable rate: the highest at which
the model settles with the running batch inside the KV cache 99% of the time (the highest a plan sizes at).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.catalog import Catalog
from planner.metrics import LATENCY_METRICS
from planner.perf import engine_shape
from planner.perf.calibration import efficiency_for
from planner.perf.open_loop import open_loop_states
from planner.perf.closed_loop import SteadyState, steady_state_curve
from planner.perf.serving import DEFAULT_ENGINE, instance_budget, kv_admission
from planner.perf.shapes import EngineShape
from planner.perf.step import Efficiency
from planner.perf.tables import instance_memory
from planner.perf.types import DEFAULT_TOKEN_BUDGET, Layout
from planner.simulate.balance import run
from planner.simulate.engines import ServingEngine
from planner.simulate.stats import batch_interval, gap_arrays, request_latencies, weighted_percentile
from planner.simulate.steps import RooflineSteps
from planner.simulate.traffic import Requests, cached_prefixes, poisson_arrivals


def highest_rate_rps(shape: EngineShape, eff: Efficiency, isl: int, osl: int, capacity: int, cache=None) -> float:
    """The engine's highest modeled throughput up to its KV capacity (closed loop, every slot always busy)."""
    curve = steady_state_curve(shape, eff, isl, osl, np.linspace(1, capacity, 200), capacity, cache=cache)
    return max(s.request_throughput_rps for s in curve)


def usable_rate_rps(shape: EngineShape, eff: Efficiency, isl: int, osl: int, capacity: int,
                    token_budget: int = DEFAULT_TOKEN_BUDGET, cache=None) -> float:  # fmt: skip
    """The highest rate at which the open loop settles with its P99 batch below the KV capacity (bisection)."""
    low, high = 0.0, highest_rate_rps(shape, eff, isl, osl, capacity, cache)
    for _ in range(40):
        middle = (low + high) / 2
        state = open_loop_states(shape, eff, isl, osl, [middle], capacity, None, token_budget, cache)[0][0]
        fits = math.isfinite(state.e2e_ms) and state.concurrency < capacity
        low, high = (middle, high) if fits else (low, middle)
    return low


def model_at_rate(shape: EngineShape, eff: Efficiency, isl: int, osl: int, capacity: int, rate_rps: float,
                  percentile: float | None, token_budget: int = DEFAULT_TOKEN_BUDGET, cache=None) -> SteadyState:  # fmt: skip
    """The open-loop steady state at `rate_rps`, latencies at `percentile` (None: means)."""
    return open_loop_states(shape, eff, isl, osl, [rate_rps], capacity, percentile, token_budget, cache)[0][0]


def simulate_engine(shape: EngineShape, eff: Efficiency, isl: int, osl: int, capacity: int, kv_tokens: float | None,
                    rate_rps: float, percentile: float, seed: int = 0, token_budget: int = DEFAULT_TOKEN_BUDGET,
                    requests_wanted: float = 15_000, intervals: bool = False, cache=None,
                    kv_admission: str = "paged"):  # fmt: skip
    """(percentile, mean) of each metric (ttft_ms, tpot_ms, itl_ms, e2e_ms) of one engine simulated under Poisson
    arrivals at `rate_rps`, the first tenth of the run left out (the means also hold `completed_rps`: requests
    finished per second in that window); with `intervals`, also the batch-means 95%
    interval of each percentile ((low, high), or None with too few samples). `cache` (perf.types.PrefixCache): each
    request finds its prefix cached with the hit rate's probability."""
    duration = max(300.0, requests_wanted / rate_rps)
    rng = np.random.default_rng(seed)
    arrivals = poisson_arrivals(rate_rps, duration, rng)
    requests = Requests(arrivals, np.full(len(arrivals), isl), np.full(len(arrivals), osl),
                        cached_prefixes(np.full(len(arrivals), isl), cache, rng))  # fmt: skip
    engine = ServingEngine(RooflineSteps(shape, eff), capacity, kv_tokens, instance_budget(token_budget, shape.dp),
                           eff.ttft_overhead_ms, speculation=shape.speculation, seed=seed,
                           kv_admission=kv_admission)  # fmt: skip
    run([engine], requests, "round-robin", seed)
    window = (0.1 * duration, duration)
    done = (requests.arrival_s >= window[0]) & ~np.isnan(requests.finish_s)
    latencies = request_latencies(requests, done)
    gap_end, gap_ms, gap_tokens = gap_arrays(engine.gaps, window)
    per_request = {"ttft_ms": latencies["TTFT"], "tpot_ms": latencies["TPOT"], "e2e_ms": latencies["E2E"]}
    at = {m: float(np.percentile(v, percentile)) for m, v in per_request.items()}
    at["itl_ms"] = weighted_percentile(gap_ms, gap_tokens, [percentile])[0]
    means = {m: float(v.mean()) for m, v in per_request.items()}
    means["itl_ms"] = float(np.average(gap_ms, weights=gap_tokens))
    finished = requests.finish_s[~np.isnan(requests.finish_s)]
    means["completed_rps"] = float(((finished >= window[0]) & (finished < window[1])).sum() / (window[1] - window[0]))
    if not intervals:
        return at, means
    arrived = requests.arrival_s[done]
    bounds = {m: batch_interval(v, arrived, percentile) for m, v in per_request.items()}
    bounds["itl_ms"] = batch_interval(gap_ms, gap_end, percentile, gap_tokens)
    return at, means, bounds


@dataclass(frozen=True)
class EngineCase:
    """One engine and request shape, as the model and the simulator both run it."""

    label: str
    shape: EngineShape
    eff: Efficiency
    isl: int
    osl: int
    capacity: int  # sequences the KV cache runs at once under the engine's admission (planner/perf/serving.py)
    kv_tokens: float | None
    token_budget: int = DEFAULT_TOKEN_BUDGET
    kv_admission: str = "reserve"  # the reference engine's (TensorRT-LLM)

    @classmethod
    def build(cls, catalog: Catalog, model: str, gpu: str, tp: int, precision: str, isl: int, osl: int,
              token_budget: int = DEFAULT_TOKEN_BUDGET, layout: Layout | None = None,
              speculation=None, engine: str | None = None) -> EngineCase:  # fmt: skip
        """`layout` (attention DP, EP, pipeline stages) beyond TP: the simulator runs it as one engine whose ranks
        step in lockstep, on the model's own step (planner/simulate/setups.py). `speculation`
        (planner.perf.roofline.Speculation): a speculative engine, its accepted tokens drawn per step. `engine`
        (trtllm, vllm, sglang): that engine class's calibrated factors (planner.perf.engines); None: the GPU
        generation's own."""
        layout = layout or Layout(tp)
        memory = instance_memory(catalog, model, gpu, layout.tp, precision, isl, osl, layout.dp, layout.ep, layout.pp)
        shape = engine_shape(catalog, catalog.models[model], catalog.gpus[gpu], layout, precision, speculation)
        if engine is None:
            eff = efficiency_for(catalog, catalog.gpus[gpu].architecture)
        else:
            from planner.perf.engines import engine_efficiency

            eff = engine_efficiency(catalog, model, gpu, engine)
        label = f"{model} {gpu} {layout.label} {precision} {isl}/{osl}" + (
            f" budget {token_budget}" if token_budget != DEFAULT_TOKEN_BUDGET else "") + (
            f" speculative {speculation.draft_tokens}@{speculation.acceptance:g}" if speculation else "") + (
            f" {engine}" if engine else "")  # fmt: skip
        serving = engine or DEFAULT_ENGINE
        return cls(label, shape, eff, isl, osl, memory.running_limit(isl, osl, serving), memory.kv_token_capacity,
                   token_budget, kv_admission(serving))  # fmt: skip

    def usable_rate_rps(self) -> float:
        return usable_rate_rps(self.shape, self.eff, self.isl, self.osl, self.capacity, self.token_budget)


@dataclass(frozen=True)
class MetricCheck:
    """One metric at a percentile p: the model's figure, and at p -+ PERCENTILE_SLACK (`modeled_band_ms`), the
    simulated one and its 95% interval (None: too few samples for one)."""

    modeled_ms: float
    simulated_ms: float
    interval: tuple[float, float] | None
    modeled_band_ms: tuple[float, float]

    @property
    def ratio(self) -> float:
        return self.simulated_ms / self.modeled_ms

    def within(self, tolerance: float) -> bool:
        """The simulated figure, or its interval, within +-tolerance of the model's figure, or of the model's band
        p -+ PERCENTILE_SLACK: a law with atoms (a gap is a decode step plus whole prompt chunks) has percentiles
        that jump by a chunk where its CDF crosses p, and a tenth of a point of probability cannot be told apart in
        a finite run."""
        low = min(self.modeled_ms, self.modeled_band_ms[0]) * (1 - tolerance)
        high = max(self.modeled_ms, self.modeled_band_ms[1]) * (1 + tolerance)
        if low <= self.simulated_ms <= high:
            return True
        return self.interval is not None and self.interval[0] <= high and self.interval[1] >= low


def percentile_slack(percentile: float) -> float:
    """Half a percentile point, or a tenth of the tail beyond p where that is less (P99: 0.1)."""
    return min(0.5, 0.1 * (100.0 - percentile))


def compare(case: EngineCase, load: float, percentile: float, seed: int = 0,
            requests_wanted: float = 15_000) -> dict[str, MetricCheck]:  # fmt: skip
    """Each metric at `percentile`, modeled and simulated, for the engine at `load` x its usable rate."""
    rate = load * case.usable_rate_rps()

    def model(p: float) -> SteadyState:
        return model_at_rate(case.shape, case.eff, case.isl, case.osl, case.capacity, rate, p, case.token_budget)

    slack = percentile_slack(percentile)
    modeled, below, above = model(percentile), model(percentile - slack), model(percentile + slack)
    at, _, bounds = simulate_engine(case.shape, case.eff, case.isl, case.osl, case.capacity, case.kv_tokens, rate,
                                    percentile, seed, case.token_budget, requests_wanted, intervals=True,
                                    kv_admission=case.kv_admission)  # fmt: skip
    return {m: MetricCheck(getattr(modeled, m), at[m], bounds[m], (getattr(below, m), getattr(above, m)))
            for m in LATENCY_METRICS}  # fmt: skip


RANDOM_MODELS = ("llama-3.1-8b", "llama-3.3-70b", "qwen2.5-72b", "qwen3-32b", "mistral-7b", "qwen3-30b-a3b",
                 "gpt-oss-120b", "mixtral-8x7b")  # fmt: skip
RANDOM_GPUS = ("H100-SXM-80GB", "H200-SXM-141GB", "B200-SXM-180GB", "A100-SXM-80GB", "L40S-48GB", "MI300X-192GB")
RANDOM_BUDGETS = (2048, 4096, 8192, 8192, 16384)


def random_engine(catalog: Catalog, rng: np.random.Generator, min_capacity: int = 16) -> tuple[EngineCase, float, float]:
    """A random engine (model, GPU, the smallest TP of 1/2/4/8 it fits at a random precision, ISL 64-16,000 and OSL
    8-2,000 log-uniform, a token budget) that runs at least `min_capacity` sequences, a load from 0.3 to 0.85 and a
    percentile of 50/90/95/99: the domain of the model-vs-simulator property."""
    while True:
        model, gpu = rng.choice(RANDOM_MODELS), rng.choice(RANDOM_GPUS)
        precisions = [p for p in ("bf16", "fp8", "fp4") if p in catalog.gpus[gpu].tflops_by_precision]
        precision = str(rng.choice(precisions))
        isl, osl = int(np.exp(rng.uniform(np.log(64), np.log(16_000)))), int(np.exp(rng.uniform(np.log(8), np.log(2_000))))
        budget = int(rng.choice(RANDOM_BUDGETS))
        for tp in (1, 2, 4, 8):
            memory = instance_memory(catalog, str(model), str(gpu), tp, precision, isl, osl)
            if memory.fits and memory.running_limit(isl, osl, DEFAULT_ENGINE) >= min_capacity:
                case = EngineCase.build(catalog, str(model), str(gpu), tp, precision, isl, osl, budget)
                return case, float(rng.uniform(0.3, 0.85)), float(rng.choice((50.0, 90.0, 95.0, 99.0)))
