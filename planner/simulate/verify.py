"""Does a plan hold its latency limits under random or real traffic? Every workload in every period, on the engines
the plan gives it (`simulate_plan`).

Workloads are simulated as the deployment runs them: in each period the routes (a workload bucket on one
configuration) form pools, the connected components of the graph linking workloads and the configurations their
routes use (`_pools`). A pool runs once per seed: every route's requests (its own arrivals, lengths and caps) go
through the balancer to the engines of its configuration (all its instances running in the period), mixed with the
other routes there; each workload's statistics come from its own requests and its own token gaps (the engines count
each class's running sequences, `ServingEngine(classes=...)`). A configuration that carries one route runs as
before pools existed (same seed, same results); a workload's several length buckets on one configuration mix on all
its engines too. The engines of a configuration are `ServingEngine`s:
- modeled configurations: the calibrated roofline's step times, the plan's batch cap, the instance's KV cache;
- configurations from a measured or interpolated point: the same roofline step shapes scaled by one factor so that
  an engine kept full at the point's concurrency delivers exactly the measured requests/s (`steps.saturated_rps`);
  the concurrency is the point's own when it records one, else Little's law over its decode time (requests/s x
  OSL x TPOT, a request's mean gap), else the roofline's smallest batch reaching the measured rate. Rows measured
  on a whole node are run as the smallest tensor-parallel engine the model fits, that many per node. Models
  without an architecture get `steps.PointSteps` fitted to the point;
- disaggregated routes: prefill engines (whole prompts, the first token only), the KV transfer at the slower of the
  two instances' networks, decode engines that take each request with its prompt cached (`pools.run_pool_once`,
  `_hand_over`, `_join_stages`);
- speculative routes: the scenario's speculation, accepted tokens drawn per step (`ServingEngine`);
- a workload's prefix cache: each request's cached prompt tokens drawn at its hit rate, or a trace's own.

Verdicts: each limit the SLO sets (planner.metrics: TTFT, TPOT and E2E per request, ITL as gaps between tokens) at
the scenario's percentile over the measured window, with a 95% interval; the run length doubles until every interval
is within 5% of its value (or a cap), found on a pilot run of its own arrivals; the runs judged are fresh at that
length (`seeds` of them, with other arrivals each). A limit
`holds` (estimate and the interval's upper end within it), `misses` (the interval's lower end above it: conclusive)
or is `inconclusive` (the interval straddles it); see `classify`. When a verdict is inconclusive and neither
`duration_s` nor a trace fixed the run, more seeds are run at the same length (at least 4 in all, then doubling, at
most `MAX_SEEDS` and `max_requests` requests over all seeds) until every verdict is conclusive or the bound is
reached; the WorkloadCheck says what was done (`extra_seeds`, `seeds_note`). In a pool, settling and extra seeds
look at every workload's verdicts (a seed is a run of the whole pool; each workload's verdicts are over all of them).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np

from planner.errors import PlannerInputError
from planner.metrics import LABELS
from planner.metrics import limits as slo_limits
from planner.plan import PER_PERIOD_ROLES, configuration_key, route_matches
from planner.simulate.pools import _Group, _Pool, _RouteRun, _single_pool, run_pool_once
from planner.simulate.setups import _instances_per_node, engine_setup
from planner.simulate.stats import (
    MIN_WARMUP_FRACTION,
    RunStats,
    BATCHES,
    order_statistic_interval,
    quantile_interval,
    gap_arrays,
    request_latencies,
    run_statistics,
    warmup_s,
)

SETTLED_RELATIVE_HALF_WIDTH = 0.05
PILOT_SEED_OFFSET = 1_000_003  # the pilot run that sets a run's length draws its own arrivals (seed + this)
MAX_SEEDS = 8  # extra seeds for inconclusive verdicts stop here (a user's --seeds may be larger)
MIN_SEEDS_ACROSS = 4  # the first extra round brings the seeds to at least this (a t-interval over 2 seeds is 12.7 sd wide)
HOLDS, MISSES, INCONCLUSIVE, NOT_SIMULATED = "holds", "misses", "inconclusive", "not simulated"


@dataclass(frozen=True)
class SimulationOptions:
    """How to simulate. `duration_s` None: settle automatically (start at `start_duration_s`, double up to
    `max_duration_s`). `trace`: a planner.traces.Trace replayed for `trace_workload` (arrivals and lengths)."""

    duration_s: float | None = None
    seeds: int = 1
    seed: int = 0
    balancer: str = "round-robin"
    length_cv: float = 0.0
    arrival_cv: float = 1.0
    token_budget: int | None = None  # None: the scenario's engine.token_budget (the plan was sized with it)
    max_duration_s: float = 4 * 3600.0
    max_requests: int = 1_000_000
    trace: object | None = None
    trace_workload: str | None = None
    trace_period: str | None = None


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


# ----------------------------------------------------------------------------------------------- verdicts
def _values(requests, gaps, window):
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


def _limits(slo) -> list[tuple[str, float]]:
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


def _checks(seed_runs, slo, unsettled: bool = False) -> tuple[tuple[LimitCheck, ...], bool]:
    """Each limit at the SLO percentile, pooled over seeds: the estimate from every seed's values together, the
    interval from their batches (`stats.quantile_interval`), or, where a seed has too few values to batch (fewer
    than 200: a short trace or run), the distribution-free interval of the order statistics of all the values
    (`stats.order_statistic_interval`). Settled: every interval finite and within 5% of its value.
    Verdicts by `classify`; a limit every seed misses on its own (its own estimate and interval) is missed
    whatever the pooled interval says: more seeds never weaken a miss. `unsettled`: the runs' length reached its
    cap before the pilot settled, so their batches may lean on each other (`stats.pooled_interval`'s correlated).
    The intervals' coverage of exact queues' percentiles: benchmarks/interval_coverage.py."""
    rows, settled = [], True
    for metric, limit in _limits(slo):
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


def simulate_workload(runs: list[_RouteRun], workload_spec, rate_rps: float, options: SimulationOptions) -> WorkloadRun:
    """Runs of one workload in one period whose routes each have their own engines (`simulate_pool` of one)."""
    return simulate_pool(_single_pool(runs, workload_spec, rate_rps), options)[0]


def simulate_pool(pool: _Pool, options: SimulationOptions) -> list[WorkloadRun]:
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
        settled = all(_checks([_values(requests, gaps, window)], slo)[1]
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
    seed_values = [[_values(requests, gaps, window)] for (requests, gaps, _), window in zip(outs, windows)]

    def add_seeds(total: int) -> None:
        for k in range(len(seed_values[0]), total):
            for w, (more, more_gaps, _) in enumerate(run_pool_once(pool, length, options.seed + k, options)):
                simulated[w] += len(more)
                seed_values[w].append(_values(more, more_gaps, (warmup_s(more, length), length)))

    def all_checks():
        return [_checks(values, slo, not fixed and not settled) for values, slo in zip(seed_values, slos)]

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
    counts = {metric: sum(len(run[metric][0]) for run in seed_runs) for metric, _ in _limits(slo)
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


def simulate_plan(plan, scenario, catalog, options: SimulationOptions | None = None, progress=None) -> tuple[WorkloadCheck, ...]:
    """Every workload in every period (with a trace: the traced workload in its busiest period, or the one named),
    on the engines the plan gives it; see the module docstring. Workloads whose routes share a configuration are
    simulated together, as the deployment runs them (`_pools`): every route's requests go to all the instances of its
    configuration running in the period, mixed with the other workloads' there, and each workload's statistics and
    verdicts come from its own requests and token gaps."""
    options = options or SimulationOptions()
    if options.token_budget is None:
        options = dataclasses.replace(options, token_budget=scenario.token_budget)
    if options.trace is not None and options.trace.requests > MAX_RUN_REQUESTS:
        options = dataclasses.replace(options, trace=_trace_head(options.trace, MAX_RUN_REQUESTS))
    specs = {w.name: w for w in scenario.workloads}
    jobs = []
    for period in scenario.periods:
        routes = [r for r in plan.routing if r.period == period.name]
        for workload in plan.workloads:
            mine = [r for r in routes if r.workload == workload.name]
            if mine and sum(r.rps for r in mine) > 0:
                jobs.append((period.name, workload, mine, routes))
    pool_of = {(job[0], job[1].name): pool for pool in _pools(jobs) for job in pool}
    if options.trace is not None:
        jobs = _trace_jobs(jobs, options)
    checks, done = [], {}
    for number, (period, workload, _, _) in enumerate(jobs):
        if progress is not None:
            progress(number, len(jobs))
        key = (period, workload.name)
        if key not in done:
            traced = workload.name if options.trace is not None else None
            done.update(_simulate_pool_jobs(plan, catalog, specs, pool_of[key], options, traced, scenario.speculation))
        checks.append(done[key])
    if progress is not None:
        progress(len(jobs), len(jobs))
    return tuple(checks)


def _linking_keys(mine) -> set:
    """The configurations through which a workload's routes share engines: those its simulated routes send requests
    to (a route of no requests links nothing)."""
    return {configuration_key(r) for r in mine if r.rps > 0}


def _pools(jobs) -> list[list]:
    """The jobs (period, workload, its routes, the period's routes) grouped into pools: per period, the connected
    components of the graph linking workloads and the configurations their routes use (a workload on A and B and
    another on B form one pool). Each pool in job order; a workload alone on its configurations is a pool of one."""
    keys = [_linking_keys(job[2]) for job in jobs]
    assigned = [False] * len(jobs)
    out = []
    for i, job in enumerate(jobs):
        if assigned[i]:
            continue
        component, reach = {i}, set(keys[i])
        grown = True
        while grown:
            grown = False
            for j, other in enumerate(jobs):
                if j not in component and not assigned[j] and other[0] == job[0] and keys[j] & reach:
                    component.add(j)
                    reach |= keys[j]
                    grown = True
        for j in component:
            assigned[j] = True
        out.append([jobs[j] for j in sorted(component)])
    return out


def _trace_jobs(jobs, options):

    names = sorted({w.name for _, w, _, _ in jobs})
    name = options.trace_workload
    if name is None:
        if len(names) != 1:
            raise PlannerInputError("--workload", "workload", f"the plan has several workloads; name the traced one: {', '.join(names)}")
        name = names[0]
    mine = [j for j in jobs if j[1].name == name]
    if not mine:
        raise PlannerInputError("--workload", "workload", f"no workload '{name[:100]}' is served in the plan; allowed: {', '.join(names)}")
    if options.trace_period is not None:
        chosen = [j for j in mine if j[0] == options.trace_period]
        if not chosen:
            raise PlannerInputError("--period", "period", f"'{options.trace_period[:100]}' is not a period of the plan; allowed: "
                                    f"{', '.join(j[0] for j in mine)}")  # fmt: skip
        return chosen
    return [max(mine, key=lambda j: sum(r.rps for r in j[2]))]


def _instance_load(route) -> float:
    """Instances of its configuration a route keeps busy (its requests/s where its rate per instance is unknown)."""
    return route.rps / route.rps_per_instance if route.rps_per_instance else route.rps


def _simulate_pool_jobs(plan, catalog, specs, jobs, options, traced: str | None = None, speculation=None) -> dict:
    """The WorkloadChecks of one pool's workloads, by (period, workload): each configuration's engines (all its
    instances running in the period, or the share of them its routes here take when routes of the pool's workloads
    leave some to workloads outside the pool) take the requests of every route of the pool on it; each workload is
    judged on its own requests and gaps. With a trace, `traced` replays it and only its check is meaningful."""
    started = time.perf_counter()
    period, routes = jobs[0][0], jobs[0][3]
    # a configuration several routes share is split by the instances each route's load takes (its rate over what
    # one instance serves at its lengths), not by requests/s: a long-prompt route needs more engines per request;
    # the routes of one pool on one configuration take their shares together (all of it when they are all its routes)
    config_total: dict[tuple, float] = {}
    for r in routes:
        config_total[configuration_key(r)] = config_total.get(configuration_key(r), 0.0) + _instance_load(r)
    names = [job[1].name for job in jobs]
    rates = [sum(r.rps for r in job[2] if r.stage != "decode") for job in jobs]  # a disaggregated request is routed twice
    routed = list(rates)  # a traced workload's rate becomes the trace's
    entries: list[list] = [[] for _ in jobs]  # per workload, in route order: a note, or the index of a candidate
    candidates = []  # (workload, route, assignment)
    by_key: dict[tuple, list[int]] = {}
    for w, (_, workload, mine, _) in enumerate(jobs):
        for route in mine:
            assignment = next(a for a in workload.assignments if route_matches(a, route))
            entries[w].append(len(candidates))
            by_key.setdefault(configuration_key(route), []).append(len(candidates))
            candidates.append((w, route, assignment))
    setups, described = {}, {}  # candidate -> the setup of its group; (workload, candidate) -> the text
    groups = []
    open_loop = getattr(plan, "sizing", "random-arrivals") != "closed-loop"  # how the plan sized its engines

    def setup_of(i: int, shared_with: str = ""):
        w, route, assignment = candidates[i]
        cache = getattr(specs[names[w]], "prefix_cache", None)  # test doubles may lack it
        return engine_setup(route, assignment, instances, share, catalog, options.token_budget, shared_with,
                            speculation, cache, open_loop)  # fmt: skip

    for key, members in by_key.items():
        total = config_total[key]
        share = sum(_instance_load(candidates[i][1]) for i in members) / total if total > 0 else 0.0
        lead = max(members, key=lambda i: _instance_load(candidates[i][1]))  # the first of the largest load
        _, route, assignment = candidates[lead]
        instances = _running_instances(plan, route, catalog)
        setup = setup_of(lead)
        owners = list(dict.fromkeys(candidates[i][0] for i in members))
        if isinstance(setup, str):
            for i in members:
                described[(candidates[i][0], i)] = f"{candidates[i][1].system}: {setup}"
            continue
        differs = len(members) > 1 and any(_setup_signature(setup_of(i)) != _setup_signature(setup) for i in members)
        for w in owners:
            others = ", ".join(names[v] for v in owners if v != w)
            text = setup.description
            if others:
                text = setup_of(lead, others).description
            buckets = sum(1 for i in members if candidates[i][0] == w)
            if buckets > 1:
                text += f" (its {buckets} length buckets mixed on them)"
            if differs:
                text += (f"; step times and batch from {names[candidates[lead][0]]}'s {route.bucket_isl}/{route.bucket_osl} "
                         "route, the largest load on them")  # fmt: skip
            first = next(i for i in members if candidates[i][0] == w)
            described[(w, first)] = f"{route.system}: {text}"
        for i in members:
            setups[i] = setup
        groups.append(members)
    # the pool's runs: its simulated routes in workload and route order, each workload numbered among those that run
    active = [w for w in range(len(jobs)) if any(isinstance(e, int) and e in setups for e in entries[w])]
    number = {w: k for k, w in enumerate(active)}
    index, runs, owners = {}, [], []
    for w in active:
        for e in entries[w]:
            if isinstance(e, int) and e in setups:
                index[e] = len(runs)
                runs.append(_RouteRun(candidates[e][1], setups[e], _context_tokens(catalog, candidates[e][1])))
                owners.append(number[w])
    pool_groups = tuple(_Group(setups[members[0]], tuple(index[i] for i in members)) for members in groups)
    notes = ["" for _ in jobs]
    for w, (_, workload, _, _) in enumerate(jobs):
        cache = getattr(specs[workload.name], "prefix_cache", None)  # test doubles may lack it
        if cache is not None:
            notes[w] = (f"prefix cache: the first {cache.tokens:,} prompt tokens found cached by {cache.hit_rate:.0%} of "
                        "requests, drawn per request")  # fmt: skip
    if options.trace is not None and traced in names:
        t = names.index(traced)
        trace = options.trace
        trace_rate = trace.requests / trace.duration_s if trace.duration_s > 0 else math.nan
        cached = ("; prefix cache: each request's cached tokens from the trace's block hashes"
                  if trace.cached_tokens is not None else f"; {notes[t]}" if notes[t] else "")  # fmt: skip
        notes[t] = (f"trace {trace.path}: {trace.requests:,} requests at {trace_rate:.4g} rps mean (the plan routes {rates[t]:.4g} "
                    "rps here)" + cached + "".join(f"; {note}" for note in trace.notes))  # fmt: skip
        rates[t] = trace_rate
        if len(active) > 1:
            notes[t] += f"; {', '.join(names[w] for w in active if w != t)} ran on the shared engines at the plan's rates"
    outcomes = []
    traced_number = number.get(names.index(traced)) if traced in names else 0  # None: the traced workload cannot run
    if active and traced_number is not None:
        pool = _Pool(tuple(runs), tuple(owners), pool_groups, tuple(specs[names[w]] for w in active),
                     tuple(rates[w] for w in active), traced_number)  # fmt: skip
        outcomes = simulate_pool(pool, options)
    else:
        number = {}
    wall = time.perf_counter() - started
    simulated = sum(o.requests_simulated for o in outcomes)
    out = {}
    for w, (_, workload, _, _) in enumerate(jobs):
        texts = [e if isinstance(e, str) else described.get((w, e)) for e in entries[w]]
        engines = "; ".join(t for t in texts if t)
        if w not in number:
            out[(period, workload.name)] = WorkloadCheck(workload.name, period, routed[w], 0, engines, None, (), None,
                                                         "not simulated", verdict=NOT_SIMULATED)  # fmt: skip
            continue
        outcome = outcomes[number[w]]
        stats, note = outcome.stats, notes[w]
        if stats.rejected:
            note = (note + "; " if note else "") + f"{stats.rejected} requests refused (prompt longer than any engine takes)"
        verdict = workload_verdict(outcome.checks, stats)
        mine = {index[e] for e in entries[w] if isinstance(e, int) and e in index}
        instances = sum(g.setup.count for g in pool_groups if mine & set(g.members))
        out[(period, workload.name)] = WorkloadCheck(
            workload.name, period, rates[w], instances, engines, stats, outcome.checks, verdict == HOLDS, note,
            duration_s=outcome.duration_s, seeds=outcome.seeds, settled=outcome.settled,
            requests_simulated=outcome.requests_simulated,
            wall_s=wall * outcome.requests_simulated / simulated if simulated else wall, verdict=verdict,
            extra_seeds=outcome.extra_seeds, seeds_note=outcome.seeds_note,
        )  # fmt: skip
    return out


def _context_tokens(catalog, route) -> int | None:
    """The model's context (the longest prompt + output its engines serve), where the catalog states it."""
    model = catalog.models.get(route.model)
    return getattr(model, "max_context", None) if model is not None else None


def _setup_signature(setup) -> tuple:
    """What makes two routes' engines the same engines (a string: why they cannot be simulated)."""
    if isinstance(setup, str):
        return (setup,)
    return setup.max_batch, setup.kv_tokens, setup.request_overhead_ms, setup.count, setup.description


def _running_instances(plan, route, catalog) -> int:
    """Instances of the route's configuration running in its period (plans saved before instances were
    recorded: the nodes of its plan line x instances per node)."""
    if plan.instances:
        for allocation in plan.instances:
            if configuration_key(allocation) == configuration_key(route) and allocation.period == route.period:
                return allocation.instances
        raise ValueError(f"no instances serve route {route}")
    per_node = _instances_per_node(route, catalog.systems[route.system].gpus_per_node)
    for line in plan.lines:
        if configuration_key(line) == configuration_key(route) and (line.role not in PER_PERIOD_ROLES or line.period == route.period):
            return line.nodes * per_node
    raise ValueError(f"no plan line serves route {route}")


# ----------------------------------------------------------------------------------------------- wording
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


def overall_verdict(checks) -> str:
    """Of several workload checks: `misses` if one misses, else `inconclusive` if one is, else `holds` if one was
    simulated, else `not simulated`."""
    verdicts = {c.verdict for c in checks}
    for verdict in (MISSES, INCONCLUSIVE, HOLDS):
        if verdict in verdicts:
            return verdict
    return NOT_SIMULATED
