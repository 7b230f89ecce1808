"""One engine's modeled curve: the roofline's points over its concurrency or rate ladder (closed or open loop, at a
percentile), anchored on the engine's measured rows where it has any (planner/perf/anchor.py), each point with its
provenance ('modeled', 'modeled (aic kernels)', 'extrapolated' and why, 'interpolated' between rows), priced as far
as its reach (`priced_points`), or aiconfigurator's points where the roofline would extrapolate."""

from __future__ import annotations

import dataclasses

import numpy as np

from planner.catalog import Catalog
from planner.metrics import percentile_label
from planner.perf.anchor import AnchorSet
from planner.perf.engines import engine_error
from planner.perf.roofline import (
    EngineShape,
    Speculation,
    concurrency_ladder,
    steady_state_curve,
)
from planner.perf.modeled_engine import (
    little_scale,
    modeled_engine,
    open_loop_points,
    open_loop_rates,
    rate_chunks,
)
from planner.perf.tables import (
    answers_at,
    result_from_row,
)
from planner.perf.reach import PricedCurve, Reach
from planner.perf.points import is_modeled
from planner.perf.types import Layout, PerfMiss, PerfQuery, PerfResult


MODEL_PROVENANCE = {"measured": "modeled", "aic kernels": "modeled (aic kernels)", "timed kernels": "modeled (timed kernels)",
                    "extrapolated": "extrapolated"}  # fmt: skip


def roofline_provenance(catalog: Catalog, shape: EngineShape, eff, isl: int) -> tuple[str, str | None]:
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


def whole_curve(*args, **kwargs) -> list[PerfResult] | str:
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
    floor_rps: float | None = None,
) -> PricedCurve | None:
    """The roofline's points for one engine over the concurrency ladder (or at the query's concurrency), anchored
    on the engine's measured rows (`modeled_engine`: which engines they anchor); a measured row at the query's
    lengths stands in for the model at its concurrency. An open-loop point runs the engine's step as its rows scale
    it (planner/perf/modeled_engine.py); a closed-loop point takes the rows' factors on its means (exact at them).
    An open-loop rate ladder is priced in ascending rate up to the first point `reach` refuses (all of it without a
    reach, at one rate, or where measured rows stand among the points), and never past its first rate the engine
    cannot serve within its KV capacity: the ladder ends there (`open_loop_points`). With a `floor_rps` (and a
    reach), None where the ladder's piece at the floor shows that the reach can use no point above it (`_floor_piece`;
    at the ladder's first piece, the curve), else the curve, that piece solved once."""
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
    else:
        top = 2 * capacity if (beyond_capacity and capacity) else capacity
        ladder = [query.concurrency] if query.concurrency else sorted(set(concurrency_ladder(top)) | set(exact))
        states = steady_state_curve(shape, eff, query.isl, query.osl, ladder, capacity, percentile, query.token_budget,
                                    query.prefix_cache)  # fmt: skip
        means = (steady_state_curve(shape, eff, query.isl, query.osl, ladder, capacity, None, query.token_budget,
                                    query.prefix_cache)
                 if anchors and percentile is not None else states)  # the anchors correct means
        scales = [None] * len(states)
    provenance, why = roofline_provenance(catalog, shape, eff, query.isl)
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
        solved: dict[int, list[PerfResult]] = {}  # pieces solved before the walk (a point's figures are its own)
        if floor_rps is not None and stop is not None:
            index = _floor_piece(rates, floor_rps)
            if index is None:
                return None
            if index > 0:  # at the first piece, the walk below solves no more than it
                solved[index] = results(*open_loop_points(query, engine, percentile, chunks[index]))
                if not _used_above(solved[index], len(chunks[index]), stop, floor_rps):
                    return None
        modeled: list[PerfResult] = []
        for index, chunk in enumerate(chunks):
            more = solved[index] if index in solved else results(*open_loop_points(query, engine, percentile, chunk))
            modeled += more
            ended = index == len(chunks) - 1 or len(more) < len(chunk)  # the ladder's last rate the engine serves
            first = None if stop is None else next(
                (i for i in range(len(modeled) - len(more), len(modeled)) if stop.refuses(modeled[i])), None)
            if first is not None:
                complete = first == len(modeled) - 1 and ended
                modeled = modeled[: first + 1]
            if first is not None or ended:
                break
        if not modeled:
            what = f"{query.rate_rps:g} requests/s is" if query.rate_rps is not None else "every rate is"
            return PricedCurve(f"{layout.label} {precision}: {what} beyond what the engine serves under Poisson "
                               f"arrivals with its batch within the KV cache ({capacity} sequences) 99% of the time")  # fmt: skip
    else:
        modeled = results(states, means, scales)
    if query.open_loop:  # rows are closed-loop measurements: they stand beside the open-loop points, not for them
        rows = [] if query.rate_rps is not None else [
            _row_point(row, min(modeled, key=lambda p: abs(p.concurrency - row.concurrency)), catalog)
            for row in exact.values()]  # fmt: skip
        return PricedCurve(_between_rows(sorted(modeled + rows, key=lambda p: p.request_throughput_rps), measured, query),
                           complete)  # fmt: skip
    points = [_row_point(exact[p.concurrency], p, catalog) if p.concurrency in exact else p for p in modeled]
    return PricedCurve(_between_rows(points, measured, query))


