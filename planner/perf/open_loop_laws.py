"""The open loop's laws, each a piece `open_loop_states` (planner/perf/open_loop.py) puts together: the fluid estimate
of TPOT (`token_mean`), the batch decoding at a time (`decoding_law`), the wait for a sequence slot where the running
limit binds (`slot_wait`), the prompts ahead of an arrival (`prompts_ahead`) and the atoms of TTFT's law
(`ttft_atoms`); with the rate-free arrays a solve keeps for the next piece of the same engine's ladder."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from planner.perf.step_chain import poisson_pmf
from planner.perf.types import (  # SLOT_PERCENTILE: a point's batch
    SLOT_PERCENTILE,
)

CACHE_SIZE = 4096  # open-loop solves kept (open_loop_states)
MAX_DECODING = 1e6  # sequences decoding at once beyond which no engine is asked to run (the fluid batch's bracket)
ATOM_FLOOR = 1e-12  # an atom of TTFT's law lighter than this share of the whole is left out (its mass ~1e-9 in all)
# what a solve computes whatever its rates (the closed loop's departures, the decode step on its grid of batches),
# kept for the next piece of the same engine's ladder (planner/perf/layers.py prices a ladder in pieces)
_RATE_FREE: OrderedDict[str, np.ndarray] = OrderedDict()


def rate_free(key: str, compute) -> np.ndarray:
    """`compute()` once per key (the last CACHE_SIZE kept); the same array, read-only, every time."""
    found = _RATE_FREE.get(key)
    if found is None:
        found = np.asarray(compute(), dtype=float)
        found.setflags(write=False)
        _RATE_FREE[key] = found
        if len(_RATE_FREE) > CACHE_SIZE:
            _RATE_FREE.popitem(last=False)
    else:
        _RATE_FREE.move_to_end(key)
    return found


def rate_free_keys() -> set[str]:
    """The keys of the rate-free arrays kept now (`rate_free_since`)."""
    return set(_RATE_FREE)


def rate_free_since(before: set[str]) -> dict[str, np.ndarray]:
    """The rate-free arrays kept since `before` (rate_free_keys): what a forked worker computed, for its parent to
    keep as if computed there (`keep_rate_free`)."""
    return {key: array for key, array in _RATE_FREE.items() if key not in before}


def keep_rate_free(found: dict[str, np.ndarray]) -> None:
    """Keep arrays another process computed under their keys (`rate_free`: read-only, the last CACHE_SIZE)."""
    for key, array in found.items():
        rate_free(key, lambda array=array: array)


_U_NODES, _U_WEIGHTS = np.polynomial.legendre.leggauss(4)
_U_NODES, _U_WEIGHTS = (_U_NODES + 1) / 2, _U_WEIGHTS / 2  # Gauss-Legendre on [0, 1]


def slot_wait(throughput: np.ndarray, rate, limit: int):
    """The wait for one of `limit` sequence slots, with the requests in the engine a birth-death chain: arrivals at
    lambda, departures at X(N), the closed loop's throughput at N in flight (`throughput`, requests per ms for N =
    1..K: its flow-equivalent server: when more run, each runs slower, and all of them together). pi(N) ~
    prod_{i <= N} lambda / X(i) up to the limit K, then geometric with ratio lambda / X(K) for the requests waiting.
    Returns, per rate, the probability that an arrival waits (PASTA: pi(N >= K)), the rate (per ms) at which a wait
    ends, X(K) - lambda (exponential waits; <= 0 where the engine cannot keep up), and the batch that holds
    SLOT_PERCENTILE of the time."""
    drain = throughput[-1] - rate
    ratio = rate[:, None] / throughput[None, :]  # rates x N = 1..K
    log_pi = np.concatenate([np.zeros((len(rate), 1)), np.cumsum(np.log(np.maximum(ratio, 1e-300)), axis=1)], axis=1)
    top = log_pi.max(axis=1, keepdims=True)
    pi = np.exp(log_pi - top)  # N = 0..K
    stable = drain > 0
    queue = np.where(stable, pi[:, -1] / np.where(stable, 1 - ratio[:, -1], 1.0), np.inf)  # N >= K, all of it
    total = np.where(stable, pi[:, :-1].sum(axis=1) + queue, 1.0)
    waits = np.where(stable, queue / total, 1.0)
    below = np.cumsum(pi[:, :-1], axis=1) / total[:, None]
    needed = np.array([min(int(np.searchsorted(b, SLOT_PERCENTILE / 100)), limit) for b in below])
    return waits, drain, needed.astype(float)


def decoding_law(decode, rate, m: float, u, ok, key: str = ""):
    """The others decoding at a time, the fluid n = lambda m D(1 + n) / u (Little's law on the decode phase, its
    steps stretched by the prompts' share of time), at each rate: the least root of G(n) = lambda m D(1 + n) / u - n,
    where G falls through 0 (the stable batch: one above it drains, one below it fills).

    D is increasing but neither convex nor concave: a mixture of experts reads more of its experts with every
    sequence at first (a slope of milliseconds per sequence at batch 1), none more past a few dozen, and a dense
    step bends from memory- to compute-bound. Newton from n = 0 stops on the local slope where it is steep (the
    first step of a mixture of experts asks lambda m D' / u > 1 at any load), so the root is bracketed on a
    geometric grid of batches first (D on the grid does not depend on the rate: one pass), bisected, and polished
    by Newton. Returns (n, the slope D(2 + n) - D(1 + n), ok: a root within MAX_DECODING where G's fall is real,
    lambda m slope / u < 1). `key` names the decode step for the grid's values to be kept (none: computed here)."""
    grid = np.concatenate([[0.0], np.geomspace(1e-3, MAX_DECODING, 160)])
    steps = rate_free(repr(("grid", key)), lambda: decode(1.0 + grid)) if key else np.asarray(decode(1.0 + grid), dtype=float)
    excess = (rate * m / u)[:, None] * steps[None, :] - grid[None, :]  # G on the grid, rates x batches
    falls = excess <= 0
    ok = ok & falls.any(axis=1)
    first = np.where(ok, np.argmax(falls, axis=1), 1)
    rows = np.arange(len(rate))
    low, high = grid[np.maximum(first - 1, 0)], grid[first]
    g_low, g_high = excess[rows, np.maximum(first - 1, 0)], excess[rows, first]
    n = high.copy()
    before = np.zeros(len(rate), dtype=int)  # the side the last guess fell on: 1 below the root, -1 above, 0 none
    for _ in range(64):  # regula falsi, Illinois: the bracket's end kept twice running has its G halved (superlinear)
        width = g_low - g_high  # G > 0 below the root, <= 0 at and above it
        guess = np.where(width > 0, high + g_high * (high - low) / np.where(width > 0, width, 1.0), (low + high) / 2)
        guess = np.where((guess > low) & (guess < high), guess, (low + high) / 2)
        g_guess = rate * m * decode(1.0 + guess) / u - guess
        above = g_guess > 0  # the root lies above the guess
        settled = np.abs(guess - n) <= 1e-13 * np.maximum(guess, 1e-300)
        n = guess
        g_high = np.where(above, np.where(before == 1, g_high / 2, g_high), g_guess)  # the high end kept again: halved
        g_low = np.where(above, g_guess, np.where(before == -1, g_low / 2, g_low))
        low, high = np.where(above, guess, low), np.where(above, high, guess)
        exact = g_guess == 0  # the root itself (D flat around it makes G linear: one secant finds it): kept
        low, g_low = np.where(exact, guess, low), np.where(exact, 0.0, g_low)
        settled |= exact
        before = np.where(above, 1, -1)
        if np.all(settled | ~ok):
            break
    n = np.where(ok, n, 0.0)
    for _ in range(3):  # Newton within the bracket: the last digits, where D is smooth
        d0 = decode(1.0 + n)
        slope = decode(2.0 + n) - d0
        gain = rate * m * slope / u
        step = np.where(ok & (gain < 1.0), (rate * m * d0 / u - n) / np.where(gain < 1.0, 1.0 - gain, 1.0), 0.0)
        n = np.clip(n + step, low, high)
    slope = decode(2.0 + n) - decode(1.0 + n)
    ok = ok & (rate * m * slope / u < 1.0)
    return np.where(ok, n, 0.0), slope, ok


def token_mean(decode, rate, m: float, u, slope, batch_var, start, ok):
    """The fluid estimate of the mean gap over tokens (the chain's pace, refined from the chain in `_open_loop`),
    T = E[N tau] / E[N] over steps (N the sequences a step decodes, tau its length):

        E[tau] = D(N) / (1 - rho),   Cov(N, tau) = slope Var(N) / (1 - rho)
        T = E[tau] + Cov(N, tau) / N,   lambda m T = N + Cov(N, tau) / E[tau]   (Little's law, time-averaged)

    With E[tau] and Cov held, the second equation times N is a quadratic, N^2 - (lambda m E[tau] - Cov / E[tau]) N
    - lambda m Cov = 0, whose positive root is the next N (a fixed-point step on N itself diverges where N is small
    and Cov / N large); D(N) moves E[tau] by slope / (1 - rho) per sequence, a contraction where lambda m slope <
    1 - rho (damped by it). Returns (N, T, the time-averaged N, ok: `ok` where the solution settled)."""
    safe_u = np.where(ok, u, 1.0)
    contraction = np.clip(np.where(ok, rate * m * slope / safe_u, 0.0), 0.0, 0.95)
    batch = np.maximum(start, 1e-9)
    settled = np.zeros(len(rate), dtype=bool)
    for _ in range(80):
        e_tau = decode(batch) / safe_u
        cov = slope * batch_var / safe_u
        tpot = e_tau + cov / np.maximum(batch, 1e-9)
        linear = rate * m * e_tau - cov / e_tau
        new = np.maximum((linear + np.sqrt(linear**2 + 4 * rate * m * cov)) / 2, 1e-9)
        settled = np.isclose(new, batch, rtol=1e-8, atol=1e-8)
        if np.all(settled | ~ok):
            break
        # a settled point stays put: its figures never depend on the other points' iterations
        batch = np.where(settled, batch, np.maximum(batch + (new - batch) / (1.0 - contraction), 1e-9))
    ok = ok & settled & np.isfinite(tpot)
    return batch, np.where(ok, tpot, np.inf), rate * m * np.where(ok, tpot, 0.0), ok


def prompts_ahead(rate, decode, delta, per_step, q, x, pi) -> float:
    """The mean number of prompts that finish before an arrival's last chunk runs: those the step in progress
    runs, and those ahead of it (left over, or arrived before it in that step) that the steps before its last one
    run (none unless the budget spills)."""
    tau = decode + delta * x
    biased = pi * tau / np.sum(pi * tau)
    before_mean = rate * tau[:, None] * _U_NODES[None, :]  # states x U
    most = float(before_mean.max())
    before = np.arange(int(most + 10 * np.sqrt(most) + 10) + 1)
    p_before = poisson_pmf(before[None, None, :], before_mean[..., None])
    waiting = (q - x)[:, None, None] + before[None, None, :]
    earlier = np.maximum(np.ceil((waiting + 1.0) / per_step - 1e-9), 1.0) - 1.0  # steps before its last one
    done = np.minimum(waiting, earlier * per_step)
    w = biased[:, None, None] * _U_WEIGHTS[None, :, None] * p_before
    return float(np.sum(biased * x) + np.sum(w * done) / np.sum(w))


def ttft_atoms(rate, decode, delta, per_step, q, x, pi, idle: float, alone: float):
    """The engine's TTFT (from arrival to the end of the step that runs its prompt's last token) as weighted
    atoms (module docstring), and their weights. An arrival with no prompt ahead and no prompt work in the step in
    progress finds the engine idle with probability `idle` (nothing decoding): its prompt runs `alone` at once."""
    tau = decode + delta * x
    biased = pi * tau / np.sum(pi * tau)
    keep = biased > 1e-12
    tau, left, biased, quiet = tau[keep], (q - x)[keep], biased[keep], (x[keep] == 0) & (q[keep] == 0)
    before_mean = rate * tau[:, None] * _U_NODES[None, :]  # states x U
    most = float(before_mean.max())
    before = np.arange(int(most + 10 * np.sqrt(most) + 10) + 1)
    p_before = poisson_pmf(before[None, None, :], before_mean[..., None])  # states x U x A
    residual = (1 - _U_NODES[None, :]) * tau[:, None]
    through = left[:, None, None] + before[None, None, :] + 1.0  # prompts up to and with the own one
    steps = np.maximum(np.ceil(through / per_step - 1e-9), 1.0)
    full = decode + delta * per_step
    remainder = through - (steps - 1) * per_step
    behind_mean = rate * (residual[..., None] + (steps - 1) * full)
    # what arrives behind it before its last step: a three-point law with the Poisson's mean and variance
    spread = np.sqrt(3 * behind_mean)
    atoms, weights = [], []
    base = residual[..., None] + (steps - 1) * full + decode
    w = biased[:, None, None] * _U_WEIGHTS[None, :, None] * p_before
    for offset, share in ((-1.0, 1 / 6), (0.0, 2 / 3), (1.0, 1 / 6)):
        behind = np.maximum(behind_mean + offset * spread, 0.0)
        atoms.append(base + delta * np.minimum(remainder + behind, np.maximum(per_step, remainder)))
        weights.append(w * share)
    # nothing ahead and nothing in the step: the share `idle` of those arrivals meets an idle engine
    found_idle = float(np.sum(w[quiet][:, :, 0])) * idle
    for k in range(3):
        weights[k][quiet, :, 0] *= 1.0 - idle
    atoms = np.concatenate([[alone]] + [a.ravel() for a in atoms])
    weights = np.concatenate([[found_idle]] + [v.ravel() for v in weights])
    heavy = weights > ATOM_FLOOR * weights.sum()
    return atoms[heavy], weights[heavy] / weights[heavy].sum()
