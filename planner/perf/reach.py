"""How far along its rate ladder an engine's curve is priced: the limits it is priced for, and whether a point meets them.

A plan reads an engine's open-loop curve for one thing: for each workload that may run on the engine and each batch
cap, the highest-throughput point below the first one the workload's latency limits or the cap refuse (the first
crossing: `layers.best_points_by_cap`). So once a point is refused by every workload that asks for the curve at the
largest cap, no later point can serve any of them, whatever the curve does after it. Candidate pricing therefore
prices the ladder in ascending rate and stops after that point (`Reach.refuses`): the near-saturation rates, whose
step chains mix slowly and take most of the solve, are priced only where some limit can use them. The curve is then
a prefix of the full one, point for point (each rate is solved on its own), and every answer is the one the full
curve gives, by construction rather than by any assumption on the curve's shape. `PricedCurve.complete` says
whether the pricing stopped early, and `PricedCurve.serves` whether a kept prefix holds every point another set of
limits can use (a kept curve priced for tighter limits is priced again, further, for looser ones).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.metrics import LABELS
from planner.metrics import limits as metric_limits
from planner.perf.serving import instance_batch
from planner.perf.types import PerfResult


def limit_violation(result: PerfResult, limits) -> str | None:
    """None when the point meets every limit `limits` sets (an object with ttft_ms, tpot_ms, itl_ms, e2e_ms: a
    PerfQuery or an Slo), else why not. A value the source did not record meets a limit only when the source states
    a bound at or below it (e.g. 'TTFT < 500 ms')."""
    e2e_bound = None
    if result.ttft_ms_bound is not None and result.tpot_ms_bound is not None and result.osl:
        e2e_bound = result.ttft_ms_bound + (result.osl - 1) * result.tpot_ms_bound
    bounds = {"ttft_ms": result.ttft_ms_bound, "tpot_ms": result.tpot_ms_bound, "itl_ms": result.itl_ms_bound,
              "e2e_ms": e2e_bound}  # fmt: skip
    for metric, limit in metric_limits(limits):
        name, value, bound = LABELS[metric], getattr(result, metric), bounds[metric]
        if value is not None:
            if value > limit:
                return f"{name} {value:.5g} ms > limit {limit:g} ms"
        elif bound is not None:
            if bound > limit:
                return f"{name} only known to be below {bound:g} ms, which is above the limit {limit:g} ms"
        else:
            return f"{name} not recorded by the source"
    return None


def within_cap(point: PerfResult, cap: int) -> bool:
    """Whether a point's batch is within a cap of `cap` sequences per attention-DP rank (planner/perf/serving.py:
    engines cap each rank's scheduler; an instance of DP ranks runs cap x DP)."""
    return (point.concurrency or 0) <= instance_batch(cap, point.dp)


@dataclass(frozen=True)
class Reach:
    """The asks a curve is priced for: (latency limits, largest batch cap per attention-DP rank) of every workload
    that reads it. `limits` is any object with ttft_ms, tpot_ms, itl_ms and e2e_ms (an Slo, a PerfQuery)."""

    asks: tuple[tuple[object, int], ...]

    def refuses(self, point: PerfResult) -> bool:
        """Whether no ask can use the point: each has a limit it misses, or a cap its batch is beyond."""
        return all(limit_violation(point, limits) is not None or not within_cap(point, cap) for limits, cap in self.asks)

    def __or__(self, other: Reach) -> Reach:
        return Reach(tuple(dict.fromkeys(self.asks + other.asks)))


@dataclass(frozen=True)
class PricedCurve:
    """An engine's points over its rate ladder (or why it has none), and whether every rate was priced
    (`complete`) or the pricing stopped after the first point its reach refuses."""

    points: list[PerfResult] | str
    complete: bool = True

    def serves(self, reach: Reach | None) -> bool:
        """Whether the points hold all that `reach` can use: every rate priced, or a point it refuses among them
        (nothing after such a point meets its asks). A reach of None asks for the whole curve."""
        if self.complete or isinstance(self.points, str):
            return True
        return reach is not None and any(reach.refuses(point) for point in self.points)

    def used_above(self, reach: Reach, floor_rps: float) -> bool:
        """Whether the asks of `reach` (the curve priced for them) can use one of its points at a rate above
        `floor_rps`: a point before the first one the reach refuses (the plan reads no point after it); a curve
        without points has none they can use."""
        for point in [] if isinstance(self.points, str) else self.points:  # in ascending rate
            if reach.refuses(point):
                return False
            if point.request_throughput_rps > floor_rps:
                return True
        return False