def _floor_piece(rates: list[float], floor_rps: float) -> int | None:
    """The piece (`rate_chunks`) of a ladder's first rate not below `floor_rps`, None where every rate is below it.
    A point's rate is its ladder rate to a few units in the last place: rates below the floor by more than 1e-9 of it
    give points at or below it."""
    above = next((i for i, rate in enumerate(rates) if rate > floor_rps * (1 - 1e-9)), None)
    return None if above is None else above // 3


def _used_above(piece: list[PerfResult], asked: int, reach: Reach, floor_rps: float) -> bool:
    """False where the points of a ladder's piece at a floor (`_floor_piece`: every rate of the pieces before it is
    below the floor) show that `reach` can use no point of the curve above `floor_rps`: the piece stops the curve
    (a point the reach refuses, or fewer points than its `asked` rates: the ladder ended), and no point before that
    is above the floor. True where the piece alone does not show it."""
    stop = next((i for i, point in enumerate(piece) if reach.refuses(point)), len(piece) if len(piece) < asked else None)
    return stop is None or any(point.request_throughput_rps > floor_rps for point in piece[:stop])


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
    floor_rps: float | None = None,
) -> PricedCurve | None:
    """Roofline points over the concurrency ladder (up to the KV capacity of an engine built for
    `engine_lengths`), anchored on the engine's rows (unless not `anchored`), or why there are none; with `aic_where_extrapolated`
    (--perf-source auto), aiconfigurator's points where the roofline would extrapolate. An open-loop ladder is
    priced only as far as `reach` can use it (planner/perf/reach.py); with a `floor_rps`, None where a piece of it
    shows that the reach can use no point above that rate (`_priced_curve`)."""
    curve = _priced_curve(query, catalog, tp, precision, percentile, engine_lengths=engine_lengths, layout=layout,
                          speculation=speculation, hop_bytes_per_s=hop_bytes_per_s, reach=reach, anchored=anchored,
                          floor_rps=floor_rps)  # fmt: skip
    if curve is None:
        return None
    plain = (layout is None or layout == Layout(tp)) and speculation is None and query.prefix_cache is None
    if not aic_where_extrapolated or not plain:
        return curve
    answer = aic_instead(query, catalog, tp, precision, curve.points)
    return curve if answer is curve.points else PricedCurve(answer)


def modeled_curve(query: PerfQuery, catalog: Catalog, percentile: float | None = None, anchored: bool = True) -> list[PerfResult] | PerfMiss:
    """The roofline's latency-throughput curve over the concurrency ladder for one TP and precision, on to twice
    the KV-cache capacity to show the queueing beyond it."""
    points = whole_curve(query, catalog, query.tp or 1, query.precision or "bf16", percentile, beyond_capacity=True, anchored=anchored)
    return PerfMiss(query, points) if isinstance(points, str) else points


def aic_instead(query: PerfQuery, catalog: Catalog, tp: int, precision: str, curve):
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
