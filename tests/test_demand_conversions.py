"""Demand conversions (planner/requirements.py) as properties (hypothesis): the Poisson peak, users and request
rates, words and tokens. The seeds' worked values of the same conversions are in test_seed_cases.py."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from planner.requirements import (
    daily_active_users,
    peak_rps_from_mean,
    rps_from_users,
    words_to_tokens,
)


@given(st.floats(0.1, 500), st.floats(0.5, 0.999))
def test_poisson_peak_is_at_least_the_median_count_and_grows_with_the_quantile(mean, quantile):
    peak = peak_rps_from_mean(mean, quantile)
    assert peak >= math.floor(mean) - 1
    assert peak_rps_from_mean(mean, min(0.9999, quantile + 0.0009)) >= peak


@given(st.floats(0.01, 1e4), st.floats(0.5, 24), st.floats(0.5, 50))
def test_users_round_trip(rps, hours, per_user):
    users = daily_active_users(rps, hours, per_user)
    assert rps_from_users(users, per_user, hours) <= rps + 1e-9
    assert rps_from_users(users + 1, per_user, hours) > rps - 1e-9


@given(st.integers(0, 10**6), st.floats(0.3, 1.5))
def test_words_to_tokens_covers_the_text(words, words_per_token):
    tokens = words_to_tokens(words, words_per_token)
    assert tokens * words_per_token >= words - 1e-6
    assert (tokens - 1) * words_per_token < words + 1e-6 or tokens == 0
