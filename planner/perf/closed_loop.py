"""Stage 4 of the performance model: the closed loop, a benchmark's fixed concurrency (the open loop is
planner/perf/open_loop.py).

Steady state of in-flight batching at concurrency C (closed loop): B = min(C, KV capacity) requests run, the rest
wait for a slot. X requests/s, r = (B-1)/B, and for one request among the B:

    rho  = X r Delta                      time share of the others' prompts (Delta: what one adds to a compute-bound step)
    n    = X r (OSL-1) ITL                others decoding at a time (Little's law on the decode phase)
    ITL  = D(1 + n) / (1 - rho)           decode steps of the batch, stretched by the prompts fused into them
    TTFT = t0 + [B > 1] (D(1 + n)/2 + q rho / (2 (1 - rho)) Delta) + P(n)
                                          request overhead, the step in progress, the prompts ahead (M/D/1 with
                                          Kingman's arrival-variability factor q), the own prompt's step
    E2E  = TTFT + (OSL - 1) ITL,   X = B / E2E

D(b) is the decode step of b sequences (linear between b = 1 and B), P(n) the own prompt's step beside n decoding
sequences. X x E2E rises strictly with X, so the equation has exactly one root; `steady_state_curve` bisects for it
at every concurrency at once and raises `SteadyStateError` unless X x E2E = B to 1e-9. At C = 1 it gives
TTFT = t0 + prefill and ITL = one decode step of batch 1. Beyond the KV capacity the C - B waiting requests wait
(C - B) / X for a slot (added to TTFT and E2E).

These are means (the ITL above is a request's mean gap, TPOT). At a percentile p (50 to 99.9, planner/metrics.py)
TTFT and TPOT are their deterministic part plus the p-quantile of a Gamma distribution with the mean and variance of
their random part (the step in progress, the M/D/1 wait, the wait for a slot; the number of prompts fused into one
request's decode steps), and ITL, one gap between tokens, is the decode step plus the prompt chunks the step carries
under the engine's token budget (`TokenGaps`).

Token budget. An iteration takes at most b tokens (planner/perf/serving.py: the engine's per-rank budget x its
attention-DP ranks): one per decoding sequence (k + 1 when speculative), the rest prompt chunks. Where the steady
state above would put more into a step, every step is full (`budget_bound`): the decoders settle at
n = m b / (e m + L) (m decode steps per request, L computed prompt tokens, e tokens per decoder), the throughput at
X = (b - e n) / (L tau) and the prompts beyond wait their turn (TTFT = B / X - m tau). The same budget caps the
open loop's prompts per step (planner/perf/open_loop.py) and the simulator's iterations.

Capacity. The steady state charges a request the others' prompts (what it waits for), not its own; at a small batch
of long prompts that would let X exceed what the GPU computes. X is held to 1 / (Delta + (OSL - 1) slope), every
request's prompt and decode tokens at their marginal cost, and to the budget's full-step throughput (`ceiling`) below
the batch at which the budget binds; where either binds, TTFT is what Little's law leaves.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from planner.perf.serving import instance_budget
from planner.perf.shapes import EngineShape
from planner.perf.step import COMPUTE_BOUND_TOKENS, Efficiency, step_ms
from planner.perf.token_gaps import StepTimes, TokenGaps, tails, token_gaps
from planner.perf.types import DEFAULT_TOKEN_BUDGET, PrefixCache, SteadyStateError, prompt_terms


@dataclass(frozen=True)
class SteadyState:
    """One operating point, each latency at the curve's percentile (means where none was asked): `tpot_ms` a
    request's mean gap between tokens, `itl_ms` one token gap (planner/metrics.py)."""

    concurrency: int
    running: int
    ttft_ms: float
    tpot_ms: float
    itl_ms: float
    e2e_ms: float
    request_throughput_rps: float
    output_tokens_per_s: float
    prefill_share: float
    prefill_ms: float
    decode_step_ms: float
    decoding: float  # mean sequences in a decode step
    slot_wait_ms: float = 0.0  # the part of TTFT spent waiting for a KV-cache slot (beyond the capacity)
    chunks_per_step: float = 0.0  # mean prompt chunks a decode step carries (Poisson)
    chunk_ms: float = 0.0  # what one prompt chunk adds to a step


