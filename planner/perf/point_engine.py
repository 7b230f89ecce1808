"""A model the catalog has no architecture for, served from its measured point alone.

`PointSteps` are its step costs: prefill work from the parameter count at the GPUs' calibrated GEMM rate (2 x params
FLOPs per prompt token) and a decode step that does not depend on the batch (the memory-bound regime), set so that
an engine kept full at the point's batch B delivers the point's requests/s X:

    B / X = B x p x ISL + OSL x d        p: prefill ms per token, d: decode step ms

The simulator runs these steps (planner/simulate/setups.py), and the open loop (planner/perf/open_loop.py) sizes
the engine with the same costs for requests arriving at random (`point_open_loop`): a closed-loop benchmark row
holds B requests in flight and never queues, while Poisson arrivals at X leave a queue that does not settle, so
the row's rate is not what an engine serves at a latency limit. The point's batch is its concurrency, or Little's
law over its decode time (X x OSL x TPOT) where the row states none.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from planner.catalog import compute_precision
from planner.perf.reach import limit_violation
from planner.perf.serving import release_line
from planner.perf.types import DEFAULT_TOKEN_BUDGET, PerfQuery, PerfResult

_ROW_ARITHMETIC = ("output_tokens_per_s =", "e2e_ms =")  # the row's own sums, which its engine's figures replace
OPEN_LOOP_PROVENANCE = "measured row, open loop"  # a row's engine re-rated for random arrivals (not a measurement)
LADDER_SHARES = np.linspace(0.02, 0.995, 40)  # the rates tried, shares of the row's: then 20 between the crossing


@dataclass(frozen=True)
class PointSteps:
    """Step times fitted to a measured point (module docstring). The TTFT and queueing respond to load; the decode
    step does not grow with the batch, so it is only as good as the point (said wherever it is used)."""

    decode_step_ms: float
    prefill_per_token_ms: float

    @property
    def prefill_base_ms(self) -> float:
        return 0.0

    def prompt_work_ms(self, tokens: float) -> float:
        return self.prefill_per_token_ms * tokens

    fused_work_ms = prompt_work_ms

    def decode_ms(self, batch: int, mean_context: float) -> float:
        return self.decode_step_ms

    def saturated_rps(self, batch, isl: float, osl: float):
        """Requests/s of an engine kept full at `batch` (B / (B p ISL + OSL d)); arrays in, arrays out."""
        return np.asarray(batch, dtype=float) / (batch * self.prefill_per_token_ms * isl + osl * self.decode_step_ms) * 1e3

    @classmethod
    def fitted(cls, params_b: float, gpus: int, flops_per_gpu: float, gemm_efficiency: float, batch: int,
               rps: float, isl: float, osl: float) -> PointSteps:  # fmt: skip
        per_token_ms = 2 * params_b * 1e9 / (gpus * flops_per_gpu * gemm_efficiency) * 1e3
        decode_ms = (batch / rps * 1e3 - batch * per_token_ms * isl) / osl
        if decode_ms <= 0:  # the point is faster than the prior's prefill: give decode a tenth and rescale prefill
            decode_ms = batch / rps * 1e3 / osl / 10
            per_token_ms = (batch / rps * 1e3 - osl * decode_ms) / (batch * isl)
        return cls(decode_ms, per_token_ms)


def pinned_release(engine: str, version: str) -> str | None:
    """The release a point's figures are for, where it names one (a row's 'not stated' is the class's current)."""
    return version if release_line(engine, version) is not None else None


def point_batch(concurrency: int | None, tpot_ms: float | None, itl_ms: float | None, rps: float, osl: int) -> int | None:
    """The batch of a measured point: its concurrency, or Little's law over its decode time (OSL x TPOT, a request's
    mean gap: what keeps the engine's seats full); a point with only a token-gap ITL uses it as the mean gap."""
    if concurrency:
        return int(concurrency)
    gap = tpot_ms if tpot_ms is not None else itl_ms
    return math.ceil(rps * osl * gap / 1e3 - 1e-9) if gap is not None else None


def fit_point_steps(catalog, model: str, gpu: str, engine: str, version: str | None, gpus: int, precision: str,
                    batch: int, rps: float, isl: int, osl: int) -> PointSteps:  # fmt: skip
    """The point's steps on `gpus` GPUs of `gpu` (module docstring), at the engine's calibrated GEMM rate."""
    from planner.perf.engines import engine_efficiency

    efficiency = engine_efficiency(catalog, model, gpu, engine, version)
    rates = catalog.gpus[gpu].tflops_by_precision
    rate = rates.get(compute_precision(precision), rates["bf16"])
    return PointSteps.fitted(catalog.models[model].params_b, gpus, rate * 1e12, efficiency.gemm(precision), batch, rps,
                             isl, osl)  # fmt: skip


