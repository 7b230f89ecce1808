"""How long and how many times a pool is run before its verdicts are judged (`simulate_pool`, `simulate_workload`).

The run length doubles until every interval is within 5% of its value (or a cap), found on a pilot run of its own
arrivals; the runs judged are fresh at that length (`seeds` of them, with other arrivals each). When a verdict is
inconclusive and neither `duration_s` nor a trace fixed the run, more seeds are run at the same length (at least 4
in all, then doubling, at most `MAX_SEEDS` and `max_requests` requests over all seeds) until every verdict is
conclusive or the bound is reached; the WorkloadCheck says what was done (`extra_seeds`, `seeds_note`). In a pool,
settling and extra seeds look at every workload's verdicts (a seed is a run of the whole pool; each workload's
verdicts are over all of them). One run holds at most `MAX_RUN_REQUESTS` requests in memory (`within_run_bound`
cuts a longer trace). The verdicts themselves: planner/simulate/verdicts.py; one run of a pool:
planner/simulate/pools.py.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from planner.errors import PlannerInputError
from planner.simulate.options import SimulationOptions
from planner.simulate.pools import Pool, RouteRun, run_pool_once, single_pool
from planner.simulate.stats import BATCHES, MIN_WARMUP_FRACTION, RunStats, run_statistics, warmup_s
from planner.simulate.verdicts import INCONCLUSIVE, LimitCheck, labelled_limits, limit_checks, window_values

PILOT_SEED_OFFSET = 1_000_003  # the pilot run that sets a run's length draws its own arrivals (seed + this)
MAX_SEEDS = 8  # extra seeds for inconclusive verdicts stop here (a user's --seeds may be larger)
MIN_SEEDS_ACROSS = 4  # the first extra round brings the seeds to at least this (a t-interval over 2 seeds is 12.7 sd wide)


def _start_duration(rate_rps: float) -> float:
    """About 6,000 requests, between 5 minutes and an hour."""
    return min(3600.0, max(300.0, 6000.0 / max(rate_rps, 1e-9)))


MAX_RUN_REQUESTS = 4_000_000  # one run of a pool holds its requests in memory (about 0.5 KB each): ~2 GB at most


def _first_duration(pool_rate_rps: float, slowest_rate_rps: float, max_requests: int) -> float:
    """The first run's length when settling: `_start_duration` of the slowest workload, shortened so that the
    whole pool's requests stay within `max_requests` (at 50,000 requests/s: 20 s, not 300 s of 15 million)."""
    return min(_start_duration(slowest_rate_rps), max_requests / max(pool_rate_rps, 1e-9))


def _trace_head(trace, count: int):
    """The first `count` requests of a trace (by arrival), with a note saying so: one run holds at most
    MAX_RUN_REQUESTS requests in memory."""
    end_s = float(trace.arrival_s[count - 1] - trace.arrival_s[0])
    note = (f"the first {count:,} of its {trace.requests:,} requests replayed (its first {end_s:,.0f} s): a run "
            f"holds at most {MAX_RUN_REQUESTS:,} requests")  # fmt: skip
    cached = trace.cached_tokens[:count] if trace.cached_tokens is not None else None
    return dataclasses.replace(trace, arrival_s=trace.arrival_s[:count], isl_tokens=trace.isl_tokens[:count],
                               osl_tokens=trace.osl_tokens[:count], cached_tokens=cached, notes=(*trace.notes, note))  # fmt: skip


def within_run_bound(options: SimulationOptions) -> SimulationOptions:
    """The options, with a trace longer than one run holds (`MAX_RUN_REQUESTS`) cut to its first requests
    (`_trace_head`)."""
    if options.trace is not None and options.trace.requests > MAX_RUN_REQUESTS:
        return dataclasses.replace(options, trace=_trace_head(options.trace, MAX_RUN_REQUESTS))
    return options


@dataclass(frozen=True)
class WorkloadRun:
    """What `simulate_workload` found: the first seed's statistics, the verdicts over every seed, and what was done
    about inconclusive ones."""

    stats: RunStats
    checks: tuple[LimitCheck, ...]
    settled: bool
    duration_s: float
    requests_simulated: int
    seeds: int
    extra_seeds: int = 0
    seeds_note: str = ""


