"""The performance model's distribution laws are computed from scipy.special (importing scipy.stats costs every
process, each forked pricing worker too, about 0.3 s): each must give what scipy.stats gives, over the ranges the
open-loop model asks for."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from planner.perf.laws import beta_binomial_pmf, binomial_pmf, count_law, count_ppf, count_sf, gamma_ppf
from planner.perf.step_chain import poisson_ppf

RNG = np.random.default_rng(20261203)
N = 50_000
MEAN = 10 ** RNG.uniform(-3, 3.5, N)  # requests in an engine: from almost none to thousands
VAR = MEAN * (1 + 10 ** RNG.uniform(-9, 2, N))  # from Poisson-like to 100x over-dispersed
MEAN[::13], VAR[::17] = np.inf, np.inf  # an engine that does not settle
LIMIT = np.floor(10 ** RNG.uniform(0, 3.7, N))
LIMIT[::7], LIMIT[::11], LIMIT[::19] = 0, 1, -3  # below and at the support's start


def _law():
    return count_law(np.where(np.isfinite(MEAN), MEAN, 1.0), np.where(np.isfinite(VAR), VAR, 1.0))


def test_count_survival_is_scipy_negative_binomial_bit_for_bit():
    size, prob = _law()
    expected = np.where(np.isfinite(MEAN), stats.nbinom.sf(LIMIT - 1, size, prob), 1.0)
    assert np.array_equal(count_sf(LIMIT, MEAN, VAR), expected)


@pytest.mark.parametrize("q", [0.5, 0.9, 0.95, 0.99, 0.999])
def test_count_quantile_is_scipy_negative_binomial_bit_for_bit(q):
    size, prob = _law()
    expected = np.where(np.isfinite(MEAN), stats.nbinom.ppf(q, size, prob), np.inf)
    assert np.array_equal(count_ppf(q, MEAN, VAR), expected)


@pytest.mark.parametrize("q", [0.01, 0.5, 0.95, 1 - 1e-9])
def test_poisson_and_gamma_quantiles_are_scipy_bit_for_bit(q):
    assert np.array_equal(poisson_ppf(q, MEAN[np.isfinite(MEAN)]), stats.poisson.ppf(q, MEAN[np.isfinite(MEAN)]))
    shape, scale = 10 ** RNG.uniform(-2, 4, 2_000), 10 ** RNG.uniform(-3, 3, 2_000)
    assert np.array_equal(gamma_ppf(q, shape, scale), stats.gamma.ppf(q, shape, scale=scale))


@pytest.mark.parametrize("trials", [1, 7, 64, 400])
def test_binomial_and_beta_binomial_probabilities_agree_with_scipy(trials):
    counts = np.arange(trials + 1)
    for share in (1e-6, 0.03, 0.5, 0.97):
        assert binomial_pmf(counts, trials, share) == pytest.approx(stats.binom.pmf(counts, trials, share), rel=1e-9, abs=1e-300)
    for a, b in ((0.3, 0.7), (2.0, 5.0), (40.0, 1.5)):
        assert beta_binomial_pmf(counts, trials, a, b) == pytest.approx(stats.betabinom.pmf(counts, trials, a, b), rel=1e-9, abs=1e-300)