def _steps(shape: EngineShape, eff: Efficiency, isl: int, osl: float, running: np.ndarray, context: float,
           cache: PrefixCache | None = None) -> StepTimes:  # fmt: skip
    n = len(running)
    others = running - 1.0
    per = np.maximum(others, 1.0)
    prompts, length, _ = prompt_terms(isl, cache)  # the mean request's prefill (a cached prefix computes less)
    # two passes over every iteration needed (one array each): first the decode of 1, the prompt alone and the batch
    first = step_ms(shape, eff, np.concatenate([[1.0, 0.0], running]), context,
                    np.concatenate([[0.0, prompts], np.zeros(n)]), length)  # fmt: skip
    d1, alone, batch = first[0], first[1], first[2:]
    # the own prompt shares its step with the others that are decoding (a share of their lives as long as the
    # decode phase); the others' prompts cost what they add to a compute-bound step, whatever the batch (a prompt
    # hidden under a memory-bound step's weight read is the exception at low load, and there prompts are rare)
    decoding = others * max(osl - 1, 0) * d1 / (max(osl - 1, 0) * d1 + alone)
    saturated = COMPUTE_BOUND_TOKENS
    second = step_ms(shape, eff, np.array([saturated, saturated, *decoding]), context,
                     np.array([0.0, prompts, *np.full(n, prompts)]), length)  # fmt: skip
    delta, fused = second[1] - second[0], second[2:]
    busy = others > 0
    return StepTimes(
        np.full(n, d1), np.where(busy, (batch - d1) / per, 0.0), np.full(n, alone),
        np.where(decoding > 0, (fused - alone) / np.maximum(decoding, 1e-300), 0.0), np.full(n, delta),
    )  # fmt: skip


def _capacity(s: StepTimes, osl: float, ceiling: np.ndarray) -> np.ndarray:
    """The engine's capacity (requests per ms) where the token budget does not bind: every request's prompt costs
    Delta and its OSL - 1 decode tokens the marginal slope, its own included (the steady state charges a request only
    the others' prompts, what it waits for, which at a small batch of long prompts would let X exceed what the GPU
    computes), and no more than the budget's full steps put through (`BudgetBound.ceiling`)."""
    per_request = s.delta + max(osl - 1, 0) * s.slope
    with np.errstate(divide="ignore"):
        return np.minimum(np.where(per_request > 0, 1.0 / per_request, np.inf), ceiling)


def _at_saturation(shape: EngineShape, eff: Efficiency, isl: int, osl: float, s: StepTimes, running: np.ndarray,
                   full: np.ndarray, x: np.ndarray, context: float, cache: PrefixCache | None,
                   bound: BudgetBound) -> tuple[StepTimes, np.ndarray]:  # fmt: skip
    """Where the engine is at capacity (`full`): the steps and running batch of B*, the largest batch whose free
    steady state stays within its capacity (bisection over B in [1, B]); elsewhere `s` and `running` as they are.
    A batch beyond B* puts no more through (the capacity, x, is unchanged) but its token gaps would be read at a
    larger batch's cheaper marginal decode: ITL fell as concurrency rose past capacity (OSL 15 on an A100 TP2:
    294 ms at 96, 279 ms at 128). A B* whose gaps do not solve at x keeps B."""
    low, high = np.ones(int(full.sum())), running[full].astype(float)
    ceiling = bound.ceiling[full]
    for _ in range(40):
        middle = (low + high) / 2
        steps = _steps(shape, eff, isl, osl, middle, context, cache)
        over = _root(steps, middle, osl, eff)[0] > _capacity(steps, osl, ceiling)
        high, low = np.where(over, middle, high), np.where(over, low, middle)
    saturated = _steps(shape, eff, isl, osl, low, context, cache)
    solved = np.isfinite(_latencies(x[full], saturated, low, osl, eff)[-1])
    index = np.flatnonzero(full)[solved]
    merged = StepTimes(*(getattr(s, f.name).copy() for f in fields(StepTimes)))
    for f in fields(StepTimes):
        getattr(merged, f.name)[index] = getattr(saturated, f.name)[solved]
    batch = running.astype(float).copy()
    batch[index] = low[solved]
    return merged, batch


