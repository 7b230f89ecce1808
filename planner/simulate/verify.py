"""Does a plan hold its latency limits under random or real traffic? Every workload in every period, on the engines
the plan gives it (`simulate_plan`).

Each route (a workload bucket on one configuration) runs on its share of the configuration's instances as
`ServingEngine`s:
- modeled configurations: the calibrated roofline's step times, the plan's batch cap, the instance's KV cache;
- configurations from a measured or interpolated point: the same roofline step shapes scaled by one factor so that
  an engine kept full at the point's concurrency delivers exactly the measured requests/s (`steps.saturated_rps`);
  the concurrency is the point's own when it records one, else Little's law over its decode time (requests/s x
  OSL x ITL), else the roofline's smallest batch reaching the measured rate. Rows measured on a whole node are run
  as the smallest tensor-parallel engine the model fits, that many per node. Models without an architecture get
  `steps.PointSteps` fitted to the point.

Verdicts: each limit at the scenario's percentile (TTFT, E2E, and ITL as gaps between tokens) over the requests of
the measured window, with a confidence interval; the run length doubles until every interval is within 5% of its
value (or a cap), and `seeds` repeats the run with other arrivals.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from planner.plan import configuration_key
from planner.simulate.balance import run
from planner.simulate.engines import ServingEngine
from planner.simulate.stats import (
    MIN_WARMUP_FRACTION,
    RunStats,
    batch_interval,
    gap_arrays,
    request_latencies,
    run_statistics,
    warmup_s,
)
from planner.simulate.steps import PointSteps, RooflineSteps, saturated_rps
from planner.simulate.traffic import Requests, gamma_arrivals, lognormal_lengths

SETTLED_RELATIVE_HALF_WIDTH = 0.05
TP_CHOICES = (1, 2, 4, 8, 16, 32, 64, 72)


@dataclass(frozen=True)
class SimulationOptions:
    """How to simulate. `duration_s` None: settle automatically (start at `start_duration_s`, double up to
    `max_duration_s`). `trace`: a planner.traces.Trace replayed for `trace_workload` (arrivals and lengths)."""

    duration_s: float | None = None
    seeds: int = 1
    seed: int = 0
    balancer: str = "power-of-two"
    length_cv: float = 0.0
    arrival_cv: float = 1.0
    token_budget: int = 8192
    max_duration_s: float = 4 * 3600.0
    max_requests: int = 1_000_000
    trace: object | None = None
    trace_workload: str | None = None
    trace_period: str | None = None


@dataclass(frozen=True)
class LimitCheck:
    metric: str  # TTFT | ITL | E2E
    limit_ms: float
    percentile: float
    simulated_ms: float
    ci_low_ms: float | None  # 95% interval (batch means with one seed, across seeds with several)
    ci_high_ms: float | None
    seeds_passed: int
    ok: bool


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
    ok: bool | None  # None: could not be simulated (see note)
    note: str
    duration_s: float = 0.0
    seeds: int = 0
    settled: bool = True
    requests_simulated: int = 0
    wall_s: float = 0.0


@dataclass(frozen=True)
class EngineSetup:
    """How one route's instances are simulated."""

    steps: object
    max_batch: int
    kv_tokens: float | None
    count: int
    description: str


# ----------------------------------------------------------------------------------------------- engines
def _instances_per_node(route, gpus_per_node: int) -> int:
    return gpus_per_node // route.tp if route.tp else 1  # rows of a whole system: one instance per node


def _engine_shape(route, catalog):
    """(tp, precision, memory fit) of the engine: the route's own, or for rows measured on a whole node the smallest
    TP (bf16 first, then fp8) at which the model fits with a KV cache."""
    from planner.perf.roofline import supports_roofline
    from planner.perf.tables import instance_memory

    system = catalog.systems[route.system]
    gpu = catalog.gpus[system.gpu]
    if not supports_roofline(catalog.models[route.model]):
        return None
    precisions = [route.precision] if route.precision else [p for p in ("bf16", "fp8") if p in gpu.precisions]
    tps = [route.tp] if route.tp else [t for t in TP_CHOICES if t <= system.gpus_per_node and system.gpus_per_node % t == 0]
    for precision in precisions:
        for tp in tps:
            memory = instance_memory(catalog, route.model, system.gpu, tp, precision, route.engine_isl, route.engine_osl)
            if memory.fits and (memory.max_concurrency_by_memory or 0) >= 1:
                return tp, precision, memory
    return None


