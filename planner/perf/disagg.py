"""Disaggregated serving: prefill-only and decode-only engine instances (provenance 'modeled', the roofline's).

A request runs its prompt on a prefill instance, its KV cache moves over the network to a decode instance,
which generates the rest of the output (docs/perf-model.md, "Disaggregated prefill and decode"):

Prefill instance, batches of k prompts of ISL tokens, one batch per step P(k) = step_ms(0 decoding, k prompts):
    utilization rho = lambda P(k) / k       (lambda: requests/ms)
    W    = q rho P(k) / (2 (1 - rho))       M/D/1 wait, a batch as one service (Kingman's factor q of the engine);
                                            the batch is taken as full at every load, which overstates the wait
                                            when the queue is short
    TTFT = t0 + W + P(k) + KV transfer      t0: the engine's per-request overhead
    at a percentile p (50 to 99.9): W replaced by the Gamma quantile with W's mean and the M/D/1 variance
    W^2 + q lambda_b P^3 / (3 (1 - rho)), lambda_b = rho / P the batch rate.
    Capacity: the largest lambda with TTFT <= the limit (bisection on rho, TTFT rises with it), best over k.

KV transfer = ISL x KV bytes per token / (the network of the instance's GPUs, at line rate) + one hop latency:
    the prefill instance's share of its node's scale-out NICs (catalog `network_gbit_per_s`), a lower bound.

Decode instance, sequences arriving with their cache; each needs (OSL - 1) / e steps (e tokens per step with
speculative decoding, 1 without), a step of B sequences taking D(B) = step_ms(B decoding at ISL + OSL / 2):
    lambda = B / ((OSL - 1) / e x D(B))    Little's law on the decode phase
    ITL    = D(B_p) / e                     B_p: the p-quantile of the batch, Poisson with mean B (sequences
                                            arrive at random and each stays a fixed number of steps: M/D/inf)
    Capacity: the largest mean batch B with ITL <= the limit and B_p within the KV cache (slots never run out).
"""

from __future__ import annotations


from planner.catalog import Catalog
from planner.metrics import percentile_label
from planner.perf.engines import engine_efficiency, engine_error
from planner.perf.roofline import Efficiency, EngineShape, Speculation, gamma_quantile, step_ms
from planner.perf.tables import instance_memory
from planner.perf.types import Layout, PerfQuery, PerfResult

PREFILL_TOKEN_BUDGET = 16_384  # tokens a prefill step may hold (a common max_num_batched_tokens): k x ISL within it
UNLIMITED_UTILIZATION = 0.9  # a stage without its own limit is sized at this utilization, not at saturation


def kv_transfer_ms(shape: EngineShape, isl: int, network_bytes_per_s: float, eff: Efficiency) -> float:
    """One prompt's KV cache (every layer, K and V, or the MLA latent) over the instance's NICs at line rate."""
    kv_bytes = isl * shape.model.kv_bytes_per_token(shape.kv_bytes_per_element)
    return kv_bytes / network_bytes_per_s * 1e3 + eff.allreduce_latency_us * 1e-3


def _prefill_ttft(rho, service_ms, fixed_ms, queue_factor, percentile):
    mean_wait = queue_factor * rho * service_ms / (2 * (1 - rho))
    if percentile is None:
        return fixed_ms + service_ms + mean_wait
    batch_rate = rho / service_ms
    var = mean_wait**2 + queue_factor * batch_rate * service_ms**3 / (3 * (1 - rho))
    return fixed_ms + service_ms + gamma_quantile(mean_wait, var, percentile)


