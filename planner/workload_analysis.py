"""From a request trace to a scenario workload: rates per period, the ISL x OSL histogram, engine variants.

- Rates: arrivals are counted in windows of `period_s` aligned to the clock. Per window: the mean rate, the
  busiest second actually seen (at the quantile), and the Poisson peak at the quantile of the mean (seed 001's
  sizing rule, `peak_rps_from_mean`). A trace that covers every slot of a day is folded into a daily profile
  (one scenario period per slot, demand factors relative to the busiest slot).
- Histogram: counts over power-of-two ISL x OSL bins.
- Engine variants: K (max ISL, max OSL) pairs such that every request fits one, chosen to minimize padding
  waste = sum over requests of (max ISL - ISL) + (max OSL - OSL) of the variant it runs on (the KV cache an
  engine reserves for its maximum lengths). Candidate maxima are the trace's length quantiles; the choice is a
  K-median integer program (PuLP/CBC) over histogram cells, solved to optimality.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.errors import PlannerInputError
from planner.requirements import peak_rps_from_mean
from planner.traces import Trace

SECONDS_PER_DAY = 86400.0
PERIOD_NAMES_S = {"second": 1.0, "minute": 60.0, "hour": 3600.0, "day": 86400.0}
_UNIT_S = {"s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0, "hour": 3600.0, "d": 86400.0}
LENGTH_QUANTILES = (0.25, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.999, 1.0)


MAX_WINDOWS = 1_000_000  # rate windows of one trace: beyond, a longer --period says the same in less time


def period_seconds(text: str) -> float:
    """'hour' / 'minute' / 'day' / 'second', or a number with a unit: '15min', '30s', '2h'."""
    text = text.strip().lower()
    if text in PERIOD_NAMES_S:
        return PERIOD_NAMES_S[text]
    for unit in sorted(_UNIT_S, key=len, reverse=True):
        if text.endswith(unit):
            number = text[: -len(unit)].strip()
            try:
                value = float(number) * _UNIT_S[unit]
            except ValueError:
                break
            if math.isfinite(value) and 1.0 <= value <= 7 * SECONDS_PER_DAY:
                return value
            break
    raise PlannerInputError(
        "--period", "period", f"'{text[:40]}' is not a period; allowed: second, minute, hour, day or a number with s/min/h/d "
        "from 1 s to 7 days (e.g. 15min)"
    )


@dataclass(frozen=True)
class WindowRate:
    """Requests in one window of the trace."""

    start_s: float  # clock time of the window start (epoch seconds for datetime traces)
    covered_s: float  # seconds of the window inside the trace
    requests: int
    mean_rps: float
    observed_peak_rps: float  # the busiest second at the quantile, as seen
    poisson_peak_rps: float  # the seeds' sizing rule at the quantile of the mean


@dataclass(frozen=True)
class ProfileSlot:
    """One slot of the daily profile (a scenario period)."""

    name: str
    hours_per_year: float
    mean_rps: float
    demand_factor: float


@dataclass(frozen=True)
class EngineVariant:
    max_isl_tokens: int
    max_osl_tokens: int
    share: float  # of requests
    requests: int
    mean_isl_tokens: float
    mean_osl_tokens: float
    padding_tokens: int


@dataclass(frozen=True)
class LengthHistogram:
    isl_edges: tuple[int, ...]  # bin i holds edges[i-1] < ISL <= edges[i] (bin 0: ISL <= edges[0])
    osl_edges: tuple[int, ...]
    counts: tuple[tuple[int, ...], ...]  # [isl bin][osl bin]


@dataclass(frozen=True)
class TraceAnalysis:
    path: str
    requests: int
    duration_s: float
    period_s: float
    quantile: float
    mean_rps: float
    windows: tuple[WindowRate, ...]
    busiest: WindowRate
    profile: tuple[ProfileSlot, ...]  # empty unless the trace covers every slot of a day
    histogram: LengthHistogram
    variants: tuple[EngineVariant, ...]
    padding_fraction: float  # padding / tokens reserved, over all requests
    single_variant_padding_fraction: float  # the same with one variant (max ISL, max OSL) for comparison
    isl_mean: float
    osl_mean: float
    notes: tuple[str, ...]
    # from a trace with block hashes (traces.prefix_hits): the mean prompt tokens a hit finds cached, and the share
    # of requests that hit; None without hashes
    prefix_tokens: int | None = None
    prefix_hit_rate: float | None = None


def window_rates(trace: Trace, period_s: float, quantile: float) -> list[WindowRate]:
    """Windows aligned to multiples of period_s on the trace's clock, from the first request to the last."""
    first, last = trace.arrival_s[0], trace.arrival_s[-1]
    if (last - first) / period_s > MAX_WINDOWS:
        raise PlannerInputError(
            "--period", "period", f"the trace spans {last - first:,.0f} s: {(last - first) / period_s:,.0f} windows of "
            f"{period_s:g} s; at most {MAX_WINDOWS:,} (give a longer --period)",
        )  # fmt: skip
    index = np.floor(trace.arrival_s / period_s).astype(np.int64)
    low, high = int(index[0]), int(index[-1])
    counts = np.bincount(index - low, minlength=high - low + 1)
    # arrivals are sorted, so each window is a slice (no full scan per window)
    bounds = np.searchsorted(index, np.arange(low, high + 2), side="left")
    rates = []
    for offset, count in enumerate(counts):
        start = (low + offset) * period_s
        covered = min(start + period_s, max(last, first + 1.0)) - max(start, first)
        covered = max(covered, min(period_s, 1.0))
        in_window = trace.arrival_s[bounds[offset]:bounds[offset + 1]]
        per_second = np.bincount(np.floor(in_window - start).astype(np.int64), minlength=max(1, math.ceil(covered)))
        observed = float(np.quantile(per_second, quantile)) if period_s >= 1.0 else float(count) / period_s
        mean = float(count / covered)
        rates.append(WindowRate(float(start), float(covered), int(count), mean, observed, peak_rps_from_mean(mean, quantile)))
    return rates