def _latencies(x: np.ndarray, s: StepTimes, running: np.ndarray, osl: int, eff: Efficiency):
    """Mean latencies at throughput x (requests per ms), in closed form: with u = 1 - rho and
    v = u - x r (OSL-1) slope, the others decoding n = x r (OSL-1) d1 / v, D(1 + n) = d1 u / v and ITL = d1 / v.
    E2E is inf where x is beyond what the engine does (u or v <= 0)."""
    share = (running - 1.0) / running
    m = max(osl - 1, 0)
    u = 1.0 - x * share * s.delta
    v = u - x * share * m * s.slope
    ok = (u > 0) & (v > 0)
    safe_u, safe_v = np.where(ok, u, 1.0), np.where(ok, v, 1.0)
    others = x * share * m * s.d1 / safe_v
    decode = s.d1 * safe_u / safe_v
    itl = np.where(ok, s.d1 / safe_v, np.inf)
    wait = np.where(running > 1, decode / 2 + eff.queue_factor * (1.0 - safe_u) / (2 * safe_u) * s.delta, 0.0)
    ttft = np.where(ok, eff.ttft_overhead_ms + wait + s.prefill + others * s.prefill_slope, np.inf)
    return 1.0 - u, others, decode, wait, ttft, itl, ttft + m * itl


def _root(s: StepTimes, running: np.ndarray, osl: int, eff: Efficiency) -> tuple[np.ndarray, np.ndarray]:
    """The throughput X (requests per ms) with X E2E(X) = B. Multiplied by u v, X E2E(X) - B is the cubic
    -B + c1 X + c2 X^2 + c3 X^3, with exactly one root where u, v > 0 (X E2E rises from 0 to infinity there);
    safeguarded Newton on it, inside the bracket (0, min(B / E2E(0), 1 / alpha, 1 / beta)), then bisection on
    X E2E / B - 1 itself. Returns X, and where the root is pinned to the last bits of X."""
    share = (running - 1.0) / running
    m = max(osl - 1, 0)
    alpha, beta = share * s.delta, share * (s.delta + m * s.slope)
    busy = np.where(running > 1, 1.0, 0.0)
    a0 = eff.ttft_overhead_ms + s.prefill
    k2, k4, h = share * m * s.d1 * s.prefill_slope, busy * eff.queue_factor * share * s.delta**2 / 2, busy * s.d1 / 2
    s0 = a0 + h + m * s.d1
    s1 = -a0 * (alpha + beta) + k2 - 2 * h * alpha + k4 - m * s.d1 * alpha
    s2 = a0 * alpha * beta - k2 * alpha + h * alpha**2 - k4 * beta
    c1, c2, c3 = s0 + running * (alpha + beta), s1 - running * alpha * beta, s2
    with np.errstate(divide="ignore"):
        high = np.minimum(running / s0, np.minimum(np.where(alpha > 0, 1 / alpha, np.inf), np.where(beta > 0, 1 / beta, np.inf)))
    low = np.zeros_like(high)
    x = high / 2
    for _ in range(200):
        value = -running + x * (c1 + x * (c2 + x * c3))
        # the cubic is X E2E - B times u v: hold it to 1e-13 of B u v, so that X E2E / B is within 1e-13 of 1
        if np.all(np.abs(value) <= 1e-13 * running * np.maximum((1 - alpha * x) * (1 - beta * x), 1e-300)):
            break
        slope = c1 + x * (2 * c2 + 3 * x * c3)
        above = value >= 0
        high, low = np.where(above, x, high), np.where(above, low, x)
        newton = x - value / np.where(slope > 0, slope, 1.0)
        x = np.where((slope > 0) & (newton >= low) & (newton <= high), newton, (low + high) / 2)
    # near saturation (u v -> 0) the cubic loses digits: finish on X E2E / B - 1 itself, bisecting the bracket
    low, high = np.minimum(low, x), np.maximum(high, x)
    for _ in range(200):
        residual = x * _latencies(x, s, running, osl, eff)[6] / running - 1.0
        done = (np.abs(residual) <= 1e-12) | (high - low <= 4 * np.spacing(high))
        if np.all(done):
            break
        above = residual >= 0
        high, low = np.where(above, x, high), np.where(above, low, x)
        x = np.where(done, x, (low + high) / 2)
    return x, high - low <= 4 * np.spacing(high)


