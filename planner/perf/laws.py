"""Laws of the open-loop model's latencies as weighted atoms, and their quantiles (planner/perf/open_loop.py):
counts of sequences (negative binomial, Poisson), one token gap over a chain's states, the prompts a request's
steps carry, and the searches that find a quantile.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy.special import betainc, betaln, gammaincc, gammaincinv, gammaln

GAP_GRID = 160  # batch sizes at which the law of one gap is tabulated (a step moves by slope x spacing / 2 at most)


def count_law(mean, var):
    """Negative binomial (scipy's n, p) of this mean and variance; Poisson where the variance is not above it."""
    mean = np.maximum(np.asarray(mean, dtype=float), 1e-300)
    extra = np.maximum(np.asarray(var, dtype=float) - mean, mean * 1e-9)
    size = mean**2 / extra
    return size, size / (size + mean)


@functools.cache
def _nbinom_ufuncs():
    """scipy's own negative-binomial survival and quantile ufuncs (Boost's, what scipy.stats.nbinom calls), without
    importing scipy.stats: that costs a fresh process, and each worker forked to price curves, about 0.3 s. Where a
    scipy lacks them (private names), scipy.stats.nbinom answers instead."""
    try:
        from scipy.special._ufuncs import _nbinom_ppf, _nbinom_sf
    except ImportError:
        from scipy.stats import nbinom

        return nbinom.sf, nbinom.ppf
    return _nbinom_sf, _nbinom_ppf


def count_sf(limit, mean, var):
    """P(N >= limit) for the requests in the engine (negative binomial), as scipy.stats.nbinom.sf(limit - 1, ...)
    gives it bit for bit (a test checks): 1 below the support."""
    size, prob = count_law(np.where(np.isfinite(mean), mean, 1.0), np.where(np.isfinite(var), var, 1.0))
    k = np.floor(np.asarray(limit, dtype=float) - 1.0)
    survival, _ = _nbinom_ufuncs()
    inside = np.clip(survival(np.maximum(k, 0.0), size, prob), 0.0, 1.0)
    return np.where(np.isfinite(mean), np.where(k < 0, 1.0, inside), 1.0)


def count_ppf(q, mean, var):
    """The q-quantile of the requests in the engine, as scipy.stats.nbinom.ppf gives it (0 < q < 1)."""
    size, prob = count_law(np.where(np.isfinite(mean), mean, 1.0), np.where(np.isfinite(var), var, 1.0))
    _, quantile = _nbinom_ufuncs()
    with np.errstate(over="ignore"):
        return np.where(np.isfinite(mean), quantile(q, size, prob), np.inf)


def bisect(survival, target, low, high, iterations: int = 80):
    """The x with survival(x) = target, for a survival function falling in x, bisected on arrays."""
    for _ in range(iterations):
        middle = (low + high) / 2
        above = survival(middle) > target
        low, high = np.where(above, middle, low), np.where(above, high, middle)
    return (low + high) / 2


def weighted_quantile(values, weights, q: float, presorted: bool = False) -> float:
    order = slice(None) if presorted else np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    return float(values[order][min(np.searchsorted(cumulative, q * cumulative[-1]), len(values) - 1)])


def gamma_ppf(q, shape, scale) -> np.ndarray:
    """Gamma quantiles, as scipy.stats.gamma.ppf computes them for 0 < q < 1 (scipy.special directly)."""
    return gammaincinv(shape, q) * scale


def binomial_pmf(counts, trials: int, share: float) -> np.ndarray:
    """Binomial probabilities from log-gamma (scipy.stats's own agree to about 1e-15; importing scipy.stats costs a
    fresh process about 0.3 s)."""
    counts = np.asarray(counts, dtype=float)
    choose = gammaln(trials + 1.0) - gammaln(counts + 1.0) - gammaln(trials - counts + 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.exp(choose + counts * np.log(share) + (trials - counts) * np.log1p(-share))


def beta_binomial_pmf(counts, trials: int, a: float, b: float) -> np.ndarray:
    """Beta-binomial probabilities from log-gamma and log-beta (as `binomial_pmf`)."""
    counts = np.asarray(counts, dtype=float)
    choose = gammaln(trials + 1.0) - gammaln(counts + 1.0) - gammaln(trials - counts + 1.0)
    return np.exp(choose + betaln(counts + a, trials - counts + b) - betaln(a, b))


def window_law(base: float, unit: float, none: float, mean: float, var: float, sigma: float, lattice: float,
                most: int):
    """base + unit X + G as weighted atoms. X = 0 with probability `none`; else X = lattice x K, K from 1 to `most`
    (a step runs at most one lattice of prompt work: a chunk, or C whole prompts) distributed as 1 + a
    beta-binomial on 0..most - 1 with the rest of X's mean and variance (binomial where that is narrower), or,
    beyond 400 values, Gamma on 256 equally likely levels; G normal (0, sigma) by a 5-point Gauss-Hermite rule."""
    some = 1.0 - none
    if some > 1e-12 and mean > 0 and most >= 1:
        given_mean, given_var = mean / some, max((var + mean**2) / some - (mean / some) ** 2, 0.0)
        if most <= 400:
            trials = most - 1
            share = float(np.clip((given_mean / lattice - 1.0) / max(trials, 1), 1e-9, 1 - 1e-9))
            spread = given_var / lattice**2 / max(trials * share * (1 - share), 1e-300)  # (s + n) / (s + 1)
            counts = np.arange(trials + 1)
            if trials == 0 or spread <= 1.0 + 1e-9:
                pmf = binomial_pmf(counts, trials, share)
            else:
                total = max((trials - spread) / (spread - 1.0), 1e-3)  # a + b
                pmf = beta_binomial_pmf(counts, trials, share * total, (1 - share) * total)
            positive, positive_mass = lattice * (1.0 + counts), some * pmf / pmf.sum()
        else:
            levels = (np.arange(256) + 0.5) / 256
            positive = (gamma_ppf(levels, given_mean**2 / given_var, given_var / given_mean) if given_var > 0
                        else np.full(len(levels), given_mean))  # fmt: skip
            positive_mass = np.full(len(levels), some / len(levels))
        counts, k_mass = np.concatenate([[0.0], positive]), np.concatenate([[none], positive_mass])
    else:
        counts, k_mass = np.zeros(1), np.ones(1)
    nodes, node_weights = np.polynomial.hermite_e.hermegauss(5)
    node_weights = node_weights / node_weights.sum()
    values = (base + unit * counts)[:, None] + sigma * nodes[None, :]
    weights = k_mass[:, None] * node_weights[None, :]
    keep = weights > 0
    return values[keep], weights[keep] / weights[keep].sum()


def compress(values, weights, levels: int = 2048, presorted: bool = False):
    """A weighted sample of many atoms as `levels` equally likely ones (its quantiles), sorted."""
    order = slice(None) if presorted else np.argsort(values, kind="stable")
    values, cumulative = values[order], np.cumsum(weights[order])
    cumulative /= cumulative[-1]
    if len(values) <= levels:
        return values, np.diff(np.concatenate([[0.0], cumulative]))
    at = (np.arange(levels) + 0.5) / levels
    return values[np.minimum(np.searchsorted(cumulative, at), len(values) - 1)], np.full(levels, 1.0 / levels)


def gap_quantile(decode, batch_mean, batch_var: float, chunk_ms, pi, q: float) -> float:
    """The q-quantile of one gap, over tokens: a token's step is in chain state i with probability pi_i E[N | i] /
    E[N] (a step gives one token to each sequence it decodes), and lasts D(N) + c_i, N the sequences it decodes:
    negative binomial of mean E[N | i] and variance Var(N | Q) (Poisson where that is not above the mean),
    size-biased for the token's own sequence (1 + NB(r + 1, p); 1 + Poisson(mu)), c_i the state's prompt work."""
    tokens = pi * batch_mean
    if not np.sum(tokens) > 0:  # nothing decodes (OSL 1): a gap would be one step of one sequence
        return float(decode(1.0))
    keep = tokens > 1e-10 * np.sum(tokens)  # states of a negligible share of tokens (1e-7 in all at most) left out
    weight, mean, chunk = tokens[keep] / np.sum(tokens[keep]), np.maximum(batch_mean[keep], 1e-9), chunk_ms[keep]
    # states of the same prompt work whose batches differ by under a quarter of the batch's spread are one state
    # (their weighted mean): the mixture's variance grows by under 0.6% of the batch's, a gap's law barely moves
    width = 0.25 * np.sqrt(max(batch_var, float(weight @ mean), 1e-9))
    # (numbered in the order of (chunk, batch level), as a complex number sorts: real part first)
    _, group = np.unique(chunk + 1j * np.floor(mean / width), return_inverse=True)
    merged = np.bincount(group, weights=weight)
    mean = np.bincount(group, weights=weight * mean) / merged
    chunk = np.bincount(group, weights=weight * chunk) / merged
    weight = merged
    size, prob = count_law(mean, np.full(len(mean), batch_var))
    poissonian = batch_var <= mean * (1 + 1e-9)
    spread = 7 * np.sqrt(np.maximum(batch_var, mean)) + 8  # beyond it each law holds < 1e-8
    bottom, top = int(max(np.min(mean - spread), 0)), int(np.max(mean + spread))
    # whole counts of the others over the range that holds them, at most GAP_GRID of them
    counts = (np.arange(bottom, top + 1, dtype=float) if top - bottom < GAP_GRID
              else np.unique(np.round(np.linspace(bottom, top, GAP_GRID))))  # fmt: skip
    steps = decode(1.0 + counts)
    # P(others <= k): Poisson Q(k + 1, mu), negative binomial NB(r + 1, p): I_p(r + 1, k + 1) (each law only
    # where it is the state's)
    cdf = np.empty((len(mean), len(counts)))
    cdf[poissonian] = gammaincc(counts[None, :] + 1, mean[poissonian, None])
    spread_out = ~poissonian
    cdf[spread_out] = betainc(size[spread_out, None] + 1, counts[None, :] + 1, prob[spread_out, None])

    # the law is a step function: state i's gap reaches D(1 + k) + c_i with probability w_i P(others = k), so the
    # quantile is the first of those steps, in order, where the mass reached holds q (beyond the grid: its top)
    gaps = (steps[None, :] + chunk[:, None]).ravel()
    order = np.argsort(gaps, kind="stable")
    reached = np.cumsum((weight[:, None] * np.diff(cdf, axis=1, prepend=0.0)).ravel()[order])
    holds = 1.0 - reached <= 1 - q  # falls to True once (the mass reached only grows)
    first = int(np.argmax(holds))
    if not holds[first]:
        return float(steps[-1] + chunk.max()) * 1.001
    return float(gaps[order[first]])