def point_costs(steps: PointSteps, isl: int, osl: int, token_budget: int = DEFAULT_TOKEN_BUDGET) -> StepCosts:
    """The open loop's step costs of a point engine: D(b) = d at any batch, Delta = p ISL, no fixed cost, no
    per-request overhead, the closed loop at N in flight kept full (`PointSteps.saturated_rps`)."""
    from planner.perf.open_loop import StepCosts  # scipy: imported where the model runs (a kept answer needs none)

    work = steps.prompt_work_ms(isl)

    def decode(batch):
        return np.zeros_like(np.asarray(batch, dtype=float)) + steps.decode_step_ms

    def throughput(limit: int) -> np.ndarray:
        return steps.saturated_rps(np.arange(1, limit + 1, dtype=float), isl, osl) / 1e3

    return StepCosts(key=repr(("point", steps, isl, osl)), decode=decode, delta_ms=work, alone_ms=work, fixed_ms=0.0,
                     computed_tokens=float(isl), budget_tokens=float(token_budget), tokens_per_decoder=1.0,
                     tokens_per_step=1.0, overhead_ms=0.0, throughput=throughput, seat_wait=deterministic_seat_wait)  # fmt: skip


MAX_CHAIN_STATES = 50_000  # requests in an engine the seat chain follows; a law that needs more is not settled
U_NODES = np.linspace(0.0, 1.0, 33)  # a seat time's fractions the mean wait is integrated over (trapezoid)