def _undecided(checks) -> list[str]:
    """Why each inconclusive check is (for the note): 'the interval straddled the TTFT limit', 'too few values'."""
    out = []
    for c in checks:
        if c.verdict != INCONCLUSIVE:
            continue
        if not math.isfinite(c.simulated_ms):
            out.append(f"no {c.metric} value")
        elif c.ci_low_ms is None:
            out.append(f"no interval for the {c.metric} limit (too few values)")
        else:
            out.append(f"the interval straddled the {c.metric} limit")
    return out


def _more_seeds_helps(checks) -> bool:
    """More seeds can decide an inconclusive check that has a value (an interval from more runs)."""
    return any(c.verdict == INCONCLUSIVE and math.isfinite(c.simulated_ms) for c in checks)


def simulate_workload(runs: list[RouteRun], workload_spec, rate_rps: float, options: SimulationOptions) -> WorkloadRun:
    """Runs of one workload in one period whose routes each have their own engines (`simulate_pool` of one)."""
    return simulate_pool(single_pool(runs, workload_spec, rate_rps), options)[0]


def simulate_pool(pool: Pool, options: SimulationOptions) -> list[WorkloadRun]:
    """Runs of the workloads of a pool (one per workload, in the pool's order), every run shared by all of them: the
    first seed's settled duration (or the given one / the trace), the other seeds at that length, then, while a
    verdict of any of them is inconclusive and neither `duration_s` nor a trace fixed the run, more seeds (module
    docstring). Settling: about 6,000 requests of the slowest workload to start with, doubled until every workload's
    intervals are settled, within `max_duration_s` and `max_requests` over the whole pool; the seed budget counts
    the pool's requests."""
    count = len(pool.specs)
    slos = [spec.slo for spec in pool.specs]
    simulated = [0] * count
    pool_rate = sum(pool.rates)
    if options.trace is not None:
        duration = None
    elif options.duration_s is not None:
        duration = options.duration_s
        if duration * pool_rate > MAX_RUN_REQUESTS:
            raise PlannerInputError("--duration", "duration", f"{duration:g} s at {pool_rate:,.4g} requests/s is "
                                    f"{duration * pool_rate:,.0f} requests in one run; at most {MAX_RUN_REQUESTS:,} "
                                    f"(--duration {MAX_RUN_REQUESTS / pool_rate:,.4g} or less here)")  # fmt: skip
    else:
        duration = _first_duration(pool_rate, min(pool.rates), min(options.max_requests, MAX_RUN_REQUESTS))
    fixed = options.duration_s is not None or options.trace is not None
    settled = False  # the pilot's intervals within 5% at the length chosen (unfixed runs)

    def window_of(requests, length: float) -> tuple[float, float]:
        # a trace is not stationary: its warm-up is the minimum, not a cut that MSER finds in its daily swings
        return (length * MIN_WARMUP_FRACTION if options.trace is not None else warmup_s(requests, length)), length

    while True:  # the length: a pilot run (its own seed) doubled until settled, unless the length is fixed
        outs = run_pool_once(pool, duration or 0.0, options.seed + (0 if fixed else PILOT_SEED_OFFSET), options)
        for w, (requests, _, _) in enumerate(outs):
            simulated[w] += len(requests)
        if duration is not None:
            length = duration
        else:
            traced = outs[pool.traced][0]
            length = float(traced.arrival_s.max()) if len(traced) else 0.0
        windows = [window_of(requests, length) for requests, _, _ in outs]
        first = (outs, windows, length)
        if fixed:
            break
        settled = all(limit_checks([window_values(requests, gaps, window)], slo)[1]
                      for (requests, gaps, _), window, slo in zip(outs, windows, slos))  # fmt: skip
        grown = duration * 2
        if settled or grown > options.max_duration_s or grown * pool_rate > options.max_requests:
            break
        duration = grown
    outs, windows, length = first
    if not fixed:
        # the verdict's runs are fresh at the length the pilot chose: a run that stopped because its own batches
        # happened to agree would be judged on an interval too narrow for it (the pilot's own run: 87% of exact M/D/1
        # P99s covered at load 0.5 over 100 runs; fresh ones 93%: benchmarks/interval_coverage.py)
        outs = run_pool_once(pool, duration, options.seed, options)
        for w, (requests, _, _) in enumerate(outs):
            simulated[w] += len(requests)
        length = duration
        windows = [window_of(requests, length) for requests, _, _ in outs]
    per_seed = max(1, sum(len(requests) for requests, _, _ in outs))
    seed_values = [[window_values(requests, gaps, window)] for (requests, gaps, _), window in zip(outs, windows)]

    def add_seeds(total: int) -> None:
        for k in range(len(seed_values[0]), total):
            for w, (more, more_gaps, _) in enumerate(run_pool_once(pool, length, options.seed + k, options)):
                simulated[w] += len(more)
                seed_values[w].append(window_values(more, more_gaps, (warmup_s(more, length), length)))

    def all_checks():
        return [limit_checks(values, slo, not fixed and not settled) for values, slo in zip(seed_values, slos)]

    add_seeds(1 if options.trace is not None else max(1, options.seeds))
    results = all_checks()
    extras, notes = [0] * count, [""] * count
    helps = lambda: any(_more_seeds_helps(checks) for checks, _ in results)  # noqa: E731
    if not fixed and helps():
        undecided = [_more_seeds_helps(checks) for checks, _ in results]
        whys = ["; ".join(_undecided(checks)) for checks, _ in results]
        before = len(seed_values[0])
        budget = max(1, options.max_requests // per_seed)  # seeds whose requests fit in max_requests
        while helps():
            target = min(MAX_SEEDS, budget, max(MIN_SEEDS_ACROSS, 2 * len(seed_values[0])))
            if target <= len(seed_values[0]):
                break
            add_seeds(target)
            results = all_checks()
        extra, seeds = len(seed_values[0]) - before, len(seed_values[0])
        for w in range(count):
            extras[w] = extra
            if undecided[w]:
                notes[w] = _seeds_note(whys[w], extra, seeds, results[w][0], budget, options.max_requests)
            elif extra:
                others = ", ".join(pool.specs[v].name for v in range(count) if undecided[v])
                notes[w] = (f"{extra} more seed{'s' if extra != 1 else ''}, {seeds} in all, run for {others} "
                            "(inconclusive) on the engines they share; these verdicts are over all of them")  # fmt: skip
    elif fixed:
        fixed_by = ("a trace is replayed once" if options.trace is not None
                    else "--duration fixed the run (more --seeds, or no --duration, may decide it)")  # fmt: skip
        for w, (checks, _) in enumerate(results):
            if _more_seeds_helps(checks):
                notes[w] = f"{'; '.join(_undecided(checks))}: no more seeds run, {fixed_by}"
    for w, values in enumerate(seed_values):
        few = _few_values(values, slos[w])
        if few:
            notes[w] = f"{notes[w]}; {few}" if notes[w] else few
    runs = []
    for w, ((requests, gaps, preemptions), window, (checks, judged_settled)) in enumerate(zip(outs, windows, results)):
        stats = run_statistics(requests, gaps, window, preemptions, slos[w])
        # settled: the length was found (the pilot's intervals within 5% before a cap); a fixed run's own intervals
        run_settled = judged_settled if fixed else settled
        runs.append(WorkloadRun(stats, checks, run_settled, length, simulated[w], len(seed_values[w]), extras[w], notes[w]))
    return runs


def _few_values(seed_runs, slo) -> str:
    """What the verdicts of limits with too few values to batch rest on ('' when every limit had enough)."""
    counts = {metric: sum(len(run[metric][0]) for run in seed_runs) for metric, _ in labelled_limits(slo)
              if any(len(run[metric][0]) < BATCHES * 20 for run in seed_runs)}  # fmt: skip
    if not counts:
        return ""
    said = ", ".join(f"{metric} over {count:,} value{'s' if count != 1 else ''}" for metric, count in counts.items())
    return (f"fewer than {BATCHES * 20} values in a run's window ({said}): the percentile is the sample's own and its "
            "95% interval the order statistics' (distribution-free, the values taken as independent); an interval "
            "with no upper end (too few values for that percentile) never holds")


def _seeds_note(why: str, extra: int, seeds: int, checks, budget: int, max_requests: int) -> str:
    """'the interval straddled the ITL limit: 3 more seeds, 4 in all; now conclusive', or why it stopped."""
    done = f"{extra} more seed{'s' if extra != 1 else ''}, {seeds} in all" if extra else "no more seeds"
    if not any(c.verdict == INCONCLUSIVE for c in checks):
        return f"{why}: {done}; now conclusive"
    if seeds >= MAX_SEEDS:
        return f"{why}: {done}; still inconclusive after {seeds} seeds"
    if seeds >= budget:
        return (f"{why}: {done}; still inconclusive after {seeds} seed{'s' if seeds != 1 else ''} "
                f"(the {max_requests:,}-request budget over all seeds allows no more)")  # fmt: skip
    return f"{why}: {done}; still inconclusive after {seeds} seeds"