def closed_loop_throughput(shape: EngineShape, eff: Efficiency, isl: int, osl: int, concurrencies,
                           max_running: int | None, cache: PrefixCache | None = None,
                           token_budget: int = DEFAULT_TOKEN_BUDGET) -> np.ndarray:  # fmt: skip
    """X, requests per ms, of the closed loop at each concurrency (steady_state_curve's throughput alone)."""
    concurrency = np.asarray(concurrencies, dtype=float)
    running = np.maximum(np.minimum(concurrency, max_running) if max_running else concurrency, 1.0)
    per_step = shape.speculation.tokens_per_step if shape.speculation is not None else 1.0
    steps_osl = 1.0 + max(osl - 1, 0) / per_step
    s = _steps(shape, eff, isl, steps_osl, running, isl + osl / 2, cache)
    x = _root(s, running, steps_osl, eff)[0]
    bound = budget_bound(shape, eff, isl, steps_osl, running, isl + osl / 2, token_budget, cache)
    return np.where(bound.binds(x), bound.x, np.minimum(x, _capacity(s, steps_osl, bound.ceiling)))


@dataclass(frozen=True)
class BudgetBound:
    """The steady state where the token budget binds (module docstring, "Token budget"), per running batch: its
    throughput x (requests per ms; inf where the budget cannot bind), step tau, decoders n, their decode step and
    the prompt tokens each step carries."""

    x: np.ndarray
    tau: np.ndarray
    decoders: np.ndarray
    decode: np.ndarray
    prompt_tokens: np.ndarray
    ceiling: np.ndarray  # x wherever the batch runs: no batch puts more prompts through the budget than full steps

    def binds(self, x_free: np.ndarray) -> np.ndarray:
        """Where the budget holds the throughput below what the engine would do without it."""
        return self.x < x_free


def budget_bound(shape: EngineShape, eff: Efficiency, isl: int, osl_steps: float, running: np.ndarray, context: float,
                 token_budget: int, cache: PrefixCache | None = None) -> BudgetBound:  # fmt: skip
    """Every iteration full: n decoders take e tokens each (e = 1, or the k + 1 a speculative step verifies), the
    rest of the instance's budget b (per attention-DP rank x DP) goes to prompts of L computed tokens. A request
    decodes m steps after its prompt, so n = X m tau (Little) and X L tau = b - e n: n = m b / (e m + L),
    X = (b - e n) / (L tau), tau the step of n decoders and b - e n prompt tokens. The budget binds only where the
    running batch holds more than those n decoders and the prompt being filled."""
    b = float(instance_budget(token_budget, shape.dp))
    e = shape.tokens_per_decoder
    prompts, length, computed = prompt_terms(isl, cache)
    m = max(osl_steps - 1.0, 0.0)
    decoders = m * b / (e * m + computed)
    room = b - e * decoders
    # each prompt costs what it adds to a compute-bound step (Delta, as the steady state and the open loop price it)
    saturated = step_ms(shape, eff, np.array([COMPUTE_BOUND_TOKENS, COMPUTE_BOUND_TOKENS]), 0.0, np.array([0.0, prompts]), length)
    delta = float(saturated[1] - saturated[0])
    decode = float(step_ms(shape, eff, decoders, context))
    tau = decode + delta * room / computed
    x = room / (computed * tau)
    can_bind = np.asarray(running, dtype=float) > decoders + 1.0
    full = lambda value: np.full(len(np.atleast_1d(running)), value)  # noqa: E731
    return BudgetBound(np.where(can_bind, x, np.inf), full(tau), full(decoders), full(decode), full(room), full(x))