def deterministic_seat_wait(offered, seats: int, seat_ms):
    """The wait for one of `seats` seats, each held for a fixed time D (a request's decode steps, the same for
    every request of the bucket): the M/D/c queue, exactly (Crommelin). The requests in the engine seen every D,
    N' = max(N - c, 0) + A with A ~ Poisson(a), a = lambda D the offered load, give the law pi of N at any time;
    an arrival waits at most kD + u (0 <= u < D) iff max(N - c, 0) + A(D - u) <= (k + 1) c - 1, with N seen D - u
    before it and A(D - u) ~ Poisson(a (1 - u/D)) the arrivals between. Returns per rate, as `slot_wait` does,
    P(wait), the rate a wait ends (P(wait) / E[W]: an exponential with the law's own mean, within 10% of its
    P50-P99 at loads 0.8-0.98) and the batch at SLOT_PERCENTILE; a load at or beyond the seats waits without
    end (rate 0)."""
    from planner.perf.types import SLOT_PERCENTILE

    out = []
    for load, hold in zip(np.ravel(offered).astype(float), np.ravel(seat_ms).astype(float)):
        pi = _requests_law(load, seats) if np.isfinite(load) and np.isfinite(hold) and load < seats else None
        if pi is None:
            out.append((1.0, 0.0, float(seats)))
            continue
        excess = np.concatenate([[pi[: seats + 1].sum()], pi[seats + 1 :]])  # max(N - c, 0)
        thresholds = seats * np.arange(1, len(excess) // seats + 3) - 1  # (k + 1) c - 1, k = 0, 1, ...
        waited = []  # P(W > kD + u) at each u (rows) and k (columns)
        for u in U_NODES:
            arrivals = _poisson_pmf(load * (1.0 - u), int(load + 12 * np.sqrt(load) + 30))
            reached = np.cumsum(np.convolve(excess, arrivals))
            reached = np.pad(reached, (0, max(thresholds[-1] + 1 - len(reached), 0)), mode="edge")
            waited.append(1.0 - reached[thresholds])
        waited = np.clip(np.array(waited), 0.0, 1.0)
        p_wait = float(waited[0, 0])
        mean_d = float(np.sum(np.trapezoid(waited, U_NODES, axis=0)))  # E[W] / D
        rate_ends = p_wait / (mean_d * hold) if p_wait > 0 and mean_d > 0 else np.inf  # no wait: one that ends at once
        batch = float(min(np.searchsorted(np.cumsum(pi), SLOT_PERCENTILE / 100), seats))
        out.append((p_wait, rate_ends, batch))
    waits, ends, batches = (np.array(column, dtype=float) for column in zip(*out)) if out else (np.zeros(0),) * 3
    return waits, ends, batches


def _poisson_pmf(mean: float, size: int) -> np.ndarray:
    from planner.perf.step_chain import poisson_pmf

    return poisson_pmf(np.arange(size, dtype=float), mean)


def _requests_law(load: float, seats: int) -> np.ndarray | None:
    """The law of the requests in an M/D/c engine at any time (`deterministic_seat_wait`), on as many states as its
    tail needs (to 1e-12); None where that is more than MAX_CHAIN_STATES. The chain moves from N to
    max(N - c, 0) + A, so its balance pi = pi P is banded (A reaches `width` states up, the service c down) and one
    banded LU solves it, with pi_m = 1 at the law's mode m in place of balance row m (the rows are dependent)."""
    from scipy.linalg import solve_banded

    size = seats + int(40 * (load / (seats - load) + np.sqrt(load) + 1))
    arrivals = _poisson_pmf(load, int(load + 12 * np.sqrt(load) + 30))  # the support to 1e-16 and beyond
    arrivals[-1] += 1.0 - arrivals.sum()  # the pmf's far tail (below 1e-16) on its last term
    width = len(arrivals)
    lower, upper = width, seats  # P^T - I has A[j, i] != 0 only for -c <= j - i < width
    while size <= MAX_CHAIN_STATES:
        states = np.arange(size)
        targets = np.maximum(states - seats, 0)[:, None] + np.arange(width)[None, :]  # state i moves to j
        values = np.broadcast_to(arrivals, targets.shape)
        beyond = targets >= size
        spill = np.where(beyond, values, 0.0).sum(axis=1)  # what would leave the states kept: onto the last one
        bands = np.zeros((lower + upper + 1, size))  # A[j, i] at bands[upper + j - i, i] (scipy's banded layout)
        origin, kept = np.broadcast_to(states[:, None], targets.shape), ~beyond  # each (j, i) once: set, not added
        bands[upper + targets[kept] - origin[kept], origin[kept]] = values[kept]
        spilling = np.flatnonzero(spill)
        bands[upper + size - 1 - spilling, spilling] += spill[spilling]
        bands[upper] -= 1.0
        mode = min(int(load), size - 1)
        columns = np.arange(max(mode - lower, 0), min(mode + upper + 1, size))
        bands[upper + mode - columns, columns] = 0.0
        bands[upper, mode] = 1.0
        target = np.zeros(size)
        target[mode] = 1.0
        pi = np.clip(solve_banded((lower, upper), bands, target, check_finite=False), 0.0, None)
        pi /= pi.sum()
        if pi[-max(seats, 10) :].sum() < 1e-12:
            return pi
        size *= 2
    return None


def point_states(steps: PointSteps, batch: int, isl: int, osl: int, rates_rps, percentile: float | None,
                 token_budget: int = DEFAULT_TOKEN_BUDGET) -> list:  # fmt: skip
    """The open-loop states (planner/perf/open_loop.py) of a point engine of `batch` seats at each rate."""
    from planner.perf.open_loop import solve_open_loop

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # rates beyond the engine are inf, masked
        return solve_open_loop(point_costs(steps, isl, osl, token_budget), osl, np.asarray(rates_rps, dtype=float),
                               batch, percentile, token_budget)[0]  # fmt: skip


def _row_engine(point: PerfResult, catalog, query: PerfQuery, gpus: int) -> tuple[PointSteps, int, float] | None:
    """(steps, batch, row's requests/s) of a point's own engine at the query's lengths; None where the point has no
    step times to fit (no TPOT, ITL or concurrency, or the model no parameter count)."""
    rps = point.request_throughput_rps
    batch = point_batch(point.concurrency, point.tpot_ms, point.itl_ms, rps, query.osl) if rps else None
    if batch is None or not catalog.models[point.model].params_b:
        return None
    steps = fit_point_steps(catalog, point.model, point.gpu, point.engine, pinned_release(point.engine, point.engine_version),
                            gpus, point.precision or "bf16", batch, rps, query.isl, query.osl)  # fmt: skip
    return steps, batch, rps


def kept_point_engine_answer(point: PerfResult, catalog, query: PerfQuery, percentile: float | None) -> PerfResult | str:
    """`point_engine_answer`, kept between runs in the priced-curve cache (planner/perf/curve_cache.py) under the
    point, the query and the percentile (with the code and catalog digests every kept curve carries): the open loop
    behind it takes a fresh process 0.1-0.2 s and its imports as long."""
    from planner.perf.curve_cache import curve_cache
    from planner.perf.reach import PricedCurve

    cache = curve_cache(catalog, with_aic=False)
    key = ("point engine", point, query, percentile)
    kept = cache.get(key) if cache is not None else None
    if kept is not None and (isinstance(kept.points, str) or len(kept.points) == 1):
        return kept.points if isinstance(kept.points, str) else kept.points[0]
    answer = point_engine_answer(point, catalog, query, percentile)
    if cache is not None:
        cache.put(key, PricedCurve(answer if isinstance(answer, str) else [answer], True))
    return answer


def point_engine_answer(point: PerfResult, catalog, query: PerfQuery, percentile: float | None) -> PerfResult | str:
    """A closed-loop row of a model without an architecture, answering an open-loop query: its engine at the
    query's rate (`perf --rate`), else the highest rate meeting the query's limits (`point_open_loop`); the row as
    it is where it has no step times to fit."""
    gpus = point.tp or point.gpus_per_instance
    if query.rate_rps is None:
        rated = point_open_loop(point, catalog, query, gpus, percentile)
        return point if rated is None else rated
    engine = _row_engine(point, catalog, query, gpus)
    if engine is None:
        return point
    steps, batch, rps = engine
    state = point_states(steps, batch, query.isl, query.osl, [query.rate_rps], percentile, query.token_budget)[0]
    if not math.isfinite(state.ttft_ms):
        return (f"the {point.provenance} point's engine (no architecture: its steps fitted to the point, "
                f"{rps:.4g} requests/s kept full) does not settle at {query.rate_rps:g} requests/s arriving at random")  # fmt: skip
    return _result(point, state, steps, batch, rps, percentile)


def point_open_loop(point: PerfResult, catalog, query: PerfQuery, gpus: int,
                    percentile: float | None) -> PerfResult | str | None:  # fmt: skip
    """The highest rate at which the engine of a measured closed-loop point (a model without an architecture) meets
    the query's limits at its percentile for requests arriving at random; why none does; None where the point has
    no step times to fit (`_row_engine`). The first rate of the ladder that misses is found by bisection (the
    engine's latencies grow with its rate), then the first of 20 between it and the rate below (a plan never sizes
    past a crossing)."""
    engine = _row_engine(point, catalog, query, gpus)
    if engine is None:
        return None
    steps, batch, rps = engine

    solved: dict[float, object] = {}

    def state_at(share: float):
        if share not in solved:
            solved[share] = point_states(steps, batch, query.isl, query.osl, [rps * share], percentile,
                                         query.token_budget)[0]  # fmt: skip
        return solved[share]

    def misses(share: float) -> bool:
        state = state_at(share)
        return not math.isfinite(state.ttft_ms) or bool(limit_violation(_result(point, state, steps, batch, rps, percentile), query))

    def first_miss(shares) -> int:
        """The index of the first share that misses (len(shares) where none does), by bisection: the engine's
        latencies grow with its rate, so the ladder misses from one rung on."""
        low, high = -1, len(shares)
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (low, middle) if misses(shares[middle]) else (middle, high)
        return high

    ladder = [float(share) for share in LADDER_SHARES]
    crossing = first_miss(ladder)
    best = ladder[crossing - 1] if crossing > 0 else None
    if best is not None and crossing < len(ladder):
        finer = [float(share) for share in np.linspace(best, ladder[crossing], 22)[1:-1]]
        within = first_miss(finer)
        best = finer[within - 1] if within > 0 else best
    if best is None:
        share, state = ladder[0], state_at(ladder[0])
        why = limit_violation(_result(point, state, steps, batch, rps, percentile), query) if math.isfinite(state.ttft_ms) else "it does not settle"
        return (f"the {point.provenance} point's engine (no architecture: its steps fitted to the point) misses the "
                f"limits for requests arriving at random even at {share:.0%} of its {rps:.4g} requests/s: {why}")  # fmt: skip
    return _result(point, state_at(best), steps, batch, rps, percentile)


def _result(point: PerfResult, state, steps: PointSteps, batch: int, rps: float, percentile) -> PerfResult:
    share = state.request_throughput_rps / rps
    note = (f"sized for requests arriving at random: the {point.provenance} point ({rps:.4g} requests/s at batch "
            f"{batch}, a closed loop) as an engine of its own steps (no architecture: prefill "
            f"{steps.prefill_per_token_ms * 1e3:.3g} us/token from the parameter count, decode step "
            f"{steps.decode_step_ms:.3g} ms at any batch), in the open loop at {share:.1%} of the point's rate")  # fmt: skip
    return dataclasses.replace(
        point, concurrency=batch, request_throughput_rps=state.request_throughput_rps,
        output_tokens_per_s=state.output_tokens_per_s, ttft_ms=state.ttft_ms, tpot_ms=state.tpot_ms,
        itl_ms=state.itl_ms, e2e_ms=state.e2e_ms, ttft_ms_bound=None, itl_ms_bound=None, tpot_ms_bound=None,
        provenance=OPEN_LOOP_PROVENANCE, percentile=percentile,
        derivations=(*(d for d in point.derivations if not d.startswith(_ROW_ARITHMETIC)), note),
        statistic="mean" if percentile is None else "median" if percentile == 50 else f"p{percentile:g}",
        arrivals="poisson", point_rps_per_instance=rps,
    )  # fmt: skip