def prefill_capacity(shape: EngineShape, eff: Efficiency, isl: int, transfer_ms: float, ttft_limit_ms: float | None,
                     percentile: float | None = None) -> dict | str:  # fmt: skip
    """The prefill instance's best operating point: requests/s within the TTFT limit (module docstring), or why
    there is none. Keys: rps, ttft_ms, batch, service_ms, utilization."""
    fixed = eff.ttft_overhead_ms + transfer_ms
    best = None
    largest = max(1, PREFILL_TOKEN_BUDGET // max(isl, 1))
    batches = sorted({1, *(2**i for i in range(1, 16) if 2**i <= largest)})
    fastest = None
    for k in batches:
        service = float(step_ms(shape, eff, 0.0, 0.0, k, isl))
        alone = fixed + service
        fastest = alone if fastest is None else min(fastest, alone)
        if ttft_limit_ms is None:
            rho = UNLIMITED_UTILIZATION
        else:
            if alone > ttft_limit_ms:
                continue
            low, high = 0.0, 1.0 - 1e-9
            for _ in range(100):
                mid = (low + high) / 2
                ttft = float(_prefill_ttft(mid, service, fixed, eff.queue_factor, percentile))
                low, high = (mid, high) if ttft <= ttft_limit_ms else (low, mid)
            rho = low
        rps = rho * k / service * 1e3
        if rho > 0 and (best is None or rps > best["rps"]):
            ttft = float(_prefill_ttft(rho, service, fixed, eff.queue_factor, percentile))
            best = dict(rps=rps, ttft_ms=ttft, batch=k, service_ms=service, utilization=rho)
    if best is None:
        return f"prefill alone takes {fastest:,.0f} ms with the KV transfer, above the TTFT limit {ttft_limit_ms:g} ms"
    return best


def decode_capacity(shape: EngineShape, eff: Efficiency, isl: int, osl: int, itl_limit_ms: float | None,
                    max_running: int, percentile: float | None = None) -> dict | str:  # fmt: skip
    """The decode instance's best operating point: requests/s within the ITL limit with the batch's p-quantile
    within `max_running` (module docstring), or why there is none. Keys: rps, itl_ms, batch, step_ms."""
    per_step = shape.speculation.tokens_per_step if shape.speculation is not None else 1.0
    steps = max(osl - 1, 1) / per_step
    context = isl + osl / 2
    from scipy.stats import poisson  # scipy is slow to import: where it is used

    def at(mean_batch: float) -> tuple[float, float, float]:
        high_batch = mean_batch if percentile is None else float(poisson.ppf(min(percentile, 99.999) / 100, mean_batch))
        high_batch = max(high_batch, 1.0)
        itl = float(step_ms(shape, eff, high_batch, context)) / per_step
        step = float(step_ms(shape, eff, max(mean_batch, 1.0), context))
        return itl, high_batch, step

    one_itl = at(1e-9)[0]
    if itl_limit_ms is not None and one_itl > itl_limit_ms:
        return f"a decode step of one sequence takes {one_itl:.3g} ms per token, above the ITL limit {itl_limit_ms:g} ms"
    low, high = 1e-9, float(max_running)
    if at(high)[1] <= max_running and (itl_limit_ms is None or at(high)[0] <= itl_limit_ms):
        low = high
    else:
        for _ in range(60):
            mid = (low + high) / 2
            itl, top, _ = at(mid)
            ok = top <= max_running and (itl_limit_ms is None or itl <= itl_limit_ms)
            low, high = (mid, high) if ok else (low, mid)
    if itl_limit_ms is None:  # only the cache bounds the batch: keep a margin below it, as for prefill
        low = min(low, UNLIMITED_UTILIZATION * max_running)
    itl, _, step = at(low)
    rps = low / (steps * step) * 1e3
    return dict(rps=rps, itl_ms=itl, batch=low, step_ms=step)


def stage_points(query: PerfQuery, catalog: Catalog, layout: Layout, precision: str, network_bytes_per_s: float,
                 engine_lengths: tuple[int, int], max_batch: int, percentile: float | None = None,
                 speculation: Speculation | None = None, hop_bytes_per_s: float = 0.0,
                 ) -> tuple[PerfResult | str, PerfResult | str]:  # fmt: skip
    """(prefill instance, decode instance) of this layout and precision for the query's lengths and limits, each
    a PerfResult with `stage` set, or why there is none. The query's TTFT limit bounds the prefill (its KV
    transfer included), its ITL limit the decode; an E2E limit leaves the decode what the TTFT limit does not
    take: ITL <= (E2E - TTFT limit) / (OSL - 1), so that any prefill with any decode instance meets it."""
    from planner.perf import _provenance, engine_shape  # the package's own helpers, shared with aggregated curves

    model, gpu = catalog.models[query.model], catalog.gpus[query.gpu]
    memory = instance_memory(catalog, query.model, query.gpu, layout.tp, precision, *engine_lengths,
                             layout.dp, layout.ep, layout.pp)  # fmt: skip
    if not memory.fits:
        why = f"{layout.label} {precision}: does not fit: {memory.reason}"
        return why, why
    shape = engine_shape(catalog, model, gpu, layout, precision, speculation, hop_bytes_per_s)
    eff = engine_efficiency(catalog, query.model, query.gpu, query.engine)
    provenance, why = _provenance(catalog, shape, eff, query.isl)
    transfer = kv_transfer_ms(shape, query.isl, network_bytes_per_s, eff)
    # a decode-only step carries no prompt: one request's gaps are the steps of its batch, so TPOT and ITL are both
    # the step of the batch's quantile (a bound on TPOT, whose mean over a request's life varies less)
    gap_limits = [v for v in (query.itl_ms, query.tpot_ms) if v is not None]
    itl_limit = min(gap_limits) if gap_limits else None
    if query.e2e_ms is not None:
        if query.ttft_ms is None:
            why_not = "an E2E limit without a TTFT limit does not say how much of it the prefill may take"
            return why_not, why_not
        share = (query.e2e_ms - query.ttft_ms) / max(query.osl - 1, 1)
        itl_limit = share if itl_limit is None else min(itl_limit, share)
        if itl_limit <= 0:
            why_not = f"the TTFT limit {query.ttft_ms:g} ms leaves nothing of the E2E limit {query.e2e_ms:g} ms"
            return why_not, why_not
    common = dict(model=query.model, gpu=query.gpu, tp=layout.tp, precision=precision, isl=query.isl, osl=query.osl,
                  gpus_per_instance=layout.gpus, ttft_ms_bound=None, itl_ms_bound=None, provenance=provenance,
                  memory=memory, dp=layout.dp, ep=layout.ep, pp=layout.pp, engine=query.engine,
                  expected_error=engine_error(catalog, query.model, query.gpu, query.engine,
                                               shape.crosses_domain).as_dict())  # fmt: skip
    extra = (f"extrapolated: {why}",) if why else ()
    source = f"roofline ({eff.source})"
    prefill = prefill_capacity(shape, eff, query.isl, transfer, query.ttft_ms, percentile)
    if not isinstance(prefill, str):
        prefill = PerfResult(
            **common, concurrency=prefill["batch"], ttft_ms=prefill["ttft_ms"], itl_ms=None, e2e_ms=None,
            request_throughput_rps=prefill["rps"], output_tokens_per_s=None, stage="prefill",
            source=f"{source}, prefill-only instance",
            derivations=(
                f"prefill-only: {prefill['batch']} prompt(s) of {query.isl} tokens per step of {prefill['service_ms']:.1f} ms, "
                f"{prefill['utilization']:.0%} busy (M/D/1 wait, latencies at {percentile_label(percentile)}), KV transfer "
                f"{transfer:.1f} ms at {network_bytes_per_s / 1e9:.0f} GB/s",
                f"{gpu.architecture} factors: {eff.describe()}", *extra,
            ),
        )  # fmt: skip
    running = memory.running_limit(query.isl, query.osl) or 1
    decode = decode_capacity(shape, eff, query.isl, query.osl, itl_limit, min(running, max_batch), percentile)
    if not isinstance(decode, str):
        decode = PerfResult(
            **common, concurrency=max(1, round(decode["batch"])), ttft_ms=None, itl_ms=decode["itl_ms"], e2e_ms=None,
            tpot_ms=decode["itl_ms"],
            request_throughput_rps=decode["rps"], output_tokens_per_s=decode["rps"] * query.osl, stage="decode",
            source=f"{source}, decode-only instance"
            + (f"; speculative decoding, acceptance {speculation.acceptance:g} assumed" if speculation else ""),
            derivations=(
                f"decode-only: mean batch {decode['batch']:.1f} (cap {min(running, max_batch)}), step {decode['step_ms']:.2f} ms, "
                f"ITL and TPOT: the step at {percentile_label(percentile)} of the batch (Poisson)",
                *([speculation.describe()] if speculation else []),
                f"{gpu.architecture} factors: {eff.describe()}", *extra,
            ),
        )  # fmt: skip
    return prefill, decode