def daily_profile(rates: list[WindowRate], period_s: float, trace: Trace) -> tuple[tuple[ProfileSlot, ...], str | None]:
    """Fold windows onto the time of day; empty (with the reason) unless every slot of the day is covered."""
    if period_s > SECONDS_PER_DAY or SECONDS_PER_DAY % period_s:
        return (), f"a period of {period_s:g} s does not divide a day: no daily profile"
    slots = int(SECONDS_PER_DAY // period_s)
    full = [r for r in rates if r.covered_s >= period_s * 0.999]
    by_slot: dict[int, list[float]] = {}
    for rate in full:
        by_slot.setdefault(int(round(rate.start_s / period_s)) % slots, []).append(rate.mean_rps)
    if len(by_slot) < slots:
        return (), (
            f"the trace covers {trace.duration_s / 3600:.2f} h, {len(by_slot)} of the day's {slots} full periods: "
            "no daily profile; the workload is sized for the busiest period seen"
        )
    means = {slot: float(np.mean(values)) for slot, values in by_slot.items()}
    top = max(means.values())
    hours = 8760.0 / slots
    profile = []
    for slot in range(slots):
        start = slot * period_s
        end = start + period_s
        name = f"{int(start // 3600):02d}:{int(start % 3600 // 60):02d}-{int(end // 3600):02d}:{int(end % 3600 // 60):02d}"
        profile.append(ProfileSlot(name, hours, means[slot], means[slot] / top if top > 0 else 0.0))
    clock = "UTC" if trace.clock == "datetime" else "the trace's clock"
    return tuple(profile), f"daily profile folded from {len(full)} full periods ({clock})"


def _pow2_edges(values: np.ndarray) -> np.ndarray:
    top = max(1, int(values.max()))
    return 2 ** np.arange(0, math.ceil(math.log2(top)) + 1)


def length_histogram(trace: Trace) -> LengthHistogram:
    isl_edges, osl_edges = _pow2_edges(trace.isl_tokens), _pow2_edges(trace.osl_tokens)
    isl_bin = np.searchsorted(isl_edges, trace.isl_tokens, side="left")
    osl_bin = np.searchsorted(osl_edges, trace.osl_tokens, side="left")
    counts = np.zeros((isl_edges.size, osl_edges.size), dtype=np.int64)
    np.add.at(counts, (isl_bin, osl_bin), 1)
    # drop the empty low bins so the table starts where the traffic does
    first_isl, first_osl = int(np.flatnonzero(counts.sum(1))[0]), int(np.flatnonzero(counts.sum(0))[0])
    counts = counts[first_isl:, first_osl:]
    return LengthHistogram(
        tuple(int(e) for e in isl_edges[first_isl:]), tuple(int(e) for e in osl_edges[first_osl:]),
        tuple(tuple(int(c) for c in row) for row in counts),
    )  # fmt: skip


def _thresholds(values: np.ndarray) -> np.ndarray:
    levels = np.quantile(values, LENGTH_QUANTILES, method="higher")
    return np.unique(np.maximum(levels, 1).astype(np.int64))


def choose_variants(trace: Trace, engines: int) -> tuple[EngineVariant, ...]:
    """K-median over histogram cells: open at most `engines` (max ISL, max OSL) pairs, the largest one always,
    assign each cell to an open pair that covers it, minimize padding tokens."""
    import pulp

    isl, osl = np.maximum(trace.isl_tokens, 1), np.maximum(trace.osl_tokens, 1)
    isl_levels, osl_levels = _thresholds(isl), _thresholds(osl)
    cell_isl = np.searchsorted(isl_levels, isl, side="left")
    cell_osl = np.searchsorted(osl_levels, osl, side="left")
    cells: dict[tuple[int, int], list[int]] = {}
    for request, key in enumerate(zip(cell_isl.tolist(), cell_osl.tolist())):
        cells.setdefault(key, []).append(request)
    stats = {key: (len(ids), float(isl[ids].sum()), float(osl[ids].sum())) for key, ids in cells.items()}
    pairs = [(i, j) for i in range(isl_levels.size) for j in range(osl_levels.size)
             if any(a <= i and b <= j for a, b in cells)]  # fmt: skip
    largest = (isl_levels.size - 1, osl_levels.size - 1)

    def padding(cell, pair) -> float:
        count, isl_sum, osl_sum = stats[cell]
        return count * (isl_levels[pair[0]] + osl_levels[pair[1]]) - isl_sum - osl_sum

    problem = pulp.LpProblem("engine_variants", pulp.LpMinimize)
    open_pair = {p: pulp.LpVariable(f"open_{p[0]}_{p[1]}", cat="Binary") for p in pairs}
    assign = {
        (c, p): pulp.LpVariable(f"assign_{c[0]}_{c[1]}_to_{p[0]}_{p[1]}", lowBound=0, upBound=1)
        for c in sorted(cells) for p in pairs if p[0] >= c[0] and p[1] >= c[1]
    }  # fmt: skip
    problem += pulp.lpSum(padding(c, p) * var for (c, p), var in assign.items())
    for cell in sorted(cells):
        problem += pulp.lpSum(var for (c, _), var in assign.items() if c == cell) == 1, f"covered_{cell[0]}_{cell[1]}"
    for (c, p), var in assign.items():
        problem += var <= open_pair[p], f"open_{c[0]}_{c[1]}_{p[0]}_{p[1]}"
    problem += pulp.lpSum(open_pair.values()) <= engines, "at_most_k_variants"
    problem += open_pair[largest] == 1, "largest_always_open"
    status = problem.solve(pulp.PULP_CBC_CMD(msg=False))
    if pulp.LpStatus[status] != "Optimal":
        raise RuntimeError(f"engine variant selection: CBC returned {pulp.LpStatus[status]}")
    chosen = sorted(p for p, var in open_pair.items() if var.value() > 0.5)
    best_for = {cell: min((p for p in chosen if p[0] >= cell[0] and p[1] >= cell[1]), key=lambda p: (padding(cell, p), p))
                for cell in cells}  # fmt: skip
    variants = []
    for pair in chosen:
        ids = [r for cell, p in best_for.items() if p == pair for r in cells[cell]]
        if not ids:
            continue
        ids_array = np.array(ids)
        max_isl, max_osl = int(isl_levels[pair[0]]), int(osl_levels[pair[1]])
        pad = int((max_isl - isl[ids_array]).sum() + (max_osl - osl[ids_array]).sum())
        variants.append(EngineVariant(
            max_isl, max_osl, len(ids) / isl.size, len(ids),
            float(isl[ids_array].mean()), float(osl[ids_array].mean()), pad,
        ))  # fmt: skip
    return tuple(variants)


def analyze_trace(trace: Trace, period_s: float = 3600.0, engines: int = 2, quantile: float = 0.95) -> TraceAnalysis:
    """Rates per period, the length histogram and K engine variants of a trace."""
    if engines < 1:
        raise PlannerInputError("--engines", "engines", f"must be >= 1 (got {engines})")
    if not 0 < quantile < 1:
        raise PlannerInputError("--quantile", "quantile", f"must be strictly between 0 and 1 (got {quantile:g})")
    if period_s < 1.0:
        raise PlannerInputError("--period", "period", f"must be at least one second (got {period_s:g} s)")
    rates = window_rates(trace, period_s, quantile)
    profile, profile_note = daily_profile(rates, period_s, trace)
    full = [r for r in rates if r.covered_s >= period_s * 0.999] or rates
    busiest = max(full, key=lambda r: (r.mean_rps, -r.start_s))
    variants = choose_variants(trace, engines)
    isl, osl = np.maximum(trace.isl_tokens, 1), np.maximum(trace.osl_tokens, 1)
    reserved = sum(v.requests * (v.max_isl_tokens + v.max_osl_tokens) for v in variants)
    single_reserved = isl.size * (int(isl.max()) + int(osl.max()))
    single_padding = single_reserved - float(isl.sum() + osl.sum())
    notes = list(trace.notes)
    if profile_note:
        notes.append(profile_note)
    zero = int((trace.osl_tokens == 0).sum() + (trace.isl_tokens == 0).sum())
    if zero:
        notes.append(f"{zero} token counts of 0 were taken as 1")
    if busiest.observed_peak_rps > busiest.poisson_peak_rps * 1.2 and busiest.requests >= 100:
        notes.append(
            f"burstier than Poisson: in the busiest period the {quantile:.0%} busiest second saw "
            f"{busiest.observed_peak_rps:g} requests, Poisson predicts {busiest.poisson_peak_rps:g}: "
            "consider a higher peak_quantile or peak_rps"
        )
    duration = max(trace.duration_s, 1.0)
    return TraceAnalysis(
        path=trace.path, requests=trace.requests, duration_s=trace.duration_s, period_s=period_s, quantile=quantile,
        mean_rps=trace.requests / duration, windows=tuple(rates), busiest=busiest, profile=profile,
        histogram=length_histogram(trace), variants=variants,
        padding_fraction=sum(v.padding_tokens for v in variants) / reserved if reserved else 0.0,
        single_variant_padding_fraction=single_padding / single_reserved if single_reserved else 0.0,
        isl_mean=float(isl.mean()), osl_mean=float(osl.mean()), notes=tuple(notes), **_prefix(trace),
    )  # fmt: skip


def _prefix(trace: Trace) -> dict:
    """The workload's prefix_cache from the trace's per-request cached tokens: the hit rate and the mean cached
    tokens of a hit (so that the mean prompt computes what the trace's prompts computed on average)."""
    if trace.cached_tokens is None:
        return {}
    hits = trace.cached_tokens > 0
    if not hits.any():
        return {"prefix_tokens": 0, "prefix_hit_rate": 0.0}
    return {"prefix_tokens": int(round(float(trace.cached_tokens[hits].mean()))), "prefix_hit_rate": float(hits.mean())}


def _shares(variants: tuple[EngineVariant, ...]) -> list[float]:
    """Shares rounded to 6 places that add up to exactly 1 (the scenario checks the sum)."""
    shares = [round(v.share, 6) for v in variants]
    largest = max(range(len(shares)), key=lambda i: shares[i])
    shares[largest] = round(1.0 - sum(s for i, s in enumerate(shares) if i != largest), 6)
    return shares


def workload_block(analysis: TraceAnalysis, name: str, model: str, mode: str = "streaming") -> dict:
    """A scenario `workloads:` entry (and `periods:` when there is a daily profile) built from the analysis.

    Buckets are the engine variants: lengths at the mean of their requests (what throughput depends on), engine
    maxima at the variant's maxima (what memory must hold). The demand is the busiest period's mean rate with
    the quantile as peak_quantile: the planner applies the Poisson peak rule itself.
    """
    buckets = [
        {"isl_tokens": max(1, math.ceil(v.mean_isl_tokens)), "osl_tokens": max(1, math.ceil(v.mean_osl_tokens)),
         "max_isl_tokens": v.max_isl_tokens, "max_osl_tokens": v.max_osl_tokens, "share": share}
        for v, share in zip(analysis.variants, _shares(analysis.variants))
    ]  # fmt: skip
    top_mean = max(s.mean_rps for s in analysis.profile) if analysis.profile else analysis.busiest.mean_rps
    workload = {
        "name": name, "model": model, "buckets": buckets, "mean_rps": round(top_mean, 4),
        "peak_quantile": analysis.quantile, "mode": mode,
    }  # fmt: skip
    if analysis.prefix_tokens and analysis.prefix_hit_rate:
        workload["prefix_cache"] = {"prefix_tokens": analysis.prefix_tokens, "hit_rate": round(analysis.prefix_hit_rate, 4)}
    block: dict = {"workloads": [workload]}
    if len(analysis.profile) > 1:
        block["periods"] = [
            {"name": slot.name, "hours_per_year": round(slot.hours_per_year, 6),
             "demand_factor": {name: round(slot.demand_factor, 4)}}
            for slot in analysis.profile
        ]  # fmt: skip
    return block
