"""The latency metrics, defined once (docs/metrics.md): the same names in scenarios (`slo:`), benchmark tables, the
performance model, plans, the simulator and reports.

    ttft_ms  arrival of a request -> its first output token                          one value per request
    tpot_ms  a request's mean gap between tokens after the first: (E2E - TTFT) / (OSL - 1)   one value per request
    itl_ms   one gap between two consecutive output tokens of a request              one value per token gap
    e2e_ms   arrival -> last output token                                            one value per request

A limit holds at the workload's percentile p (50 to 99.9): the p-th percentile over requests (TTFT, TPOT, E2E) or
over every token gap of every request pooled (ITL), as vLLM's `bench serve` computes them. P50 is the median.

Metrics version: scenarios and benchmark tables written before version 2 used `itl_ms` for a request's mean gap
(today's `tpot_ms`). A file that does not say `metrics_version: 2` (a scenario) or has no `tpot_ms` column (a
benchmark table) is read by that one rule: its `itl_ms` is `tpot_ms`.
"""

from __future__ import annotations

LATENCY_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
LABELS = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "itl_ms": "ITL", "e2e_ms": "E2E"}
DEFINITIONS = {
    "ttft_ms": "arrival to first token",
    "tpot_ms": "a request's mean gap between tokens, (E2E - TTFT) / (OSL - 1)",
    "itl_ms": "one gap between consecutive tokens",
    "e2e_ms": "arrival to last token",
}
PER_REQUEST = ("ttft_ms", "tpot_ms", "e2e_ms")  # percentiles over requests; itl_ms over token gaps
METRICS_VERSION = 2
MIN_PERCENTILE, MAX_PERCENTILE = 50.0, 99.9
# what a benchmark row's latency is: its statistic over the run's requests (or gaps)
STATISTICS = ("mean", "median", "p90", "p95", "p99")


def limits(slo) -> list[tuple[str, float]]:
    """(metric, limit in ms) for every metric an SLO limits, in the order of LATENCY_METRICS."""
    return [(metric, getattr(slo, metric)) for metric in LATENCY_METRICS if getattr(slo, metric, None) is not None]


def percentile_problem(value: float) -> str | None:
    """Why `value` is no percentile a limit may be at (50 to 99.9), or None; a fraction (0.95) is the slip of writing
    a quantile and gets 'did you mean 95?'. Scenarios and `--percentile` both ask this."""
    if MIN_PERCENTILE <= value <= MAX_PERCENTILE:
        return None
    hint = f"; did you mean {value * 100:g}?" if 0 < value < 1 and MIN_PERCENTILE <= value * 100 <= MAX_PERCENTILE else ""
    return f"must be a percentile from {MIN_PERCENTILE:g} to {MAX_PERCENTILE:g} (got {value:g}){hint}"


def statistic_percentile(statistic: str) -> float | None:
    """The percentile a row's statistic is (median: 50), None for the mean."""
    if statistic == "mean":
        return None
    return 50.0 if statistic == "median" else float(statistic[1:])


def percentile_label(percentile: float | None) -> str:
    """'P95', or 'mean' where no percentile was asked."""
    return "mean" if percentile is None else f"P{percentile:g}"
