"""The busiest EP rank's load (planner/perf/routing.py) against a Monte Carlo of top-k routing, independent of it:
every token draws k distinct experts of E uniformly, E / R experts per rank, and the step waits for the rank with
the most routed tokens."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from planner.perf.routing import busiest_rank_load, expected_max_of_normals


def _monte_carlo(experts: int, top_k: int, ranks: int, tokens: int, draws: int, rng) -> float:
    keys = rng.random((draws, tokens, experts))
    chosen = np.argpartition(keys, top_k, axis=2)[:, :, :top_k] // (experts // ranks)
    loads = np.stack([np.bincount(d.ravel(), minlength=ranks) for d in chosen])
    return float(loads.max(axis=1).mean()) / (tokens * top_k / ranks)


SWEEP = [(e, k, r, t) for e, k in ((256, 8), (128, 4), (64, 8), (8, 2)) for r in (2, 8, 32)
         for t in (1, 4, 32, 256) if e % r == 0 and e // r >= 1]


@pytest.mark.parametrize(("experts", "top_k", "ranks", "tokens"), SWEEP)
def test_busiest_rank_matches_monte_carlo(experts, top_k, ranks, tokens):
    """Within 15% of the simulated mean everywhere, 4% once a rank's mean load is 16 tokens or more (the exact sum
    takes the ranks as independent; they share T k routed tokens, which matters only at a few tokens)."""
    rng = np.random.default_rng(experts * 1000 + ranks * 10 + tokens)
    draws = max(40, min(400, 40_000_000 // (tokens * experts)))
    simulated = _monte_carlo(experts, top_k, ranks, tokens, draws, rng)
    modeled = float(busiest_rank_load(experts, top_k, ranks, tokens))
    tolerance = 0.04 if tokens * top_k / ranks >= 16 else 0.15
    assert modeled == pytest.approx(simulated, rel=tolerance)


def test_one_rank_and_no_tokens_are_balanced():
    assert busiest_rank_load(256, 8, [1, 8, 8], [100, 0, 1e6]).tolist() == pytest.approx([1.0, 1.0, 1.0], abs=0.01)
    assert busiest_rank_load(256, 8, 8, 1e6) > 1.0  # the normal law beyond the exact sum, still above the mean


def test_fractional_tokens_interpolate_between_whole_counts():
    low, mid, high = (float(busiest_rank_load(256, 8, 8, t)) for t in (10, 10.5, 11))
    assert mid == pytest.approx((low + high) / 2)
    assert high < low  # more tokens, better spread


def test_expected_max_of_normals_known_values():
    """E[max of 2] = 1/sqrt(pi), of 3 = 3/(2 sqrt(pi)); of 8 = 1.4236 (tables of normal order statistics)."""
    assert expected_max_of_normals(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-5)
    assert expected_max_of_normals(3) == pytest.approx(1.5 / math.sqrt(math.pi), abs=1e-5)
    assert expected_max_of_normals(8) == pytest.approx(1.4236, abs=1e-4)


def test_more_ranks_than_experts_share_each_expert():
    """EP 16 over Mixtral's 8 experts (k 2): the busiest expert's share, never below the mean or above the ceiling,
    and continuous where the exact sum hands over to the normal law (the invariant sweep found a 0 here)."""
    factors = busiest_rank_load(8, 2, 16, [1, 64, 1024, 1025, 100_000])
    assert (factors >= 1.0).all() and (factors <= 4.0).all()
    assert factors[2] == pytest.approx(factors[3], rel=0.03)
    assert busiest_rank_load(8, 2, 16, 64) == pytest.approx(busiest_rank_load(8, 2, 8, 64))


def test_exact_and_normal_laws_meet_at_the_handover():
    for experts, top_k, ranks in ((256, 8, 8), (256, 8, 64), (128, 4, 32), (8, 2, 4)):
        exact, normal = busiest_rank_load(experts, top_k, ranks, [1024, 1025])
        assert exact == pytest.approx(normal, rel=0.03)


def test_one_engine_law_is_the_broadcast_law_to_the_bit():
    """busiest_rank_load with the engine's E, k and R as numbers (its fast path, every decode step) gives the same
    floats as with them broadcast to the tokens' shape, exact table and normal law alike, over more ranks than
    experts too."""
    rng = np.random.default_rng(7)
    token_sets = (rng.uniform(0, 3000, 40), np.array([0.0, 0.5, 1.0, 1.5, 1024.0, 1024.5, 1e6]), np.array(7.3),
                  rng.uniform(0, 5, (3, 4)))  # fmt: skip
    for experts, top_k, ranks in itertools.product((8, 60, 128, 256), (1, 2, 8), (1, 2, 8, 16, 32, 72)):
        for tokens in token_sets:
            fast = busiest_rank_load(experts, top_k, ranks, tokens)
            broadcast = busiest_rank_load(*(np.full(np.shape(tokens), float(v)) for v in (experts, top_k, ranks)), tokens)
            assert fast.shape == np.shape(tokens) and np.array_equal(fast, broadcast), (experts, top_k, ranks)


@pytest.mark.parametrize(("experts", "top_k", "ranks"), [(128, 8, 8), (128, 8, 2), (16, 1, 8), (256, 8, 32), (8, 2, 4)])
def test_the_exact_table_trimmed_to_its_mass_is_the_whole_law_s(experts, top_k, ranks):
    """`_exact_busiest_table` keeps each load law where it holds more than LAW_FLOOR; the law convolved whole over
    its full support (here, independently, with 1 - F(x)^R taken from the survival summed from the top, so that F
    never sticks a rounding unit below 1 in the far tail) gives the same table to 1e-11 (the trimmed table's own top
    edge rounds so, about R x 1e-16 a value)."""
    from planner.perf.routing import EXACT_TOKENS, _exact_busiest_table

    per_rank = experts // ranks
    token = np.array([math.comb(per_rank, j) * math.comb(experts - per_rank, top_k - j)
                      for j in range(min(top_k, per_rank) + 1)]) / math.comb(experts, top_k)  # fmt: skip
    law, whole = np.ones(1), []
    for count in range(1, EXACT_TOKENS + 1):
        law = np.convolve(law, token)
        above = np.cumsum(law[::-1])[::-1][1:]  # P(load > x) for x = 0 .. top - 1; 0 at the top
        with np.errstate(divide="ignore"):  # log1p(-1) = -inf where no load is at or below x: 1 - F^R = 1
            whole.append(np.sum(-np.expm1(ranks * np.log1p(-np.minimum(above, 1.0)))) / (count * top_k / ranks))
    np.testing.assert_allclose(_exact_busiest_table(experts, top_k, ranks), whole, rtol=1e-11, atol=0)
