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
from collections.abc import Callable

from planner import deadline
from planner.candidates.builder import CandidateBuilder
from planner.candidates.curves import curve_asks, curve_reaches, modeled_curve_keys, price_curve, serves_aggregated  # noqa: F401 (the package's names)
from planner.candidates.offers import (  # noqa: F401 (the package's names)
    candidate_key,
    engine_layouts,
    engine_lengths_by_model,
    offer_costs,
    on_prem_annual_cost_usd,
    pipeline_wanted,
    unit_shape,
)
from planner.candidates.parallel import (
    CANDIDATE_STAGE,
    PARALLEL_MIN_CURVES,
    CurveTally,
    PricingAhead,
    prefetch_curves,
    prefetched_curves,
)
from planner.candidates.types import (  # noqa: F401 (the package's names)
    DECODE_NETWORK_REASON,
    DECODE_PRUNED,
    Candidate,
    CandidateSet,
    Fastest,
    Option,
    Pruned,
    restrict_candidates,
    unit_rate,
)
from planner.catalog import Catalog
from planner.perf.engines import DEFAULT_ENGINE
from planner.perf.serving import engine_problem
from planner.plan import CandidateStats
from planner.scenario import Scenario
from planner.workers import worker_count  # noqa: F401 (read by tests as candidates.worker_count)


def enumerate_candidates(
    scenario: Scenario, catalog: Catalog, progress: Callable[..., None] | None = None, bound_pruning: bool = True,
    keep_dominated: bool = False,
) -> CandidateSet:
    """For every workload bucket x allowed system: the engine configurations that fit and meet the limits.
    `progress(0, total, CANDIDATE_STAGE)` names the stage before the first workload x system pair (with the tally of
    modeled engine curves inside its brackets where there are any: kept from earlier runs, priced in parallel,
    priced as reached, left unpriced), then `progress(done, total)` follows each one (the CLI draws a bar with it).
    With `bound_pruning` (the default) curves whose every candidate is dominated by a bound are never priced
    (planner/candidates/bounds.py); the optimum is the same without. `keep_dominated` keeps every candidate that
    fits and meets the limits, dominated or not (a saved plan's configurations are looked up in it)."""
    builder = CandidateBuilder(scenario, catalog)
    first, kept = CurveTally(), None
    if bound_pruning and not keep_dominated:
        builder.unpriced, builder.floors, first, kept = _dominated_curves(scenario, catalog, progress)
    tally = prefetch_curves(builder, progress)
    below = _settle_floors(builder, progress)
    if kept is not None:  # the tally of both passes: curves at hand before the first, priced in either
        tally = dataclasses.replace(tally, needed=tally.needed - below, kept=len(kept - builder.unpriced),
                                    priced=tally.priced + first.priced, where=tally.where or first.where,
                                    unpriced=first.unpriced + below)  # fmt: skip
    tally = tally.describe()
    total = len(scenario.workloads) * len(scenario.offers)
    if progress is not None:
        progress(0, total, f"{CANDIDATE_STAGE[:-1]}; {tally})" if tally else CANDIDATE_STAGE)
    _enumerate(builder, progress)
    if not keep_dominated:
        builder.drop_dominated()
    builder.trim_store()
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


def _settle_floors(builder: CandidateBuilder, progress: Callable[..., None] | None) -> int:
    """Leave unpriced every curve with a floor that serves its asks no rate above it (`CandidateBuilder.
    settle_floor`: those the pricing workers settled are known here, the rest are settled in this process, a piece
    of their ladder or the curve solved, with their own progress bar); the number left."""
    to_solve = {key for key in builder.floors if key not in builder.unpriced and not builder.floor_known_unused(key)
                and not builder.has_curve(key)} if progress is not None else set()  # fmt: skip
    if to_solve:
        progress(0, len(to_solve), f"pricing {len(to_solve)} engine curves here, or the piece of their ladder at "
                                   "their floor")  # fmt: skip
    left, solved = [], 0
    for key in builder.floors:
        if key in builder.unpriced:
            continue
        deadline.check(CANDIDATE_STAGE)
        if builder.settle_floor(key):
            left.append(key)
        if key in to_solve:
            solved += 1
            progress(solved, len(to_solve))
    builder.unpriced.update(left)
    return len(left)


