"""What a benchmark of a plan must reproduce, read from the plan: per workload, its lengths (mean and spread as the
scenario states them), the busiest period's peak rate for the whole Service and for one instance of each pool that
serves it, the request count its SLO percentile needs, and the plan's predicted figures per pool with their
expected-error bands."""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.deploy.pools import Pool, dns_label, plan_pools

# the request count's rule (README and expected.json say it): enough requests beyond the SLO's percentile that a
# handful do not decide it, long enough at the rate to pass the start-up transient, and never a token few
TAIL_REQUESTS = 20  # requests beyond the percentile
STEADY_SECONDS = 120.0  # seconds of arrivals at the rate
MIN_REQUESTS = 100
WARMUP_REQUESTS = 10  # sent before the measured ones (tools that take it), not counted
# a measured row (provenance 'measured') carries no model error: its band is this tolerance, the planner's choice
# for run-to-run spread of one engine (not a measurement)
MEASURED_BAND = 0.10
METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


def request_count(percentile: float, rate_rps: float) -> int:
    """max(TAIL_REQUESTS / (1 - p), STEADY_SECONDS x rate, MIN_REQUESTS), rounded up."""
    tail = TAIL_REQUESTS / max(1e-9, 1.0 - percentile / 100.0)
    return int(max(math.ceil(tail - 1e-9), math.ceil(STEADY_SECONDS * rate_rps - 1e-9), MIN_REQUESTS))


@dataclass(frozen=True)
class Lengths:
    """Token lengths of a workload's requests: the mean and standard deviation over its buckets (a workload stated
    by one ISL/OSL has none)."""

    isl_mean: float
    isl_std: float
    osl_mean: float
    osl_std: float
    prefix_tokens: int = 0  # the shared prefix the scenario's prefix cache states (0: none)
    prefix_hit_rate: float = 0.0


@dataclass(frozen=True)
class Band:
    """The relative error around a predicted figure and where it comes from."""

    relative: float
    source: str


@dataclass(frozen=True)
class Expected:
    """The plan's figures for one workload bucket on one pool: latencies at the SLO percentile (None: the plan
    has none), the requests/s one instance is sized for, and each figure's band."""

    workload: str
    pool: str
    bucket_isl: int
    bucket_osl: int
    percentile: float
    ttft_ms: float | None
    tpot_ms: float | None
    itl_ms: float | None
    e2e_ms: float | None
    rps_per_instance: float
    rps_per_node: float
    provenance: str
    engine: str
    engine_version: str
    bands: dict[str, Band]  # metric (ttft_ms, tpot_ms, itl_ms, e2e_ms, throughput) -> band


@dataclass(frozen=True)
class PoolLoad:
    """One pool's share of a workload at the busiest period: the rate routed to it and per instance."""

    pool: Pool
    rps: float
    instances: int

    @property
    def rps_per_instance(self) -> float:
        return self.rps / self.instances if self.instances else 0.0


@dataclass(frozen=True)
class WorkloadLoad:
    name: str
    service: str  # the Kubernetes Service's name (planner deploy --target k8s)
    model: str  # the catalog id: the served model name (`--served-model-name` of the deploy scripts)
    tokenizer: str  # the Hugging Face repository of the model (its tokenizer)
    period: str  # the busiest period
    peak_rps: float
    percentile: float
    lengths: Lengths
    pools: tuple[PoolLoad, ...]
    expected: tuple[Expected, ...]
    disaggregated: bool


def workload_lengths(workload) -> Lengths:
    """Mean and standard deviation of ISL and OSL over the workload's buckets (shares as weights)."""
    buckets = workload.buckets
    total = sum(b.share for b in buckets) or 1.0
    isl = sum(b.share * b.isl_tokens for b in buckets) / total
    osl = sum(b.share * b.osl_tokens for b in buckets) / total
    isl_var = sum(b.share * (b.isl_tokens - isl) ** 2 for b in buckets) / total
    osl_var = sum(b.share * (b.osl_tokens - osl) ** 2 for b in buckets) / total
    cache = workload.prefix_cache
    return Lengths(round(isl, 3), round(math.sqrt(isl_var), 3), round(osl, 3), round(math.sqrt(osl_var), 3),
                   int(cache.tokens) if cache is not None else 0, float(cache.hit_rate) if cache is not None else 0.0)  # fmt: skip


def _pool_key(pool: Pool) -> tuple:
    return (pool.system, pool.precision, pool.max_batch, pool.engine_isl, pool.engine_osl, pool.stage, pool.speculative,
            pool.engine, pool.engine_version)  # fmt: skip


