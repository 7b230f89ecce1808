"""Candidate engine configurations and which workload buckets each can serve, at what rate per node.

A candidate is one way to run a model on a node: (site, pricing, system, model, TP, precision, max batch, engine
max ISL/OSL). Enumeration (design.md): every allowed system x TP (the ladder, within the node) x precision (the
GPU's, as the workload allows) x max batch (the ladder) x engine lengths (from the workloads' buckets), pruned by
memory fit, by the workloads' latency limits, and by dominance (same node, same engine lengths, no better rate for
any bucket). Data first: where benchmark rows (or interpolation) answer for a bucket on a system, the roofline
does not add candidates for that pair. Every pruning is counted, and its reasons kept.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import multiprocessing
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from planner import deadline
from planner.catalog import Catalog
from planner.metrics import LATENCY_METRICS
from planner.perf import (
    PerfMiss,
    PerfQuery,
    PerfResult,
    best_points_by_cap,
    keeps_quality,
    model_precisions,
    operating_points,
    plan_precisions,
    priced_points,
)
from planner.perf.curve_cache import curve_cache
from planner.perf.reach import PricedCurve, Reach
from planner.perf.disagg import stage_points
from planner.perf.engines import DEFAULT_ENGINE
from planner.perf.serving import EngineSpec, engine_problem
from planner.perf.roofline import supports_roofline
from planner.perf.tables import instance_memory
from planner.perf.types import Layout
from planner.workers import can_fork, executor, map_on_ray, worker_count  # noqa: F401 (worker_count: read by tests as candidates.worker_count)
from planner.plan import CandidateStats
from planner.scenario import HOURS_PER_YEAR, Bucket, OnPremCosts, Scenario, SystemOffer, Workload


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


def on_prem_annual_cost_usd(price_usd: float, power_kw: float, rack_units: int, costs: OnPremCosts) -> tuple[float, str]:
    """A bought node's line: capex x a(r, n) (the annuity: planner/infrastructure.py) + kW x utilization x PUE x
    $/kWh x 8760 h + RU x space $/RU/year. Support, facility, software and installation are lines of their own
    (planner.infrastructure.node_extras_usd_per_year, in the objective through optimize/model.py)."""
    capital = price_usd * costs.annuity
    energy = power_kw * costs.utilization_power_factor * costs.pue * costs.usd_per_kwh * HOURS_PER_YEAR
    space = rack_units * costs.space_usd_per_rack_unit_per_year
    amortized = (f"{price_usd:,.0f} USD / {costs.amortization_years:g} y" if costs.cost_of_capital_per_year <= 0 else
                 f"{price_usd:,.0f} USD x annuity {costs.annuity:.4f} ({costs.amortization_years:g} y at "
                 f"{costs.cost_of_capital_per_year:.1%})")  # fmt: skip
    note = (
        f"{amortized} + {power_kw:g} kW x {costs.utilization_power_factor:g}"
        f" x PUE {costs.pue:g} x {costs.usd_per_kwh:g} USD/kWh x 8760 h"
        + (f" + {rack_units} RU x {costs.space_usd_per_rack_unit_per_year:g} USD/RU/y" if space else "")
    )
    return capital + energy + space, note


def offer_costs(offer: SystemOffer, scenario: Scenario) -> dict:
    """Per-node cost fields of a candidate on this offer."""
    if offer.pricing == "capex":
        annual, note = on_prem_annual_cost_usd(offer.price_usd, offer.power_kw, offer.rack_units or 0, scenario.on_prem_costs)
        return dict(annual_cost_usd=annual, usd_per_hour=None, capex_usd=offer.price_usd, power_kw=offer.power_kw,
                    rack_units=offer.rack_units or 0, cost_note=note)  # fmt: skip
    if offer.pricing == "reserved":
        term = f", {offer.term_months:g}-month term" if offer.term_months else ""
        return dict(annual_cost_usd=offer.usd_per_hour * HOURS_PER_YEAR, usd_per_hour=None, capex_usd=0.0, power_kw=0.0,
                    rack_units=0, cost_note=f"reserved {offer.usd_per_hour:g} USD/h x 8760 h{term}")  # fmt: skip
    if offer.pricing == "spot":
        note = f"spot {offer.usd_per_hour:g} USD/h x hours of each period, capacity x {offer.capacity_factor:.3g}"
    else:
        note = f"on demand {offer.usd_per_hour:g} USD/h x hours of each period"
    return dict(annual_cost_usd=0.0, usd_per_hour=offer.usd_per_hour, capex_usd=0.0, power_kw=0.0, rack_units=0,
                cost_note=note)  # fmt: skip


def engine_lengths_by_model(scenario: Scenario) -> dict[str, list[tuple[int, int]]]:
    """Engine max (ISL, OSL) variants per model: every bucket cell, and each workload's envelope of its buckets."""
    lengths: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for workload in scenario.workloads:
        cells = {b.engine_lengths for b in workload.buckets}
        lengths[workload.model] |= cells
        lengths[workload.model].add((max(i for i, _ in cells), max(o for _, o in cells)))
    return {model: sorted(values) for model, values in lengths.items()}


