"""The steady state of one engine under Poisson arrivals at a rate (open loop): what a plan's instance serves.

A benchmark at a fixed concurrency is a closed loop (roofline.steady_state_curve): B requests always in flight,
the others' prompts arriving at X (B-1)/B. A deployment sees arrivals at rate lambda whatever is in flight, and
the number running varies about its mean. At rate lambda (per ms), with the roofline's step costs:

    D(b)   decode step of b sequences (context ISL + OSL/2)
    Delta  what one prompt adds to a step that runs anyway (its compute, the weights already read)
    rho  = lambda Delta                   time share of prompts
    m    = OSL - 1                        decode steps of a request

Steps (planner/perf/step_chain.py). An iteration runs the prompts waiting, up to the token budget beside the
decoders (C = (budget - n) / ISL prompts), in tau = D(n) + Delta x: a Markov chain of Q, the prompts waiting,
solved for its stationary law pi. The batch a step decodes is the sum of the prompts the last m steps ended:
E[N | Q] and Var(N | Q) from the chain (time-reversed, and its autocovariance), widened by 1 / (1 - g) for the
feedback g = lambda m slope / (1 - rho) of a larger batch's longer steps letting more prompts in.

TPOT (= the mean ITL, over tokens). A fluid estimate first (`token_mean` in open_loop_laws.py: the token-weighted mean step with the
batch Poisson and the common slow-down), which sets the chain's pace D(n); then the chain's own token-weighted mean
step, E[N tau] / E[N], and the chain again at the pace that gives (Little: lambda m TPOT in flight), to 1%. At a
percentile: base + unit X + G, X the prompts a request's own steps carry counted from the state its prompt ended
in (step_chain.window_prompts; laws.window_law), unit its prompt plus half the steps left as one more sequence, G
the batch it shares (normal).

TTFT. An arrival comes during a step (length-biased by tau), behind the prompts left over from it and those that
arrived before it in it (V); its prompt ends in the j-th next step, j = ceil((V + 1) / C), after j - 1 full steps
(D + Delta C); the last one also carries what arrived behind it, up to C. With nothing ahead and nothing decoding
(probability exp(-n)) the engine is idle and the prompt runs alone at once. Where the running limit K binds, the
wait for a sequence slot adds to it: the requests in the engine a birth-death chain whose departures are the closed
loop's throughput at N in flight (`slot_wait`), P(W > t) = P(wait) exp(-(X(K) - lambda) t). The quantile is taken over
the atoms of that mixture.

ITL, one gap: D(N) + Delta x for the step a token falls in (laws.gap_quantile), the state drawn in proportion to
pi E[N | Q] and N size-biased for the token's own sequence. E2E: the quantile of TTFT + m TPOT, independent.

`benchmarks/model_vs_sim.py` measures all four metrics against the simulator; `tests/test_metrics.py` asserts it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planner.perf.closed_loop import SteadyState, closed_loop_throughput
from planner.perf.laws import (
    bisect,
    compress,
    count_ppf,
    count_sf,
    gap_quantile,
    weighted_quantile,
    window_law,
)
from planner.perf.open_loop_laws import (
    CACHE_SIZE,
    decoding_law,
    prompts_ahead,
    rate_free,
    slot_wait,
    token_mean,
    ttft_atoms,
)
from planner.perf.serving import instance_budget
from planner.perf.shapes import EngineShape
from planner.perf.step import COMPUTE_BOUND_TOKENS, Efficiency, decode_steps, fixed_ms, step_ms
from planner.perf.step_chain import (
    batch_given_state,
    chain_gap_means,
    grid_size,
    serial_blas,
    step_chains,
    window_prompts,
)
from planner.perf.types import (  # SLOT_PERCENTILE: a point's batch
    DEFAULT_TOKEN_BUDGET,
    SLOT_PERCENTILE,
    prompt_terms,
)

MAX_PROMPTS_PER_STEP = 256.0  # prompts one step admits at most (vLLM's default max_num_seqs)
CHAIN_ROUNDS = 8  # rounds of chain and pace before a point that has not settled is given up
PACE_TOLERANCE = 0.03  # the chain's pace and the batch it gives agree to this share (figures move < 1% within it)
_SOLVED: OrderedDict[str, tuple[list[SteadyState], list[SteadyState]]] = OrderedDict()


def open_loop_states(
    shape: EngineShape,
    eff: Efficiency,
    isl: int,
    osl: int,
    rates_rps,
    max_running: int | None,
    percentile: float | None = None,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    cache=None,
) -> tuple[list[SteadyState], list[SteadyState]]:
    """The open-loop steady state (module docstring) at each rate, from one solve: (states with latencies at
    `percentile`, states of means; with `percentile` None, the means twice). A rate the engine cannot serve (prompts
    or decode beyond its speed, or the running limit) has infinite latencies. `cache` (types.PrefixCache): prompts
    partly found in the engine's prefix cache compute the rest only (types.prompt_terms).

    A pure function of its arguments, so solves are kept (the last CACHE_SIZE, keyed by the arguments' full repr):
    a plan asks for one engine's curve at every batch cap, and sweeps and `--verify` plan the same engines again."""
    key = repr((shape, eff, isl, osl, tuple(float(r) for r in np.ravel(rates_rps)), max_running, percentile, token_budget)
               + ((cache,) if cache is not None else ()))  # fmt: skip
    kept = _SOLVED.get(key)
    if kept is None:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # rates beyond the engine are inf, masked
            kept = _open_loop(shape, eff, isl, osl, rates_rps, max_running, percentile, token_budget, cache)
        _SOLVED[key] = kept
        if len(_SOLVED) > CACHE_SIZE:
            _SOLVED.popitem(last=False)
    else:
        _SOLVED.move_to_end(key)
    return list(kept[0]), list(kept[1])


@dataclass(frozen=True)
class StepCosts:
    """What the open loop reads of one engine's iterations (module docstring's D, Delta): the roofline's for a
    modeled engine (`roofline_costs`), a measured point's for a model without an architecture
    (planner/perf/point_engine.py), the same step costs the simulator runs."""

    key: str  # names the engine's steps and lengths (the rate-free laws are kept under it)
    decode: Callable  # D(b): a decode step of b sequences at the mean context, ms (arrays in, arrays out)
    delta_ms: float  # what the mean prompt adds to a step that runs anyway
    alone_ms: float  # the mean prompt's step with nothing else in it
    fixed_ms: float  # what a step of a prompt's chunk alone pays again
    computed_tokens: float  # the budget tokens the mean prompt takes (less where a prefix is cached)
    budget_tokens: float  # an iteration's tokens (the instance's budget)
    tokens_per_decoder: float  # a decoder's tokens a step (k + 1 verified by a speculative step)
    tokens_per_step: float  # output tokens a decode step yields per sequence (speculation's accepted, else 1)
    overhead_ms: float  # the per-request overhead t0 added to TTFT
    throughput: Callable  # X(N) for N = 1..K in flight, requests per ms: the closed loop (the slot wait's chain)
    # (offered load, seats K, seat time ms) -> (P(wait), rate a wait ends per ms, the batch at SLOT_PERCENTILE), per
    # rate: an engine's own law of the wait for one of K seats; None: the closed loop's birth-death chain
    seat_wait: Callable | None = None


DECODE_MEMO = 4  # decode steps a solve keeps (roofline_costs)


def roofline_costs(shape: EngineShape, eff: Efficiency, isl: int, osl: int, token_budget: int, cache=None) -> StepCosts:
    """The roofline's step costs of one engine at these lengths (planner/perf/step.py)."""
    context = isl + osl / 2
    recent: OrderedDict = OrderedDict()  # one solve's last decode steps: its laws ask for the same batches again
    steps = decode_steps(shape, eff, context)  # the same floats as step_ms, its batch-free terms computed once

    def decode(batch):
        """D(batch), the last DECODE_MEMO arrays asked for answered again (the same array, read-only): a solve asks
        for a quarter of its steps a second time (the pace's step for the chain and for its grid, the root's step for
        the fluid TPOT), at about 90 us a call."""
        batches = np.asarray(batch, dtype=float)
        if batches.ndim == 0:
            return step_ms(shape, eff, batches, context)
        key = (batches.shape, batches.tobytes())
        found = recent.get(key)
        if found is None:
            found = np.asarray(steps(batches), dtype=float)
            found.flags.writeable = False
            recent[key] = found
            if len(recent) > DECODE_MEMO:
                recent.popitem(last=False)
        return found

    def throughput(limit: int) -> np.ndarray:
        return rate_free(repr(("slots", shape, eff, isl, osl, limit, cache, token_budget)), lambda: closed_loop_throughput(
            shape, eff, isl, osl, np.arange(1, limit + 1), limit, cache, token_budget))  # fmt: skip

    prompts, length, computed = prompt_terms(isl, cache)
    return StepCosts(
        key=repr((shape, eff, context)), decode=decode,
        delta_ms=float(step_ms(shape, eff, COMPUTE_BOUND_TOKENS, 0.0, prompts, length)
                       - step_ms(shape, eff, COMPUTE_BOUND_TOKENS, 0.0)),
        alone_ms=float(step_ms(shape, eff, 0.0, 0.0, prompts, length)), fixed_ms=float(fixed_ms(shape, eff)),
        computed_tokens=computed, budget_tokens=float(instance_budget(token_budget, shape.dp)),
        tokens_per_decoder=shape.tokens_per_decoder,
        tokens_per_step=shape.speculation.tokens_per_step if shape.speculation is not None else 1.0,
        overhead_ms=eff.ttft_overhead_ms, throughput=throughput,
    )  # fmt: skip


COSTS_KEPT = 4  # engines whose step costs are kept (_costs_of)
_COSTS: OrderedDict[tuple, tuple] = OrderedDict()  # the last COSTS_KEPT engines' step costs, by identity


def _costs_of(shape: EngineShape, eff: Efficiency, isl: int, osl: int, token_budget: int, cache=None) -> StepCosts:
    """`roofline_costs`, kept for the same engine objects: a curve is solved a few rates at a time (modeled_engine.
    rate_chunks), each piece with the engine its curve holds, and its costs (three steps and two reprs) and decode
    memo need not be made again. Keyed by the objects' identity, each kept beside its costs (so no other object
    takes its id while they are kept): an equal engine in other objects is a miss, and is costed afresh."""
    key = (id(shape), id(eff), isl, osl, token_budget, id(cache))
    found = _COSTS.get(key)
    if found is not None and found[0] is shape and found[1] is eff and found[2] is cache:
        _COSTS.move_to_end(key)
        return found[3]
    costs = roofline_costs(shape, eff, isl, osl, token_budget, cache)
    _COSTS[key] = (shape, eff, cache, costs)
    if len(_COSTS) > COSTS_KEPT:
        _COSTS.popitem(last=False)
    return costs


def _open_loop(shape, eff, isl, osl, rates_rps, max_running, percentile, token_budget, cache=None):
    return solve_open_loop(_costs_of(shape, eff, isl, osl, token_budget, cache), osl, rates_rps, max_running,
                           percentile, token_budget)  # fmt: skip


@serial_blas()  # small matrices: BLAS threads only contend (step_chain.serial_blas)
def solve_open_loop(costs: StepCosts, osl: int, rates_rps, max_running, percentile, token_budget):
    """The open-loop states (`open_loop_states`) of an engine given its step costs, uncached."""
    rate = np.asarray(rates_rps, dtype=float) / 1e3  # per ms
    per_token = costs.tokens_per_step
    real_osl, steps_osl = osl, 1.0 + max(osl - 1, 0) / per_token
    # an iteration's tokens: the instance's budget (per attention-DP rank x its ranks), a decoder taking the k + 1
    # tokens a speculative step verifies (planner/perf/serving.py)
    budget = costs.budget_tokens
    verified = costs.tokens_per_decoder
    m = steps_osl - 1.0
    limit = float(max_running) if max_running else np.inf
    decode = costs.decode
    # the mean request's prefill: its work and the budget tokens it takes (less where a prefix is cached)
    computed = costs.computed_tokens
    delta, alone, fixed = costs.delta_ms, costs.alone_ms, costs.fixed_ms
    rho = rate * delta
    u = 1.0 - rho
    ok = u > 0
    safe_u = np.where(ok, u, 1.0)
    n, slope, ok = decoding_law(decode, rate, m, safe_u, ok, costs.key)
    tpot_plain = np.where(ok, decode(1.0 + n) / safe_u, 1.0)
    # the spread of one request's TPOT (a Poisson functional of the others' arrivals, module docstring)
    feedback = np.maximum(u - rate * m * slope, 1e-300)
    tpot_var = np.where(ok, rate * m * tpot_plain * ((2 / 3) * (slope * m) ** 2 + delta**2 + slope * m * delta)
                        / feedback**2, 0.0) / max(m, 1.0) ** 2  # fmt: skip
    # the token-weighted mean gap (module docstring), first without the prompts ahead: their law needs the steps'
    batch_var = n + (rate * m) ** 2 * tpot_var
    _, tpot, n_time, ok = token_mean(decode, rate, m, u, slope, batch_var, n, ok)
    # the step chain at the pace of the batch's time average, and the batch it gives (step_chain.batch_given_state): its
    # token-weighted mean gap replaces the fluid estimate, and the chain is solved again at the pace that gap
    # gives (Little: lambda m T) until the two agree to PACE_TOLERANCE (a secant step near saturation)
    # the chain steps at the mean batch's pace; a larger batch makes longer steps that let more prompts in (lambda
    # slope / (1 - rho) more a step for each sequence more, each staying m steps): that feedback g = lambda m slope
    # / (1 - rho) widens the spread of the batch and of a window's prompts by 1 / (1 - g) (a birth-death chain's
    # linear-noise variance)
    widen = 1.0 / (1.0 - np.minimum(rate * m * slope / safe_u, 0.95))
    # each point's rounds are its own (a point's figures never depend on which other rates are asked with it)
    per_step, gap = np.ones(len(rate)), np.full(len(rate), np.nan)
    chain_of, batch_of = {}, {}
    active, settled = ok.copy(), np.zeros(len(rate), dtype=bool)
    last_n, last_f = np.full(len(rate), np.nan), np.full(len(rate), np.nan)
    for _ in range(CHAIN_ROUNDS):
        room = np.maximum(budget - verified * n_time, 1.0)
        # prompts a step runs: as many as the budget holds, at most a step's admissions (prompts of a few tokens, or
        # almost all cached, would otherwise ask for a chain of thousands of states)
        per_step = np.where(active, np.minimum(room / computed, MAX_PROMPTS_PER_STEP), per_step)
        per_prompt, states = grid_size(rate, decode(n_time), delta, per_step)
        for i in np.flatnonzero(active & (states <= 0)):  # the queue of prompts does not settle: no answer
            chain_of.pop(i, None)
        active = active & (states > 0)
        rows = np.flatnonzero(active)
        chains = step_chains(rate[rows], decode(n_time)[rows], delta, per_step[rows], per_prompt[rows], states[rows])
        batches = batch_given_state([(matrix, pi, x) for _, x, pi, matrix in chains], m)
        for i, chain, batch in zip(rows, chains, batches):
            chain_of[i], batch_of[i] = chain, batch
        gap[rows] = chain_gap_means(decode, [(batch[0], batch[1] * widen[i], delta * chain[1], chain[2])
                                             for i, chain, batch in zip(rows, chains, batches)])  # fmt: skip
        given = rate * m * np.nan_to_num(gap)  # the batch the chain gives, for the one it stepped at
        settled = settled | (active & (np.abs(given - n_time) <= PACE_TOLERANCE * np.maximum(n_time, 1e-9)))
        # the next pace: a secant step on n = F(n) (its slope, the feedback, climbs to 1 near saturation, where a
        # plain step would swing), plain on the first round
        with np.errstate(divide="ignore", invalid="ignore"):
            secant = np.clip(np.nan_to_num((given - last_f) / (n_time - last_n)), 0.0, 0.95)
        last_n, last_f = np.where(active, n_time, last_n), np.where(active, given, last_f)
        n_time = np.where(active & ~settled, n_time + (given - n_time) / (1.0 - secant), n_time)
        active = active & ~settled
        if not active.any():
            break
    # a point whose chain and pace did not agree is near saturation: no answer rather than a wrong one
    ok = ok & settled & np.isin(np.arange(len(rate)), list(chain_of)) & np.isfinite(gap)
    solved = np.flatnonzero(ok)
    chains = [chain_of[i] for i in solved]
    batches = [batch_of[i] for i in solved]
    # the prompts that finish before one's own (the step in progress's, and those ahead of it that earlier steps
    # run when the budget spills): they decode while its chunks run, so steps that carry prompts carry more
    # sequences than the average
    ahead = np.zeros_like(rate)
    paced = decode(n_time)  # the decode step at each point's pace
    for i, (q, x, pi, _) in zip(solved, chains):
        # less the sequences that finish meanwhile (a step ends N / (OSL - 1) of them)
        ahead[i] = max(prompts_ahead(rate[i], paced[i], delta, per_step[i], q, x, pi) - n_time[i] / max(m, 1.0), 0.0)
    tpot = np.where(ok, gap, np.inf)
    t0 = costs.overhead_ms
    count = len(rate)
    busy_mean = np.full(count, np.inf)
    chunks_mean, chunk_cost = np.zeros(count), np.zeros(count)
    laws = [None] * count
    alone_chunks = np.ceil(computed / token_budget - 1e-9)  # an idle engine gives a prompt the whole budget
    # the decode step varies with the batch (the same one for the step in progress and those that follow):
    # three batches of the law of N (its mean and variance), each with its own atoms
    offsets, shares = np.array([-np.sqrt(3.0), 0.0, np.sqrt(3.0)]), (1 / 6, 2 / 3, 1 / 6)
    held = np.maximum((n_time + ahead)[:, None] + offsets[None, :] * np.sqrt(np.maximum(batch_var, 0.0))[:, None], 0.0)
    held_ms = np.asarray(decode(held.ravel()), dtype=float).reshape(held.shape)
    for i, (q, x, pi, matrix) in zip(solved, chains):
        if not ok[i]:
            continue
        parts = []
        for k, share in enumerate(shares):
            part = ttft_atoms(rate[i], float(held_ms[i, k]), delta, per_step[i], q, x, pi, float(np.exp(-n_time[i])),
                               alone + (alone_chunks - 1) * fixed)  # fmt: skip
            parts.append((part[0], part[1] * share))
        atoms, weights = np.concatenate([a for a, _ in parts]), np.concatenate([w for _, w in parts])
        order = np.argsort(atoms, kind="stable")  # sorted once: every quantile of the law is then a search
        atoms, weights = atoms[order], weights[order]
        busy_mean[i] = np.sum(atoms * weights)
        laws[i] = (x, pi, atoms, weights, matrix)
        chunks_mean[i] = np.sum(pi * x)
    chunk_cost[:] = delta
    engine_ttft = busy_mean  # an idle engine is among the atoms (ttft_atoms)
    engine_s = np.where(ok, engine_ttft + m * tpot, np.inf)
    offered = rate * engine_s
    if np.isfinite(limit) and costs.seat_wait is not None:  # the engine's own law of the wait for a seat
        waits, drain, needed = costs.seat_wait(np.where(ok, offered, np.inf), int(limit), np.where(ok, engine_s, np.inf))
        ok = ok & (drain > 0)
    elif np.isfinite(limit):
        waits, drain, needed = slot_wait(costs.throughput(int(limit)), rate, int(limit))
        ok = ok & (drain > 0)
        # the chain's occupancy is too narrow where prompts slow every sequence at once: the requests in the
        # engine are also Poisson about `offered`, spread by the slow-downs all of them share
        system_var = offered + (rate * m) ** 2 * tpot_var
        waits = np.where(ok, np.maximum(waits, count_sf(limit, offered, system_var)), 1.0)
        needed = np.where(ok, np.maximum(needed, np.minimum(count_ppf(SLOT_PERCENTILE / 100, offered, system_var), limit)), 0.0)
    else:
        waits, drain = np.zeros_like(rate), np.full(count, np.inf)
        needed = np.where(ok, count_ppf(SLOT_PERCENTILE / 100, offered, offered + (rate * m) ** 2 * tpot_var), 0.0)
    slot_mean = np.where(ok, waits / drain, np.inf)
    ttft_mean = np.where(ok, t0 + engine_ttft + slot_mean, np.inf)
    itl_mean = np.where(ok, tpot, np.inf)
    running = np.where(ok, np.minimum(offered, limit), 0.0)
    cap = np.minimum(needed, limit)
    rho_out = np.where(ok, rho, 1.0)

    step_at = np.asarray(decode(1.0 + n_time), dtype=float)

    def states(ttft_at, tpot_at, itl_at, e2e_at, slot_at) -> list[SteadyState]:
        return [
            SteadyState(
                concurrency=int(max(cap[i], 1)), running=int(max(round(float(running[i])), 1)),
                ttft_ms=float(ttft_at[i]), tpot_ms=float(tpot_at[i] / per_token), itl_ms=float(itl_at[i] / per_token),
                e2e_ms=float(e2e_at[i]), request_throughput_rps=float(rate[i] * 1e3),
                output_tokens_per_s=float(rate[i] * 1e3 * real_osl), prefill_share=float(rho_out[i]), prefill_ms=alone,
                decode_step_ms=float(step_at[i]), decoding=float(1.0 + n_time[i]),
                slot_wait_ms=float(slot_at[i]), chunks_per_step=float(chunks_mean[i]), chunk_ms=float(chunk_cost[i]),
            )  # fmt: skip
            for i in range(count)
        ]

    means = states(ttft_mean, tpot, itl_mean, ttft_mean + m * tpot, slot_mean)
    if percentile is None:
        return means, means
    p = percentile / 100.0
    ttft_at, itl_at = np.full(count, np.inf), np.full(count, np.inf)
    for i in np.flatnonzero(ok):
        x, pi, atoms, weights, _ = laws[i]
        values, mass = atoms + t0, weights
        if waits[i] < 1e-6:
            ttft_at[i] = weighted_quantile(values, mass, p, presorted=True)
        else:
            values, mass = compress(values, mass, presorted=True)
            def survival(y, values=values, mass=mass, w=waits[i], d=drain[i]):
                gap = y[:, None] - values[None, :]
                waited = np.where(gap < 0, 1.0, np.exp(-d * np.maximum(gap, 0.0)))
                return np.sum(mass[None, :] * np.where(gap < 0, 1.0, w * waited), axis=1)

            ttft_at[i] = float(bisect(survival, 1 - p, np.array([values.min()]), np.array([values.max() + 50 / drain[i]]), 50)[0])
    served = np.flatnonzero(ok)
    # one gap: the step of a random token, D(N) + Delta x, with N the sequences its step decodes given the chain's
    # state (batch_given_state, widened as above), a token drawn in proportion to them
    law_of_batch = dict(zip(solved, batches))
    for i in served:
        batch_mean, batch_var_given = law_of_batch[i]
        itl_at[i] = gap_quantile(decode, batch_mean, batch_var_given * widen[i], delta * laws[i][0], laws[i][1], p)
    slot_at = np.where(ok & (waits > 1 - p), np.log(np.maximum(waits, 1e-300) / (1 - p)) / drain, 0.0)
    slot_at = np.minimum(slot_at, ttft_at)
    tpot_at, e2e_at = np.full(count, np.inf), np.full(count, np.inf)
    windows = window_prompts([(laws[i][4], laws[i][1], laws[i][0]) for i in served], m)
    for i, (none, k_mean, k_var) in zip(served, windows):
        # TPOT = base + unit X + G: X the prompts its decode steps carry (step_chain.window_prompts: none with probability
        # `none`, else in whole chunks or prompts, at most one lattice a step), each adding its prompt and, on
        # average, half the steps left as one more sequence decoding (unit); G those decoding when it starts,
        # sharing a part of its steps (normal); base such that the mean is the token-weighted TPOT. The chain
        # steps at the mean batch's pace: a window of more prompts also runs a larger batch, longer steps that let
        # more in, which widens X's spread as it widens the batch's (`widen`)
        gaps = max(m, 1.0)
        unit = (delta + slope[i] * m / 2) / gaps
        sharing = rate[i] * m * tpot[i] * (5 / 12) * (slope[i] * m) ** 2 / feedback[i] ** 2 / gaps**2
        lattice = min(per_step[i], 1.0)  # a chunk of a prompt, or one whole prompt
        most = int(np.floor(max(m, 0.0) * max(per_step[i], 1.0) + 1e-9))
        stretched = k_var * widen[i]
        values, mass = window_law(tpot[i] - unit * k_mean, unit, none, k_mean, stretched, np.sqrt(sharing), lattice, most)
        tpot_at[i] = weighted_quantile(values, mass, p)
        # E2E = TTFT + m TPOT, independent: the quantile of the sum of the two laws
        x, pi, atoms, weights, _ = laws[i]
        first, first_mass = compress(atoms + t0 + slot_mean[i], weights, 64, presorted=True)
        rest, rest_mass = compress(values * m, mass, 64)
        e2e_at[i] = weighted_quantile((first[:, None] + rest[None, :]).ravel(), (first_mass[:, None] * rest_mass[None, :]).ravel(), p)
    return states(ttft_at, tpot_at, itl_at, e2e_at, slot_at), means


