"""What candidate enumeration hands the optimizer: a candidate (one engine configuration on one hardware offer
with its per-node costs), an option (a workload bucket it serves, at what rate), what was pruned and why, the
fastest point seen per limit, and the set of them."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass

from planner.perf import (
    PerfResult,
)
from planner.perf.engines import DEFAULT_ENGINE
from planner.perf.types import Layout
from planner.workers import can_fork, executor, map_on_ray, worker_count  # noqa: F401 (worker_count: read by tests as candidates.worker_count)
from planner.plan import CandidateStats


@dataclass(frozen=True)
class Candidate:
    key: str
    site: str
    pricing: str  # capex | reserved | on-demand
    system: str
    gpu: str
    gpus_per_node: int
    model: str
    tp: int | None
    precision: str | None
    max_batch: int | None
    engine_isl: int
    engine_osl: int
    annual_cost_usd: float  # per node and year for capex/reserved nodes (0 for on-demand)
    usd_per_hour: float | None  # per node-hour for on-demand nodes
    capex_usd: float
    power_kw: float
    rack_units: int
    cost_note: str
    gpus_per_instance: int = 1
    instances_per_node: float = 1  # a fraction for an instance over several nodes (pipeline stages)
    gpus_per_unit: int = 1  # g[c]: the GPUs the optimizer allots at a time (docs/optimizer.md)
    instances_per_unit: int = 1  # k[c]: instances in one unit
    stage: str = "aggregated"  # aggregated | prefill | decode (disaggregated pools)
    dp: int = 1
    ep: int = 1
    pp: int = 1
    speculative: bool = False
    engine: str = DEFAULT_ENGINE  # the serving engine (planner/perf/engines.py)
    engine_version: str = ""  # the release its figures are for (its class's newest calibrated, or the pinned one)
    pinned: bool = False  # the scenario pinned the engine's version (engine@version)

    @property
    def layout(self) -> Layout:
        return Layout(self.tp or 1, self.dp, self.ep, self.pp)

    @property
    def layout_label(self) -> str:
        """As plans name it: 'TP8', 'DP8 EP8', 'TP8 PP2', or '8 GPUs' for a row of a whole system (TP not stated)."""
        return self.layout.label if self.tp else f"{self.gpus_per_instance} GPUs"

    @property
    def fixed(self) -> bool:
        """Bought or reserved: one count for every period."""
        return self.pricing in ("capex", "reserved")

    @property
    def variant(self) -> tuple:
        """The engine build: what `max_engine_variants` counts."""
        return (self.model, self.gpu, self.tp, self.precision, self.max_batch, self.engine_isl, self.engine_osl,
                self.stage, self.dp, self.ep, self.pp, self.speculative, self.engine, self.engine_version)  # fmt: skip


@dataclass(frozen=True)
class Option:
    """Bucket `bucket` of workload `workload` can run on `candidate` at `rps_per_node` within its limits."""

    workload: str
    bucket: int
    candidate: str
    rps_per_node: float
    instances_per_node: float
    perf: PerfResult

    @property
    def rps_per_instance(self) -> float:
        return self.rps_per_node / self.instances_per_node


def unit_rate(option: Option, candidate: Candidate) -> float:
    """rho[w,b,c]: requests/s of one allotment unit (k[c] instances) of c for this bucket (docs/optimizer.md)."""
    return option.rps_per_instance * candidate.instances_per_unit


@dataclass(frozen=True)
class Pruned:
    workload: str
    system: str
    reason: str
    kind: str = "other"  # memory | latency | data | other


# the start of a decode pool's pruning reason where its system's network is too slow (_Builder.decode_network_problem):
# optimize/readback.decode_placement_warnings finds those reasons by it and says them without DECODE_PRUNED
DECODE_PRUNED = "disaggregated decode: "
DECODE_NETWORK_REASON = DECODE_PRUNED + "its network is"


@dataclass(frozen=True)
class Fastest:
    """The lowest latency any configuration that fits reaches for a workload (at concurrency 1)."""

    value_ms: float
    label: str


@dataclass(frozen=True)
class CandidateSet:
    candidates: tuple[Candidate, ...]
    options: tuple[Option, ...]
    pruned: tuple[Pruned, ...]
    stats: CandidateStats
    fastest: dict[str, dict[str, Fastest]]  # workload -> metric (planner.metrics.LATENCY_METRICS) -> fastest
    course_sized: tuple[str, ...] = ()  # workloads a closed-loop row sized under random arrivals (no model for them)

    def candidate(self, key: str) -> Candidate:
        return self._by_key()[key]

    def _by_key(self) -> dict[str, Candidate]:
        cache = self.__dict__.get("_index")
        if cache is None:
            cache = {c.key: c for c in self.candidates}
            object.__setattr__(self, "_index", cache)
        return cache

    def options_of(self, candidate_key: str) -> tuple[Option, ...]:
        cache = self.__dict__.get("_by_candidate")
        if cache is None:
            cache = defaultdict(list)
            for option in self.options:
                cache[option.candidate].append(option)
            object.__setattr__(self, "_by_candidate", cache)
        return tuple(cache.get(candidate_key, ()))



def restrict_candidates(cset: CandidateSet, offers) -> CandidateSet:
    """The candidates of these offers only (`planner compare` enumerates the widest deployment once and solves
    each deployment on its part). Dominance never compares candidates of different sites, so what remains is
    what enumerating the narrower deployment would give."""
    allowed = {(o.site, o.pricing, o.system) for o in offers}
    systems = {o.system for o in offers}
    candidates = tuple(c for c in cset.candidates if (c.site, c.pricing, c.system) in allowed)
    keys = {c.key for c in candidates}
    options = tuple(o for o in cset.options if o.candidate in keys)
    pruned = tuple(p for p in cset.pruned if p.system in systems)
    stats = dataclasses.replace(cset.stats, kept=len(candidates), options=len(options),
                                pruned=tuple(p for p in cset.stats.pruned if p[1] in systems))  # fmt: skip
    return CandidateSet(candidates, options, pruned, stats, cset.fastest, cset.course_sized)
