"""The verdicts of a simulated workload (`LimitCheck`, `WorkloadCheck`, what `simulate_plan` returns) and how they
are judged from its runs.

Each limit the SLO sets (planner.metrics: TTFT, TPOT and E2E per request, ITL as gaps between tokens) at the
scenario's percentile over the measured window (`window_values`), with a 95% interval pooled over seeds
(`limit_checks`). A limit `holds` (estimate and the interval's upper end within it), `misses` (the interval's lower
end above it: conclusive) or is `inconclusive` (the interval straddles it); see `classify`. A workload's verdict
(`workload_verdict`) and several workloads' (`overall_verdict`) follow from them. How long and how many seeds are
run before judging: planner/simulate/settling.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.metrics import LABELS
from planner.metrics import limits as slo_limits
from planner.simulate.stats import RunStats, gap_arrays, order_statistic_interval, quantile_interval, request_latencies

SETTLED_RELATIVE_HALF_WIDTH = 0.05
HOLDS, MISSES, INCONCLUSIVE, NOT_SIMULATED = "holds", "misses", "inconclusive", "not simulated"


@dataclass(frozen=True)
class LimitCheck:
    metric: str  # TTFT | TPOT | ITL | E2E (planner.metrics.LABELS)
    limit_ms: float
    percentile: float
    simulated_ms: float
    ci_low_ms: float | None  # 95% interval (batch means with one seed, across seeds with several)
    ci_high_ms: float | None
    seeds_passed: int
    ok: bool  # verdict == "holds" (kept for compatibility)
    verdict: str = INCONCLUSIVE  # holds | misses | inconclusive (`classify`)


@dataclass(frozen=True)
class WorkloadCheck:
    """One workload in one period, simulated at the period's peak rate (or on a trace) on the plan's engines."""

    workload: str
    period: str
    rate_rps: float
    instances: int
    engines: str  # what was simulated
    stats: RunStats | None  # the first seed's run
    checks: tuple[LimitCheck, ...]
    ok: bool | None  # verdict == "holds"; None: could not be simulated (see note)
    note: str
    duration_s: float = 0.0
    seeds: int = 0  # in all, extra seeds included
    settled: bool = True
    requests_simulated: int = 0
    wall_s: float = 0.0
    verdict: str = NOT_SIMULATED  # holds | misses | inconclusive | not simulated (`workload_verdict`)
    extra_seeds: int = 0  # seeds added because a verdict was inconclusive
    seeds_note: str = ""  # what was done about inconclusive verdicts ("" when nothing was)
    balancer: str = ""  # how the requests were spread over the instances (SimulationOptions.balancer)


# ----------------------------------------------------------------------------------------------- verdicts
def window_values(requests, gaps, window):
    """Per metric label: (values, weights or None, times for batching) over the window. TPOT is (E2E - TTFT) /
    (OSL - 1), so requests of one output token have none (as in vLLM's `bench serve`)."""
    low, high = window
    mask = (requests.arrival_s >= low) & (requests.arrival_s < high) & ~np.isnan(requests.finish_s)
    latencies = request_latencies(requests, mask)
    arrivals = requests.arrival_s[mask]
    several = requests.osl[mask] > 1
    gap_times, gap_ms, gap_tokens = gap_arrays(gaps, window)
    return {
        "TTFT": (latencies["TTFT"], None, arrivals),
        "TPOT": (latencies["TPOT"][several], None, arrivals[several]),
        "E2E": (latencies["E2E"], None, arrivals),
        "ITL": (gap_ms, gap_tokens, gap_times),
    }


def _estimate(values, weights, percentile: float) -> float:
    from planner.simulate.stats import weighted_percentile

    if len(values) == 0:
        return math.nan
    if weights is None:
        return float(np.percentile(values, percentile))
    return weighted_percentile(values, weights, [percentile])[0]


def labelled_limits(slo) -> list[tuple[str, float]]:
    """(label, limit ms) of every limit the SLO sets (planner.metrics.limits): TTFT, TPOT, ITL, E2E."""
    return [(LABELS[metric], limit) for metric, limit in slo_limits(slo)]


def classify(estimate: float, low: float | None, high: float | None, limit: float, settled: bool) -> str:
    """The verdict of one limit from the simulated percentile and its 95% interval (low, high):
    - `misses`: the interval's lower end is above the limit (conclusive);
    - `holds`: the estimate and the interval's upper end are within the limit;
    - `inconclusive`: otherwise (the interval straddles the limit).
    Without an interval (no value in a seed's window) the estimate decides only in a settled run; otherwise, or
    with no value at all, the verdict is inconclusive. An end at infinity (a sample too small to bound the
    percentile from above) never holds."""
    if estimate is None or not math.isfinite(estimate):
        return INCONCLUSIVE
    if low is None or high is None:
        if not settled:
            return INCONCLUSIVE
        return HOLDS if estimate <= limit else MISSES
    if low > limit:
        return MISSES
    if estimate <= limit and high <= limit:
        return HOLDS
    return INCONCLUSIVE


def workload_verdict(checks, stats) -> str:
    """`not simulated` without a run; `misses` when a check misses or a request of the window was refused or left
    unfinished (the engines could not take or finish it: no statistic makes that a pass); `holds` when every check
    holds; `inconclusive` otherwise."""
    if stats is None:
        return NOT_SIMULATED
    if stats.completed < stats.requests:
        return MISSES
    verdicts = {c.verdict for c in checks}
    if MISSES in verdicts:
        return MISSES
    return HOLDS if verdicts <= {HOLDS} else INCONCLUSIVE


def limit_checks(seed_runs, slo, unsettled: bool = False) -> tuple[tuple[LimitCheck, ...], bool]:
    """Each limit at the SLO percentile, pooled over seeds: the estimate from every seed's values together, the
    interval from their batches (`stats.quantile_interval`), or, where a seed has too few values to batch (fewer
    than 200: a short trace or run), the distribution-free interval of the order statistics of all the values
    (`stats.order_statistic_interval`). Settled: every interval finite and within 5% of its value.
    Verdicts by `classify`; a limit every seed misses on its own (its own estimate and interval) is missed
    whatever the pooled interval says: more seeds never weaken a miss. `unsettled`: the runs' length reached its
    cap before the pilot settled, so their batches may lean on each other (`stats.pooled_interval`'s correlated).
    The intervals' coverage of exact queues' percentiles: benchmarks/interval_coverage.py."""
    rows, settled = [], True
    for metric, limit in labelled_limits(slo):
        per_seed, pooled_values, pooled_weights, runs, interval = [], [], [], [], None
        for values in seed_runs:
            v, w, t = values[metric]
            per_seed.append(_estimate(v, w, slo.percentile))
            pooled_values.append(v)
            pooled_weights.append(w if w is not None else np.ones(len(v)))
            runs.append((v, w, t))
        values = np.concatenate(pooled_values)
        weights = np.concatenate(pooled_weights)
        estimate = _estimate(values, weights, slo.percentile)
        own = [quantile_interval([run], slo.percentile, unsettled) if len(seed_runs) > 1 else None for run in runs]
        interval = quantile_interval(runs, slo.percentile, unsettled) if len(values) else None
        if interval is None and len(values):  # too few values to batch (a short trace or run): the order statistics
            interval = order_statistic_interval(values, slo.percentile, weights)
        if interval is not None:
            interval = (float(interval[0]), float(interval[1]))
        if (interval is None or not math.isfinite(estimate) or not all(map(math.isfinite, interval))
                or (interval[1] - interval[0]) / 2 > SETTLED_RELATIVE_HALF_WIDTH * abs(estimate)):
            settled = False
        passed = sum(1 for p in per_seed if math.isfinite(p) and p <= limit)
        # each seed alone: a conclusive miss needs its own batch interval above the limit
        each_misses = len(seed_runs) > 1 and all(
            b is not None and math.isfinite(p) and b[0] > limit for p, b in zip(per_seed, own))
        rows.append((metric, limit, estimate, interval, passed, each_misses))
    checks = []
    for metric, limit, estimate, interval, passed, each_misses in rows:
        low, high = interval if interval is not None else (None, None)
        if low is not None:
            low = max(0.0, low)  # a t-interval across few seeds may reach below zero; a latency does not
        # an unsettled queue does not pass on a lucky run: the interval's upper end must be within the limit too
        verdict = MISSES if each_misses else classify(estimate, low, high, limit, settled)
        high = high if high is None or math.isfinite(high) else None  # a sample too small to bound it above
        checks.append(LimitCheck(metric, limit, slo.percentile, estimate, low, high, passed, verdict == HOLDS, verdict))
    return tuple(checks), bool(settled)


def overall_verdict(checks) -> str:
    """Of several workload checks: `misses` if one misses, else `inconclusive` if one is, else `holds` if one was
    simulated, else `not simulated`."""
    verdicts = {c.verdict for c in checks}
    for verdict in (MISSES, INCONCLUSIVE, HOLDS):
        if verdict in verdicts:
            return verdict
    return NOT_SIMULATED
