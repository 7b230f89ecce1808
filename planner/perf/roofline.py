"""Layer 3 of the performance model: the roofline (provenance 'modeled').

Formulas (design.md, hardware.md), per engine instance of TP GPUs:

    prefill_ms(ISL, B)  = max(FLOPs / (TP x peak_FLOPs(precision) x e_c), weight_bytes / (TP x BW x e_b))
                          + allreduce(B x ISL tokens) + overhead
        FLOPs = B x (2 x active_params x ISL + 2 x layers x ISL^2 x hidden)
        (causal attention: half of the non-causal 4 x layers x ISL^2 x hidden of hardware.md, as causal kernels
         skip the masked half; our H100 step timings of benchmarks/gpu/ bear this out)
    decode_ms(B, L)     = max((weight_bytes + B x L x kv_bytes_per_token) / (TP x BW x e_b),
                              B x (2 x active_params + 4 x layers x L x hidden) / (TP x peak_FLOPs x e_c))
                          + allreduce(B tokens) + overhead
    allreduce(T tokens) = 2 x layers x (2 (TP - 1) x step_latency + 2 (TP - 1) / TP x T x hidden x 2 B / link_bw)
                          (ring all-reduce: 2 (TP - 1) steps, each with a fixed latency; 0 at TP 1)

e_c, e_b, overhead and the all-reduce step latency are the calibrated efficiencies (`calibration.py`).

Steady state of in-flight batching at concurrency C (closed loop: C requests always in flight), with
B = min(C, KV-cache capacity) running and the rest queued, X requests/s, prefill share rho = X x prefill_ms:

    ITL  = decode_ms(B, ISL + OSL/2) / (1 - rho)          decode steps stretched by interleaved prefills
    TTFT = prefill_ms + decode_ms / 2 + rho / (2 (1 - rho)) x prefill_ms  (+ (C - B) / X queued)
    E2E  = TTFT + (OSL - 1) x ITL,      X = B / E2E       (solved as a fixed point)

These are means. For a limit at percentile p > 50 the queueing part of TTFT is scaled by -ln(1 - p/100)
(the p-quantile of an exponential wait with that mean), and ITL becomes decode_ms + prefill_ms (a step that
carries a whole prefill) once more than 1 - p/100 of the time is spent in prefill.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.catalog import BYTES_PER_PARAM, Gpu, ModelArch

ACTIVATION_BYTES = 2.0  # bf16 activations in the all-reduce


@dataclass(frozen=True)
class Efficiency:
    """Fractions of peak the engine reaches, and a fixed per-step overhead; `source` says how they were found."""

    compute: float
    bandwidth: float
    overhead_ms: float
    allreduce_step_us: float
    source: str


@dataclass(frozen=True)
class EngineShape:
    """What the roofline needs of one engine instance."""

    model: ModelArch
    gpu: Gpu
    tp: int
    precision: str
    kv_bytes_per_element: float

    @property
    def active_params(self) -> float:
        moe = self.model.moe
        return (moe.active_params_b if moe is not None else self.model.params_b) * 1e9

    @property
    def weight_bytes(self) -> float:
        return self.model.params_b * 1e9 * BYTES_PER_PARAM[self.precision]

    @property
    def kv_bytes_per_token(self) -> float:
        return self.model.kv_bytes_per_token(self.kv_bytes_per_element)

    @property
    def peak_flops(self) -> float:
        return self.gpu.tflops_by_precision[self.precision] * 1e12

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.gpu.mem_bw_tb_per_s * 1e12


def kv_bytes_for(precision: str) -> float:
    """KV cache element size: fp8 engines keep an fp8 KV cache (TensorRT-LLM / NIM fp8 profiles); else bf16."""
    return 1.0 if precision in ("fp8", "fp4") else 2.0


def supports_roofline(model: ModelArch) -> bool:
    return None not in (model.layers, model.hidden, model.kv_heads, model.head_dim)


def allreduce_ms(shape: EngineShape, eff: Efficiency, tokens: float) -> float:
    """2 all-reduces per layer of tokens x hidden activations, ring algorithm over the GPU link."""
    if shape.tp == 1:
        return 0.0
    steps = 2 * (shape.tp - 1)
    message_bytes = tokens * shape.model.hidden * ACTIVATION_BYTES
    per_allreduce_s = steps * eff.allreduce_step_us * 1e-6 + steps / shape.tp * message_bytes / (
        shape.gpu.link_gb_per_s * 1e9
    )
    return 2 * shape.model.layers * per_allreduce_s * 1e3


def prefill_ms(shape: EngineShape, eff: Efficiency, isl: int, batch: int = 1) -> float:
    """Time to process `batch` prompts of `isl` tokens (compute-bound unless tiny)."""
    model = shape.model
    flops = batch * (2 * shape.active_params * isl + 2 * model.layers * isl**2 * model.hidden)
    compute_s = flops / (shape.tp * shape.peak_flops * eff.compute)
    weights_s = shape.weight_bytes / (shape.tp * shape.bandwidth_bytes_per_s * eff.bandwidth)
    return max(compute_s, weights_s) * 1e3 + allreduce_ms(shape, eff, batch * isl) + eff.overhead_ms


def decode_step_ms(shape: EngineShape, eff: Efficiency, batch: int, context_tokens: float) -> float:
    """One generated token for each of `batch` sequences holding `context_tokens` each (memory-bound)."""
    model = shape.model
    bytes_read = shape.weight_bytes + batch * context_tokens * shape.kv_bytes_per_token
    memory_s = bytes_read / (shape.tp * shape.bandwidth_bytes_per_s * eff.bandwidth)
    flops = batch * (2 * shape.active_params + 4 * model.layers * context_tokens * model.hidden)
    compute_s = flops / (shape.tp * shape.peak_flops * eff.compute)
    return max(memory_s, compute_s) * 1e3 + allreduce_ms(shape, eff, batch) + eff.overhead_ms


@dataclass(frozen=True)
class SteadyState:
    concurrency: int
    running: int
    ttft_ms: float
    itl_ms: float
    e2e_ms: float
    request_throughput_rps: float
    output_tokens_per_s: float
    prefill_share: float
    prefill_ms: float
    decode_step_ms: float


def steady_state(
    shape: EngineShape,
    eff: Efficiency,
    isl: int,
    osl: int,
    concurrency: int,
    max_running: int | None,
    percentile: float = 50.0,
) -> SteadyState:
    """In-flight batching at a fixed concurrency: see the module docstring for the equations."""
    running = min(concurrency, max_running) if max_running else concurrency
    running = max(running, 1)
    t_prefill = prefill_ms(shape, eff, isl)
    t_decode = decode_step_ms(shape, eff, running, isl + osl / 2)
    decode_tokens = max(osl - 1, 0)
    rate = running / (t_prefill + decode_tokens * t_decode)  # requests per ms, first guess: no interference
    for _ in range(500):
        rho = min(rate * t_prefill, 0.999)
        itl = t_decode / (1 - rho)
        ttft = t_prefill + t_decode / 2 + rho / (2 * (1 - rho)) * t_prefill
        new_rate = running / (ttft + decode_tokens * itl)
        if abs(new_rate - rate) <= 1e-12 + 1e-9 * rate:
            rate = new_rate
            break
        rate = 0.5 * rate + 0.5 * new_rate
    rho = min(rate * t_prefill, 0.999)
    wait = t_decode / 2 + rho / (2 * (1 - rho)) * t_prefill
    itl = t_decode / (1 - rho)
    queued_ms = (concurrency - running) / rate if concurrency > running else 0.0
    if percentile > 50:
        tail = -math.log(1 - percentile / 100)
        wait *= tail
        queued_ms *= tail
        if rho > 1 - percentile / 100:
            itl = t_decode + t_prefill
    ttft = t_prefill + wait + queued_ms
    e2e = ttft + decode_tokens * itl
    rps = rate * 1e3
    return SteadyState(
        concurrency=concurrency, running=running, ttft_ms=ttft, itl_ms=itl, e2e_ms=e2e,
        request_throughput_rps=rps, output_tokens_per_s=rps * osl, prefill_share=rho,
        prefill_ms=t_prefill, decode_step_ms=t_decode,
    )


def concurrency_ladder(max_running: int | None, limit: int = 4096) -> list[int]:
    """1, 2, 3, 4, 6, 8, 12, 16, ... up to the KV-cache capacity (powers of two and the midpoints between)."""
    top = min(max_running or limit, limit)
    ladder = {1}
    power = 1
    while power <= top:
        ladder.add(power)
        ladder.add(power + power // 2)
        power *= 2
    ladder.add(top)
    return sorted(c for c in ladder if 1 <= c <= top)
