"""Discrete-event simulation: does a plan hold its latency limits under random (Poisson) arrivals?

The optimizer sizes on steady-state averages; this module replays arrivals request by request.

Two engine models:
- `BatchingEngine`: iteration-level scheduling of one engine instance, with step times from a `StepModel`
  (the roofline, or fixed times for tests). In-flight (continuous) batching admits waiting requests at every
  iteration while the batch cap and the KV cache allow (KV reserved for ISL + OSL per request); an admitted
  request is prefilled in that iteration and gets its first token at its end, then one token per iteration.
  Static batching admits a batch only when the engine is empty and runs it until its longest request is done
  (finished sequences keep their slot: that is the waste the seeds' notebook shows).
- `SlotEngine`: a measured operating point (TTFT, ITL, requests/s at some concurrency) as C parallel slots
  (C = ceil(rps x E2E), Little's law at the measured point); a request holds a slot for TTFT + (OSL - 1) x ITL',
  ITL' scaled so that C / E2E' equals the measured throughput exactly. FIFO queue in front (an M/D/C queue).

Time advances from event to event (arrivals, iteration ends); there is no ticking through idle time.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from planner.perf.roofline import Efficiency, EngineShape, decode_step_ms, fixed_ms, prefill_ms
from planner.plan import configuration_key


class StepModel(Protocol):
    def prefill_ms(self, isls: list[int]) -> float: ...

    def decode_ms(self, batch: int, mean_context: float) -> float: ...


@dataclass(frozen=True)
class FixedSteps:
    """Step times a + b x prompt tokens (prefill) and c + d x batch (decode): for tests and the notebook's toy."""

    prefill_base_ms: float
    prefill_per_token_ms: float
    decode_base_ms: float
    decode_per_sequence_ms: float = 0.0

    def prefill_ms(self, isls: list[int]) -> float:
        return self.prefill_base_ms + self.prefill_per_token_ms * sum(isls)

    def decode_ms(self, batch: int, mean_context: float) -> float:
        return self.decode_base_ms + self.decode_per_sequence_ms * batch