def engine_setup(route, assignment, instances: int, share: float, catalog, token_budget: int = 8192) -> EngineSetup | str:
    """The engines that serve `route` (module docstring), or why it cannot be simulated."""
    from planner.perf import is_modeled
    from planner.perf.calibration import efficiency_for
    from planner.perf.roofline import EngineShape, kv_bytes_for

    system = catalog.systems[route.system]
    found = _engine_shape(route, catalog)
    if found is None:
        return _point_setup(route, assignment, instances, share, catalog, token_budget)
    tp, precision, memory = found
    gpu = catalog.gpus[system.gpu]
    shape = EngineShape(catalog.models[route.model], gpu, tp, precision, kv_bytes_for(precision))
    base = RooflineSteps(shape, efficiency_for(catalog, gpu.architecture))
    kv_tokens = memory.kv_token_capacity or (memory.max_concurrency_by_memory * (route.engine_isl + route.engine_osl))
    kv_batch = memory.running_limit(route.bucket_isl, route.bucket_osl) or 1
    per_node = system.gpus_per_node // tp if route.tp is None else 1  # engines per plan instance
    count = max(1, round(instances * per_node * share))
    engine = f"TP{tp} {precision}"
    if is_modeled(assignment.provenance):
        batch = route.max_batch or kv_batch
        return EngineSetup(base, batch, kv_tokens, count,
                           f"{count} x {engine} engine, roofline steps, batch <= {batch}, budget {token_budget} tokens")
    rps = _rps_per_engine(route, system, per_node)
    isl, osl = route.bucket_isl, route.bucket_osl
    batch, how = _point_batch(assignment, rps, osl, per_node)
    if batch is None:
        batch, how = _batch_reaching(base, rps, isl, osl, kv_batch), "the roofline's batch at that rate"
    batch = max(1, min(batch, kv_batch))
    scale = saturated_rps(base, batch, isl, osl) / rps
    return EngineSetup(base.scaled(scale), batch, kv_tokens, count, (
        f"{count} x {engine} engine, roofline steps x{scale:.3g} to deliver the {assignment.provenance} "
        f"{rps:.4g} rps per engine at batch {batch} ({how}), budget {token_budget} tokens"))


def _rps_per_engine(route, system, engines_per_instance: int) -> float:
    if route.tp is None:
        return route.rps_per_node / engines_per_instance
    return route.rps_per_instance or route.rps_per_node / _instances_per_node(route, system.gpus_per_node)


def _point_batch(assignment, rps: float, osl: int, engines_per_instance: int) -> tuple[int | None, str]:
    """The concurrency of a measured point: its own, or Little's law over its decode time (OSL x ITL: what keeps
    the engine's seats full; the point's TTFT includes the benchmark's queueing)."""
    if assignment.concurrency:
        return math.ceil(assignment.concurrency / engines_per_instance), "the point's concurrency"
    if assignment.itl_ms is not None:
        return math.ceil(rps * osl * assignment.itl_ms / 1e3 - 1e-9), "Little's law over OSL x ITL at the point"
    return None, ""


def _point_setup(route, assignment, instances: int, share: float, catalog, token_budget: int) -> EngineSetup | str:
    """A model without an architecture, from its measured point (`steps.PointSteps`): one engine per plan instance."""
    from planner.perf import is_modeled
    from planner.perf.calibration import efficiency_for

    model = catalog.models[route.model]
    system = catalog.systems[route.system]
    gpu = catalog.gpus[system.gpu]
    if is_modeled(assignment.provenance) or not model.params_b:
        return f"{route.model} has no architecture (layers, heads) for step times and no measured point to scale"
    rps = _rps_per_engine(route, system, 1)
    batch, how = _point_batch(assignment, rps, route.bucket_osl, 1)
    if batch is None:
        return f"the {assignment.provenance} point of {route.model} records neither ITL nor concurrency: no step times"
    gpus = route.tp or system.gpus_per_node
    precision = route.precision or "bf16"
    efficiency = efficiency_for(catalog, gpu.architecture)
    steps = PointSteps.fitted(model.params_b, gpus, gpu.tflops_by_precision.get(precision, gpu.tflops_by_precision["bf16"]) * 1e12,
                              efficiency.gemm(precision), batch, rps, route.bucket_isl, route.bucket_osl)  # fmt: skip
    count = max(1, round(instances * share))
    return EngineSetup(steps, batch, None, count, (
        f"{count} x {gpus}-GPU engine from the {assignment.provenance} point ({route.model} has no architecture): "
        f"prefill {steps.prefill_per_token_ms * 1e3:.3g} us/token from 2 x {model.params_b:g} B params at the GPUs' "
        f"calibrated GEMM rate, decode step {steps.decode_step_ms:.3g} ms at any batch, so that batch {batch} ({how}) "
        f"delivers {rps:.4g} rps; KV cache not limited; budget {token_budget} tokens"))