def _enumerate(builder: CandidateBuilder, progress: Callable[..., None] | None) -> None:
    """Every workload x offer x engine x bucket of the builder's scenario into its candidates (before the dominated
    ones are dropped); `progress(done, total)` after each workload x offer."""
    scenario, catalog = builder.scenario, builder.catalog
    total, done = len(scenario.workloads) * len(scenario.offers), 0
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


def price_leading_ahead(scenario: Scenario, catalog: Catalog):
    """Start pricing, on forked workers, the leading curves an enumeration of `scenario` will price first (its
    `_dominated_curves` pass): a plan starts its fp4 comparison's while its own solve runs. The handle's `finish`
    keeps them in the catalog's memo, where that enumeration finds them; None where there is nothing to start."""
    from planner.workers import can_fork, executor

    if executor() == "ray" or worker_count() < 2 or not can_fork():
        return None
    found = _leading_pass(scenario, catalog)
    if found is None:
        return None
    first = found[0]
    pending = [key for key in prefetched_curves(first) if first.wanted(key) and not first.has_curve(key)]
    return PricingAhead(first, pending) if len(pending) >= 4 else None


def _leading_pass(scenario: Scenario, catalog: Catalog) -> tuple[CandidateBuilder, list, dict] | None:
    """The builder of an enumeration's first pass, on its leading curves (`only`), with the asks and the ceilings of
    every curve they name (planner/candidates/bounds.py); None where there is no such pass: no open-loop curve to
    bound, or too few curves for it to pay."""
    from planner.candidates import bounds

    if "modeled" not in scenario.perf_sources or scenario.sizing == "closed-loop":
        return None
    first = CandidateBuilder(scenario, catalog)
    asks = list(curve_asks(first))
    keys = list(dict.fromkeys(ask.key for ask in asks))
    if len(keys) < PARALLEL_MIN_CURVES:  # a small scenario: pricing all its curves costs less than the first pass
        return None
    ceilings = bounds.curve_ceilings(first, keys)
    first.only = bounds.leading_curves(first, asks, ceilings)
    return first, asks, ceilings


def _dominated_curves(scenario: Scenario, catalog: Catalog,
                      progress: Callable[..., None] | None,
                      ) -> tuple[set[tuple], dict[tuple, float], CurveTally, set[tuple] | None]:  # fmt: skip
    """The modeled curves whose every candidate is dominated by a bound (planner/candidates/bounds.py): the ceilings
    of every curve the enumeration may ask for, a first enumeration on the leading curves (priced, and kept for the
    plan's), and the verdict on the rest; the floors of the other curves the prefetch prices (`curve_floors`); with
    the tally of the first pass's pricing and the curves at hand before it (kept from earlier runs or this process);
    the tally's `unpriced` counts the left curves the prefetch would price. None left where there are too few curves
    for it to pay, or no open-loop curve to bound."""
    from planner.candidates import bounds

    found = _leading_pass(scenario, catalog)
    if found is None:
        return set(), {}, CurveTally(), None
    first, asks, ceilings = found
    prefetched = prefetched_curves(first)
    kept = {key for key in prefetched if first.has_curve(key)}
    tally = prefetch_curves(first, progress, "leading ")
    here = [key for key in prefetched if first.wanted(key) and not first.has_curve(key)] if progress is not None else []
    if here:  # not priced in parallel: the first pass prices them as it reaches them
        progress(0, len(scenario.workloads) * len(scenario.offers),
                 f"pricing {len(here)} leading engine curves here (workload x system)")  # fmt: skip
    _enumerate(first, progress if here else None)
    unpriced = bounds.unpriced_curves(first, asks, ceilings, first.only)
    floors = bounds.curve_floors(first, asks, ceilings, set(prefetched) - first.only - unpriced)
    return unpriced, floors, dataclasses.replace(tally, unpriced=len(unpriced.intersection(prefetched))), kept
