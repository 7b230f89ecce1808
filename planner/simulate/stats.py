"""Statistics of a simulated run over its measured window (after the warm-up).

- Latencies of the requests arriving in the window (planner/metrics.py): TTFT, E2E, per-request TPOT ((finish -
  first token) / (OSL - 1)), and ITL as the gaps between consecutive tokens (every decode iteration is one gap for
  each sequence it carries; a preempted sequence's gap spans its wait and recompute).
- Throughput: completions inside the window / window length (not the offered rate).
- Time averages over the window from the requests' own intervals: number in system (arrival -> finish) and queue
  length (arrival -> admission).
- Warm-up: MSER-5 on E2E in arrival order (the cut that minimizes the standard error of the remaining mean), at
  least 5% of the run, at most half.
- Confidence: batch means. The window's requests split into 10 batches by arrival; the interval of a percentile is
  the mean of the batches' percentiles +- t(0.975, 9) x their standard deviation / sqrt(10). Fewer than 200 values
  (a short trace) make no batches: the percentile is then the sample's own and its interval the order statistics'
  distribution-free one (`order_statistic_interval`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

BATCHES = 10
# Student's t at 0.975 for 1..32 degrees of freedom, as scipy.stats.t.ppf gives them (bit for bit: a test checks):
# every interval of a run needs one, and importing scipy.stats costs about half a second of a fresh process
_T_975 = (12.706204736174694, 4.302652729749462, 3.1824463052837078, 2.7764451051977934, 2.5705818356363146,
          2.4469118511449786, 2.364624251592784, 2.306004135204166, 2.262157162798205, 2.228138851986274,
          2.200985160091639, 2.1788128296672284, 2.1603686564627913, 2.144786687917804, 2.131449545559776,
          2.1199052992212546, 2.1098155778333156, 2.1009220402410382, 2.0930240544083087, 2.085963447265864,
          2.0796138447276795, 2.0738730679040254, 2.0686576104190486, 2.0638985616280245, 2.0595385527532972,
          2.0555294386428735, 2.0518305164802846, 2.0484071417952454, 2.045229642132703, 2.0422724563012378,
          2.039513446396408, 2.0369333434601016)  # fmt: skip


def t_975(degrees_of_freedom: int) -> float:
    """The 97.5th percentile of Student's t (a two-sided 95% interval's factor)."""
    if 1 <= degrees_of_freedom <= len(_T_975):
        return _T_975[degrees_of_freedom - 1]
    from scipy import stats as scipy_stats  # slow to import: only beyond the table

    return float(scipy_stats.t.ppf(0.975, degrees_of_freedom))
MIN_WARMUP_FRACTION = 0.05


@dataclass(frozen=True)
class Percentiles:
    p50: float
    p95: float
    p99: float
    mean: float


@dataclass(frozen=True)
class RunStats:
    requests: int  # arriving in the measured window
    completed: int  # of those, finished (the rest were still queued or running at the end, or rejected)
    rejected: int  # prompts larger than an engine's whole KV cache
    window_s: float
    warmup_s: float
    throughput_rps: float  # completions inside the window / window_s
    ttft_ms: Percentiles
    itl_ms: Percentiles  # gaps between consecutive tokens
    tpot_ms: Percentiles  # per-request mean time per output token after the first
    e2e_ms: Percentiles
    mean_in_system: float  # time-averaged requests queued or running
    mean_queue_length: float  # time-averaged requests waiting for admission
    max_queue_length: int
    queue_timeline: tuple[tuple[float, int], ...]  # (start of each of 20 time bins in s, longest queue in it)
    preemptions: int
    slo_attainment: float | None  # share of the window's requests within every per-request limit (TTFT, TPOT, E2E)


def percentiles(values: np.ndarray, weights: np.ndarray | None = None) -> Percentiles:
    if len(values) == 0:
        return Percentiles(math.nan, math.nan, math.nan, math.nan)
    if weights is None:
        p50, p95, p99 = np.percentile(values, [50, 95, 99])
        return Percentiles(float(p50), float(p95), float(p99), float(values.mean()))
    p50, p95, p99 = weighted_percentile(values, weights, [50, 95, 99])
    return Percentiles(p50, p95, p99, float(np.average(values, weights=weights)))


def weighted_percentile(values: np.ndarray, weights: np.ndarray, qs) -> list[float]:
    """Percentiles of values each repeated `weights` times (the inverted-CDF definition)."""
    if len(values) == 0 or weights.sum() <= 0:
        return [math.nan for _ in qs]
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    total = cumulative[-1]
    out = []
    for q in qs:
        position = np.searchsorted(cumulative, q / 100.0 * total, side="left")
        out.append(float(values[order][min(position, len(order) - 1)]))
    return out


def mser5_cut(values: np.ndarray) -> int:
    """MSER-5: index (a multiple of 5) of the first observation kept, minimizing the standard error of the mean
    of what is left over cuts in the first half (White 1997)."""
    m = len(values) // 5
    if m < 4:
        return 0
    means = values[: m * 5].reshape(m, 5).mean(axis=1)
    tail_sum = np.cumsum(means[::-1])[::-1]
    tail_sq = np.cumsum((means**2)[::-1])[::-1]
    kept = np.arange(m, 0, -1, dtype=float)
    variance = tail_sq / kept - (tail_sum / kept) ** 2
    score = variance / kept
    d = int(np.argmin(score[: m // 2 + 1]))
    return d * 5


def batch_shares(values: np.ndarray, times: np.ndarray, threshold: float, weights=None) -> np.ndarray | None:
    """The share of values at or below `threshold` in each of BATCHES batches by `times` (arrival, or a token gap's
    end; `weights` count a value that many times), or None with too few values per batch."""
    if len(values) < BATCHES * 20:
        return None
    edges = np.quantile(times, np.linspace(0, 1, BATCHES + 1))
    slot = np.clip(np.searchsorted(edges, times, side="right") - 1, 0, BATCHES - 1)
    counts = np.ones(len(values)) if weights is None else np.asarray(weights, dtype=float)
    below = np.bincount(slot, weights=counts * (np.asarray(values) <= threshold), minlength=BATCHES)
    total = np.bincount(slot, weights=counts, minlength=BATCHES)
    if (total <= 0).any():
        return None
    return below / total


def quantile_interval(seeds: list, percentile: float, correlated: bool = False) -> tuple[float, float] | None:
    """(low, high) of a 95% interval for a percentile from one or more independent runs (`seeds`: (values, weights
    or None, times) each), or None where a run has too few values to batch.

    The estimate is the percentile q of all the values together. How far the share of values at or below q wanders
    between batches of a run (and between runs: `pooled_interval`, its half-width h) is how uncertain the level p is
    at which q sits, so the interval is the values' own quantiles at p - h and p + h (Chen & Kelton's batched
    quantile interval): centred on the whole sample's estimate, not on the mean of the batches' percentiles (a
    small batch's P99 is biased low in a skewed tail), bounded shares that batch well even where the latency's tail
    is heavy, and an atom (requests that never wait: an M/D/1 response time's P50 at load 0.5 is the service time
    exactly) inside the interval. Where the batches disagree by more than the tail holds (p + h >= 100%: a tail
    that is nearly flat, one batch at a slightly higher level, as a P99 TPOT near saturation), the end is the
    largest value seen (the smallest, below): at least 200 values in every run, so a percentile beyond all of them
    would need every batch to miss it. `correlated`: the runs reached their cap before settling
    (`pooled_interval`)."""
    values = np.concatenate([np.asarray(v, dtype=float) for v, _, _ in seeds])
    weights = None if all(w is None for _, w, _ in seeds) else np.concatenate(
        [np.ones(len(v)) if w is None else np.asarray(w, dtype=float) for v, w, _ in seeds])  # fmt: skip
    if len(values) == 0:
        return None
    estimate = float(np.percentile(values, percentile)) if weights is None else weighted_percentile(values, weights, [percentile])[0]
    shares = [batch_shares(np.asarray(v, dtype=float), t, estimate, w) for v, w, t in seeds]
    if any(b is None for b in shares):
        return None
    low, high = pooled_interval(shares, correlated)
    half = (high - low) / 2 * 100.0  # in percentile points
    ends = []
    for level in (percentile - half, percentile + half):
        if level <= 0.0 or level >= 100.0:
            ends.append(float(values.min() if level <= 0.0 else values.max()))
        elif weights is None:
            ends.append(float(np.percentile(values, level)))
        else:
            ends.append(weighted_percentile(values, weights, [level])[0])
    return ends[0], ends[1]


def batch_interval(values: np.ndarray, times: np.ndarray, percentile: float, weights=None):
    """(low, high) of one run's 95% interval of a percentile (`quantile_interval`), batches by `times` (arrival, or
    a token gap's end), or None with too few values per batch."""
    return quantile_interval([(values, weights, times)], percentile)


MAX_LAG_CORRELATION = 0.8  # the batches' lag-1 correlation counted at most (it inflates the variance 9x there)


def pooled_interval(seed_batches: list[np.ndarray], correlated: bool = False) -> tuple[float, float]:
    """(low, high) of a percentile's 95% interval from several independent runs (seeds) of BATCHES batches each:
    the mean of every batch estimate, its variance the larger of the batches' (pooled within seeds, over k seeds
    of B batches: variance / kB) and the seeds' (the spread of the seed means / k, which catches batches of one run
    that are not independent), Student's t at k (B - 1) degrees of freedom. Every seed adds evidence: the interval
    narrows with seeds where the runs agree, instead of starting over at the t of k - 1 degrees of freedom (12.7
    wide at 2 seeds, wider than one seed's). `correlated` (a run that reached its cap before settling: its batches
    may lean on each other): each run's batch variance x (1 + r) / (1 - r), r its batches' lag-1 correlation
    (0 to MAX_LAG_CORRELATION) -- the variance of a mean of AR(1) batches."""
    k = len(seed_batches)
    means = np.array([float(b.mean()) for b in seed_batches])
    variances = [b.var(ddof=1) * (_lag_inflation(b) if correlated else 1.0) for b in seed_batches]
    within = float(np.mean(variances)) / (k * BATCHES)
    between = float(means.var(ddof=1)) / k if k > 1 else 0.0
    half = t_975(k * (BATCHES - 1)) * math.sqrt(max(within, between))
    return float(means.mean() - half), float(means.mean() + half)


def _lag_inflation(batches: np.ndarray) -> float:
    """(1 + r) / (1 - r) for the batches' lag-1 correlation r, clipped to [0, MAX_LAG_CORRELATION]."""
    deviations = batches - batches.mean()
    square = float((deviations**2).sum())
    r = float((deviations[:-1] * deviations[1:]).sum()) / square if square > 0 else 0.0
    r = min(max(r, 0.0), MAX_LAG_CORRELATION)
    return (1 + r) / (1 - r)


def order_statistic_interval(values: np.ndarray, percentile: float, weights=None) -> tuple[float, float]:
    """(low, high) of a distribution-free 95% interval for a percentile from values too few to batch: the order
    statistics x_(r) <= x_(s) with B ~ Binomial(n, p) below r at most 2.5% and at s or above at most 2.5% of the
    time (the values taken as independent draws; `weights`, whole token counts, repeat a value that many times).
    An end the sample cannot reach (P99 of 100 values has no upper one) is -inf or +inf."""
    from scipy.stats import binom  # only for short runs and traces

    order = np.argsort(values, kind="stable")
    ordered = np.asarray(values, dtype=float)[order]
    counts = np.ones(len(ordered)) if weights is None else np.asarray(weights, dtype=float)[order]
    cumulative = np.cumsum(counts)
    n = int(round(cumulative[-1])) if len(cumulative) else 0
    if n == 0:
        return -math.inf, math.inf
    p = percentile / 100.0
    below = int(binom.ppf(0.025, n, p))  # the first k with P(B <= k) >= 2.5%
    r = below if binom.cdf(below, n, p) > 0.025 else below + 1  # P(B <= r - 1) <= 2.5%
    s = int(binom.ppf(0.975, n, p)) + 1  # P(B <= s - 1) >= 97.5%

    def statistic(k: int) -> float:  # x_(k), 1-based, of the values repeated by their counts
        return float(ordered[min(int(np.searchsorted(cumulative, k - 1e-9)), len(ordered) - 1)])

    return (statistic(r) if r >= 1 else -math.inf), (statistic(s) if s <= n else math.inf)


def warmup_s(requests, duration_s: float) -> float:
    """Where the measured window starts: the MSER-5 cut on E2E in arrival order, within [5%, 50%] of the run.
    Requests not finished count as finishing at the end of the run (their latency so far)."""
    arrival = requests.arrival_s
    if len(arrival) == 0:
        return duration_s * MIN_WARMUP_FRACTION
    end = np.where(np.isnan(requests.finish_s), max(duration_s, float(np.nanmax(requests.finish_s, initial=0.0))),
                   requests.finish_s)  # fmt: skip
    cut = mser5_cut(end - arrival)
    at = float(arrival[min(cut, len(arrival) - 1)])
    return min(max(at, duration_s * MIN_WARMUP_FRACTION), duration_s / 2)


def _time_average(start: np.ndarray, stop: np.ndarray, window: tuple[float, float]) -> float:
    low, high = window
    overlap = np.clip(np.minimum(stop, high) - np.maximum(start, low), 0.0, None)
    return float(overlap.sum() / (high - low))


def _queue_profile(arrival: np.ndarray, admitted: np.ndarray, window, bins: int = 20):
    """Longest queue over the window and per bin, from the +1 (arrival) / -1 (admission) events."""
    low, high = window
    times = np.concatenate([arrival, admitted])
    steps = np.concatenate([np.ones(len(arrival)), -np.ones(len(admitted))])
    order = np.lexsort((steps, times))  # at equal times the admission (-1) first
    length = np.cumsum(steps[order])
    times = times[order]
    inside = (times >= low) & (times <= high)
    if not inside.any():
        return 0, ()
    edges = np.linspace(low, high, bins + 1)
    slot = np.clip(np.searchsorted(edges, times[inside], side="right") - 1, 0, bins - 1)
    longest = np.zeros(bins, dtype=np.int64)
    np.maximum.at(longest, slot, length[inside].astype(np.int64))
    return int(longest.max()), tuple((round(float(edges[i]), 3), int(longest[i])) for i in range(bins))


def request_latencies(requests, mask) -> dict[str, np.ndarray]:
    arrival, first, finish = requests.arrival_s[mask], requests.first_token_s[mask], requests.finish_s[mask]
    return {
        "TTFT": (first - arrival) * 1e3,
        "E2E": (finish - arrival) * 1e3,
        "TPOT": (finish - first) * 1e3 / np.maximum(requests.osl[mask] - 1, 1),
    }


def gap_arrays(gaps, window) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token gaps ending inside the window: (end times s, gap ms, tokens). `gaps`: engines' `gaps` (each a triple
    of arrays), or one triple."""
    if isinstance(gaps, tuple):
        gaps = [gaps]
    if not gaps:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    end, ms, tokens = (np.concatenate([g[i] for g in gaps]) for i in range(3))
    inside = (end >= window[0]) & (end <= window[1])
    return end[inside], ms[inside], tokens[inside]


def run_statistics(requests, gaps, window: tuple[float, float], preemptions: int = 0, slo=None) -> RunStats:
    """Statistics of the requests arriving in `window` (see the module docstring). `slo` (planner.scenario.Slo)
    gives SLO attainment: the share of those requests finished within every per-request limit it sets, TTFT, TPOT
    ((finish - first token) / (OSL - 1); a request of one output token has none and passes it) and E2E, or None
    when it sets none of them. A token-gap ITL limit is left out: it is a percentile over every gap of every
    request pooled, not a property of one request (the verdicts check it)."""
    from planner.metrics import LABELS, PER_REQUEST
    from planner.metrics import limits as slo_limits

    low, high = window
    arriving = (requests.arrival_s >= low) & (requests.arrival_s < high)
    done = arriving & ~np.isnan(requests.finish_s)
    latencies = request_latencies(requests, done)
    _, gap_ms, gap_tokens = gap_arrays(gaps, window)
    end = max(high, float(np.nanmax(requests.finish_s, initial=high)))
    finish = np.where(np.isnan(requests.finish_s), end, requests.finish_s)
    finish = np.where(requests.rejected, requests.arrival_s, finish)  # refused at once
    admitted = np.where(np.isnan(requests.admitted_s), finish, requests.admitted_s)
    completions = int(((requests.finish_s >= low) & (requests.finish_s < high)).sum())
    longest, timeline = _queue_profile(requests.arrival_s, admitted, window)
    attainment = None
    per_request = [(LABELS[m], limit) for m, limit in slo_limits(slo) if m in PER_REQUEST] if slo is not None else []
    if per_request:
        within = np.zeros(int(arriving.sum()), dtype=bool)
        ok = np.ones(int(done.sum()), dtype=bool)
        for metric, limit in per_request:
            ok &= latencies[metric] <= limit
        within[np.flatnonzero(done[arriving])] = ok
        attainment = float(within.mean()) if len(within) else None
    return RunStats(
        requests=int(arriving.sum()), completed=int(done.sum()), rejected=int((arriving & requests.rejected).sum()),
        window_s=high - low, warmup_s=low, throughput_rps=completions / (high - low) if high > low else math.nan,
        ttft_ms=percentiles(latencies["TTFT"]), itl_ms=percentiles(gap_ms, gap_tokens),
        tpot_ms=percentiles(latencies["TPOT"]), e2e_ms=percentiles(latencies["E2E"]),
        mean_in_system=_time_average(requests.arrival_s, finish, window),
        mean_queue_length=_time_average(requests.arrival_s, admitted, window),
        max_queue_length=longest, queue_timeline=timeline, preemptions=preemptions, slo_attainment=attainment,
    )  # fmt: skip