@dataclass(frozen=True)
class RooflineSteps:
    """Step times of the calibrated roofline (planner/perf/roofline.py) for one engine shape. Decode times are
    memoized per batch and context rounded to 16 tokens (a 16-token difference moves a step by far under 0.1%)."""

    shape: EngineShape
    efficiency: Efficiency
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    def prefill_ms(self, isls: list[int]) -> float:
        # prompts prefilled together: their work adds up, the fixed per-iteration latencies are paid once
        overhead = float(fixed_ms(self.shape, self.efficiency))
        total = overhead
        for isl in isls:
            one = self._cache.get(("prefill", isl))
            if one is None:
                one = self._cache[("prefill", isl)] = prefill_ms(self.shape, self.efficiency, isl) - overhead
            total += one
        return total

    def decode_ms(self, batch: int, mean_context: float) -> float:
        key = (batch, int(mean_context) // 16)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = decode_step_ms(self.shape, self.efficiency, batch, key[1] * 16 + 8)
        return cached


@dataclass
class Requests:
    """Arrival time (s), lengths, and what the simulation fills in: first-token and finish times (s)."""

    arrival_s: np.ndarray
    isl: np.ndarray
    osl: np.ndarray
    first_token_s: np.ndarray = field(init=False)
    finish_s: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.first_token_s = np.full(len(self.arrival_s), np.nan)
        self.finish_s = np.full(len(self.arrival_s), np.nan)

    def __len__(self) -> int:
        return len(self.arrival_s)


def poisson_arrivals(rate_rps: float, duration_s: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times of a Poisson process of `rate_rps` over [0, duration_s)."""
    count = rng.poisson(rate_rps * duration_s)
    return np.sort(rng.uniform(0.0, duration_s, size=count))


def deterministic_arrivals(rate_rps: float, duration_s: float) -> np.ndarray:
    """One request every 1 / rate_rps seconds, starting at 0."""
    return np.arange(0.0, duration_s, 1.0 / rate_rps)


class BatchingEngine:
    """One engine instance with iteration-level batching (see the module docstring)."""

    def __init__(self, steps: StepModel, max_batch: int, kv_tokens: float | None, in_flight: bool = True):
        self.steps, self.max_batch, self.kv_tokens, self.in_flight = steps, max_batch, kv_tokens, in_flight
        self.clock = 0.0
        self.queue: deque[int] = deque()
        self.running: list[int] = []  # request indices
        self.remaining = np.zeros(0, dtype=np.int64)  # tokens still to generate, per running request
        self.reserved_tokens = 0.0
        self.context_sum = 0.0
        self.static_batch_size = 0
        self.queue_samples: list[tuple[float, int]] = []
        self.requests: Requests | None = None
        self._next_event: float | None = None

    def outstanding(self) -> int:
        return len(self.queue) + len(self.running)

    def submit(self, index: int) -> None:
        self._next_event = None
        if not self.running and not self.queue:
            self.clock = max(self.clock, float(self.requests.arrival_s[index]))
        self.queue.append(index)

    def advance_to(self, time_s: float) -> None:
        """Run iterations that start before `time_s`. Stretches of pure decoding (nothing to admit) are taken in
        one jump up to the next completion or `time_s`: the per-iteration loop would dominate long runs."""
        while (self.running or self.queue) and self.clock < time_s:
            self._next_event = None
            if self._can_admit() or not self.running:
                self._iterate()
            else:
                self._jump(time_s)

    def drain(self) -> None:
        self.advance_to(math.inf)

    def next_event_s(self) -> float:
        """When the number of outstanding requests may next change (a completion), or now if work is waiting.
        Cached until the engine's state changes: the balancer asks every engine at every arrival."""
        if self._next_event is None:
            self._next_event = self._compute_next_event()
        return self._next_event

    def _compute_next_event(self) -> float:
        if self._can_admit():
            return self.clock
        if not self.running:
            return math.inf
        return self.clock + self._steps_to_next_completion() * self._decode_ms() / 1e3

    def _steps_to_next_completion(self) -> int:
        if self.in_flight:
            return int(self.remaining.min())
        # static batching keeps finished sequences (remaining <= 0) in the batch until the last one is done
        generating = self.remaining[self.remaining > 0]
        return int(generating.min()) if len(generating) else 1

    def _can_admit(self) -> bool:
        if not self.queue or len(self.running) >= self.max_batch or (self.running and not self.in_flight):
            return False
        if self.kv_tokens is None or not self.running:
            return True
        index = self.queue[0]
        return self.reserved_tokens + float(self.requests.isl[index] + self.requests.osl[index]) <= self.kv_tokens

    def _decode_ms(self, steps_ahead: float = 0.0) -> float:
        decoding = len(self.running)
        batch = self.static_batch_size if not self.in_flight else decoding
        return self.steps.decode_ms(batch, (self.context_sum + steps_ahead * decoding) / decoding)

    def _jump(self, time_s: float) -> None:
        """k decode-only iterations at once; the step time is taken at the middle of the stretch (context grows
        by one token per sequence and iteration)."""
        to_completion = self._steps_to_next_completion()
        k = to_completion
        if math.isfinite(time_s):
            step_ms = self._decode_ms()
            k = max(1, min(k, math.ceil((time_s - self.clock) * 1e3 / step_ms - 1e-9)))
        self.queue_samples.append((self.clock, len(self.queue)))
        self.clock += k * self._decode_ms((k - 1) / 2) / 1e3
        self.remaining -= k
        self.context_sum += k * len(self.running)
        if k == to_completion:  # someone finished in this stretch
            self._retire(self.remaining <= 0)

    def _admit(self) -> list[int]:
        requests = self.requests
        admitted = []
        if not self.in_flight and self.running:
            return admitted
        while self.queue and len(self.running) + len(admitted) < self.max_batch:
            index = self.queue[0]
            need = float(requests.isl[index] + requests.osl[index])
            if self.kv_tokens is not None and self.reserved_tokens + need > self.kv_tokens and (self.running or admitted):
                break
            self.queue.popleft()
            self.reserved_tokens += need
            admitted.append(index)
        return admitted

    def _iterate(self) -> None:
        requests = self.requests
        self.queue_samples.append((self.clock, len(self.queue)))
        admitted = self._admit()
        decoding = len(self.running)
        duration_ms = 0.0
        if admitted:
            duration_ms += self.steps.prefill_ms([int(requests.isl[i]) for i in admitted])
        if decoding:
            batch = self.static_batch_size if not self.in_flight else decoding
            duration_ms += self.steps.decode_ms(batch, self.context_sum / decoding)
        self.clock += duration_ms / 1e3
        if decoding:
            self.remaining -= 1
            self.context_sum += decoding
        if len(admitted) == 1:  # the common case at moderate load: no array building
            index = admitted[0]
            requests.first_token_s[index] = self.clock
            self.running.append(index)
            self.remaining = np.append(self.remaining, requests.osl[index] - 1)
            self.context_sum += float(requests.isl[index]) + 1.0
            if not self.in_flight:
                self.static_batch_size = len(self.running)
        elif admitted:
            new = np.asarray(admitted, dtype=np.int64)
            requests.first_token_s[new] = self.clock
            self.running.extend(admitted)
            self.remaining = np.concatenate([self.remaining, requests.osl[new] - 1])
            self.context_sum += float(requests.isl[new].sum() + len(admitted))
            if not self.in_flight:
                self.static_batch_size = len(self.running)
        done = self.remaining <= 0
        if done.any():
            self._retire(done)

    def _retire(self, done: np.ndarray) -> None:
        requests = self.requests
        if not self.in_flight:
            # static: a sequence that is done keeps its slot until the whole batch is
            for i in np.flatnonzero(done):
                index = self.running[i]
                if np.isnan(requests.finish_s[index]):
                    requests.finish_s[index] = self.clock
            if not done.all():
                return
        positions = np.flatnonzero(done).tolist()
        for i in positions:
            index = self.running[i]
            if np.isnan(requests.finish_s[index]):
                requests.finish_s[index] = self.clock
            tokens = float(requests.isl[index] + requests.osl[index])
            self.reserved_tokens -= tokens
            self.context_sum -= tokens
        if len(positions) == 1:  # the common case in flight: one sequence ends
            del self.running[positions[0]]
            self.remaining = np.delete(self.remaining, positions[0])
        else:
            keep = ~done
            self.running = [r for r, k in zip(self.running, keep.tolist()) if k]
            self.remaining = self.remaining[keep]
        if not self.running:
            self.context_sum, self.reserved_tokens, self.static_batch_size = 0.0, 0.0, 0


class SlotEngine:
    """A measured operating point as C parallel slots with a FIFO queue (an M/D/C queue)."""

    def __init__(self, ttft_ms: float, itl_ms: float, request_throughput_rps: float, osl: int):
        e2e_ms = ttft_ms + (osl - 1) * itl_ms
        self.slots = max(1, math.ceil(request_throughput_rps * e2e_ms / 1e3 - 1e-9))
        service_ms = self.slots / request_throughput_rps * 1e3  # C / E2E' = measured throughput
        self.ttft_ms = ttft_ms
        self.itl_ms = (service_ms - ttft_ms) / max(osl - 1, 1) if osl > 1 else 0.0
        self.free_at = [0.0] * self.slots
        self.busy_until: list[float] = []  # finish times of requests not yet done, for 'outstanding'
        self.queue_samples: list[tuple[float, int]] = []
        self.requests: Requests | None = None

    def outstanding(self) -> int:
        return len(self.busy_until)

    def next_event_s(self) -> float:
        return self.busy_until[0] if self.busy_until else math.inf

    def advance_to(self, time_s: float) -> None:
        while self.busy_until and self.busy_until[0] <= time_s:
            heapq.heappop(self.busy_until)

    def submit(self, index: int) -> None:
        requests = self.requests
        arrival = float(requests.arrival_s[index])
        free = heapq.heappop(self.free_at)
        start = max(arrival, free)
        first = start + self.ttft_ms / 1e3
        finish = first + (int(requests.osl[index]) - 1) * self.itl_ms / 1e3
        requests.first_token_s[index], requests.finish_s[index] = first, finish
        heapq.heappush(self.free_at, finish)
        heapq.heappush(self.busy_until, finish)
        self.queue_samples.append((arrival, max(0, len(self.busy_until) - self.slots)))

    def drain(self) -> None:
        self.busy_until.clear()


def run(engines: list, requests: Requests, balancer: str = "round-robin") -> Requests:
    """Feed requests in arrival order to the engines (a node or a fleet) through a load balancer:
    'round-robin' or 'least-outstanding' (fewest requests queued or running at arrival)."""
    if balancer not in ("round-robin", "least-outstanding"):
        raise ValueError("balancer must be 'round-robin' or 'least-outstanding'")
    for engine in engines:
        engine.requests = requests
    order = np.argsort(requests.arrival_s, kind="stable")
    for position, index in enumerate(order):
        arrival = float(requests.arrival_s[index])
        if balancer == "round-robin":
            engine = engines[position % len(engines)]
            engine.advance_to(arrival)
        else:
            best, fewest = None, None
            for candidate in engines:
                if candidate.next_event_s() <= arrival:
                    candidate.advance_to(arrival)
                count = candidate.outstanding()
                if fewest is None or count < fewest:
                    best, fewest = candidate, count
            engine = best
            engine.advance_to(arrival)
        engine.submit(int(index))
    for engine in engines:
        engine.drain()
    return requests


@dataclass(frozen=True)
class Percentiles:
    p50: float
    p95: float
    p99: float
    mean: float


@dataclass(frozen=True)
class RunStats:
    requests: int
    completed: int
    duration_s: float
    throughput_rps: float
    ttft_ms: Percentiles
    itl_ms: Percentiles
    e2e_ms: Percentiles
    mean_in_system: float
    mean_queue_length: float
    max_queue_length: int
    queue_timeline: tuple[tuple[float, int], ...]  # (start of each of 20 time bins in s, longest queue in it)
    slo_attainment: float | None


def _percentiles(values: np.ndarray) -> Percentiles:
    if len(values) == 0:
        return Percentiles(math.nan, math.nan, math.nan, math.nan)
    p50, p95, p99 = np.percentile(values, [50, 95, 99])
    return Percentiles(float(p50), float(p95), float(p99), float(values.mean()))


def _queue_timeline(samples: list[tuple[float, int]], end_s: float, bins: int = 20) -> tuple[tuple[float, int], ...]:
    """The longest queue (over engines' samples) in each of `bins` equal slices of the sampled time."""
    if not samples:
        return ()
    times = np.array([t for t, _ in samples])
    end_s = float(times.max()) or end_s
    lengths = np.array([q for _, q in samples])
    edges = np.linspace(0.0, end_s, bins + 1)
    slot = np.clip(np.searchsorted(edges, times, side="right") - 1, 0, bins - 1)
    longest = np.zeros(bins, dtype=np.int64)
    np.maximum.at(longest, slot, lengths)
    return tuple((round(float(edges[i]), 3), int(longest[i])) for i in range(bins))


def statistics(
    requests: Requests,
    engines: list,
    duration_s: float,
    ttft_limit_ms: float | None = None,
    itl_limit_ms: float | None = None,
    e2e_limit_ms: float | None = None,
) -> RunStats:
    """Percentiles of TTFT, ITL (per request: (finish - first token) / (OSL - 1)) and E2E, throughput over the
    arrival window, time-averaged requests in system, queue length, and the share of requests within every limit."""
    done = ~np.isnan(requests.finish_s)
    ttft = (requests.first_token_s[done] - requests.arrival_s[done]) * 1e3
    e2e = (requests.finish_s[done] - requests.arrival_s[done]) * 1e3
    decode_tokens = np.maximum(requests.osl[done] - 1, 1)
    itl = (requests.finish_s[done] - requests.first_token_s[done]) * 1e3 / decode_tokens
    samples = [s for engine in engines for s in engine.queue_samples]
    queue = np.array([q for _, q in samples]) if samples else np.zeros(1)
    end = float(np.nanmax(requests.finish_s)) if done.any() else duration_s
    within = np.ones(done.sum(), dtype=bool)
    for values, limit in ((ttft, ttft_limit_ms), (itl, itl_limit_ms), (e2e, e2e_limit_ms)):
        if limit is not None:
            within &= values <= limit
    any_limit = any(v is not None for v in (ttft_limit_ms, itl_limit_ms, e2e_limit_ms))
    timeline = _queue_timeline(samples, end)
    return RunStats(
        requests=len(requests), completed=int(done.sum()), duration_s=duration_s,
        throughput_rps=float(done.sum()) / duration_s if duration_s else 0.0,
        ttft_ms=_percentiles(ttft), itl_ms=_percentiles(itl), e2e_ms=_percentiles(e2e),
        mean_in_system=float(e2e.sum() / 1e3 / end) if end > 0 else 0.0,
        mean_queue_length=float(queue.mean()), max_queue_length=int(queue.max()), queue_timeline=timeline,
        slo_attainment=float(within.mean()) if any_limit and len(within) else None,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------- plans
@dataclass(frozen=True)
class LimitCheck:
    metric: str  # TTFT | ITL | E2E
    limit_ms: float
    percentile: float
    simulated_ms: float
    ok: bool


@dataclass(frozen=True)
class WorkloadCheck:
    """One workload in one period, simulated at the period's peak rate on the plan's engines."""

    workload: str
    period: str
    rate_rps: float
    instances: int
    engines: str  # what was simulated
    stats: RunStats | None
    checks: tuple[LimitCheck, ...]
    ok: bool | None  # None: could not be simulated (see note)
    note: str


WARMUP_FRACTION = 0.1  # requests arriving in the first 10% of the run start on an empty fleet: not counted


def _instances_per_node(route, gpus_per_node: int) -> int:
    return gpus_per_node // route.tp if route.tp else 1  # rows of a whole system: one instance per node


def _engines_for(route, assignment, instances: int, share: float, catalog, scenario) -> tuple[list, str]:
    """The engine instances that serve this route: the roofline's steps for modeled points, slots for data."""
    from planner.perf import is_modeled
    from planner.perf.calibration import efficiency_for
    from planner.perf.roofline import kv_bytes_for
    from planner.perf.tables import instance_memory

    system = catalog.systems[route.system]
    per_node = _instances_per_node(route, system.gpus_per_node)
    count = max(1, round(instances * share))
    if is_modeled(assignment.provenance):
        gpu = catalog.gpus[system.gpu]
        shape = EngineShape(catalog.models[route.model], gpu, route.tp, route.precision, kv_bytes_for(route.precision))
        memory = instance_memory(catalog, route.model, system.gpu, route.tp, route.precision, route.engine_isl, route.engine_osl)
        kv_tokens = (memory.max_concurrency_by_memory or 0) * (route.engine_isl + route.engine_osl) or None
        steps = RooflineSteps(shape, efficiency_for(catalog, gpu.architecture))
        engines = [BatchingEngine(steps, route.max_batch or 1, kv_tokens) for _ in range(count)]
        return engines, f"{count} x in-flight batching engine (roofline steps), batch <= {route.max_batch}"
    if assignment.ttft_ms is None or assignment.itl_ms is None:
        return [], f"the {assignment.provenance} point records no TTFT/ITL: nothing to simulate"
    rps_per_instance = route.rps_per_node / per_node
    engines = [SlotEngine(assignment.ttft_ms, assignment.itl_ms, rps_per_instance, route.bucket_osl) for _ in range(count)]
    return engines, f"{count} x {engines[0].slots}-slot engine ({assignment.provenance} point)"


def simulate_plan(plan, scenario, catalog, duration_s: float = 600.0, seed: int = 0,
                  balancer: str = "least-outstanding") -> tuple[WorkloadCheck, ...]:  # fmt: skip
    """Every workload in every period at its peak rate (Poisson arrivals), on the engines the plan gives it.

    Configurations shared by several workloads are split by their routed share of requests. Latency limits are
    checked at the scenario's percentile on the requests arriving after a warm-up of 10% of the run.
    """
    rng = np.random.default_rng(seed)
    checks = []
    slo_of = {w.name: w.slo for w in scenario.workloads}
    for period in scenario.periods:
        routes = [r for r in plan.routing if r.period == period.name]
        config_total: dict[tuple, float] = {}
        for r in routes:
            key = configuration_key(r)
            config_total[key] = config_total.get(key, 0.0) + r.rps
        for workload in plan.workloads:
            mine = [r for r in routes if r.workload == workload.name]
            rate = sum(r.rps for r in mine)
            if not mine or rate <= 0:
                continue
            batches, notes, instances = [], [], 0
            for route in mine:
                running = _running_instances(plan, route, catalog)
                assignment = next(a for a in workload.assignments if _assignment_matches(a, route))
                engines, note = _engines_for(route, assignment, running, route.rps / config_total[configuration_key(route)], catalog, scenario)
                notes.append(f"{route.system}: {note}")
                if not engines:
                    continue
                instances += len(engines)
                arrivals = poisson_arrivals(route.rps, duration_s, rng)
                requests = Requests(arrivals, np.full(len(arrivals), route.bucket_isl, dtype=np.int64),
                                    np.full(len(arrivals), route.bucket_osl, dtype=np.int64))  # fmt: skip
                run(engines, requests, balancer)
                batches.append((requests, engines))
            slo = slo_of[workload.name]
            if not batches:
                checks.append(WorkloadCheck(workload.name, period.name, rate, 0, "; ".join(notes), None, (), None, "not simulated"))
                continue
            merged = _merge([b[0] for b in batches], duration_s * WARMUP_FRACTION)
            stats = statistics(merged, [e for b in batches for e in b[1]], duration_s * (1 - WARMUP_FRACTION),
                               slo.ttft_ms, slo.itl_ms, slo.e2e_ms)  # fmt: skip
            limit_checks = _limit_checks(merged, slo)
            ok = all(c.ok for c in limit_checks) and stats.completed == len(merged)
            checks.append(WorkloadCheck(workload.name, period.name, rate, instances, "; ".join(notes), stats,
                                        limit_checks, ok, ""))  # fmt: skip
    return tuple(checks)


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
            assignment.engine_osl, assignment.bucket_isl, assignment.bucket_osl) == (
        route.system, route.tp, route.precision, route.max_batch, route.engine_isl, route.engine_osl,
        route.bucket_isl, route.bucket_osl)  # fmt: skip


def _merge(batches: list[Requests], warmup_s: float) -> Requests:
    arrival = np.concatenate([b.arrival_s for b in batches])
    keep = arrival >= warmup_s
    merged = Requests(arrival[keep], np.concatenate([b.isl for b in batches])[keep], np.concatenate([b.osl for b in batches])[keep])
    merged.first_token_s = np.concatenate([b.first_token_s for b in batches])[keep]
    merged.finish_s = np.concatenate([b.finish_s for b in batches])[keep]
    return merged


def _limit_checks(requests: Requests, slo) -> tuple[LimitCheck, ...]:
    done = ~np.isnan(requests.finish_s)
    values = {
        "TTFT": (requests.first_token_s[done] - requests.arrival_s[done]) * 1e3,
        "ITL": (requests.finish_s[done] - requests.first_token_s[done]) * 1e3 / np.maximum(requests.osl[done] - 1, 1),
        "E2E": (requests.finish_s[done] - requests.arrival_s[done]) * 1e3,
    }
    checks = []
    for metric, limit in (("TTFT", slo.ttft_ms), ("ITL", slo.itl_ms), ("E2E", slo.e2e_ms)):
        if limit is None or not len(values[metric]):
            continue
        value = float(np.percentile(values[metric], slo.percentile))
        checks.append(LimitCheck(metric, limit, slo.percentile, value, value <= limit))
    return tuple(checks)
