"""Expert parallelism's busiest rank: how top-k routing spreads one step's tokens over EP ranks (docs/perf-model.md).

With expert parallelism over R ranks, each GPU holds E / R whole experts, and every token of the step goes to k of
its E experts. The ranks wait for each other at the all-to-all, so the step's expert GEMMs, activations and
all-to-all run at the pace of the busiest rank, not the mean one. Routing is taken as uniform and independent per
token (a balanced router; real routers are more skewed, which the fitted grouped-GEMM factors absorb):

    tokens a rank computes   mean T k / R; the R loads sum to T k (multinomial, k distinct experts per token)
    busiest / mean           1 + m_R sqrt(R (E - k) / (T k (E - 1))),  at most R min(k, E/R) / k

m_R is the expected maximum of R independent standard normals (the normal approximation of each rank's count;
for loads that sum to a constant the maximum of the centred variables has the same mean). At one rank it is the
mean; as T grows the busiest rank approaches the mean (DeepSeek-V3, E 256, k 8, at EP 8 and 256 tokens: 1.09x the
mean load; at EP 32: 1.26x; at 8,192 prompt tokens, EP 8: 1.02x).

The experts a rank reads are taken at the mean rank's (E / R of the E (1 - (1 - k/E)^T) touched): the busiest
rank's reads fit the kernel database's EP decode iterations better but the measured serving rows worse (engines
balance experts at small batches better than random routing does; docs/perf-model.md).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

_GRID = np.linspace(-12.0, 12.0, 24_001)


@lru_cache(maxsize=1)
def _normal_cdf() -> np.ndarray:
    """Phi on the grid (made on first use: 24,001 erfc calls cost a start-up that never needs them 15 ms)."""
    return 0.5 * np.array([math.erfc(-x / math.sqrt(2.0)) for x in _GRID])


@lru_cache(maxsize=None)
def expected_max_of_normals(count: int) -> float:
    """E[max of `count` independent N(0, 1)] = int_0^inf (1 - Phi^n) dx - int_-inf^0 Phi^n dx (0 for one)."""
    if count <= 1:
        return 0.0
    power = _normal_cdf() ** count
    above, below = 1.0 - power[_GRID >= 0], power[_GRID <= 0]  # both include x = 0: trapezoid rule on each side
    dx = _GRID[1] - _GRID[0]
    return float(dx * (above.sum() - above[0] / 2 - below.sum() + below[-1] / 2))


def _m(ranks) -> np.ndarray:
    """m_R for every element of `ranks` (numbers or an array)."""
    values = np.asarray(ranks, dtype=float)
    if values.size and np.all(values == values.flat[0]):  # one engine's ranks (the common case): one lookup
        return np.full(values.shape, expected_max_of_normals(int(np.rint(values.flat[0]))))
    unique, inverse = np.unique(np.rint(values).astype(int), return_inverse=True)
    return np.array([expected_max_of_normals(int(r)) for r in unique])[inverse].reshape(values.shape)


EXACT_TOKENS = 1024  # up to this many tokens the busiest rank's load is summed exactly; beyond, the normal law
LAW_FLOOR = 1e-40  # a rank's load law is kept where it holds more than this (`_exact_busiest_table`)


def _exact_busiest(experts: int, top_k: int, ranks: int, tokens: int) -> float:
    """E[max of R loads] / mean at T = `tokens` (1 .. EXACT_TOKENS), from `_exact_busiest_table`."""
    return float(_exact_busiest_table(experts, top_k, ranks)[tokens - 1])


@lru_cache(maxsize=64)
def _exact_busiest_table(experts: int, top_k: int, ranks: int) -> np.ndarray:
    """E[max of R loads] / mean for T = 1 .. EXACT_TOKENS: one token puts j of its k experts on a rank with the
    hypergeometric law C(E/R, j) C(E - E/R, k - j) / C(E, k); a rank's load is the sum over T tokens (the law convolved
    T times, one token at a time: every T in one pass, 0.06 s for DeepSeek's 256 experts over 8 ranks, where each T
    by repeated squaring took 1.6 ms), and E[max of R] = sum over x >= 0 of 1 - F(x)^R, the ranks taken as
    independent (they sum to T k: a slight excess).

    The law is kept only where it holds more than LAW_FLOOR: below, F(x)^R is under 1e-280 and each x counts 1;
    above, F(x) is 1 to within the floor and counts 0. Kept whole, its support grows to T min(k, E/R) + 1 (8,193
    values for Qwen3's 128 experts over 8 ranks) where the mass sits within some 30 standard deviations of T k / R,
    and the far tail's F only adds rounding (F stuck a unit below 1, about R x 1e-16 each): trimmed, the tables move
    by at most 5e-13 relative up to 16 ranks (4e-11 at 32, where the whole tail's rounding was largest; against a
    sum that takes 1 - F from the top, tests/test_routing.py, the trimmed table is within 1e-11) and take a quarter
    of the time (0.06 s to 0.015 s each)."""
    per_rank = experts // ranks
    token = np.array([math.comb(per_rank, j) * math.comb(experts - per_rank, top_k - j)
                      for j in range(min(top_k, per_rank) + 1)], dtype=float) / math.comb(experts, top_k)  # fmt: skip
    law, first, out = np.ones(1), 0, np.empty(EXACT_TOKENS)  # law[i] is P(load = first + i)
    for count in range(1, EXACT_TOKENS + 1):
        law = np.convolve(law, token)
        held = np.flatnonzero(law > LAW_FLOOR)
        first, law = first + int(held[0]), law[held[0] : held[-1] + 1]
        below = np.minimum(np.cumsum(law), 1.0)
        out[count - 1] = (first + np.sum(1.0 - below**ranks)) / (count * top_k / ranks)
    return out


def _normal_busiest(experts, top_k, ranks, tokens):
    """1 + m_R sqrt(R (E - k) / (T k (E - 1))), at most R min(k, E/R) / k."""
    spread = np.sqrt(ranks * np.maximum(experts - top_k, 0.0)
                     / (np.maximum(tokens, 1e-12) * top_k * np.maximum(experts - 1.0, 1.0)))  # fmt: skip
    ceiling = ranks * np.minimum(top_k, experts / np.maximum(ranks, 1.0)) / top_k
    return np.minimum(1.0 + _m(ranks) * spread, np.maximum(ceiling, 1.0))


def busiest_rank_load(experts, top_k, ranks, tokens):
    """The busiest EP rank's routed tokens over the mean rank's (1 at one rank or no tokens): exact up to
    EXACT_TOKENS (linear between whole token counts) where the ranks hold E / R experts each, the normal law beyond
    or otherwise. Over more ranks than experts (EP 16 of Mixtral's 8), each expert is one group whose tokens its
    R / E ranks share: the busiest group sets the pace."""
    if np.all(np.asarray(ranks) <= 1):  # one rank everywhere (no expert parallelism): every factor is 1
        return np.ones(np.broadcast_shapes(*(np.shape(v) for v in (experts, top_k, ranks, tokens))))
    if np.ndim(experts) == np.ndim(top_k) == np.ndim(ranks) == 0:  # one engine's steps (the common case)
        return _one_engine_busiest(float(experts), float(top_k), float(ranks), np.asarray(tokens, dtype=float))
    arrays = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (experts, top_k, ranks, tokens)))
    shape = arrays[0].shape
    experts, top_k, ranks, tokens = (a.ravel() for a in arrays)
    ranks = np.minimum(ranks, experts)  # more ranks than experts: each expert's tokens shared by R / E ranks
    factor = np.ones(tokens.size)
    spread = (ranks > 1) & (tokens > 0) & (experts > top_k)
    if spread.any():
        factor[spread] = _normal_busiest(experts[spread], top_k[spread], ranks[spread], tokens[spread])
        whole = np.mod(experts, np.maximum(ranks, 1.0)) == 0  # E / R experts on every rank
        exact = np.flatnonzero(spread & whole & (tokens <= EXACT_TOKENS))
        # one table per (E, k, R) among them (usually one): linear between whole token counts
        combos = np.stack([experts[exact], top_k[exact], ranks[exact]], axis=1)
        if len(combos) and np.all(combos == combos[0]):
            combos = combos[:1]  # one engine's (the common case)
        elif len(combos):
            combos = np.unique(combos, axis=0)
        for e, k, r in combos.astype(int).tolist():
            rows = exact[(experts[exact] == e) & (top_k[exact] == k) & (ranks[exact] == r)]
            factor[rows] = _exact_between(e, k, r, tokens[rows])
    return factor.reshape(shape)


def _exact_between(experts: int, top_k: int, ranks: int, tokens: np.ndarray) -> np.ndarray:
    """The exact law (`_exact_busiest_table`) at token counts of 0 < T <= EXACT_TOKENS: linear between whole counts."""
    low, high = np.maximum(1.0, np.floor(tokens)), np.maximum(1.0, np.ceil(tokens))
    table = _exact_busiest_table(experts, top_k, ranks)
    at_low, at_high = table[low.astype(int) - 1], table[high.astype(int) - 1]
    return np.where(high > low, at_low + (tokens - low) * (at_high - at_low), at_low)


def _one_engine_busiest(experts: float, top_k: float, ranks: float, tokens: np.ndarray) -> np.ndarray:
    """`busiest_rank_load` of one engine (E, k and R numbers) over an array of token counts: the same arithmetic,
    element for element, without broadcasting the engine's numbers to the tokens' shape, and the normal law only
    where the exact one does not answer (a decode step asks for it thousands of times a curve)."""
    ranks = min(ranks, experts)
    factor = np.ones(tokens.shape)
    if not (ranks > 1 and experts > top_k):
        return factor
    spread = tokens > 0
    exact = spread & (tokens <= EXACT_TOKENS) if experts % max(ranks, 1.0) == 0 else np.zeros(tokens.shape, dtype=bool)
    normal = spread & ~exact
    if normal.any():
        factor[normal] = _normal_busiest(experts, top_k, ranks, tokens[normal])
    if exact.any():
        factor[exact] = _exact_between(int(experts), int(top_k), int(ranks), tokens[exact])
    return factor
