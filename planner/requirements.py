"""Requirement helpers of the seeds: words to tokens, peak rate from a mean, requests and users per day."""

from __future__ import annotations

import math


WORDS_PER_TOKEN = 0.75  # seed 001: 1 token ~ 0.75 English words
SECONDS_PER_HOUR = 3600.0


def words_to_tokens(words: float, words_per_token: float = WORDS_PER_TOKEN) -> int:
    """Tokens for a text of `words` words, rounded up (a partial token is still a token)."""
    if words < 0 or words_per_token <= 0:
        raise ValueError("words must be >= 0 and words_per_token > 0")
    # round away float noise first: 3000 / 0.75 must give 4000, not 4001
    return math.ceil(round(words / words_per_token, 9))


def peak_rps_from_mean(mean_rps: float, quantile: float = 0.95) -> float:
    """Requests in the busiest second at `quantile`, arrivals Poisson with `mean_rps` (seed 001, case C4).

    `scipy.stats.poisson.ppf(0.95, 64) == 77`: size for this, not for the mean.
    """
    if mean_rps < 0:
        raise ValueError("mean_rps must be >= 0")
    if not 0 < quantile < 1:
        raise ValueError("quantile must be strictly between 0 and 1")
    from scipy.stats import poisson  # scipy is slow to import: where it is used

    return float(poisson.ppf(quantile, mean_rps))


def requests_per_day(rps: float, hours_per_day: float = 8.0) -> float:
    """Requests served in a working day at a sustained `rps` (case C2: 70.7 x 3600 x 8 = 2.04 M)."""
    return rps * SECONDS_PER_HOUR * hours_per_day


def daily_active_users(rps: float, hours_per_day: float = 8.0, requests_per_user: float = 3.0) -> int:
    """Users a sustained `rps` serves in a day when each makes `requests_per_user` (case C2: 679k)."""
    if requests_per_user <= 0:
        raise ValueError("requests_per_user must be > 0")
    return math.floor(round(requests_per_day(rps, hours_per_day) / requests_per_user, 6))


def rps_from_users(daily_active_users: float, requests_per_user: float, hours_per_day: float) -> float:
    """Mean request rate over the working hours that `daily_active_users` generate."""
    if hours_per_day <= 0:
        raise ValueError("hours_per_day must be > 0")
    return daily_active_users * requests_per_user / (hours_per_day * SECONDS_PER_HOUR)
