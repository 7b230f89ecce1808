"""The modeled engine curves an enumeration asks the performance model for: which (`modeled_curve_keys`), how far
each is priced (`curve_reaches`: the limits of the workloads reading it), and one curve priced (`price_curve`, a pure
function of its key, wherever it runs)."""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass

from planner.catalog import Catalog
from planner.perf import (
    priced_points,
)
from planner.perf.reach import PricedCurve, Reach
from planner.perf.engines import DEFAULT_ENGINE
from planner.perf.roofline import supports_roofline
from planner.workers import can_fork, executor, map_on_ray, worker_count  # noqa: F401 (worker_count: read by tests as candidates.worker_count)
from planner.scenario import Bucket, Scenario, SystemOffer, Workload


def serves_aggregated(scenario: Scenario, workload: Workload) -> bool:
    """Whether the workload gets aggregated candidates: all but a streaming one under `disaggregated: always`."""
    return scenario.disaggregated != "always" or workload.mode == "offline"


def price_curve(context: tuple[Catalog, bool, bool], key: tuple, reach: Reach | None = None) -> PricedCurve:
    """One engine curve: its modeled points (or why there are none), from the builder's `context` (catalog, whether
    aiconfigurator's tables answer where the roofline extrapolates, whether measured rows anchor it); `key` is the
    builder's (shape, layout, precision, percentile, speculation, hop bytes/s), `reach` the asks it is priced for
    (planner/perf/reach.py). A pure function of its arguments, wherever it runs."""
    return price_curve_above(context, key, reach, None)


def price_curve_above(context: tuple[Catalog, bool, bool], key: tuple, reach: Reach | None,
                      floor_rps: float | None) -> PricedCurve | None:  # fmt: skip
    """`price_curve`, or None where a piece of its ladder shows that `reach` can use no point of it above
    `floor_rps` (planner/perf/engine_curve.py, `_floor_piece`): then only that piece is solved."""
    catalog, aic, anchored = context
    shape, layout, precision, percentile, speculation, hop_bytes_per_s = key
    return priced_points(shape, catalog, layout.tp, precision, percentile, aic_where_extrapolated=aic, layout=layout,
                         speculation=speculation, hop_bytes_per_s=hop_bytes_per_s, reach=reach, anchored=anchored,
                         floor_rps=floor_rps)  # fmt: skip


@dataclass(frozen=True)
class CurveAsk:
    """One ask of a modeled curve: bucket `bucket_index` of `workload` on `offer` under engine `label` (the
    reference release rows were measured on or not) reads the curve of memo key `key`."""

    workload: Workload
    offer: SystemOffer
    label: str
    reference: bool
    bucket_index: int
    bucket: Bucket
    key: tuple


def curve_asks(builder):
    """Every ask of a modeled curve the enumeration of `builder` (planner/candidates/builder.py) may make
    (`from_model`'s curve specs, aggregated serving); the builder's engine is as it was afterwards."""
    scenario, catalog = builder.scenario, builder.catalog
    engine, version = builder.engine, builder.engine_version
    try:
        for workload in scenario.workloads:
            if not supports_roofline(catalog.models[workload.model]) or not serves_aggregated(scenario, workload):
                continue
            for offer, label in itertools.product(scenario.offers, workload.engines):
                reference = builder.use_engine(label) == DEFAULT_ENGINE and builder.engine_version is None
                for index, bucket in enumerate(workload.buckets):
                    for shape, layout, precision, speculation, hop in builder.curve_specs(offer, workload, bucket):
                        key = (shape, layout, precision, workload.slo.percentile, speculation, hop)
                        yield CurveAsk(workload, offer, label, reference, index, bucket, key)
    finally:
        builder.engine, builder.engine_version = engine, version


def modeled_curve_keys(builder):
    """(workload, offer, whether its engine is the reference release rows were measured on, memo key) of every
    modeled curve the enumeration of `builder` may ask for (`curve_asks`)."""
    for ask in curve_asks(builder):
        yield ask.workload, ask.offer, ask.reference, ask.key


def curve_reaches(builder) -> dict[tuple, Reach]:
    """Per memo key of a modeled curve the scenario may ask for: the asks of the workloads reading it, their
    latency limits with the largest batch cap of the ladder (every smaller cap reads a prefix of what it reads)."""
    cap = max(builder.scenario.max_batch_ladder)
    asks: dict[tuple, dict] = defaultdict(dict)
    for workload, _, _, key in modeled_curve_keys(builder):
        asks[key][(workload.slo, cap)] = None
    return {key: Reach(tuple(found)) for key, found in asks.items()}
