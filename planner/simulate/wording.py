"""How simulated verdicts read in the reports: the verdict's words, a 95% interval as text, one limit's check in a
line (`describe_check`) and what the engines left unserved (`unserved`)."""

from __future__ import annotations

import math

from planner.simulate.verdicts import HOLDS, INCONCLUSIVE, MISSES, NOT_SIMULATED, LimitCheck, WorkloadCheck

VERDICT_WORDS = {HOLDS: "holds", MISSES: "MISSES", INCONCLUSIVE: "inconclusive", NOT_SIMULATED: "not simulated"}


def _ms(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:,.1f}" if abs(value) < 100 else f"{value:,.0f}"


def interval_text(low: float | None, high: float | None, ms=_ms, to: str = "-") -> str:
    """A 95% interval as read: '48.1-55.9'; '< 3,296' where its lower end is 0 (a t-interval across few seeds
    reaches below zero and is cut at 0: no latency is below it, so only the upper end says anything); '> 48.1'
    where a sample too small leaves it unbounded above; '' without one."""
    if low is None:
        return ""
    if high is None or not math.isfinite(high):
        return f"> {ms(low)}"
    if low <= 0.0:
        return f"< {ms(high)}"
    return f"{ms(low)}{to}{ms(high)}"


def describe_check(check: LimitCheck, extra_seeds: int = 0) -> str:
    """'ITL P95 52.0 ms (95% 48.1-55.9) vs 50 ms: inconclusive (4 more seeds run)'; '(95% < 3,296)' where the
    interval's lower end is 0 (`interval_text`)."""
    interval = "" if check.ci_low_ms is None else f" (95% {interval_text(check.ci_low_ms, check.ci_high_ms)})"
    more = f" ({extra_seeds} more seed{'s' if extra_seeds != 1 else ''} run)" if extra_seeds else ""
    return (f"{check.metric} P{check.percentile:g} {_ms(check.simulated_ms)} ms{interval} vs {check.limit_ms:,g} ms: "
            f"{VERDICT_WORDS.get(check.verdict, check.verdict)}{more}")  # fmt: skip


def unserved(check: WorkloadCheck) -> str:
    """'12 requests refused; 3 left unfinished' for the window's requests the engines did not serve, or ''."""
    stats = check.stats
    if stats is None:
        return ""
    parts = []
    if stats.rejected:
        parts.append(f"{stats.rejected:,} requests refused")
    unfinished = stats.requests - stats.completed - stats.rejected
    if unfinished > 0:
        parts.append(f"{unfinished:,} requests unfinished")
    return "; ".join(parts)