def pool_key(item) -> tuple:
    """What ties a route or an assignment to its pool (planner/deploy/pools.py's configuration; the layout apart)."""
    return (item.system, item.precision, item.max_batch, item.engine_isl, item.engine_osl, item.stage, item.speculative,
            item.engine, item.engine_version)  # fmt: skip


def pool_of(pools: tuple[Pool, ...], model: str, item) -> Pool | None:
    """The pool a route or assignment of `model` runs on."""
    for pool in pools:
        if pool.model == model and _pool_key(pool) == pool_key(item) and (
                pool.layout_label == item.layout if item.layout else pool.layout.tp == item.tp):  # fmt: skip
            return pool
    return None


def bands_of(assignment) -> dict[str, Band]:
    """Each figure's band: the performance model's expected error of the assignment's engine class (the relative
    error covering 80% of its held-out errors, planner/perf/engines.py), or MEASURED_BAND for a measured row."""
    error = assignment.expected_error
    if not error:
        source = (f"measured row: no model error; +-{MEASURED_BAND:.0%} is the planner's tolerance for run-to-run "
                  "spread (a choice, not a measurement)")  # fmt: skip
        return {m: Band(MEASURED_BAND, source) for m in (*METRICS, "throughput")}
    source = (f"the performance model's expected error for {assignment.engine} {assignment.engine_version or ''} "
              f"({assignment.provenance}): the relative error covering 80% of its engine class's held-out errors "
              "(catalogs/engines/classes.csv)").replace("  ", " ")  # fmt: skip
    ttft, tpot = float(error.get("ttft", 0.0)), float(error.get("tpot", 0.0))
    bands = {"ttft_ms": Band(ttft, source), "tpot_ms": Band(tpot, source),
             "itl_ms": Band(float(error.get("itl", tpot)), source),
             "throughput": Band(float(error.get("throughput", 0.0)), source),
             "e2e_ms": Band(max(ttft, tpot), source + "; E2E takes the wider of TTFT's and TPOT's")}  # fmt: skip
    return bands


def workload_loads(plan, scenario, catalog) -> tuple[WorkloadLoad, ...]:
    """Every workload of the plan with its busiest period's load per pool and the plan's figures."""
    from planner.deploy.engines import hugging_face_id

    pools = plan_pools(plan, scenario, catalog)
    results = {w.name: w for w in plan.workloads}
    loads = []
    for workload in scenario.workloads:
        result = results.get(workload.name)
        if result is None:
            continue
        periods = [p for p in result.periods if p.period in plan.periods] or list(result.periods)
        busiest = max(periods, key=lambda p: p.demand_rps) if periods else None
        period = busiest.period if busiest is not None else (plan.periods[0] if plan.periods else "all")
        peak = busiest.demand_rps if busiest is not None else result.demand_rps
        shares: dict[str, float] = {}
        for route in plan.routing:
            if route.workload != workload.name or route.rps <= 0 or route.period not in (period, "all"):
                continue
            pool = pool_of(pools, workload.model, route)
            if pool is not None:
                shares[pool.name] = shares.get(pool.name, 0.0) + route.rps
        pool_loads = []
        for pool in pools:
            if pool.name in shares:
                instances = dict(pool.instances_by_period).get(period) or pool.peak_instances
                pool_loads.append(PoolLoad(pool, round(shares[pool.name], 6), instances))
        expected = []
        for assignment in result.assignments:
            pool = pool_of(pools, workload.model, assignment)
            if pool is None:
                continue
            route = next((r for r in plan.routing if r.workload == workload.name and pool_key(r) == pool_key(assignment) and r.layout == assignment.layout
                          and (r.bucket_isl, r.bucket_osl) == (assignment.bucket_isl, assignment.bucket_osl)
                          and r.rps_per_instance > 0), None)  # fmt: skip
            per_instance = route.rps_per_instance if route is not None else 0.0
            expected.append(Expected(
                workload.name, pool.name, assignment.bucket_isl, assignment.bucket_osl, result.percentile,
                assignment.ttft_ms, assignment.tpot_ms, assignment.itl_ms, assignment.e2e_ms, round(per_instance, 6),
                assignment.rps_per_node, assignment.provenance, assignment.engine, assignment.engine_version,
                bands_of(assignment),
            ))  # fmt: skip
        model = catalog.models[workload.model]
        repo, _ = hugging_face_id(tuple(model.aliases), model.id, None)
        loads.append(WorkloadLoad(
            workload.name, dns_label(workload.name), workload.model, repo, period, round(peak, 6), result.percentile,
            workload_lengths(workload), tuple(pool_loads), tuple(expected), result.serving == "disaggregated",
        ))  # fmt: skip
    return tuple(loads)