def unit_shape(gpus_per_instance: int, gpus_per_node: int, share_nodes: bool) -> tuple[int, int]:
    """(g, k): GPUs of one allotment unit and the instances it holds. Shared nodes: the smallest slot of the node's
    chain (powers of two dividing the node, then the whole node) that holds an instance; the chain's sizes divide
    each other, so any units whose GPUs add up to at most the nodes' GPUs pack into the nodes. Where slots would
    hold fewer instances than the node (an odd instance size), or nodes are not shared: the whole node."""
    if gpus_per_instance > gpus_per_node:  # an instance over whole nodes: its nodes are the unit
        return gpus_per_instance, 1
    per_node = gpus_per_node // gpus_per_instance
    if share_nodes:
        chain = [2**i for i in range(gpus_per_node.bit_length()) if gpus_per_node % 2**i == 0] + [gpus_per_node]
        slot = min(size for size in chain if size >= gpus_per_instance)
        if (gpus_per_node // slot) * (slot // gpus_per_instance) == per_node:
            return slot, slot // gpus_per_instance
    return gpus_per_node, per_node


def _key(offer: SystemOffer, model: str, point: PerfResult, batch, isl: int, osl: int, speculative: bool = False,
         pinned: bool = False) -> str:  # fmt: skip
    tp_part = Layout(point.tp, point.dp, point.ep, point.pp).label.lower().replace(" ", "-") if point.tp else f"{point.gpus_per_instance}gpu"
    engine = point.engine + (f"@{point.engine_version}" if pinned else "")
    extra = ([point.stage] if point.stage != "aggregated" else []) + (["spec"] if speculative else []) + (
        [engine] if engine != DEFAULT_ENGINE else [])
    return "/".join((offer.site, offer.pricing, offer.system, model, tp_part, point.precision or "prec?",
                     f"b{batch}" if batch else "b?", f"{isl}x{osl}", *extra))  # fmt: skip


def engine_layouts(scenario: Scenario, catalog: Catalog, model_id: str, system_id: str) -> list[Layout]:
    """The layouts tried for a model on a system: TP over the ladder within a node; for a mixture of experts,
    attention data parallelism with expert parallelism over 2 .. all of the node's GPUs (GB200 NVL72: up to 72);
    for a model whose bf16 weights no node holds, TP over a whole node and pipeline stages over 2 .. the
    scenario's max_pipeline_nodes nodes (where the catalog gives the node's network)."""
    model, system = catalog.models[model_id], catalog.systems[system_id]
    node = system.gpus_per_node
    layouts = [Layout(tp) for tp in scenario.tp_ladder if tp <= node]
    if model.moe is not None and scenario.expert_parallel and model.moe.experts > 1:
        sizes = [g for g in (2, 4, 8, 16, 32, 64, 72) if g <= node and g <= model.moe.experts and g in {*scenario.tp_ladder, 16, 32, 64, 72}]
        layouts += [Layout(1, g, g) for g in sizes]
    if pipeline_wanted(scenario, catalog, model_id, system_id) and system.network_gbit_per_s is not None:
        layouts += [Layout(node, pp=n) for n in range(2, scenario.max_pipeline_nodes + 1)]
    return layouts


def pipeline_wanted(scenario: Scenario, catalog: Catalog, model_id: str, system_id: str) -> bool:
    """Whether pipeline stages over several nodes are tried for the model on the system: its bf16 weights exceed
    one node's usable memory and the TP ladder reaches the whole node (they then also need the node's network)."""
    model, system = catalog.models[model_id], catalog.systems[system_id]
    node = system.gpus_per_node
    widest = max((tp for tp in scenario.tp_ladder if tp <= node), default=0)
    usable_gb = catalog.gpus[system.gpu].memory_gb * node * (1 - catalog.defaults.memory_reserve_fraction.value)
    return widest == node and model.params_b * 2 > usable_gb


_UNOPENED = object()  # a builder's curve cache not opened yet


class _Builder:
    def __init__(self, scenario: Scenario, catalog: Catalog):
        self.scenario, self.catalog = scenario, catalog
        self.candidates: dict[str, Candidate] = {}
        self.options: dict[tuple[str, int, str], Option] = {}
        self.pruned: list[Pruned] = []
        self.counts: Counter = Counter()
        self.engines = engine_lengths_by_model(scenario)
        self.memo: dict[tuple, object] = {}  # curves, engine fits and best points, computed once each
        self.fastest: dict[str, dict[str, Fastest]] = defaultdict(dict)
        self.engine_fit: dict[tuple[str, int, str], object] = {}  # memory fit of an option's engine lengths
        self.engine = DEFAULT_ENGINE  # the serving engine of the workload being enumerated
        self.engine_version: str | None = None  # its pinned version (engine@version), None: the newest
        # priced curves kept between runs (planner/perf/curve_cache.py), None with PLANNER_CACHE_DIR=off
        self._store: object = _UNOPENED
        # engine curves, shared by every enumeration of this catalog in the process (a plan's fp4 and cold-prefix
        # re-plans ask for the same ones): pure functions of their keys, the catalog and whether aic answers, each
        # priced as far along its rates as the workloads asking for it can use (`reaches`, planner/perf/reach.py)
        self.curves: dict[tuple, PricedCurve] = catalog.derived.setdefault(("engine curves", *self.context[1:]), {})
        self._reaches: dict[tuple, Reach] | None = None
        # workloads sized by a closed-loop row under random arrivals (no architecture to model them with)
        self.course_sized: set[str] = set()

    @property
    def context(self) -> tuple[Catalog, bool, bool]:
        """What a curve is priced with beside its key (`price_curve`): the catalog, whether aiconfigurator's tables
        answer where the roofline extrapolates, and whether measured rows anchor the roofline (not with
        --perf-source model: the roofline alone, as `perf --perf-source model` answers)."""
        sources = self.scenario.perf_sources
        return self.catalog, "aic" in sources, "measured" in sources or "interpolated" in sources

    @property
    def store(self):
        """The curve cache, opened on first use (its key hashes the package's source: a plan that prices no modeled
        curve never pays for it); None with PLANNER_CACHE_DIR=off."""
        if self._store is _UNOPENED:
            self._store = curve_cache(*self.context)
        return self._store

    def use_engine(self, label: str) -> str:
        """Enumerate for the engine a workload names ('vllm', 'vllm@0.12'); returns the engine."""
        spec = EngineSpec.parse(label)
        self.engine, self.engine_version = spec.engine, spec.version
        return spec.engine

    def note_fastest(self, workload: Workload, offer: SystemOffer, point: PerfResult) -> None:
        label = f"{offer.system} {Layout(point.tp or 1, point.dp, point.ep, point.pp).label} {point.precision}"
        for metric in LATENCY_METRICS:
            value = getattr(point, metric)
            known = self.fastest[workload.name].get(metric)
            if value is not None and (known is None or value < known.value_ms):
                self.fastest[workload.name][metric] = Fastest(value, label)

    def add(self, offer: SystemOffer, workload: Workload, bucket: int, point: PerfResult, batch, lengths,
            speculative: bool = False) -> str | None:  # fmt: skip
        """The option of this point (its candidate made if new); its candidate key, or None when pruned."""
        system = self.catalog.systems[offer.system]
        instances = point.instances_per_node(system.gpus_per_node)
        rps_per_node = point.rps_per_node(system.gpus_per_node) * offer.capacity_factor  # spot: its availability A
        if instances <= 0:
            self.prune(workload, offer, f"an instance needs {point.gpus_per_instance} GPUs; the node has {system.gpus_per_node}")
            return None
        if not rps_per_node:
            self.prune(workload, offer, f"no request throughput in {point.source}")
            return None
        pinned = self.engine_version is not None
        key = _key(offer, workload.model, point, batch, *lengths, speculative, pinned)
        if key not in self.candidates:
            self.candidates[key] = Candidate(
                key=key, site=offer.site, pricing=offer.pricing, system=offer.system, gpu=system.gpu,
                gpus_per_node=system.gpus_per_node, model=workload.model, tp=point.tp, precision=point.precision,
                max_batch=batch, engine_isl=lengths[0], engine_osl=lengths[1], **offer_costs(offer, self.scenario),
                gpus_per_instance=point.gpus_per_instance, instances_per_node=instances,
                **dict(zip(("gpus_per_unit", "instances_per_unit"), unit_shape(
                    point.gpus_per_instance, system.gpus_per_node, self.scenario.share_nodes_across_models))),
                stage=point.stage, dp=point.dp, ep=point.ep, pp=point.pp, speculative=speculative, engine=point.engine,
                engine_version=point.engine_version, pinned=pinned,
            )  # fmt: skip
        self.options[(workload.name, bucket, key)] = Option(workload.name, bucket, key, rps_per_node, instances, point)
        return key

    def prune(self, workload: Workload, offer: SystemOffer, reason: str, kind: str = "other") -> None:
        self.pruned.append(Pruned(workload.name, offer.system, reason, kind))

    def from_data(self, offer: SystemOffer, workload: Workload, bucket_index: int, bucket: Bucket) -> bool:
        """Candidates from benchmark rows (the roofline anchored on them where the scenario allows the model, or
        interpolation between them); True when data answered (even with a miss)."""
        if not any(s != "modeled" for s in self.scenario.perf_sources):
            return False
        query = self.query(workload, offer, bucket)
        points = operating_points(
            query, self.catalog, tps=tuple(self.scenario.tp_ladder),
            precisions=tuple(workload.precisions) if workload.precisions else None,
            sources=tuple(self.scenario.perf_sources), percentile=workload.slo.percentile, model_without_rows=False,
            max_concurrency=max(self.scenario.max_batch_ladder),  # the ladder caps the batch of table rows too
        )  # fmt: skip
        if isinstance(points, PerfMiss):
            if workload.prefix_cache is not None:  # rows measured cold prefills: the roofline answers, or says why not
                self.prune(workload, offer, points.reason, "data")
                return not supports_roofline(self.catalog.models[workload.model])
            if points.reason.startswith("no benchmark row"):
                if " give the " in points.reason:  # rows of another statistic: the roofline answers, or says why not
                    self.prune(workload, offer, points.reason, "data")
                return False
            self.counts["latency"] += 1
            self.prune(workload, offer, points.reason, "latency")
            return True
        points = self.random_arrivals(points, workload, offer)
        if not points:  # closed-loop rows only: the roofline sizes the engine for random arrivals
            return False
        added = False
        for point in points:
            self.counts["generated"] += 1
            refused = self.precision_refused(workload, point.precision)
            if refused is not None:
                self.prune(workload, offer, refused)
                continue
            self.add(offer, workload, bucket_index, point, point.concurrency, bucket.engine_lengths)
            added = True
        # rows only of formats the default leaves out (fp4): the roofline answers at the default's, as without rows
        return added or workload.precisions is not None

    def random_arrivals(self, points: list[PerfResult], workload: Workload, offer: SystemOffer) -> list[PerfResult]:
        """The points that may size an engine: all of them by the course's method (perf.sizing: closed-loop); for
        requests arriving at random (the default), those of the open loop (the roofline anchored on the rows). A
        closed-loop row then sizes nothing where the roofline can model the model (it answers, anchored on the rows
        where they state the engine), and sizes as the course reads it where it cannot, said in the plan."""
        if self.scenario.sizing == "closed-loop":
            return points
        closed = [p for p in points if p.arrivals != "poisson"]
        if not closed:
            return points
        if supports_roofline(self.catalog.models[workload.model]) and "modeled" in self.scenario.perf_sources:
            for point in closed:
                self.prune(workload, offer, (
                    f"{point.provenance} closed-loop point ({point.request_throughput_rps:.4g} requests/s per "
                    f"{point.gpus_per_instance} GPUs at concurrency {point.concurrency or 'not stated'}; {point.source}) "
                    "not used for sizing: requests arrive at random, and the calibrated model sizes the engine for "
                    "them (perf.sizing: closed-loop reads the row as the course does)"), "data")  # fmt: skip
            return [p for p in points if p.arrivals == "poisson"]
        self.course_sized.add(workload.name)
        return points

    def from_model(self, offer: SystemOffer, workload: Workload, bucket_index: int, bucket: Bucket) -> None:
        """Roofline candidates: layout (TP, DP/EP, PP) x precision x engine lengths covering the bucket x batch
        cap, each with and without speculative decoding where the scenario offers it."""
        model = self.catalog.models[workload.model]
        if not supports_roofline(model):
            self.prune(
                workload, offer, f"no benchmark row, and the architecture of {model.id} is not published for the roofline",
                "data",
            )
            return
        system = self.catalog.systems[offer.system]
        query = self.query(workload, offer, bucket)
        largest = max(self.scenario.max_batch_ladder)
        need_isl, need_osl = bucket.engine_lengths
        engines = [e for e in self.engines[workload.model] if e[0] >= need_isl and e[1] >= need_osl]
        for shape, layout, precision, speculation, hop in self.curve_specs(offer, workload, bucket):
            points = self.curve(shape, layout, precision, workload.slo.percentile, speculation, hop)
            if not isinstance(points, str) and points:
                self.note_fastest(workload, offer, points[0])
            best_by_cap = None
            for lengths in engines:
                fit = self.fit(workload.model, system.gpu, layout, precision, lengths)
                if not isinstance(points, str) and fit.fits and best_by_cap is None:
                    best_by_cap = self.best_by_cap(points, query, layout, precision, workload.slo.percentile, speculation)
                for batch in self.scenario.max_batch_ladder:
                    self.counts["generated"] += 1
                    if isinstance(points, str) or not fit.fits:
                        self.counts["memory"] += 1
                        why = points if isinstance(points, str) else f"{layout.label} {precision}: does not fit: {fit.reason}"
                        self.prune(workload, offer, why, "memory")
                        continue
                    best = best_by_cap[batch]
                    if isinstance(best, str):
                        self.counts["latency"] += 1
                        self.prune(workload, offer, f"{layout.label} {precision} batch <= {batch}: {best}", "latency")
                        continue
                    if batch != largest:
                        # the largest cap reaches every point a smaller one does (best_point is monotone in
                        # the cap), so its candidate serves every bucket this one serves at a rate as
                        # high: this one is dominated before it is made
                        self.counts["dominated_early"] += 1
                        continue
                    key = self.add(offer, workload, bucket_index, best, batch, lengths, speculation is not None)
                    if key is not None:
                        self.engine_fit[(workload.name, bucket_index, key)] = fit

    def curve_specs(self, offer: SystemOffer, workload: Workload, bucket: Bucket):
        """(shape, layout, precision, speculation, hop) of every curve `from_model` asks for: the curve does not
        depend on the latency limits, nor on the engine's max lengths beyond whether one sequence of them fits (a
        paged KV cache runs as many of the bucket's sequences): one curve per bucket shape serves every workload
        and engine variant."""
        system = self.catalog.systems[offer.system]
        query = self.query(workload, offer, bucket)
        shape = dataclasses.replace(query, ttft_ms=None, tpot_ms=None, itl_ms=None, e2e_ms=None)  # what the curve depends on
        for layout in engine_layouts(self.scenario, self.catalog, workload.model, offer.system):
            hop = system.network_bytes_per_s(layout.tp * layout.dp) or 0.0 if layout.pp > 1 else 0.0
            for precision in self.precisions(workload, system.gpu):
                for speculation in self.speculations:
                    yield shape, layout, precision, speculation, hop

    @property
    def speculations(self) -> tuple:
        """Plain decoding, and speculative decoding where the scenario offers it."""
        return (None,) + ((self.scenario.speculation,) if self.scenario.speculation is not None else ())

    def precisions(self, workload: Workload, gpu: str) -> tuple[str, ...]:
        """The precisions the workload may run at on the GPU: its `precisions:` where it names them, else the
        quality-keeping default (planner.perf.plan_precisions, the one place of the rule)."""
        requested = tuple(workload.precisions) if workload.precisions is not None else None
        return plan_precisions(self.catalog, gpu, workload.model, requested, self.scenario.lower_precisions)

    def precision_refused(self, workload: Workload, precision: str | None) -> str | None:
        """Why a benchmark row's engine at `precision` may not serve the workload (its `precisions:` do not name
        it, or, by default, it does not keep the model's quality: planner.perf.keeps_quality), or None."""
        if workload.precisions is not None:  # a row that states none ran the checkpoint as published
            native = self.catalog.models[workload.model].checkpoint_precision
            if (precision or native) in workload.precisions:
                return None
            stated = precision or f"unstated (the checkpoint's {native})"
            return f"precision {stated} not in {list(workload.precisions)}"
        if self.scenario.lower_precisions or keeps_quality(self.catalog, workload.model, precision):
            return None
        return (f"precision {precision}: not by default (bf16 and fp8 keep the model's quality); allow it with "
                f"precisions: [{precision}]")  # fmt: skip

    def precision_problem(self, workload: Workload, offer: SystemOffer) -> str | None:
        """Why none of the workload's `precisions:` runs on the offer's GPU (naming the precisions, the GPU and
        what it runs), or, for a workload that names none, why no quality-keeping one does; None where one does."""
        gpu = self.catalog.gpu_of(offer.system)
        if workload.precisions is None:
            modeled = model_precisions(self.catalog, gpu.id, workload.model)
            if self.precisions(workload, gpu.id) or not modeled:
                return None
            return (f"no precision that keeps the model's quality (bf16, fp8) runs {workload.model} on its GPU {gpu.id} "
                    f"(modeled there: {', '.join(modeled)}); name the ones to allow in precisions:")  # fmt: skip
        if self.precisions(workload, gpu.id):
            return None
        asked = ", ".join(workload.precisions)
        unsupported = [p for p in workload.precisions if p not in gpu.precisions]
        if len(unsupported) == len(workload.precisions):
            return (f"precisions [{asked}] asked for, but its GPU {gpu.id} ({gpu.architecture}) has no tensor cores for "
                    f"{'it' if len(unsupported) == 1 else 'them'}: it runs {', '.join(gpu.precisions)}")  # fmt: skip
        modeled = ", ".join(model_precisions(self.catalog, gpu.id, workload.model)) or "none"
        return (f"precisions [{asked}] asked for: none is modeled for {workload.model} on its GPU {gpu.id} "
                f"(modeled there: {modeled})")  # fmt: skip

    def decode_network_problem(self, offer: SystemOffer) -> str | None:
        """Why the offer's system may not host decode pools, or None. A prefill pool prices its KV
        transfer at its own system's network share per GPU (perf/disagg.py), and the integer program may pair it
        with a decode pool on any other system: a decode system slower per GPU than a system that may prefill would
        receive caches slower than priced (the simulator moves them at the slower side). Such decode candidates are
        not made, so that every pairing the program may choose is no slower than its prefill side's price."""
        system = self.catalog.systems[offer.system]
        mine = system.network_bytes_per_s(1)
        others = {o.system: self.catalog.systems[o.system].network_bytes_per_s(1) for o in self.scenario.offers}
        fastest = max((s for s, rate in others.items() if rate is not None), key=lambda s: others[s], default=None)
        if mine is None or fastest is None or mine >= others[fastest]:
            return None
        return (f"{DECODE_NETWORK_REASON} {mine * 8 / 1e9:,.6g} Gb/s per GPU, below the "
                f"{others[fastest] * 8 / 1e9:,.6g} Gb/s per GPU of {fastest}, whose prefill pools price their KV "
                "transfer at that rate; a decode pool here would receive caches slower than priced, so none is "
                "placed here (docs/perf-model.md, KV transfer)")  # fmt: skip

    def disaggregated(self, offer: SystemOffer, workload: Workload, bucket_index: int, bucket: Bucket) -> None:
        """Prefill-only and decode-only candidates (perf/disagg.py): one of each per layout, precision and engine
        lengths covering the bucket; the integer program pairs them into pools."""
        model = self.catalog.models[workload.model]
        system = self.catalog.systems[offer.system]
        why = None
        if not supports_roofline(model):
            why = f"the architecture of {model.id} is not published for the roofline"
        elif bucket.osl_tokens <= 1:
            why = "one output token: nothing to decode apart from the prompt"
        elif system.network_gbit_per_s is None:
            why = f"{offer.system} has no scale-out network in the catalog (network_gbit_per_s) to move KV caches"
        if why:
            self.prune(workload, offer, f"disaggregated: {why}", "data")
            return
        decode_problem = self.decode_network_problem(offer)
        if decode_problem is not None:
            self.prune(workload, offer, decode_problem, "data")
        query = self.query(workload, offer, bucket)
        largest = max(self.scenario.max_batch_ladder)
        need_isl, need_osl = bucket.engine_lengths
        lengths = min((e for e in self.engines[workload.model] if e[0] >= need_isl and e[1] >= need_osl),
                      key=lambda e: (e[0] + e[1], e))  # fmt: skip
        for layout in engine_layouts(self.scenario, self.catalog, workload.model, offer.system):
            network = system.network_bytes_per_s(layout.gpus)
            hop = system.network_bytes_per_s(layout.tp * layout.dp) if layout.pp > 1 else 0.0
            for precision in self.precisions(workload, system.gpu):
                for speculation in self.speculations:
                    key = ("stages", query, layout, precision, workload.slo.percentile, speculation, lengths, largest)
                    if key not in self.memo:
                        self.memo[key] = stage_points(query, self.catalog, layout, precision, network, lengths, largest,
                                                      workload.slo.percentile, speculation, hop)  # fmt: skip
                    prefill, decode = self.memo[key]
                    for point in ((prefill,) if speculation is None else ()) + ((decode,) if decode_problem is None else ()):
                        self.counts["generated"] += 1
                        if isinstance(point, str):
                            kind = "memory" if "does not fit" in point else "latency"
                            self.counts[kind] += 1
                            self.prune(workload, offer, f"disaggregated {layout.label} {precision}: {point}", kind)
                            continue
                        self.add(offer, workload, bucket_index, point, point.concurrency if point.stage == "prefill" else largest,
                                 lengths, speculation is not None)  # fmt: skip

    def best_by_cap(self, points, query: PerfQuery, layout: Layout, precision: str, percentile: float, speculation=None) -> dict:
        """best_points_by_cap, once per curve and latency limits (workloads often share both)."""
        key = ("best", query, layout, precision, percentile, speculation)
        if key not in self.memo:
            self.memo[key] = best_points_by_cap(points, query, self.scenario.max_batch_ladder)
        return self.memo[key]

    def fit(self, model: str, gpu: str, layout: Layout, precision: str, lengths: tuple[int, int]):
        key = ("fit", model, gpu, layout, precision, lengths)
        if key not in self.memo:
            self.memo[key] = instance_memory(self.catalog, model, gpu, layout.tp, precision, *lengths, layout.dp,
                                             layout.ep, layout.pp)  # fmt: skip
        return self.memo[key]

    def curve(self, shape: PerfQuery, layout: Layout, precision: str, percentile: float, speculation=None,
              hop_bytes_per_s: float = 0.0) -> list[PerfResult] | str:  # fmt: skip
        """The modeled curve of an engine at the lengths of `shape` (a query without limits), computed once."""
        return self.priced((shape, layout, precision, percentile, speculation, hop_bytes_per_s)).points

    def priced(self, key: tuple) -> PricedCurve:
        """The curve of a memo key, priced as far as the workloads asking for it can use it, once."""
        if not self.has_curve(key):
            self.curves[key] = price_curve(self.context, key, self.reach(key))
            self.keep_curve(key)
        return self.curves[key]

    def reach(self, key: tuple) -> Reach | None:
        """The asks of every workload of the scenario that reads the curve of `key` (None: the whole ladder)."""
        if self._reaches is None:
            self._reaches = curve_reaches(self)
        return self._reaches.get(key)

    def has_curve(self, key: tuple) -> bool:
        """Whether the curve of `key` is at hand as far as its reach needs: priced in this process, or by an
        earlier run (then brought among the curves)."""
        reach = self.reach(key)
        found = self.curves.get(key)
        if found is not None and found.serves(reach):
            return True
        kept = self.store.get(key) if self.store is not None else None
        if kept is None or not kept.serves(reach):
            return False
        self.curves[key] = kept
        return True

    def keep_curve(self, key: tuple) -> None:
        if self.store is not None:
            self.store.put(key, self.curves[key])

    def query(self, workload: Workload, offer: SystemOffer, bucket: Bucket) -> PerfQuery:
        return PerfQuery(
            model=workload.model, gpu=self.catalog.systems[offer.system].gpu, isl=bucket.isl_tokens,
            osl=bucket.osl_tokens, ttft_ms=workload.slo.ttft_ms, itl_ms=workload.slo.itl_ms, e2e_ms=workload.slo.e2e_ms,
            tpot_ms=workload.slo.tpot_ms, token_budget=self.scenario.token_budget,
            arrivals="closed" if self.scenario.sizing == "closed-loop" else "poisson", engine=self.engine,
            engine_version=self.engine_version, prefix_cache=workload.prefix_cache,
        )  # fmt: skip

    def drop_dominated(self) -> None:
        """Drop candidates another one makes useless, so the optimum is unchanged.

        Nodes shared or reconfigured (the default fleet): c is dominated by c' on the same hardware offer when c'
        serves every bucket c serves and m = ceil(max over c's buckets of rho[c] / rho[c']) units of c' take no
        more GPUs than one unit of c: replacing each unit of c by m of c' keeps every node-room row, and the
        engine-variant count cannot grow (all of c's units move to c').
        One configuration per node all year (both fleet switches off): units are whole nodes and c is dominated
        by c' when m nodes of c' serve at least what one node of c serves and cost no more in every respect that
        counts (annual and hourly cost, power, rack units, capex, GPUs); across systems only where no N + k
        spares, engine-variant limit or GPU limit could tell them apart."""
        served: dict[str, dict[tuple[str, int], float]] = defaultdict(dict)
        for (workload, bucket, key), option in self.options.items():
            served[key][(workload, bucket)] = unit_rate(option, self.candidates[key])
        limits = self.scenario.limits
        per_node = not (self.scenario.share_nodes_across_models or self.scenario.reconfigure_between_periods)
        cross_system = per_node and limits.max_engine_variants is None and not limits.max_gpus
        groups: dict[tuple, list[str]] = defaultdict(list)
        for key, c in self.candidates.items():
            site_key = (c.site, c.pricing) if cross_system and not (c.pricing == "capex" and (limits.spare_nodes_per_system or limits.spare_fraction)) else (c.site, c.pricing, c.system)
            # across engine lengths too: an engine built for longer sequences serves the shorter buckets at the
            # same rate (a paged KV cache runs as many of them), so it can dominate the narrower one
            groups[(*site_key, c.model, c.stage)].append(key)
        dropped = set()
        for keys in groups.values():
            ordered = sorted(keys, key=lambda k: (self._unit_cost(k, served, per_node), k))
            for index, key in enumerate(ordered):
                for other in ordered[:index]:
                    if other not in dropped and self._dominates(other, key, served, per_node):
                        dropped.add(key)
                        break
        self.counts["dominated"] = len(dropped) + self.counts["dominated_early"]
        self.candidates = {k: c for k, c in self.candidates.items() if k not in dropped}
        self.options = {
            k: o if k not in self.engine_fit else dataclasses.replace(o, perf=dataclasses.replace(o.perf, memory=self.engine_fit[k]))
            for k, o in self.options.items() if o.candidate not in dropped
        }  # fmt: skip

    def _unit_cost(self, key: str, served: dict, per_node: bool) -> float:
        c = self.candidates[key]
        cost = (c.annual_cost_usd + (c.usd_per_hour or 0.0)) if per_node else c.gpus_per_unit
        return cost / max(sum(served[key].values()), 1e-12)

    def _dominates(self, better: str, worse: str, served: dict, per_node: bool) -> bool:
        cells, rates = served[worse], served[better]
        if not rates.keys() >= cells.keys():
            return False
        b, w = self.candidates[better], self.candidates[worse]
        most = max(rate / rates[cell] for cell, rate in cells.items())
        m = max(1, math.ceil(most - 1e-9))
        if not per_node:
            return m * b.gpus_per_unit <= w.gpus_per_unit
        pairs = (
            (b.annual_cost_usd, w.annual_cost_usd), (b.usd_per_hour or 0.0, w.usd_per_hour or 0.0),
            (b.power_kw, w.power_kw), (b.rack_units, w.rack_units), (b.capex_usd, w.capex_usd),
            (b.gpus_per_node, w.gpus_per_node),
        )  # fmt: skip
        return all(m * x <= y + 1e-9 for x, y in pairs)


CANDIDATE_STAGE = "pricing candidates (workload x system)"
PARALLEL_MIN_CURVES = 24  # fewer curves are priced in this process: forking costs more than it saves
_FORKED: _Builder | None = None  # the builder forked workers price curves for (inherited by fork, never pickled)


def serves_aggregated(scenario: Scenario, workload: Workload) -> bool:
    """Whether the workload gets aggregated candidates: all but a streaming one under `disaggregated: always`."""
    return scenario.disaggregated != "always" or workload.mode == "offline"


def price_curve(context: tuple[Catalog, bool, bool], key: tuple, reach: Reach | None = None) -> PricedCurve:
    """One engine curve: its modeled points (or why there are none), from the builder's `context` (catalog, whether
    aiconfigurator's tables answer where the roofline extrapolates, whether measured rows anchor it); `key` is the
    builder's (shape, layout, precision, percentile, speculation, hop bytes/s), `reach` the asks it is priced for
    (planner/perf/reach.py). A pure function of its arguments, wherever it runs."""
    catalog, aic, anchored = context
    shape, layout, precision, percentile, speculation, hop_bytes_per_s = key
    return priced_points(shape, catalog, layout.tp, precision, percentile, aic_where_extrapolated=aic, layout=layout,
                         speculation=speculation, hop_bytes_per_s=hop_bytes_per_s, reach=reach, anchored=anchored)  # fmt: skip


def _price_on_ray(context: tuple[Catalog, bool, bool], item: tuple) -> PricedCurve:
    """A Ray task's curve: `item` is (memo key, reach)."""
    return price_curve(context, *item)


def _price_curve(key: tuple) -> tuple:
    """In a forked worker: one engine curve (the builder's memo key) and its points (none past the deadline)."""
    deadline.check(CANDIDATE_STAGE)
    return key, _FORKED.priced(key)


def modeled_curve_keys(builder: _Builder):
    """(workload, offer, whether its engine is the reference release rows were measured on, memo key) of every
    modeled curve the enumeration may ask for (`from_model`'s curve specs, aggregated serving); the builder's engine
    is as it was afterwards."""
    scenario, catalog = builder.scenario, builder.catalog
    engine, version = builder.engine, builder.engine_version
    try:
        for workload in scenario.workloads:
            if not supports_roofline(catalog.models[workload.model]) or not serves_aggregated(scenario, workload):
                continue
            for offer, label in itertools.product(scenario.offers, workload.engines):
                reference = builder.use_engine(label) == DEFAULT_ENGINE and builder.engine_version is None
                for bucket in workload.buckets:
                    for shape, layout, precision, speculation, hop in builder.curve_specs(offer, workload, bucket):
                        yield workload, offer, reference, (shape, layout, precision, workload.slo.percentile, speculation, hop)
    finally:
        builder.engine, builder.engine_version = engine, version


def curve_reaches(builder: _Builder) -> dict[tuple, Reach]:
    """Per memo key of a modeled curve the scenario may ask for: the asks of the workloads reading it, their
    latency limits with the largest batch cap of the ladder (every smaller cap reads a prefix of what it reads)."""
    cap = max(builder.scenario.max_batch_ladder)
    asks: dict[tuple, dict] = defaultdict(dict)
    for workload, _, _, key in modeled_curve_keys(builder):
        asks[key][(workload.slo, cap)] = None
    return {key: Reach(tuple(found)) for key, found in asks.items()}


def _prefetch_on_ray(builder: _Builder, keys: list[tuple], progress) -> int:
    """The curves as Ray tasks (`--executor ray`): the catalog, its calibration fits made, goes to the object store
    once; each task prices a few curves with `price_curve`. Checked against the deadline as results come back."""
    if progress is not None:
        progress(0, len(keys), f"pricing {len(keys)} engine curves on Ray")
    context = builder.context

    def report(done: int, total: int) -> None:
        deadline.check(CANDIDATE_STAGE)
        if progress is not None:
            progress(done, total)

    items = [(key, builder.reach(key)) for key in keys]
    for key, points in zip(keys, map_on_ray(_price_on_ray, context, items, report)):
        builder.curves[key] = points
        builder.keep_curve(key)
    return len(keys)


@dataclass(frozen=True)
class CurveTally:
    """The modeled engine curves an enumeration asks for before it starts: how many, how many were kept from an
    earlier run (or this process), how many were priced in parallel and where; the rest are priced as reached."""

    needed: int = 0
    kept: int = 0
    priced: int = 0
    where: str = ""

    def describe(self) -> str:
        """'224 modeled engine curves: 98 kept from earlier runs, 126 priced on 2 processes' (empty: none needed)."""
        if not self.needed:
            return ""
        parts = [f"{self.kept} kept from earlier runs"] if self.kept else []
        if self.priced:
            parts.append(f"{self.priced} priced {self.where}")
        if self.needed - self.kept - self.priced > 0:
            parts.append(f"{self.needed - self.kept - self.priced} priced here as reached")
        return f"{self.needed} modeled engine curve{'s' if self.needed != 1 else ''}: {', '.join(parts)}"


def prefetch_curves(builder: _Builder, progress: Callable[..., None] | None = None) -> CurveTally:
    """Price the engine curves the enumeration will ask the roofline for, in parallel processes, into the builder's
    memo; the enumeration then runs as before and finds them there, so its result is the same whatever the number of
    processes (the curves are pure functions of their keys). Curves of a (model, GPU) with benchmark rows are left to
    the enumeration (data may answer and need none). The calibration fits and lazy imports happen here, once,
    before the fork. On `--executor ray` (planner.workers.executor) every pending curve is a Ray task instead.
    Returns the tally: curves needed, kept from earlier runs, priced in parallel (none where there are too few, one
    process, or no fork on this platform)."""
    global _FORKED
    scenario, catalog = builder.scenario, builder.catalog
    if "modeled" not in scenario.perf_sources:
        return CurveTally()
    with_rows = {(row.model, row.gpu) for row in catalog.benchmarks}
    pending: dict[tuple, None] = {}
    needed: set[tuple] = set()
    for workload, offer, reference, key in modeled_curve_keys(builder):
        if reference and (workload.model, catalog.systems[offer.system].gpu) in with_rows:
            continue
        needed.add(key)
        if not builder.has_curve(key):
            pending[key] = None
    tally = CurveTally(len(needed), len(needed) - len(pending))
    on_ray = executor() == "ray" and bool(pending)
    workers = min(worker_count(), len(pending) // 8)
    if not on_ray and (workers < 2 or len(pending) < PARALLEL_MIN_CURVES or not can_fork()):
        return tally
    from planner.perf import open_loop  # noqa: F401 (imported once, before the fork)
    from planner.perf.calibration import fit_kernels
    from planner.perf.engines import calibrated

    for model, gpu, engine, version in sorted({(key[0].model, key[0].gpu, key[0].engine, key[0].engine_version or "")
                                               for key in pending}):  # fmt: skip
        calibrated(catalog, model, gpu, engine, version or None)  # the calibration fits, kept with the catalog
        fit_kernels(catalog, catalog.gpus[gpu].architecture)
    rest = list(pending)
    if on_ray:
        return dataclasses.replace(tally, priced=_prefetch_on_ray(builder, rest, progress), where="on Ray")
    if progress is not None:
        kept = f" ({tally.kept} kept from earlier runs)" if tally.kept else ""
        progress(0, len(rest), f"pricing {len(rest)} engine curves on {workers} processes{kept}")
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    _FORKED = builder
    done = 0
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            for done, (key, points) in enumerate(pool.map(_price_curve, rest, chunksize=4), start=1):
                if deadline.remaining_s() is not None and deadline.remaining_s() <= 0:
                    pool.shutdown(wait=False, cancel_futures=True)  # the workers stop at their next curve
                    deadline.check(CANDIDATE_STAGE)
                builder.curves[key] = points
                builder.keep_curve(key)
                if progress is not None:
                    progress(done, len(rest))
    except (BrokenProcessPool, OSError):  # a worker killed (memory) or no process to start: price the rest here
        pass
    finally:
        _FORKED = None
    return dataclasses.replace(tally, priced=done, where=f"on {workers} processes")


def enumerate_candidates(
    scenario: Scenario, catalog: Catalog, progress: Callable[..., None] | None = None
) -> CandidateSet:
    """For every workload bucket x allowed system: the engine configurations that fit and meet the limits.
    `progress(0, total, CANDIDATE_STAGE)` names the stage before the first workload x system pair (with the tally of
    modeled engine curves inside its brackets where there are any: kept from earlier runs, priced in parallel,
    priced as reached), then `progress(done, total)` follows each one (the CLI draws a bar with it)."""
    builder = _Builder(scenario, catalog)
    tally = prefetch_curves(builder, progress).describe()
    total, done = len(scenario.workloads) * len(scenario.offers), 0
    if progress is not None:
        progress(0, total, f"{CANDIDATE_STAGE[:-1]}; {tally})" if tally else CANDIDATE_STAGE)
    for workload in scenario.workloads:
        for offer in scenario.offers:
            done += 1
            split = scenario.disaggregated != "never" and "modeled" in scenario.perf_sources
            unrun = builder.precision_problem(workload, offer)
            if unrun is not None:  # said once for the pair, not once per bucket and engine
                builder.prune(workload, offer, unrun)
            for label, (index, bucket) in itertools.product(workload.engines if unrun is None else (), enumerate(workload.buckets)):
                deadline.check(CANDIDATE_STAGE)
                engine = builder.use_engine(label)
                elsewhere = engine_problem(engine, catalog.gpu_of(offer.system).architecture)
                if elsewhere is not None:  # TensorRT-LLM on AMD, ATOM on NVIDIA: said once, not per layout
                    builder.prune(workload, offer, elsewhere, "data")
                    continue
                if split:
                    builder.disaggregated(offer, workload, index, bucket)
                if not serves_aggregated(scenario, workload):
                    continue
                # benchmark rows are of the reference engine: another engine (or a pinned release) is the roofline's
                answered = engine == DEFAULT_ENGINE and builder.engine_version is None and builder.from_data(offer, workload, index, bucket)
                if not answered and "modeled" in scenario.perf_sources:
                    builder.from_model(offer, workload, index, bucket)
                elif not answered:
                    builder.prune(
                        workload, offer,
                        f"no benchmark row for {workload.model} on {catalog.systems[offer.system].gpu} at ISL "
                        f"{bucket.isl_tokens} / OSL {bucket.osl_tokens} (sources: {', '.join(scenario.perf_sources)})",
                        "data",
                    )  # fmt: skip
            if progress is not None:
                progress(done, total)
    builder.drop_dominated()
    if builder._store not in (_UNOPENED, None) and builder._store.written:  # a run that kept nothing new trims nothing
        builder._store.trim()
    ordered = tuple(builder.candidates[k] for k in sorted(builder.candidates))
    options = tuple(builder.options[k] for k in sorted(builder.options))
    pruned = tuple(dict.fromkeys(builder.pruned))  # same reason for several batch caps: once
    stats = CandidateStats(
        generated=builder.counts["generated"], pruned_memory=builder.counts["memory"],
        pruned_latency=builder.counts["latency"], pruned_dominated=builder.counts["dominated"], kept=len(ordered),
        options=len(options), pruned=tuple((p.workload, p.system, p.reason) for p in pruned),
    )  # fmt: skip
    return CandidateSet(ordered, options, pruned, stats, {w: dict(m) for w, m in builder.fastest.items()},
                        tuple(sorted(builder.course_sized)))
