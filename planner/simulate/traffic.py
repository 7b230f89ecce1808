"""Requests to simulate: arrival times (Poisson, Gamma-burstier, deterministic or a trace's) and lengths (fixed,
lognormal around the scenario's mean, or a trace's)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Requests:
    """Arrival time (s), lengths, and what the simulation fills in: admission, first-token and finish times (s);
    `rejected` marks prompts larger than the engine's whole KV cache. `cached` (optional, tokens): the part of each
    prompt already in the engine's KV cache when it arrives (a prefix-cache hit, or a disaggregated decode's
    transferred cache); its prefill is not computed again."""

    arrival_s: np.ndarray
    isl: np.ndarray
    osl: np.ndarray
    cached: np.ndarray | None = None
    admitted_s: np.ndarray = field(init=False)
    first_token_s: np.ndarray = field(init=False)
    finish_s: np.ndarray = field(init=False)
    rejected: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        self.isl = np.asarray(self.isl, dtype=np.int64)
        self.osl = np.asarray(self.osl, dtype=np.int64)
        self.cached = np.zeros(n, dtype=np.int64) if self.cached is None else np.asarray(self.cached, dtype=np.int64)
        self.admitted_s = np.full(n, np.nan)
        self.first_token_s = np.full(n, np.nan)
        self.finish_s = np.full(n, np.nan)
        self.rejected = np.zeros(n, dtype=bool)

    def __len__(self) -> int:
        return len(self.arrival_s)

    @classmethod
    def merged(cls, parts: list[Requests]) -> Requests:
        """Several runs' requests as one set (e.g. the routes of one workload), sorted by arrival."""
        arrival = np.concatenate([p.arrival_s for p in parts]) if parts else np.zeros(0)
        order = np.argsort(arrival, kind="stable")
        out = cls(arrival[order], np.concatenate([p.isl for p in parts])[order] if parts else np.zeros(0),
                  np.concatenate([p.osl for p in parts])[order] if parts else np.zeros(0),
                  np.concatenate([p.cached for p in parts])[order] if parts else None)  # fmt: skip
        for name in ("admitted_s", "first_token_s", "finish_s", "rejected"):
            if parts:
                setattr(out, name, np.concatenate([getattr(p, name) for p in parts])[order])
        return out


def cached_prefixes(isl: np.ndarray, cache, rng: np.random.Generator) -> np.ndarray | None:
    """Prompt tokens each request finds in the engine's prefix cache (perf.types.PrefixCache): the prefix, at most
    all but the prompt's last token, for a share `hit_rate` of requests drawn at random; None without a cache."""
    if cache is None or cache.hit_rate <= 0 or cache.tokens <= 0:
        return None if cache is None else np.zeros(len(isl), dtype=np.int64)
    hits = rng.uniform(size=len(isl)) < cache.hit_rate
    return np.where(hits, np.minimum(cache.tokens, np.maximum(np.asarray(isl) - 1, 0)), 0)


def poisson_arrivals(rate_rps: float, duration_s: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times of a Poisson process of `rate_rps` over [0, duration_s)."""
    count = rng.poisson(rate_rps * duration_s)
    return np.sort(rng.uniform(0.0, duration_s, size=count))


def gamma_arrivals(rate_rps: float, duration_s: float, cv: float, rng: np.random.Generator) -> np.ndarray:
    """A renewal process with Gamma inter-arrival times of mean 1 / rate and coefficient of variation `cv`
    (1: Poisson; above 1: burstier, arrivals in clumps), over [0, duration_s)."""
    if abs(cv - 1.0) < 1e-12:
        return poisson_arrivals(rate_rps, duration_s, rng)
    shape = 1.0 / cv**2
    expected = rate_rps * duration_s
    gaps = rng.gamma(shape, 1.0 / (shape * rate_rps), size=int(expected + 6 * math.sqrt(expected * cv**2 + 1) + 16))
    times = np.cumsum(gaps) - gaps[0] * rng.uniform()  # start in the stationary phase, not at an arrival
    while times[-1] < duration_s:  # rare: more arrivals than 6 sigma
        more = np.cumsum(rng.gamma(shape, 1.0 / (shape * rate_rps), size=len(times))) + times[-1]
        times = np.concatenate([times, more])
    return times[(times >= 0) & (times < duration_s)]


def deterministic_arrivals(rate_rps: float, duration_s: float) -> np.ndarray:
    """One request every 1 / rate_rps seconds, starting at 0."""
    return np.arange(0.0, duration_s, 1.0 / rate_rps)


def lognormal_lengths(mean_tokens: float, cv: float, size: int, cap_tokens, rng: np.random.Generator) -> np.ndarray:
    """Token counts with the given mean and coefficient of variation (lognormal), whole and within [1, cap] (`cap`
    one number or one per request: the room a request's context leaves). cv = 0 gives the mean for every request.
    A cap far above the mean (the engine's context) leaves the mean as stated."""
    cap = np.maximum(np.minimum(cap_tokens, np.iinfo(np.int64).max // 2), 1)
    if cv <= 0:
        return np.minimum(np.full(size, max(1, int(round(mean_tokens))), dtype=np.int64), cap).astype(np.int64)
    sigma = math.sqrt(math.log1p(cv**2))
    location = _location_for_mean(mean_tokens, sigma, float(np.median(cap)))
    values = rng.lognormal(location, sigma, size=size)
    return np.clip(np.rint(values), 1, cap).astype(np.int64)


def _location_for_mean(mean_tokens: float, sigma: float, cap: float) -> float:
    """The lognormal's mu whose draws, cut at `cap` (the engine's context), keep the stated mean: E[min(X, c)] =
    e^(mu + s^2/2) Phi((ln c - mu - s^2) / s) + c (1 - Phi((ln c - mu) / s)) grows with mu; solved by bisection.
    Where the cap is far above the mean this is the plain lognormal's mu = ln(mean) - s^2 / 2 (to the bit); a mean
    at or beyond the cap puts every draw at the cap."""
    from scipy.special import ndtr

    plain = math.log(mean_tokens) - sigma**2 / 2

    def cut_mean(mu: float) -> float:
        log_cap = math.log(cap)
        return float(math.exp(mu + sigma**2 / 2) * ndtr((log_cap - mu - sigma**2) / sigma)
                     + cap * (1 - ndtr((log_cap - mu) / sigma)))  # fmt: skip

    if not math.isfinite(cap) or cut_mean(plain) >= mean_tokens * (1 - 1e-9):
        return plain
    if mean_tokens >= cap:
        return math.log(cap) + 10 * sigma
    low, high = plain, math.log(cap) + 10 * sigma
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if cut_mean(middle) < mean_tokens else (low, middle)
    return (low + high) / 2