def _batch_reaching(steps, rps: float, isl: int, osl: int, cap: int) -> int:
    """Smallest batch at which an engine kept full reaches `rps` (saturated throughput grows with the batch)."""
    low, high = 1, max(1, cap)
    if saturated_rps(steps, high, isl, osl) < rps:
        return high
    while low < high:
        middle = (low + high) // 2
        if saturated_rps(steps, middle, isl, osl) >= rps:
            high = middle
        else:
            low = middle + 1
    return low


# ----------------------------------------------------------------------------------------------- traffic
@dataclass(frozen=True)
class _RouteRun:
    route: object
    setup: EngineSetup


def _route_requests(route, duration_s: float, options: SimulationOptions, rng, bucket_caps) -> Requests:
    arrivals = gamma_arrivals(route.rps, duration_s, options.arrival_cv, rng)
    isl_cap, osl_cap = bucket_caps
    return Requests(arrivals, lognormal_lengths(route.bucket_isl, options.length_cv, len(arrivals), isl_cap, rng),
                    lognormal_lengths(route.bucket_osl, options.length_cv, len(arrivals), osl_cap, rng))  # fmt: skip


def _trace_split(trace, runs: list[_RouteRun], rng) -> list[Requests]:
    """The trace's requests (times from its first arrival) split across the routes whose engines take their
    lengths, in proportion to the routes' rates; prompts longer than every engine are refused (counted as
    failed), outputs are cut at the engine's maximum. Returns one set per route, then the refused ones."""
    arrival = trace.arrival_s - trace.arrival_s[0]
    isl, osl = trace.isl_tokens.astype(np.int64), np.maximum(trace.osl_tokens.astype(np.int64), 1)
    isl = np.maximum(isl, 1)
    weights = np.array([r.route.rps for r in runs], dtype=float)
    fits = np.array([isl <= r.route.engine_isl for r in runs])  # routes x requests
    chosen = np.full(len(arrival), -1)
    draw = rng.uniform(size=len(arrival))
    cumulative = np.cumsum(fits * weights[:, None], axis=0)
    total = cumulative[-1] if len(runs) else np.zeros(len(arrival))
    served = total > 0
    chosen[served] = (cumulative[:, served] < (draw[served] * total[served])[None, :]).sum(axis=0)
    parts = []
    for i, r in enumerate(runs):
        mine = chosen == i
        parts.append(Requests(arrival[mine], isl[mine], np.minimum(osl[mine], r.route.engine_osl)))
    refused = Requests(arrival[~served], isl[~served], osl[~served])
    refused.rejected[:] = True
    parts.append(refused)
    return parts


def _bucket_caps(workload_spec, route) -> tuple[int, int]:
    """Longest request of a bucket: its stated maximum, else the engine's."""
    for bucket in workload_spec.buckets or ():
        if (bucket.isl_tokens, bucket.osl_tokens) == (route.bucket_isl, route.bucket_osl):
            return (min(bucket.max_isl_tokens or route.engine_isl, route.engine_isl),
                    min(bucket.max_osl_tokens or route.engine_osl, route.engine_osl))  # fmt: skip
    return route.engine_isl, route.engine_osl


def _run_once(runs: list[_RouteRun], duration_s: float, seed: int, options: SimulationOptions, workload_spec):
    """One run of every route of a workload; returns the merged requests, gaps and preemptions."""
    rng = np.random.default_rng(seed)
    if options.trace is not None:
        parts = _trace_split(options.trace, runs, rng)
    else:
        parts = [_route_requests(r.route, duration_s, options, rng, _bucket_caps(workload_spec, r.route)) for r in runs]
        parts.append(Requests(np.zeros(0), np.zeros(0), np.zeros(0)))
    gaps, preemptions = [], 0
    for r, requests in zip(runs, parts):
        engines = [ServingEngine(r.setup.steps, r.setup.max_batch, r.setup.kv_tokens, options.token_budget)
                   for _ in range(r.setup.count)]  # fmt: skip
        if len(requests):
            run(engines, requests, options.balancer, seed)
        for engine in engines:
            gaps.append(engine.gaps)
            preemptions += engine.preemptions
    return Requests.merged(parts), gaps, preemptions


