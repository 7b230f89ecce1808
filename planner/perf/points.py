"""Choosing on a curve: a point's rank (requests/s per GPU), the highest-throughput point that meets a query's limits
(`best_point`), the same for every batch cap at once (`best_points_by_cap`), and why none does."""

from __future__ import annotations



from planner.perf.reach import limit_violation, within_cap
from planner.perf.types import PerfQuery, PerfResult


def is_modeled(provenance: str) -> bool:
    """The roofline answered (whatever its basis), not a row or an interpolation between rows."""
    return provenance.startswith("modeled") or provenance == "extrapolated"


def throughput_key(result: PerfResult) -> float:
    """Rank points by requests/s per GPU (output tokens/s when requests are unknown)."""
    if result.request_throughput_rps is not None:
        return result.request_throughput_rps / result.gpus_per_instance
    return (result.output_tokens_per_s or 0.0) * 1e-9 / result.gpus_per_instance


def _best(results: list[PerfResult], query: PerfQuery) -> PerfResult | str:
    usable = [r for r in results if r.memory is None or r.memory.fits]
    if not usable:
        return f"does not fit in memory: {results[0].memory.reason}"
    meeting = [r for r in usable if limit_violation(r, query) is None]
    if not meeting:
        return _refusal(usable, query)
    return max(meeting, key=lambda r: (throughput_key(r), -(r.concurrency or 0)))


def _refusal(results: list[PerfResult], query: PerfQuery) -> str:
    """Why no point serves: what the lowest-concurrency point misses."""
    lowest = min(results, key=lambda r: (r.concurrency or 0, r.ttft_ms or 0))
    what = "modeled" if is_modeled(lowest.provenance) else "measured"
    return (f"no {what} point meets the limits; at the lowest concurrency ({lowest.concurrency or 'not stated'}): "
            f"{limit_violation(lowest, query) or 'its limits met, but a point at a lower rate misses them'}")  # fmt: skip


def best_points_by_cap(points: list[PerfResult], query: PerfQuery, caps) -> dict[int, PerfResult | str]:
    """The highest-throughput point of an engine's curve (ascending rate) for every batch cap at once, each point's
    limits checked once (candidate enumeration asks for every cap of the ladder on the same curve). A plan sizes an
    engine below the first modeled point the limits or the cap refuse (the first crossing): where the model's curve
    dips back under a limit past it (an MoE step amortizing its expert reads as batches grow, a step chain's grid
    near saturation), the rates beyond are not trusted. Measured rows standing among the points count where they
    meet the limits. The same answer whether the curve was priced whole or up to its reach (planner/perf/reach.py)."""
    usable = [p for p in points if p.memory is None or p.memory.fits]
    meets = [limit_violation(p, query) is None for p in usable]
    out: dict[int, PerfResult | str] = {}
    for cap in caps:
        within = [p for p in usable if within_cap(p, cap)]
        if not within:
            out[cap] = best_point(points, query, cap)  # says why, in the same words
            continue
        meeting = []
        for point, ok in zip(usable, meets):
            if ok and within_cap(point, cap):
                meeting.append(point)
            elif point.provenance != "measured":
                break
        out[cap] = max(meeting, key=lambda r: (throughput_key(r), -(r.concurrency or 0))) if meeting else _refusal(within, query)
    return out


def best_point(points: list[PerfResult], query: PerfQuery, max_concurrency: int | None = None) -> PerfResult | str:
    """The highest-throughput point meeting the query's limits, at concurrency <= max_concurrency per attention-DP
    rank. For requests arriving at random (an open-loop query) the open loop's points answer where a curve has any:
    a closed-loop row standing beside them was measured with a fixed number in flight, not at a rate."""
    if query.open_loop and any(p.arrivals == "poisson" for p in points):
        points = [p for p in points if p.arrivals == "poisson"]
    if max_concurrency is not None:
        points = [p for p in points if within_cap(p, max_concurrency)]
        if not points:
            return f"no point at concurrency <= {max_concurrency} per rank"
    return _best(points, query)
