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
    ITL    = D(B_p) / e                     B_p: the p-quantile of the batch, whose law is a birth-death chain
                                            (sequences arrive at random, each stays (OSL - 1) / e steps of D(n)
                                            with n running: `decode_batch_law`; Poisson, M/D/inf, where D is flat)
    Capacity: the largest lambda with ITL <= the limit and the batch's P99 (B_p if p is higher) within the KV
    cache: slots (almost) never run out.
"""

from __future__ import annotations


import numpy as np

from planner.catalog import Catalog
from planner.metrics import percentile_label
from planner.perf.engines import calibrated, engine_error
from planner.perf.token_gaps import gamma_quantile
from planner.perf.serving import instance_batch
from planner.perf.shapes import EngineShape, Speculation, tensor_split_refusal
from planner.perf.step import Efficiency, step_ms
from planner.perf.tables import instance_memory
from planner.perf.types import SLOT_PERCENTILE, Layout, PerfQuery, PerfResult

PREFILL_TOKEN_BUDGET = 16_384  # tokens a prefill step may hold (a common max_num_batched_tokens): k x ISL within it
UNLIMITED_UTILIZATION = 0.9  # a stage without its own limit is sized at this utilization, not at saturation
# a decode pool's batch stays within its cache SLOT_PERCENTILE of the time whatever the SLO's percentile: when it does
# not, arriving sequences wait with their first token out (at P50 sizing a 16k-token pool at 93% of its slots queued
# for seconds and its TPOT P50 was 5% over the limit in simulation)


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


def decode_batch_law(shape: EngineShape, eff: Efficiency, context: float, steps_per_request: float,
                     rate_per_ms: float, largest: int) -> np.ndarray | None:
    """pi(n), n = 0..largest: the law of the number of sequences decoding in a pool where they arrive at random
    (Poisson, rate lambda) and each stays `steps_per_request` (m) steps of D(n), the step of the n running: a
    birth-death chain with birth rate lambda and death rate n / (m D(n)), so

        pi(n) proportional to  prod over k = 1..n of  lambda m D(k) / k.

    With D constant this is Poisson(lambda m D) (M/D/inf). A step that grows with the batch (the KV read of long
    contexts) makes a busy pool slower to drain and widens the law: 16k-token prompts on Llama 3.3 70B TP8 H100 put
    the P99 batch at 190 where Poisson says 176 (the simulator found it, issue 32). None where the chain has no
    stationary law within `largest` (the tail beyond it not negligible)."""
    n = np.arange(1, largest + 1, dtype=float)
    step = np.asarray(step_ms(shape, eff, n, context), dtype=float)
    with np.errstate(divide="ignore"):
        log_terms = np.log(rate_per_ms * steps_per_request * step) - np.log(n)
    log_pi = np.concatenate([[0.0], np.cumsum(log_terms)])
    if log_terms[-1] > -1e-3:  # still rising at the end: not stationary within reach
        return None
    pi = np.exp(log_pi - log_pi.max())
    pi /= pi.sum()
    return None if pi[-1] > 1e-12 else pi


def _quantile(pi: np.ndarray, percentile: float) -> float:
    """The batch at `percentile` of the law pi (n = 0, 1, ...)."""
    return float(np.searchsorted(np.cumsum(pi), min(percentile, 99.999) / 100 - 1e-12))


def decode_capacity(shape: EngineShape, eff: Efficiency, isl: int, osl: int, itl_limit_ms: float | None,
                    max_running: int, percentile: float | None = None) -> dict | str:  # fmt: skip
    """The decode instance's best operating point: the largest arrival rate with ITL within its limit and the batch's
    p-quantile within `max_running` (module docstring; the batch's law from `decode_batch_law`), or why there is
    none. Keys: rps, itl_ms, batch (mean sequences decoding), step_ms (the mean step a sequence sees: Little's law,
    batch = rate x steps x step)."""
    per_step = shape.speculation.tokens_per_step if shape.speculation is not None else 1.0
    steps = max(osl - 1, 1) / per_step
    context = isl + osl / 2
    largest = 4 * max(max_running, 16)

    def at(rate_per_ms: float):
        """(ITL, the batch at the percentile (the mean without one), mean batch, the batch at P99 or the
        percentile if higher), or None without a law."""
        pi = decode_batch_law(shape, eff, context, steps, rate_per_ms, largest)
        if pi is None:
            return None
        mean = float(pi @ np.arange(len(pi)))
        high = max(mean if percentile is None else _quantile(pi, percentile), 1.0)
        full = _quantile(pi, max(percentile or 0.0, SLOT_PERCENTILE))
        return float(step_ms(shape, eff, high, context)) / per_step, high, mean, full

    def ok(rate_per_ms: float) -> bool:
        found = at(rate_per_ms)
        if found is None:
            return False
        itl, _, mean, full = found
        if full > max_running:  # sequences would wait for cache at the door: their next token waits with them
            return False
        if itl_limit_ms is None:  # only the cache bounds the batch: keep a margin below it, as for prefill
            return mean <= UNLIMITED_UTILIZATION * max_running
        return itl <= itl_limit_ms

    one_itl = float(step_ms(shape, eff, 1.0, context)) / per_step
    if itl_limit_ms is not None and one_itl > itl_limit_ms:
        return f"a decode step of one sequence takes {one_itl:.3g} ms per token, above the ITL limit {itl_limit_ms:g} ms"
    # the rate that keeps max_running busy at its own step bounds the search
    low, high = 0.0, 2 * max_running / (steps * float(step_ms(shape, eff, max_running, context)))
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if ok(mid) else (low, mid)
    if low <= 0:
        return f"no rate keeps the batch's {percentile_label(percentile)} within {max_running} sequences"
    itl, _, mean, _ = at(low)
    return dict(rps=low * 1e3, itl_ms=itl, batch=mean, step_ms=mean / (low * steps))


def stage_points(query: PerfQuery, catalog: Catalog, layout: Layout, precision: str, network_bytes_per_s: float,
                 engine_lengths: tuple[int, int], max_batch: int, percentile: float | None = None,
                 speculation: Speculation | None = None, hop_bytes_per_s: float = 0.0,
                 ) -> tuple[PerfResult | str, PerfResult | str]:  # fmt: skip
    """(prefill instance, decode instance) of this layout and precision for the query's lengths and limits, each
    a PerfResult with `stage` set, or why there is none. The query's TTFT limit bounds the prefill (its KV
    transfer included), its ITL limit the decode; an E2E limit leaves the decode what the TTFT limit does not
    take: ITL <= (E2E - TTFT limit) / (OSL - 1), so that any prefill with any decode instance meets it."""
    from planner.perf.engine_curve import roofline_provenance  # shared with aggregated curves
    from planner.perf.modeled_engine import engine_shape

    model, gpu = catalog.models[query.model], catalog.gpus[query.gpu]
    refusal = tensor_split_refusal(model, layout.tp)
    if refusal is not None:
        return refusal, refusal
    memory = instance_memory(catalog, query.model, query.gpu, layout.tp, precision, *engine_lengths,
                             layout.dp, layout.ep, layout.pp)  # fmt: skip
    if not memory.fits:
        why = f"{layout.label} {precision}: does not fit: {memory.reason}"
        return why, why
    shape = engine_shape(catalog, model, gpu, layout, precision, speculation, hop_bytes_per_s)
    found = calibrated(catalog, query.model, query.gpu, query.engine, query.engine_version)
    if isinstance(found, str):
        return found, found
    eff, engine_cls = found
    provenance, why = roofline_provenance(catalog, shape, eff, query.isl)
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
                  expected_error=engine_error(catalog, query.model, query.gpu, query.engine, shape.crosses_domain,
                                              query.engine_version).as_dict(),
                  engine_version=engine_cls.engine_version, error_known=engine_cls.known)  # fmt: skip
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
    # the batch cap is per attention-DP rank (planner/perf/serving.py)
    cap = min(memory.running_limit(query.isl, query.osl, query.engine) or 1, instance_batch(max_batch, layout.dp))
    decode = decode_capacity(shape, eff, query.isl, query.osl, itl_limit, cap, percentile)
    if not isinstance(decode, str):
        decode = PerfResult(
            **common, concurrency=max(1, round(decode["batch"])), ttft_ms=None, itl_ms=decode["itl_ms"], e2e_ms=None,
            tpot_ms=decode["itl_ms"],
            request_throughput_rps=decode["rps"], output_tokens_per_s=decode["rps"] * query.osl, stage="decode",
            source=f"{source}, decode-only instance"
            + (f"; speculative decoding, acceptance {speculation.acceptance:g} assumed" if speculation else ""),
            derivations=(
                f"decode-only: mean batch {decode['batch']:.1f} (cap {cap}), step {decode['step_ms']:.2f} ms, "
                f"ITL and TPOT: the step at {percentile_label(percentile)} of the batch (birth-death law)",
                *([speculation.describe()] if speculation else []),
                f"{gpu.architecture} factors: {eff.describe()}", *extra,
            ),
        )  # fmt: skip
    return prefill, decode
