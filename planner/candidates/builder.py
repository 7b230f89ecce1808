"""The enumeration's builder: the candidates of one workload bucket on one offer, from benchmark rows
(`from_data`), from the performance model's curves (`from_model`), disaggregated (`disaggregated`), each pruned by
memory fit, limits and engine rules with its reason kept, and the dominated ones dropped at the end."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, defaultdict

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
)
from planner.perf.curve_cache import curve_cache
from planner.perf.reach import PricedCurve, Reach
from planner.perf.disagg import stage_points
from planner.perf.engines import DEFAULT_ENGINE
from planner.perf.serving import EngineSpec
from planner.perf.roofline import supports_roofline
from planner.perf.tables import instance_memory
from planner.perf.types import Layout
from planner.workers import can_fork, executor, map_on_ray, worker_count  # noqa: F401 (worker_count: read by tests as candidates.worker_count)
from planner.scenario import Bucket, Scenario, SystemOffer, Workload

from planner.candidates.curves import curve_reaches, price_curve, price_curve_above
from planner.candidates.offers import candidate_key, engine_layouts, engine_lengths_by_model, offer_costs, unit_shape
from planner.candidates.types import DECODE_NETWORK_REASON, Candidate, Fastest, Option, Pruned, unit_rate


_UNOPENED = object()  # a builder's curve cache not opened yet


class CandidateBuilder:
    """One enumeration's state: the candidates and options made so far, what was pruned and why, the curves priced
    (in this process or kept by earlier runs) and the engine being enumerated; `from_data`, `from_model` and
    `disaggregated` add a bucket's candidates on an offer, `drop_dominated` ends it."""

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
        # curves this enumeration prices (None: all) and those it leaves unpriced, every candidate of theirs
        # dominated by a bound (planner/candidates/bounds.py)
        self.only: set[tuple] | None = None
        self.unpriced: set[tuple] = set()
        # curves whose every candidate is dominated unless they serve a rate above their floor (bounds.curve_floors):
        # `settle_floor` prices them, or a piece of them, and leaves them unpriced where they do not
        self.floors: dict[tuple, float] = {}

    def wanted(self, key: tuple) -> bool:
        """Whether this enumeration prices the modeled curve of memo `key`."""
        return key not in self.unpriced and (self.only is None or key in self.only)

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

    def trim_store(self) -> None:
        """Bound the curve cache's folder after a run that kept a new curve (one that kept nothing trims nothing:
        a stat per kept curve)."""
        if self._store not in (_UNOPENED, None) and self._store.written:
            self._store.trim()

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
        key = candidate_key(offer, workload.model, point, batch, *lengths, speculative, pinned)
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
        requests arriving at random (the default), those of the open loop. A closed-loop row then sizes nothing
        where the roofline can model the model (it answers, anchored on the rows where they state the engine); for a
        model without an architecture the row's own engine, its steps fitted to the row (the simulator's), comes
        sized in the open loop (perf.layers, planner/perf/point_engine.py); a row without what that needs, or of a
        model the scenario's perf.sources keep the roofline from, sizes as the course reads it, said in the plan."""
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
        # the roofline is not among the sources; or the model has no architecture, whose rows perf.layers answered
        # with their own engines sized for random arrivals (planner/perf/point_engine.py) where they have step times
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
            key = (shape, layout, precision, workload.slo.percentile, speculation, hop)
            if not self.wanted(key):
                if key in self.unpriced:
                    self.count_unpriced(workload, offer, layout, precision, engines)
                continue
            points = self.curve(shape, layout, precision, workload.slo.percentile, speculation, hop)
            if not isinstance(points, str) and points:
                self.note_fastest(workload, offer, points[0])
            best_by_cap = None
            for lengths in engines:
                fit = self.fit(workload.model, system.gpu, layout, precision, lengths)
                if not isinstance(points, str) and fit.fits and best_by_cap is None:
                    best_by_cap = self.best_by_cap(points, query, layout, precision, workload.slo.percentile, speculation,
                                                   hop)  # fmt: skip
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

    def count_unpriced(self, workload: Workload, offer: SystemOffer, layout: Layout, precision: str, engines: list) -> None:
        """The candidates of a curve left unpriced, counted as `from_model` would count them: each engine lengths x
        batch cap generated, pruned for memory where the engine does not fit, else dominated (by the bound)."""
        system = self.catalog.systems[offer.system]
        unplaced = layout.gpus > system.gpus_per_node and layout.gpus % system.gpus_per_node  # as `add` refuses it
        for lengths in engines:
            fit = self.fit(workload.model, system.gpu, layout, precision, lengths)
            for _ in self.scenario.max_batch_ladder:
                self.counts["generated"] += 1
                if fit.fits and unplaced:
                    self.prune(workload, offer, f"an instance needs {layout.gpus} GPUs; the node has {system.gpus_per_node}")
                elif not fit.fits:
                    self.counts["memory"] += 1
                    self.prune(workload, offer, f"{layout.label} {precision}: does not fit: {fit.reason}", "memory")
                else:
                    self.counts["dominated_early"] += 1

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
                    # the node's network prices the KV transfer (and a pipeline's hops): two nodes of one GPU
                    # with other networks get figures of their own
                    key = ("stages", query, layout, precision, workload.slo.percentile, speculation, lengths, largest,
                           network, hop)  # fmt: skip
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

    def best_by_cap(self, points, query: PerfQuery, layout: Layout, precision: str, percentile: float, speculation=None,
                    hop_bytes_per_s: float = 0.0) -> dict:  # fmt: skip
        """best_points_by_cap, once per curve and latency limits (workloads often share both): the curve's key
        (with its hops between nodes: two nodes of one GPU with other networks have curves of their own)."""
        key = ("best", query, layout, precision, percentile, speculation, hop_bytes_per_s)
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

    def settle_floor(self, key: tuple) -> bool:
        """Whether the curve of `key` serves its asks no rate above its floor (`floors`), so every candidate of it is
        dominated: read from the curve where it is at hand, else from the piece of its ladder at the floor (the
        piece alone solved, `price_curve_above`), else from the curve, then priced (and kept) with that piece. The
        same answer whichever (planner/perf/engine_curve.py, `_used_above`); a floor found unused is kept with the
        catalog and between runs, so a what-if does not solve the piece again."""
        floor, reach = self.floors[key], self.reach(key)
        if reach is None:  # the whole curve asked for: priced whole
            return False
        if self.floor_known_unused(key):
            return True
        if not self.has_curve(key):
            curve = price_curve_above(self.context, key, reach, floor)
            if curve is None:
                self.note_floor_unused(key)
                if self.store is not None:
                    self.store.put_unused_floor(key, reach, self._unused_floors[(key, reach)])
                return True
            self.curves[key] = curve
            self.keep_curve(key)
        return not self.curves[key].used_above(reach, floor)

    def floor_known_unused(self, key: tuple) -> bool:
        """Whether the curve of `key` is known, in this process or from an earlier run, to serve its asks no rate
        above its floor (no point used above a lower rate: none above this one); nothing is solved."""
        floor, reach, known = self.floors.get(key), self.reach(key), self._unused_floors
        if floor is None or reach is None:
            return False
        if known.get((key, reach), math.inf) <= floor:
            return True
        found, value = self.store.get_unused_floor(key, reach) if self.store is not None else (False, None)
        if found and value <= floor:
            known[(key, reach)] = value
            return True
        return False

    @property
    def _unused_floors(self) -> dict:
        """(memo key, reach) -> the lowest floor its asks were found to use no point above, kept with the catalog."""
        return self.catalog.derived.setdefault(("floors unused", *self.context[1:]), {})

    def note_floor_unused(self, key: tuple) -> None:
        """Keep that the curve of `key` serves its asks no rate above its floor (found by a forked worker)."""
        known, reach = self._unused_floors, self.reach(key)
        known[(key, reach)] = min(self.floors[key], known.get((key, reach), math.inf))

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