def steady_state_curve(
    shape: EngineShape,
    eff: Efficiency,
    isl: int,
    osl: int,
    concurrencies,
    max_running: int | None,
    percentile: float | None = None,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    cache: PrefixCache | None = None,
) -> list[SteadyState]:
    """The steady state at each concurrency (module docstring), solved for all of them at once; latencies at
    `percentile` (None: means). `cache`: prompts partly found in a prefix cache (types.prompt_terms)."""
    concurrency = np.asarray(concurrencies, dtype=float)
    running = np.maximum(np.minimum(concurrency, max_running) if max_running else concurrency, 1.0)
    # speculative decoding: the OSL - 1 decode tokens come in (OSL - 1) / e steps of e tokens each; the equations
    # run over steps (a fractional count is a mean), the gaps a user sees are a step / e
    per_step = shape.speculation.tokens_per_step if shape.speculation is not None else 1.0
    real_osl, osl = osl, 1.0 + max(osl - 1, 0) / per_step
    s = _steps(shape, eff, isl, osl, running, isl + real_osl / 2, cache)
    x, pinned = _root(s, running, osl, eff)
    bound = budget_bound(shape, eff, isl, osl, running, isl + real_osl / 2, token_budget, cache)
    binds = bound.binds(x)
    # where the engine's own capacity, or the budget's ceiling below a batch that fills it, binds, Little's law
    # leaves the rest of E2E to TTFT
    m = max(osl - 1, 0)
    capacity = _capacity(s, osl, bound.ceiling)
    full = (x > capacity) & ~binds & np.isfinite(_latencies(x, s, running, osl, eff)[-1])  # a root that solved
    x = np.where(full, capacity, x)
    if full.any():
        # at capacity the engine runs the batch B* at which the free steady state reaches it: the requests beyond
        # wait for their turn (as beyond the KV capacity), so the token gaps are B*'s and TTFT takes the rest of E2E
        s, running = _at_saturation(shape, eff, isl, osl, s, running, full, x, isl + real_osl / 2, cache, bound)
    rho, others, decode, wait, ttft, tpot, e2e = _latencies(x, s, running, osl, eff)
    ttft = np.where(full, running / x - m * tpot, ttft)
    e2e = np.where(full, running / x, e2e)
    pinned = pinned & ~full
    little = x * e2e / running
    # a root pinned to the last bit of X where E2E is that steep (prefills take all the time) is solved as well
    # as floating point can: its TTFT is what Little's law leaves of E2E
    steep = pinned & np.isfinite(little) & (np.abs(little - 1.0) > 1e-9) & (np.abs(little - 1.0) < 1e-3)
    ttft = np.where(steep, running / x - max(osl - 1, 0) * tpot, ttft)
    e2e = np.where(steep, running / x, e2e)
    little = x * e2e / running
    if not np.all(np.abs(little - 1.0) <= 1e-9):
        bad = int(np.argmax(np.abs(np.nan_to_num(little, nan=np.inf) - 1.0)))
        raise SteadyStateError(
            f"steady state did not solve for {shape.model.id} on {shape.gpu.id} TP{shape.tp} {shape.precision} "
            f"ISL {isl} OSL {osl} at concurrency {int(concurrency[bad])}: X x E2E / B = {little[bad]:.9g}"
        )
    queued = concurrency - running
    slot_wait = np.where(queued > 0, queued / x, 0.0)
    computed = prompt_terms(isl, cache)[2]
    gaps = token_gaps(x, s, running, computed, others, tpot, token_budget, shape)
    ttft_at, tpot_at, itl_at = ttft + slot_wait, tpot, gaps.quantile(decode, None)
    if percentile is not None:
        ttft_at, tpot_at, slot_wait = tails(x, s, running, osl, rho, decode, wait, ttft, tpot, queued, percentile, eff)
        itl_at = gaps.quantile(decode, percentile)
    # where the token budget binds, every step is full: the same step for every token, prompts queue for their turn
    if binds.any():
        x = np.where(binds, bound.x, x)
        slot_wait = np.where(binds, np.where(queued > 0, queued / x, 0.0), slot_wait)
        engine_ttft = running / x - m * bound.tau  # Little's law on the running batch, less its decode
        # one output token (m = 0) has no gap to time: TPOT and ITL stay the free engine's reading of a step
        gapped = binds & (m > 0)
        if percentile is None:
            ttft_at = np.where(binds, engine_ttft + slot_wait, ttft_at)
            tpot_at, itl_at = np.where(gapped, bound.tau, tpot_at), np.where(gapped, bound.tau, itl_at)
        else:  # full steps are all alike; a tail no lighter than the free engine's at that batch (conservative)
            ttft_at = np.where(binds, np.maximum(engine_ttft + slot_wait, ttft_at), ttft_at)
            tpot_at = np.where(gapped, np.maximum(bound.tau, tpot_at), tpot_at)
            itl_at = np.where(gapped, np.maximum(bound.tau, itl_at), itl_at)
        rho = np.where(binds, 1.0 - bound.decode / bound.tau, rho)
        decode, others = np.where(binds, bound.decode, decode), np.where(binds, bound.decoders - 1.0, others)
        chunks = np.maximum(np.ceil(bound.prompt_tokens / computed), 1.0)
        gaps = TokenGaps(np.where(binds, chunks, gaps.chunks_per_step),
                         np.where(binds, (bound.tau - bound.decode) / chunks, gaps.chunk_ms))  # fmt: skip
    e2e_at = ttft_at + max(osl - 1, 0) * tpot_at
    return [
        SteadyState(
            concurrency=int(concurrency[i]), running=int(running[i]), ttft_ms=float(ttft_at[i]),
            tpot_ms=float(tpot_at[i] / per_step), itl_ms=float(itl_at[i] / per_step), e2e_ms=float(e2e_at[i]),
            request_throughput_rps=float(x[i] * 1e3), output_tokens_per_s=float(x[i] * 1e3 * real_osl),
            prefill_share=float(rho[i]), prefill_ms=float(s.prefill[i]), decode_step_ms=float(decode[i]),
            decoding=float(1.0 + others[i]), slot_wait_ms=float(slot_wait[i]),
            chunks_per_step=float(gaps.chunks_per_step[i]), chunk_ms=float(gaps.chunk_ms[i]),
        )  # fmt: skip
        for i in range(len(concurrency))
    ]


def steady_state(
    shape: EngineShape,
    eff: Efficiency,
    isl: int,
    osl: int,
    concurrency: int,
    max_running: int | None,
    percentile: float | None = None,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
) -> SteadyState:
    """In-flight batching at one concurrency: see the module docstring for the equations."""
    return steady_state_curve(shape, eff, isl, osl, [concurrency], max_running, percentile, token_budget)[0]


def concurrency_ladder(max_running: int | None, limit: int = 4096) -> list[int]:
    """1, 2, 3, 4, 6, 8, 12, 16, ... up to the KV-cache capacity (powers of two and the midpoints between)."""
    top = min(max_running or limit, limit)
    ladder = {1}
    power = 1
    while power <= top:
        ladder.add(power)
        ladder.add(power + power // 2)
        power *= 2
    ladder.add(top)
    return sorted(c for c in ladder if 1 <= c <= top)