# ----------------------------------------------------------------------------------------------- verdicts
def _values(requests, gaps, window):
    low, high = window
    mask = (requests.arrival_s >= low) & (requests.arrival_s < high) & ~np.isnan(requests.finish_s)
    latencies = request_latencies(requests, mask)
    gap_times, gap_ms, gap_tokens = gap_arrays(gaps, window)
    return {
        "TTFT": (latencies["TTFT"], None, requests.arrival_s[mask]),
        "E2E": (latencies["E2E"], None, requests.arrival_s[mask]),
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
    return [(m, v) for m, v in (("TTFT", slo.ttft_ms), ("ITL", slo.itl_ms), ("E2E", slo.e2e_ms)) if v is not None]


def _checks(seed_runs, slo) -> tuple[tuple[LimitCheck, ...], bool]:
    """Each limit at the SLO percentile, pooled over seeds; the interval from batch means (one seed) or across
    seeds. Settled: every interval within 5% of its value."""
    from scipy import stats as scipy_stats

    checks, settled = [], True
    for metric, limit in _limits(slo):
        per_seed, pooled_values, pooled_weights, interval = [], [], [], None
        for values in seed_runs:
            v, w, t = values[metric]
            per_seed.append(_estimate(v, w, slo.percentile))
            pooled_values.append(v)
            pooled_weights.append(w if w is not None else np.ones(len(v)))
            if len(seed_runs) == 1:
                interval = batch_interval(v, t, slo.percentile, w)
        values = np.concatenate(pooled_values)
        weights = np.concatenate(pooled_weights)
        estimate = _estimate(values, weights, slo.percentile)
        finite = [p for p in per_seed if math.isfinite(p)]
        if len(seed_runs) > 1 and len(finite) > 1:
            half = scipy_stats.t.ppf(0.975, len(finite) - 1) * float(np.std(finite, ddof=1)) / math.sqrt(len(finite))
            interval = (float(np.mean(finite)) - half, float(np.mean(finite)) + half)
        if interval is not None:
            interval = (float(interval[0]), float(interval[1]))
        if interval is None or not math.isfinite(estimate) or (interval[1] - interval[0]) / 2 > SETTLED_RELATIVE_HALF_WIDTH * abs(estimate):
            settled = False
        passed = sum(1 for p in per_seed if math.isfinite(p) and p <= limit)
        # the verdict holds only if the interval's upper end is within the limit: an unsettled queue does not pass
        ok = bool(math.isfinite(estimate) and estimate <= limit and (interval is None or interval[1] <= limit))
        checks.append(LimitCheck(metric, limit, slo.percentile, estimate, interval[0] if interval else None,
                                 interval[1] if interval else None, passed, ok))  # fmt: skip
    return tuple(checks), bool(settled)


def _start_duration(rate_rps: float) -> float:
    """About 6,000 requests, between 5 minutes and an hour."""
    return min(3600.0, max(300.0, 6000.0 / max(rate_rps, 1e-9)))


def simulate_workload(runs: list[_RouteRun], workload_spec, rate_rps: float, options: SimulationOptions):
    """Runs of one workload in one period: the settled duration (or the given one / the trace), then more seeds."""
    slo = workload_spec.slo
    simulated = 0
    if options.trace is not None:
        duration = None
    elif options.duration_s is not None:
        duration = options.duration_s
    else:
        duration = _start_duration(rate_rps)
    seeds = [options.seed + k for k in range(max(1, options.seeds))]
    first = None
    settled = True
    while True:
        requests, gaps, preemptions = _run_once(runs, duration or 0.0, seeds[0], options, workload_spec)
        simulated += len(requests)
        length = duration if duration is not None else (float(requests.arrival_s.max()) if len(requests) else 0.0)
        # a trace is not stationary: its warm-up is the minimum, not a cut that MSER finds in its daily swings
        start = length * MIN_WARMUP_FRACTION if options.trace is not None else warmup_s(requests, length)
        window = (start, length)
        first = (requests, gaps, preemptions, window, length)
        if options.duration_s is not None or options.trace is not None or options.seeds > 1:
            break
        _, settled = _checks([_values(requests, gaps, window)], slo)
        grown = duration * 2
        if settled or grown > options.max_duration_s or grown * rate_rps > options.max_requests:
            break
        duration = grown
    requests, gaps, preemptions, window, length = first
    seed_values = [_values(requests, gaps, window)]
    for seed in seeds[1:]:
        more, more_gaps, _ = _run_once(runs, length, seed, options, workload_spec)
        simulated += len(more)
        seed_values.append(_values(more, more_gaps, (warmup_s(more, length), length)))
    checks, settled = _checks(seed_values, slo)
    stats = run_statistics(requests, gaps, window, preemptions, slo)
    return stats, checks, settled, length, simulated


def simulate_plan(plan, scenario, catalog, options: SimulationOptions | None = None, progress=None) -> tuple[WorkloadCheck, ...]:
    """Every workload in every period (with a trace: the traced workload in its busiest period, or the one named),
    on the engines the plan gives it; see the module docstring. Configurations shared by several workloads are
    split by their routed share of requests."""
    options = options or SimulationOptions()
    specs = {w.name: w for w in scenario.workloads}
    jobs = []
    for period in scenario.periods:
        routes = [r for r in plan.routing if r.period == period.name]
        for workload in plan.workloads:
            mine = [r for r in routes if r.workload == workload.name]
            if mine and sum(r.rps for r in mine) > 0:
                jobs.append((period.name, workload, mine, routes))
    if options.trace is not None:
        jobs = _trace_jobs(jobs, options)
    checks = []
    for number, (period, workload, mine, routes) in enumerate(jobs):
        if progress is not None:
            progress(number, len(jobs))
        checks.append(_simulate_job(plan, catalog, specs[workload.name], workload, period, mine, routes, options))
    if progress is not None:
        progress(len(jobs), len(jobs))
    return tuple(checks)


def _trace_jobs(jobs, options):
    from planner.errors import PlannerInputError

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


def _simulate_job(plan, catalog, spec, workload, period, mine, routes, options) -> WorkloadCheck:
    started = time.perf_counter()
    rate = sum(r.rps for r in mine if r.stage != "decode")  # a disaggregated request is routed twice
    config_total: dict[tuple, float] = {}
    for r in routes:
        config_total[configuration_key(r)] = config_total.get(configuration_key(r), 0.0) + r.rps
    runs, notes = [], []
    for route in mine:
        unsupported = _not_simulated(route)
        if unsupported:
            notes.append(f"{route.system}: {unsupported}")
            continue
        assignment = next(a for a in workload.assignments if _assignment_matches(a, route))
        share = route.rps / config_total[configuration_key(route)]
        setup = engine_setup(route, assignment, _running_instances(plan, route, catalog), share, catalog, options.token_budget)
        if isinstance(setup, str):
            notes.append(f"{route.system}: {setup}")
            continue
        notes.append(f"{route.system}: {setup.description}")
        runs.append(_RouteRun(route, setup))
    if not runs:
        return WorkloadCheck(workload.name, period, rate, 0, "; ".join(notes), None, (), None, "not simulated")
    note = ""
    if options.trace is not None:
        trace = options.trace
        trace_rate = trace.requests / trace.duration_s if trace.duration_s > 0 else math.nan
        note = f"trace {trace.path}: {trace.requests:,} requests at {trace_rate:.4g} rps mean (the plan routes {rate:.4g} rps here)"
        rate = trace_rate
    stats, checks, settled, length, simulated = simulate_workload(runs, spec, rate, options)
    if stats.rejected:
        note = (note + "; " if note else "") + f"{stats.rejected} requests refused (prompt longer than any engine takes)"
    ok = bool(all(c.ok for c in checks) and stats.completed == stats.requests)
    return WorkloadCheck(
        workload.name, period, rate, sum(r.setup.count for r in runs), "; ".join(notes), stats, checks, ok, note,
        duration_s=length, seeds=max(1, options.seeds) if options.trace is None else 1, settled=settled,
        requests_simulated=simulated, wall_s=time.perf_counter() - started,
    )  # fmt: skip


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
        if configuration_key(line) == configuration_key(route) and (line.role != "on-demand" or line.period == route.period):
            return line.nodes * per_node
    raise ValueError(f"no plan line serves route {route}")


def _assignment_matches(assignment, route) -> bool:
    return (assignment.system, assignment.tp, assignment.precision, assignment.max_batch, assignment.engine_isl,
            assignment.engine_osl, assignment.bucket_isl, assignment.bucket_osl, assignment.stage, assignment.layout,
            assignment.speculative) == (
        route.system, route.tp, route.precision, route.max_batch, route.engine_isl, route.engine_osl,
        route.bucket_isl, route.bucket_osl, route.stage, route.layout, route.speculative)  # fmt: skip


def _not_simulated(route) -> str | None:
    """What the simulator's engines cannot run yet: they are aggregated TP engines without speculation."""
    if route.stage != "aggregated":
        return (f"{route.stage} pool ({route.rps:.4g} rps) not simulated: the simulator runs aggregated engines only "
                "(disaggregated pools are checked by the model's own M/D/1 and Poisson-batch terms)")  # fmt: skip
    if any(part in (route.layout or "") for part in ("DP", "EP", "PP")):
        return f"{route.layout} engine not simulated: the simulator runs tensor-parallel engines of one node only"
    if route.speculative:
        return "speculative decoding not simulated (the simulator has no draft/verify steps)"
    return None
