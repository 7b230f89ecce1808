"""Memory fit (seed cases C5): weights split over TP, a runtime reserve, the rest holds the KV cache."""

from __future__ import annotations

import math

from planner.catalog import Gpu, ModelArch
from planner.perf.types import MemoryFit


def memory_fit(
    model: ModelArch,
    gpu: Gpu,
    gpus_per_instance: int,
    precision: str,
    tokens_per_sequence: int | None,
    reserve_fraction: float,
    kv_bytes_per_element: float = 2.0,
    dp: int = 1,
    ep: int = 1,
    pp: int = 1,
) -> MemoryFit:
    """`gpus_per_instance` is the TP of one attention rank; `dp` ranks, experts over `ep` GPUs, `pp` stages.
    Weights per GPU = (always-read weights / TP + routed experts / EP) / PP, each part at its bytes
    (`roofline.weight_format`: 4-bit layers with their block scales, embeddings and LM head bf16), where EP 1 splits
    the experts by TP too (weights / TP / PP for a dense model); usable = memory x (1 - reserve);
    KV tokens = DP x PP x (usable - weights per GPU) / KV bytes per token per GPU (`kv_bytes_per_token_per_gpu`:
    the ceil(KV heads / TP) heads one GPU keeps, a KV head replicated where TP exceeds them; the whole latent of
    an MLA cache): each rank holds its own sequences, each stage its layers of them;
    max concurrency = floor(KV tokens / (isl + osl)): sequences reserved in full (the running batch of a paged
    cache is larger: MemoryFit.running_limit).
    """
    tp = gpus_per_instance
    weights_gb_per_gpu = weights_gb_per_gpu_of(model, precision, tp, ep, pp)
    usable_gb_per_gpu = gpu.memory_gb * (1.0 - reserve_fraction)
    free_gb = usable_gb_per_gpu - weights_gb_per_gpu
    if free_gb <= 0:
        gpus = tp * dp * pp
        return MemoryFit(
            False, weights_gb_per_gpu, usable_gb_per_gpu, 0,
            f"weights need {weights_gb_per_gpu:.1f} GB per GPU at {precision} over {gpus} GPU(s); "
            f"{gpu.id} has {usable_gb_per_gpu:.1f} GB usable ({reserve_fraction:.0%} reserved)",
        )
    kv_per_token = model.kv_bytes_per_token(kv_bytes_per_element)
    if kv_per_token is None or tokens_per_sequence is None:
        why = "architecture of the model not known" if kv_per_token is None else "no sequence length"
        return MemoryFit(True, weights_gb_per_gpu, usable_gb_per_gpu, None, f"weights fit; KV capacity unknown ({why})")
    # the roofline's own, so that both read one cache: a latent (MLA) cache is whole on every GPU; heads' K and V
    # are split over them, whole heads per GPU
    from planner.perf.roofline import kv_bytes_per_token_per_gpu

    kv_tokens = free_gb * 1e9 / kv_bytes_per_token_per_gpu(model, tp, kv_bytes_per_element) * dp * pp
    max_concurrency = math.floor(kv_tokens / tokens_per_sequence)
    if max_concurrency < 1:
        return MemoryFit(
            False, weights_gb_per_gpu, usable_gb_per_gpu, 0,
            f"weights fit but the KV cache of one {tokens_per_sequence}-token sequence does not",
        )
    return MemoryFit(True, weights_gb_per_gpu, usable_gb_per_gpu, max_concurrency, "fits", kv_tokens)


def weights_gb_per_gpu_of(model: ModelArch, precision: str, tp: int, ep: int = 1, pp: int = 1) -> float:
    """GB of weights on one GPU: a dense model's weights / (TP x PP); with expert parallelism the routed experts
    are spread whole over EP GPUs and the rest (attention, shared experts, embeddings) split by TP. The bytes of
    each part are the roofline's (`weight_format`), so that memory and weight reads agree."""
    from planner.perf.roofline import weight_format

    weights = weight_format(model, precision)
    total_gb = weights.total_bytes / 1e9
    if ep <= 1 or model.moe is None:
        return total_gb / tp / pp
    experts_gb = weights.expert_bytes / 1e9
    return ((total_gb - experts_gb) / tp + experts_gb / ep) / pp
