"""The performance model: per (engine config, workload) latency and throughput, each with its provenance.

Layers (design.md), data first:
1. measured      a benchmark row matches exactly (model, GPU, ISL, OSL; TP, precision, concurrency when asked);
2. interpolated  between measured rows of one engine: the roofline anchored on them (`anchor.py`: exact at the
                 rows, a residual correction between), or log-log between rows the roofline cannot model;
3. modeled       the roofline (`roofline.py`) calibrated per GPU generation (`calibration.py`) and anchored on the
                 engine's rows where it has any, so that a curve runs on continuously where the data ends.
                 'modeled (aic kernels)' where the generation's factors rest on aiconfigurator's kernel database
                 alone (no measured rows of it), 'extrapolated' beyond what its calibration covers;
4. aic           NVIDIA's aiconfigurator (`aic.py`, the optional extra .[aic]): asked for alone, or, in
                 `auto`, for an engine the roofline would only extrapolate (the roofline calibrated on the package's
                 kernel database is the more accurate of the two where it is calibrated: docs/perf-model.md).
Where data exists for a query, the model does not overrule it: a limit the data misses is a miss with its reason.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from planner.catalog import PRECISION_SPECS, WEIGHT_ONLY_PRECISIONS, Catalog
from planner.metrics import percentile_label
from planner.perf.anchor import AnchorSet
from planner.perf.engines import DEFAULT_ENGINE, engine_error
from planner.perf.interpolate import concurrency_grid, over_concurrency, over_lengths
from planner.perf.roofline import (
    EngineShape,
    Speculation,
    concurrency_ladder,
    steady_state_curve,
    supports_roofline,
)
from planner.perf.modeled_engine import (
    engine_shape,
    little_scale,
    modeled_engine,
    open_loop_points,
    open_loop_rates,
    rate_chunks,
    step_efficiency,
)
from planner.perf.tables import (
    answers_at,
    group_by_engine,
    matching_rows,
    result_from_row,
)
from planner.perf.reach import PricedCurve, Reach, limit_violation, within_cap
from planner.perf.types import Layout, MemoryFit, PerfMiss, PerfQuery, PerfResult

__all__ = [
    "PERF_SOURCE_LAYERS",
    "SOURCES",
    "TP_LADDER",
    "MemoryFit",
    "PerfMiss",
    "PerfQuery",
    "PerfResult",
    "aic_unavailable_message",
    "best_point",
    "engine_shape",
    "estimate",
    "is_modeled",
    "limit_violation",
    "keeps_quality",
    "model_precisions",
    "plan_precisions",
    "modeled_curve",
    "modeled_points",
    "priced_points",
    "step_efficiency",
    "operating_points",
    "throughput_key",
]  # fmt: skip

SOURCES = ("measured", "interpolated", "modeled")
# --perf-source names -> layers, in order (aic only where installed and supported, except when asked alone)
PERF_SOURCE_LAYERS = {
    "auto": ("measured", "interpolated", "modeled", "aic"),
    "tables": ("measured", "interpolated"),
    "model": ("modeled",),
    "aic": ("aic",),
}
TP_LADDER = (1, 2, 4, 8)
MODEL_PROVENANCE = {"measured": "modeled", "aic kernels": "modeled (aic kernels)", "timed kernels": "modeled (timed kernels)",
                    "extrapolated": "extrapolated"}  # fmt: skip


def is_modeled(provenance: str) -> bool:
    """The roofline answered (whatever its basis), not a row or an interpolation between rows."""
    return provenance.startswith("modeled") or provenance == "extrapolated"


def throughput_key(result: PerfResult) -> float:
    """Rank points by requests/s per GPU (output tokens/s when requests are unknown)."""
    if result.request_throughput_rps is not None:
        return result.request_throughput_rps / result.gpus_per_instance
    return (result.output_tokens_per_s or 0.0) * 1e-9 / result.gpus_per_instance


def _best(results: list[PerfResult], query: PerfQuery) -> PerfResult | str:
    usable = [r for r in results if r.memory is None or r.memory.fits]
    if not usable:
        return f"does not fit in memory: {results[0].memory.reason}"
    meeting = [r for r in usable if limit_violation(r, query) is None]
    if not meeting:
        return _refusal(usable, query)
    return max(meeting, key=lambda r: (throughput_key(r), -(r.concurrency or 0)))


def _refusal(results: list[PerfResult], query: PerfQuery) -> str:
    """Why no point serves: what the lowest-concurrency point misses."""
    lowest = min(results, key=lambda r: (r.concurrency or 0, r.ttft_ms or 0))
    what = "modeled" if is_modeled(lowest.provenance) else "measured"
    return (f"no {what} point meets the limits; at the lowest concurrency ({lowest.concurrency or 'not stated'}): "
            f"{limit_violation(lowest, query) or 'its limits met, but a point at a lower rate misses them'}")  # fmt: skip


def model_precisions(catalog: Catalog, gpu: str, model: str | None = None,
                     requested: tuple[str, ...] | None = None) -> tuple[str, ...]:  # fmt: skip
    """Precisions worth modeling for a model on a GPU: bf16, fp8 and fp4 where the GPU has their tensor cores (fp16
    runs at the bf16 rate, so bf16 stands for both). The weight-only formats (w4a16, w4a8) only for a model shipped
    in fp4 on a GPU without fp4 tensor cores (gpt-oss's MXFP4 experts: w4a16, and w4a8 where fp8 is), so that the
    search does not grow for every model; or where `requested` (a workload's `precisions:`) names them, as for
    fp16. Filtered to `requested` when given."""
    supported = catalog.gpus[gpu].precisions
    asked = set(requested or ())
    precisions = [p for p in supported if (p != "fp16" or p in asked) and p not in WEIGHT_ONLY_PRECISIONS]
    four_bit_checkpoint = model is not None and catalog.models[model].checkpoint_precision == "fp4"
    for p in WEIGHT_ONLY_PRECISIONS:
        if p in supported and ((four_bit_checkpoint and "fp4" not in supported) or (requested and p in requested)):
            precisions.append(p)
    if requested is not None:
        precisions = [p for p in precisions if p in requested]
    return tuple(precisions)


QUALITY_PRECISIONS = ("bf16", "fp16", "fp8")  # formats that keep a model's quality (fp8: per-tensor/block scales)


def keeps_quality(catalog: Catalog, model: str, precision: str | None) -> bool:
    """Whether serving `model` at `precision` keeps the model's quality: the rule of the default precisions (a
    workload that names no `precisions:`).

    bf16 (and fp16) and fp8 keep it. A 4-bit format keeps it only where the checkpoint itself is 4-bit (catalog
    `checkpoint_precision: fp4`: gpt-oss ships MXFP4 experts): its released weights served at fp4, or as w4a16 / w4a8
    on a GPU without fp4 tensor cores, lose nothing. fp4 and the weight-only formats (w4a16, w4a8) of a 16- or 8-bit
    checkpoint trade quality for cost: a decision the user makes (`precisions:` in the scenario, `--precisions`),
    never the planner; the plan says what allowing them would save. A benchmark row that states no precision
    (`None`) has no format to judge and keeps its place."""
    if precision is None or precision in QUALITY_PRECISIONS:
        return True
    four_bit = PRECISION_SPECS[precision].four_bit if precision in PRECISION_SPECS else False
    return four_bit and catalog.models[model].checkpoint_precision == "fp4"


def plan_precisions(catalog: Catalog, gpu: str, model: str, requested: tuple[str, ...] | None = None,
                    lower: bool = False) -> tuple[str, ...]:  # fmt: skip
    """The precisions a plan may serve `model` at on `gpu` (what candidate enumeration tries): those of `requested`
    (a workload's `precisions:`, or `--precisions`) that are modeled there; where none is requested, the default:
    the quality-keeping ones (`keeps_quality`) of what is modeled there (`model_precisions`). `lower` (the plan's
    one extra solve that prices the lower formats) drops the quality rule: every modeled format, fp4 included."""
    if requested is not None:
        return model_precisions(catalog, gpu, model, requested)
    modeled = model_precisions(catalog, gpu, model)
    return modeled if lower else tuple(p for p in modeled if keeps_quality(catalog, model, p))


def _table_points(query: PerfQuery, catalog: Catalog, interpolate: bool, groups=None) -> list[list[PerfResult]]:
    """Measured points per engine variant, plus log-log interpolated concurrencies between them."""
    if groups is None:
        groups = group_by_engine(matching_rows(catalog, dataclasses.replace(query, concurrency=None)))
    variants = []
    for group in groups:
        if query.concurrency is not None:
            exact = [result_from_row(r, catalog) for r in group if r.concurrency == query.concurrency]
            between = over_concurrency(group, query.concurrency, catalog) if interpolate and not exact else None
            points = exact or ([between] if between else [])
        else:
            points = [result_from_row(r, catalog) for r in group]
            if interpolate:
                points += [p for c in concurrency_grid(group) if (p := over_concurrency(group, c, catalog))]
        if points:
            variants.append(points)
    return variants


def _provenance(catalog: Catalog, shape: EngineShape, eff, isl: int) -> tuple[str, str | None]:
    """The roofline's provenance for this engine and prompt, and why it is extrapolated (if it is)."""
    from planner.perf.calibration import fit_kernels  # scipy.optimize: imported where the roofline runs

    covered = fit_kernels(catalog, shape.gpu.architecture)  # what the generation's timed iterations cover
    why = covered.outside(shape.tp, shape.gpu.link, shape.precision, isl, shape.model.moe is not None) if covered else None
    timed_dp, timed_ep = (covered.max_dp, covered.max_ep) if covered else (1, 1)
    beyond = [what for what, used in (
        (f"attention data parallelism (DP{shape.dp})", shape.dp > timed_dp),
        (f"expert parallelism (EP{shape.ep})", shape.ep > timed_ep),
        (f"pipeline stages across nodes (PP{shape.pp})", shape.pp > 1),
    ) if used]  # fmt: skip
    if beyond:
        why = "; ".join([*([why] if why else []), f"no timed iteration of {', '.join(beyond)}"])
    if shape.crosses_domain:
        why = "; ".join([*([why] if why else []), (
            f"{max(shape.tp, shape.ep)} GPUs span link domains of {shape.gpu.domain_gpus}: the scale-out network as "
            "fitted to measured multi-node serving rows (docs/perf-model.md)")])
    if why:
        return "extrapolated", why
    return MODEL_PROVENANCE[eff.basis], None


def _bracketing(rows, isl: int, osl: int, concurrency: int, best: bool) -> str | None:
    """The axis along which measured rows of the engine surround this point, if any."""
    same = sorted({r.concurrency for r in rows if (r.isl, r.osl) == (isl, osl) and r.concurrency})
    if same and same[0] < concurrency < same[-1]:
        return "concurrency"
    for fixed, moving, target in (("osl", "isl", isl), ("isl", "osl", osl)):
        line = [
            getattr(r, moving) for r in rows
            if getattr(r, fixed) == (osl if fixed == "osl" else isl)
            and (r.concurrency == concurrency or (r.concurrency is None and best))
        ]  # fmt: skip
        if any(v < target for v in line) and any(v > target for v in line):
            return moving.upper()
    return None


def _curve(*args, **kwargs) -> list[PerfResult] | str:
    """The roofline's points for one engine (`_priced_curve`'s arguments, no reach): its whole ladder."""
    return _priced_curve(*args, **kwargs).points


def _priced_curve(
    query: PerfQuery,
    catalog: Catalog,
    tp: int,
    precision: str,
    percentile: float | None,
    beyond_capacity: bool = False,
    engine_lengths: tuple[int, int] | None = None,
    anchored: bool = True,
    layout: Layout | None = None,
    speculation: Speculation | None = None,
    hop_bytes_per_s: float = 0.0,
    reach: Reach | None = None,
) -> PricedCurve:
    """The roofline's points for one engine over the concurrency ladder (or at the query's concurrency), anchored
    on the engine's measured rows (`modeled_engine`: which engines they anchor); a measured row at the query's
    lengths stands in for the model at its concurrency. An open-loop point runs the engine's step as its rows scale
    it (planner/perf/modeled_engine.py); a closed-loop point takes the rows' factors on its means (exact at them).
    An open-loop rate ladder is priced in ascending rate up to the first point `reach` refuses (all of it without a
    reach, at one rate, or where measured rows stand among the points)."""
    engine = modeled_engine(query, catalog, tp, precision, engine_lengths, anchored, layout, speculation, hop_bytes_per_s)
    if isinstance(engine, str):
        return PricedCurve(engine)
    shape, eff, memory, layout, anchors, measured, capacity = (
        engine.shape, engine.eff, engine.memory, engine.layout, engine.anchors, engine.measured, engine.capacity)
    gpu = shape.gpu
    # a row stands in for the model at its concurrency where its statistic is the percentile asked for
    exact = {r.concurrency: r for r in measured  # rows measured cold prefills: none stands for a cached workload
             if (r.isl, r.osl) == (query.isl, query.osl) and r.concurrency and answers_at(r, percentile)
             and query.prefix_cache is None}  # fmt: skip
    if query.open_loop:
        rates = [query.rate_rps] if query.rate_rps is not None else open_loop_rates(query, engine)
        stop = reach if query.rate_rps is None and not exact else None
        states, means, scales = [], [], []
    else:
        top = 2 * capacity if (beyond_capacity and capacity) else capacity
        ladder = [query.concurrency] if query.concurrency else sorted(set(concurrency_ladder(top)) | set(exact))
        states = steady_state_curve(shape, eff, query.isl, query.osl, ladder, capacity, percentile, query.token_budget,
                                    query.prefix_cache)  # fmt: skip
        means = (steady_state_curve(shape, eff, query.isl, query.osl, ladder, capacity, None, query.token_budget,
                                    query.prefix_cache)
                 if anchors and percentile is not None else states)  # the anchors correct means
        scales = [None] * len(states)
    provenance, why = _provenance(catalog, shape, eff, query.isl)
    error = engine_error(catalog, query.model, query.gpu, query.engine, shape.crosses_domain, query.engine_version).as_dict()
    notes = (
        f"{gpu.architecture} factors: {eff.describe()}",
        ("requests arriving at random at the point's rate (open loop, planner/perf/open_loop.py); its concurrency is "
         "the running batch's P99" if query.open_loop else "a closed loop at a fixed concurrency (as a benchmark runs)"),
        "latencies are means (ITL, one token gap, averages to TPOT)" if percentile is None else
        f"latencies at {percentile_label(percentile)}: " + (
            f"TTFT from the law of the steps (every prompt waiting, up to the {query.token_budget}-token budget, runs "
            "in the next one) and of the wait for a sequence slot, TPOT with a Gamma tail of the prompts and batch "
            "a request's decode shares, ITL (one token gap) a decode step of a random batch plus its prompt work"
            if query.open_loop else
            "TTFT and TPOT with Gamma tails of the queueing, ITL (one token gap) the decode step plus the prompt "
            f"chunks of a {query.token_budget}-token budget (Poisson)"),
        *([speculation.describe()] if speculation is not None else []),
        *([f"{_cache_assumed(query)} (benchmark rows, cold prefills, are not used)"] if query.prefix_cache is not None else []),
    )  # fmt: skip
    source = f"roofline ({eff.source})" + (f"; {anchors.describe()}" if anchors else "") + (
        f"; speculative decoding, acceptance {speculation.acceptance:g} assumed" if speculation is not None else "") + (
        f"; {_cache_assumed(query)}" if query.prefix_cache is not None else "")

    def results(states, means, scales) -> list[PerfResult]:
        factors = None if query.open_loop else _anchor_factors(anchors, shape, eff, query, means)
        return [
            _modeled_result(query, state, mean, factors[i] if factors else None, anchors, provenance, why, source,
                            notes, memory, tp, precision, layout, percentile, error, engine.engine_cls, scales[i])
            for i, (state, mean) in enumerate(zip(states, means))
        ]  # fmt: skip

    complete = True
    if query.open_loop:  # the ladder in chunks of ascending rate, until a point the reach refuses (module reach.py)
        chunks = rate_chunks(rates) if query.rate_rps is None else [rates]  # the same pieces, stopped or not
        for index, chunk in enumerate(chunks):
            more_states, more_means, more_scales = open_loop_points(query, engine, percentile, chunk)
            states, means, scales = states + more_states, means + more_means, scales + more_scales
            if stop is None or not more_states:
                continue
            modeled = results(states, means, scales)  # a point's figures are its own (reach.py)
            first = next((i for i in range(len(states) - len(more_states), len(states)) if stop.refuses(modeled[i])), None)
            if first is not None:
                complete = first == len(states) - 1 and index == len(chunks) - 1
                states, means, scales = states[: first + 1], means[: first + 1], scales[: first + 1]
                break
        if not states:
            what = f"{query.rate_rps:g} requests/s is" if query.rate_rps is not None else "every rate is"
            return PricedCurve(f"{layout.label} {precision}: {what} beyond what the engine serves under Poisson "
                               f"arrivals with its batch within the KV cache ({capacity} sequences) 99% of the time")  # fmt: skip
    modeled = results(states, means, scales)
    if query.open_loop:  # rows are closed-loop measurements: they stand beside the open-loop points, not for them
        rows = [] if query.rate_rps is not None else [
            _row_point(row, min(modeled, key=lambda p: abs(p.concurrency - row.concurrency)), catalog)
            for row in exact.values()]  # fmt: skip
        return PricedCurve(_between_rows(sorted(modeled + rows, key=lambda p: p.request_throughput_rps), measured, query),
                           complete)  # fmt: skip
    points = [_row_point(exact[p.concurrency], p, catalog) if p.concurrency in exact else p for p in modeled]
    return PricedCurve(_between_rows(points, measured, query))


def _cache_assumed(query: PerfQuery) -> str:
    """What a query's prefix cache assumes, for a point's source and notes."""
    cache = query.prefix_cache
    return (f"prefix cache assumed: {cache.cached_tokens(query.isl):,.0f} of {query.isl:,} prompt tokens cached for "
            f"{cache.hit_rate:.0%} of requests; the mean prompt computes {cache.computed_tokens(query.isl):,.0f} tokens")


def _row_point(row, model: PerfResult, catalog: Catalog) -> PerfResult:
    """A measured row at the model's point: the row's own figures, and the model's (anchored on the rows) for a
    metric the row does not record (one token gap, ITL, where a tool reports a request's mean gap only)."""
    point = result_from_row(row, catalog)
    filled = [m for m in ("itl_ms", "tpot_ms", "ttft_ms") if getattr(point, m) is None and getattr(model, m) is not None]
    if not filled:
        return point
    return dataclasses.replace(
        point, **{m: getattr(model, m) for m in filled}, percentile=model.percentile,
        derivations=point.derivations + (f"{', '.join(filled)} from the roofline anchored on the rows (the row does not record it)",),
    )  # fmt: skip


def _anchor_factors(anchors: AnchorSet | None, shape: EngineShape, eff, query: PerfQuery, means) -> list | None:
    """(TTFT, TPOT) factors the anchors put on a closed loop's means, per point. Beyond the KV capacity the batch
    stops growing: the correction is the one at the running batch."""
    if anchors is None:
        return None
    model_means = {m: np.array([getattr(p, m) for p in means]) for m in ("ttft_ms", "tpot_ms")}
    corrected = anchors.correct(shape, eff, query.isl, query.osl, [p.running for p in means], model_means)
    return list(zip(corrected["ttft_ms"] / model_means["ttft_ms"], corrected["tpot_ms"] / model_means["tpot_ms"]))


def _modeled_result(query, state, mean, factors, anchors, provenance, why, source, notes, memory, tp, precision,
                    layout: Layout | None = None, percentile: float | None = None, error: dict | None = None,
                    engine_cls=None, anchoring=None) -> PerfResult:  # fmt: skip
    """One roofline point as a PerfResult: a closed loop's corrected by the anchors' (TTFT, TPOT) factors if any
    (the TPOT factor corrects the decode step, so it moves the token gaps, ITL, too); an open loop's solved on the
    step and overhead the rows set (`anchoring`, planner/perf/modeled_engine.py)."""
    decode_tokens = max(query.osl - 1, 0)
    if factors:
        ttft_factor, tpot_factor = factors
        # the rows moved the engine's latencies: its throughput follows by Little's law on the corrected means
        # (the same sequences in the engine for the corrected time), and the wait for a KV slot with it
        rps = mean.request_throughput_rps * little_scale(mean, ttft_factor, tpot_factor, query.osl)
        slot_scale = mean.request_throughput_rps / rps
    else:
        ttft_factor = tpot_factor = slot_scale = 1.0
        rps = state.request_throughput_rps
    ttft = (state.ttft_ms - state.slot_wait_ms) * ttft_factor + state.slot_wait_ms * slot_scale
    tpot, itl = state.tpot_ms * tpot_factor, state.itl_ms * tpot_factor
    derivations = [
        f"prefill {state.prefill_ms:.1f} ms, decode step {state.decode_step_ms:.2f} ms at batch {state.decoding:.1f}, "
        f"prefills take {state.prefill_share:.0%} of the time, {state.chunks_per_step:.3g} prompt chunks per step "
        f"of {state.chunk_ms:.3g} ms each"
        + (f", {state.concurrency - state.running} queued (KV cache full)"
           if state.concurrency > state.running and not query.open_loop else "")
        + (f", {state.running} sequences in flight on average, a batch of {state.concurrency} at P99"
           + (" (the KV cache is full more than 1% of the time: waits for memory come in bursts the model "
              "underestimates)" if memory.max_concurrency_by_memory and state.concurrency >= memory.running_limit(query.isl, query.osl, query.engine) else "")
           if query.open_loop else ""),
        *notes,
    ]
    if factors:
        derivations.append(f"{anchors.describe()}: TTFT x{ttft_factor:.3f}, TPOT and ITL x{tpot_factor:.3f}")
    if anchoring is not None:
        derivations.append(f"{anchors.describe()}: {anchoring.describe()}")
    if why:
        derivations.append(f"extrapolated: {why}")
    return PerfResult(
        model=query.model, gpu=query.gpu, tp=tp, precision=precision, isl=query.isl, osl=query.osl,
        concurrency=state.concurrency, gpus_per_instance=layout.gpus if layout else tp, ttft_ms=float(ttft),
        itl_ms=float(itl), e2e_ms=float(ttft + decode_tokens * tpot), ttft_ms_bound=None, itl_ms_bound=None,
        request_throughput_rps=float(rps), output_tokens_per_s=float(rps * query.osl), provenance=provenance,
        source=source, memory=memory, derivations=tuple(derivations),
        dp=layout.dp if layout else 1, ep=layout.ep if layout else 1, pp=layout.pp if layout else 1,
        tpot_ms=float(tpot), percentile=percentile,
        statistic="mean" if percentile is None else "median" if percentile == 50 else f"p{percentile:g}",
        engine=query.engine, expected_error=error, engine_version=engine_cls.engine_version if engine_cls else "",
        error_known=engine_cls.known if engine_cls else True, arrivals="poisson" if query.open_loop else "closed",
    )  # fmt: skip


def _between_rows(points: list[PerfResult], measured, query: PerfQuery) -> list[PerfResult]:
    """Roofline points that measured rows of the engine surround say 'interpolated'."""
    modeled = [p for p in points if is_modeled(p.provenance)]
    best = max(modeled, key=lambda p: p.request_throughput_rps, default=None)
    out = []
    for point in points:
        axis = _bracketing(measured, query.isl, query.osl, point.concurrency, point is best) if is_modeled(point.provenance) else None
        out.append(point if axis is None else dataclasses.replace(
            point, provenance="interpolated",
            derivations=(f"between measured rows over {axis}: the roofline anchored on them",) + point.derivations,
        ))  # fmt: skip
    return out


def modeled_points(*args, **kwargs) -> list[PerfResult] | str:
    """`priced_points`' points, its whole ladder (no reach)."""
    return priced_points(*args, **kwargs).points


def priced_points(
    query: PerfQuery,
    catalog: Catalog,
    tp: int,
    precision: str,
    percentile: float | None = None,
    engine_lengths: tuple[int, int] | None = None,
    aic_where_extrapolated: bool = False,
    layout: Layout | None = None,
    speculation: Speculation | None = None,
    hop_bytes_per_s: float = 0.0,
    reach: Reach | None = None,
    anchored: bool = True,
) -> PricedCurve:
    """Roofline points over the concurrency ladder (up to the KV capacity of an engine built for
    `engine_lengths`), anchored on the engine's rows (unless not `anchored`), or why there are none; with `aic_where_extrapolated`
    (--perf-source auto), aiconfigurator's points where the roofline would extrapolate. An open-loop ladder is
    priced only as far as `reach` can use it (planner/perf/reach.py)."""
    curve = _priced_curve(query, catalog, tp, precision, percentile, engine_lengths=engine_lengths, layout=layout,
                          speculation=speculation, hop_bytes_per_s=hop_bytes_per_s, reach=reach, anchored=anchored)  # fmt: skip
    plain = (layout is None or layout == Layout(tp)) and speculation is None and query.prefix_cache is None
    if not aic_where_extrapolated or not plain:
        return curve
    answer = _aic_instead(query, catalog, tp, precision, curve.points)
    return curve if answer is curve.points else PricedCurve(answer)


def best_points_by_cap(points: list[PerfResult], query: PerfQuery, caps) -> dict[int, PerfResult | str]:
    """The highest-throughput point of an engine's curve (ascending rate) for every batch cap at once, each point's
    limits checked once (candidate enumeration asks for every cap of the ladder on the same curve). A plan sizes an
    engine below the first modeled point the limits or the cap refuse (the first crossing): where the model's curve
    dips back under a limit past it (an MoE step amortizing its expert reads as batches grow, a step chain's grid
    near saturation), the rates beyond are not trusted. Measured rows standing among the points count where they
    meet the limits. The same answer whether the curve was priced whole or up to its reach (planner/perf/reach.py)."""
    usable = [p for p in points if p.memory is None or p.memory.fits]
    meets = [limit_violation(p, query) is None for p in usable]
    out: dict[int, PerfResult | str] = {}
    for cap in caps:
        within = [p for p in usable if within_cap(p, cap)]
        if not within:
            out[cap] = best_point(points, query, cap)  # says why, in the same words
            continue
        meeting = []
        for point, ok in zip(usable, meets):
            if ok and within_cap(point, cap):
                meeting.append(point)
            elif point.provenance != "measured":
                break
        out[cap] = max(meeting, key=lambda r: (throughput_key(r), -(r.concurrency or 0))) if meeting else _refusal(within, query)
    return out


def best_point(points: list[PerfResult], query: PerfQuery, max_concurrency: int | None = None) -> PerfResult | str:
    """The highest-throughput point meeting the query's limits, at concurrency <= max_concurrency per attention-DP
    rank. For requests arriving at random (an open-loop query) the open loop's points answer where a curve has any:
    a closed-loop row standing beside them was measured with a fixed number in flight, not at a rate."""
    if query.open_loop and any(p.arrivals == "poisson" for p in points):
        points = [p for p in points if p.arrivals == "poisson"]
    if max_concurrency is not None:
        points = [p for p in points if within_cap(p, max_concurrency)]
        if not points:
            return f"no point at concurrency <= {max_concurrency} per rank"
    return _best(points, query)


def modeled_curve(query: PerfQuery, catalog: Catalog, percentile: float | None = None, anchored: bool = True) -> list[PerfResult] | PerfMiss:
    """The roofline's latency-throughput curve over the concurrency ladder for one TP and precision, on to twice
    the KV-cache capacity to show the queueing beyond it."""
    points = _curve(query, catalog, query.tp or 1, query.precision or "bf16", percentile, beyond_capacity=True, anchored=anchored)
    return PerfMiss(query, points) if isinstance(points, str) else points


def estimate(query: PerfQuery, catalog: Catalog, sources: tuple[str, ...] = SOURCES, percentile: float | None = None) -> PerfResult | PerfMiss:
    """Answer one query: at the given concurrency, or the highest-throughput point meeting the limits."""
    answer = operating_points(query, catalog, sources=sources, percentile=percentile)
    if isinstance(answer, PerfMiss):
        return answer
    return max(answer, key=lambda r: (throughput_key(r), -(r.concurrency or 0)))


def _modelable(group, catalog: Catalog) -> bool:
    """Rows of an engine the roofline can reproduce: TP and precision stated, per instance, architecture known."""
    row = group[0]
    return (row.tp is not None and row.precision is not None and row.per == "instance" and row.tp == row.gpus
            and supports_roofline(catalog.models[row.model]))  # fmt: skip


def _pick(variants, query: PerfQuery, reasons: list[str], max_concurrency: int | None = None) -> list[PerfResult]:
    points = []
    for variant in variants:
        best = variant if isinstance(variant, str) else best_point(variant, query, max_concurrency)
        (reasons if isinstance(best, str) else points).append(best)
    return points


def operating_points(
    query: PerfQuery,
    catalog: Catalog,
    tps: tuple[int, ...] | None = None,
    precisions: tuple[str, ...] | None = None,
    sources: tuple[str, ...] = SOURCES,
    percentile: float | None = None,
    model_without_rows: bool = True,
    max_concurrency: int | None = None,
) -> list[PerfResult] | PerfMiss:
    """The best point meeting the limits for each engine variant (TP, precision), from the first layer with data,
    at concurrency <= `max_concurrency` (the largest batch of the scenario's ladder) when given.

    `tps`/`precisions` are the variants the roofline may model (default: TP 1-8 and the GPU's precisions, or the
    query's own TP/precision when it names them); `precisions` also filters table rows (a row that does not state
    its precision ran the published checkpoint: it counts as the model's `checkpoint_precision`). With the roofline among the sources, an engine with rows at the query's
    lengths answers with the roofline anchored on them (its measured rows exactly); without it, rows and log-log
    interpolation between them. `model_without_rows=False` keeps the roofline to engines with rows at the query's
    lengths (candidate enumeration models the others itself).
    """
    reasons: list[str] = []
    modeled = "modeled" in sources
    other_statistic = ""  # rows at the query's lengths that hold another statistic than the percentile asked for

    native = catalog.models[query.model].checkpoint_precision if query.model in catalog.models else None

    def allowed(point) -> bool:
        """A table point of an engine the caller allows (a row that states no TP passes the TP filter; one that
        states no precision ran the model's checkpoint as published: its `checkpoint_precision`)."""
        precision_ok = not precisions or (point.precision or native) in precisions
        return precision_ok and (not tps or point.tp is None or point.tp in tps)

    # rows are TP engines of the reference, measured with cold prefills: a prefix-cached workload is modeled
    reference = query.engine == DEFAULT_ENGINE and query.layout is None and query.prefix_cache is None
    if query.prefix_cache is not None and not supports_roofline(catalog.models[query.model]):
        return PerfMiss(query, f"a prefix cache is modeled by the roofline, which has no architecture for {query.model} "
                               "(its benchmark rows measured cold prefills); state no prefix_cache for it")  # fmt: skip
    if "measured" in sources and reference:
        groups = [g for g in group_by_engine(matching_rows(catalog, dataclasses.replace(query, concurrency=None))) if allowed(g[0])]
        if modeled:  # estimates (aic tables) stand in for nothing the calibrated roofline does not answer better
            groups = [g for g in groups if any(r.is_measurement for r in g)]
        # rows of another statistic speak only through the roofline anchored on them: without it they are no data
        # for this percentile, and the next layers (the roofline for the model) answer
        unusable = [g for g in groups if not answers_at(g[0], percentile)
                    and not (modeled and query.isl and query.osl and _modelable(g, catalog))]  # fmt: skip
        if unusable:
            statistics = ", ".join(sorted({g[0].statistic for g in unusable}))
            other_statistic = (f"no benchmark row at {percentile_label(percentile)} for {query.model} on {query.gpu} at "
                               f"ISL {query.isl} / OSL {query.osl}: the rows there give the {statistics} "
                               f"({unusable[0][0].citation})")  # fmt: skip
            groups = [g for g in groups if not any(g is u for u in unusable)]
        if groups:
            variants = []
            for group in groups:
                if modeled and query.isl and query.osl and _modelable(group, catalog):
                    variants.append(_curve(query, catalog, group[0].tp, group[0].precision, percentile))
                else:
                    variants += _table_points(query, catalog, "interpolated" in sources, [group])
            points = _pick(variants, query, reasons, max_concurrency)
            return points if points else PerfMiss(query, "; ".join(sorted(set(reasons))) or _no_data_reason(query, sources))
    if "interpolated" in sources and reference:
        between = [p for p in over_lengths(query, catalog, percentile) if allowed(p)]
        if modeled:  # the anchored roofline interpolates where it can model the engine
            between = [p for p in between if p.tp is None or p.precision is None or not supports_roofline(catalog.models[query.model])]
        if query.concurrency is not None:
            between = [p for p in between if p.concurrency == query.concurrency]
        if between:
            points = _pick([[p] for p in between], query, reasons, max_concurrency)
            return points if points else PerfMiss(query, "; ".join(sorted(set(reasons))))
    if sources == ("aic",):
        points = _pick(_aic_points(query, catalog, tps, precisions), query, reasons, max_concurrency)
        return points if points else PerfMiss(query, "; ".join(dict.fromkeys(reasons)))
    if modeled and model_without_rows:
        tps = (query.layout.tp,) if query.layout else (query.tp,) if query.tp else (tps or TP_LADDER)
        precisions = (query.precision,) if query.precision else (precisions or model_precisions(catalog, query.gpu, query.model))
        points = []
        for tp in tps:
            for precision in precisions:
                curve = _curve(query, catalog, tp, precision, percentile, anchored=sources != ("modeled",), layout=query.layout)
                if "aic" in sources and reference:  # auto: the package (TP, TensorRT-LLM) where the roofline extrapolates
                    curve = _aic_instead(query, catalog, tp, precision, curve)
                best = curve if isinstance(curve, str) else best_point(curve, query, max_concurrency)
                if isinstance(best, str):
                    reasons.append(best if best.startswith(("TP", "aic")) or "architecture" in best else f"TP{tp} {precision}: {best}")
                else:
                    points.append(best)
        if points:
            return points
    return PerfMiss(query, "; ".join(dict.fromkeys(reasons)) or other_statistic or _no_data_reason(query, sources))


def _aic_instead(query: PerfQuery, catalog: Catalog, tp: int, precision: str, curve):
    """aiconfigurator's points for an engine the roofline would only extrapolate (or cannot model), where the
    package is installed and supports it; the roofline's curve otherwise."""
    from planner.perf import aic

    extrapolating = isinstance(curve, str) and "architecture" in curve or (
        not isinstance(curve, str) and curve and curve[0].provenance == "extrapolated"
    )
    if not extrapolating or not aic.available() or aic.unsupported_reason(query.model, query.gpu, precision):
        return curve
    answer = aic.aic_points(query, catalog.gpus[query.gpu].memory_gb, tp, precision)
    return answer if not isinstance(answer, str) and answer else curve


def _aic_points(query: PerfQuery, catalog: Catalog, tps, precisions) -> list:
    """Per (TP, precision): aic points or why none (the source asked for alone: not installed is an input error)."""
    from planner.errors import PlannerInputError
    from planner.perf import aic

    if not aic.available():
        raise PlannerInputError("--perf-source", "aic", aic_unavailable_message())
    tps = (query.layout.tp,) if query.layout else (query.tp,) if query.tp else (tps or TP_LADDER)
    precisions = (query.precision,) if query.precision else (precisions or model_precisions(catalog, query.gpu, query.model))
    supported = [p for p in precisions if aic.unsupported_reason(query.model, query.gpu, p, query.engine) is None]
    if not supported:
        return [aic.unsupported_reason(query.model, query.gpu, precisions[0], query.engine)]
    memory_gb = catalog.gpus[query.gpu].memory_gb
    variants = []
    for tp in tps:
        for precision in supported:
            variants.append(aic.aic_points(query, memory_gb, tp, precision))
    return variants


def aic_unavailable_message() -> str:
    from planner.perf import aic

    try:
        aic.package_version()
    except aic.AicUnavailable as error:
        return str(error)
    return ""


def _no_data_reason(query: PerfQuery, sources: tuple[str, ...]) -> str:
    engine = "".join(
        part for part in (
            f" TP{query.tp}" if query.tp else "",
            f" {query.precision}" if query.precision else "",
            f" at concurrency {query.concurrency}" if query.concurrency else "",
        )
    )  # fmt: skip
    return (
        f"no benchmark row for {query.model} on {query.gpu}{engine} at ISL {query.isl} / OSL {query.osl} "
        f"(sources tried: {', '.join(sources)})"
    )
