"""Stage 2 of the performance model: one engine iteration (a forward pass of the batch) on an instance of TP GPUs,
per GPU (docs/perf-model.md):

    step_ms     = linear + elementwise + attention + all-reduce + fixed
    linear      = smoothmax(weights read / (BW e_bw), linear FLOPs / (peak(precision) e_gemm(precision) depth))
                  weights read = (layer weights the tokens touch x their bytes (`weight_format`) + LM head x 2 B) / TP
                  linear FLOPs = (2 x active layer params x tokens + 2 x LM head x (decode tokens + prompts)) / TP
                  peak and kernel factors are those of the compute precision (w4a16: bf16, w4a8: fp8), the bytes
                  those of the weights (4-bit formats 4.25-4.5 bits with their block scales)
                  (the embedding table is looked up, not multiplied; the LM head runs on a prompt's last token only
                  and stays bf16 in quantized checkpoints); depth = hidden / (hidden + d_half): a GEMM with a short
                  reduction spends more of its time loading and storing tiles
    elementwise = tokens x layers x (8 x hidden + 3 x MLP width / TP) x 2 B / (BW e_bw)
                  (two fused add + RMSNorm on the whole residual stream, the gated activation on the TP shard)
    attention   = decode: KV bytes of every decoding sequence on this GPU / (BW e_kv)
                  prefill: causal 2 x layers x ISL^2 x heads x head_dim FLOPs per prompt / (TP peak(bf16) e_attn)
    all-reduce  = 2 x layers x (latency + 2 (TP-1)/TP x tokens x hidden x 2 B / (link per direction x e_link))
                  (ring all-reduce over NVLink or PCIe; 0 at TP 1)
    fixed       = layers x (per-layer kernel latency(precision) + MoE routing latency) + per-iteration engine overhead
    mixture of experts: its expert weights read at e_bw x e_moe_bw and its expert FLOPs at e_gemm x e_moe_gemm(precision) (grouped
                  GEMMs against dense ones, fitted to the kernel database's MoE iterations), in the same smoothmax;
                  over EP ranks its FLOPs, activations and all-to-all are the busiest rank's (`routing.py`)
    smoothmax(a, b) = (a^k + b^k)^(1/k): a GEMM moves from memory- to compute-bound over a range of tokens

tokens = decode sequences + prompt tokens of the iteration. A mixture of experts reads, per layer, the attention
weights and the experts the tokens touch: E x (1 - (1 - k/E)^tokens) of E experts at top-k routing. The
efficiencies are calibrated per GPU generation (`calibration.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from planner.catalog import PRECISION_SPECS, compute_precision
from planner.perf.routing import busiest_rank_load
from planner.perf.shapes import ACTIVATION_BYTES, LM_HEAD_BYTES, EngineShape, ModelShape, ShapeBatch

NORM_PASSES = 8  # two fused add + RMSNorm per layer, each reading and writing the residual and the normed copy
COMPUTE_BOUND_TOKENS = 1e6  # a step this large is compute-bound on any GPU: what a prompt adds to it is its full cost




def _num(value):
    """A shape's field as a float (one engine: plain Python arithmetic, the same IEEE operations numpy's scalars do)
    or a float array (a batch of engines, planner.perf.shapes.ShapeBatch)."""
    return float(value) if isinstance(value, (int, float)) else np.asarray(value, dtype=float)


def _where(condition, yes, no):
    """np.where, or the plain choice where the condition is one engine's (a bool)."""
    if isinstance(condition, (bool, np.bool_)):
        return yes if condition else no
    return np.where(condition, yes, no)


_FP8_COMPUTE = tuple(p for p, spec in PRECISION_SPECS.items() if spec.compute == "fp8")
_FP4_COMPUTE = tuple(p for p, spec in PRECISION_SPECS.items() if spec.compute == "fp4")


def _by_precision(precision, bf16: float, fp8: float, fp4: float):
    """One value per class of compute precision (bf16/fp16 and w4a16: bf16; fp8 and w4a8: fp8; fp4); `precision`
    may be an array (a batch of engines)."""
    if isinstance(precision, str):
        compute = compute_precision(precision)
        return fp4 if compute == "fp4" else fp8 if compute == "fp8" else bf16
    return np.where(np.isin(precision, _FP4_COMPUTE), fp4, np.where(np.isin(precision, _FP8_COMPUTE), fp8, bf16))


@dataclass(frozen=True)
class Efficiency:
    """What an engine reaches on one GPU generation: fractions of peak, fixed latencies, and how they were found.

    Kernel factors (bandwidth ... sharpness) describe the GPU's kernels; engine factors (step, TTFT overheads and
    the prefill queue factor) the serving software. `basis`: 'measured' (engine benchmark rows of this generation),
    'aic kernels' / 'timed kernels' (the generation's own timed kernels, engine factors from another generation)
    or 'extrapolated' (another generation's kernel factors)."""

    bandwidth: float
    kv_bandwidth: float
    gemm_bf16: float
    gemm_fp8: float
    gemm_fp4: float
    gemm_depth_half: float
    attention_bf16: float
    attention_fp8: float
    link: float
    allreduce_latency_us: float
    layer_latency_bf16_us: float
    layer_latency_fp8_us: float
    layer_latency_fp4_us: float
    sharpness: float
    # a mixture of experts' grouped GEMMs against the dense GEMMs of the same precision: their compute and
    # weight-read efficiencies as fractions of the dense ones, and the routing / permute kernels per MoE layer
    moe_gemm_bf16: float = 1.0  # per compute precision, as the dense GEMM factors
    moe_gemm_fp8: float = 1.0
    moe_gemm_fp4: float = 1.0
    moe_bandwidth: float = 1.0
    moe_layer_latency_us: float = 0.0
    # the scale-out network between link domains (engines spanning nodes): its share of the NIC's bandwidth and its
    # latency per collective crossing it (fitted to measured multi-node serving rows, planner/perf/engines.py)
    scale_out: float = 1.0
    scale_out_latency_us: float = 0.0
    step_overhead_ms: float = 0.0
    ttft_overhead_ms: float = 0.0
    queue_factor: float = 1.0
    # measured rows of the engine scale its whole step (planner/perf/modeled_engine.py: the rows' TPOT factor; their
    # TTFT beyond it moves ttft_overhead_ms); 1 without rows. The model and the simulator run the same step.
    step_scale: float = 1.0
    source: str = ""
    basis: str = "measured"

    def anchored(self, step_scale: float, ttft_overhead_ms: float) -> Efficiency:
        """These factors with the step scaled and the per-request overhead set as measured rows put them."""
        return replace(self, step_scale=float(step_scale), ttft_overhead_ms=float(ttft_overhead_ms))

    def gemm(self, precision):
        return _by_precision(precision, self.gemm_bf16, self.gemm_fp8, self.gemm_fp4)

    def moe_gemm(self, precision):
        """Grouped GEMMs of a mixture of experts against the dense GEMMs of the same compute precision."""
        return _by_precision(precision, self.moe_gemm_bf16, self.moe_gemm_fp8, self.moe_gemm_fp4)

    def attention(self, precision):
        """Prefill attention as a fraction of the bf16 tensor rate: fp8 engines (fp8, w4a8 and fp4 compute, all
        with an fp8 KV cache) run fp8 attention kernels."""
        return _by_precision(precision, self.attention_bf16, self.attention_fp8, self.attention_fp8)

    def layer_latency_us(self, precision):
        return _by_precision(precision, self.layer_latency_bf16_us, self.layer_latency_fp8_us, self.layer_latency_fp4_us)

    def describe(self) -> str:
        return (
            f"bandwidth {self.bandwidth:.0%} (KV {self.kv_bandwidth:.0%}), GEMM bf16/fp8/fp4 {self.gemm_bf16:.0%}/"
            f"{self.gemm_fp8:.0%}/{self.gemm_fp4:.0%} (half at depth {self.gemm_depth_half:.0f}), attention "
            f"{self.attention_bf16:.0%}/{self.attention_fp8:.0%}, link {self.link:.0%} + {self.allreduce_latency_us:.3g} us, "
            f"per layer {self.layer_latency_bf16_us:.3g}/{self.layer_latency_fp8_us:.3g}/{self.layer_latency_fp4_us:.3g} us, "
            f"MoE GEMM bf16/fp8/fp4 {self.moe_gemm_bf16:.0%}/{self.moe_gemm_fp8:.0%}/{self.moe_gemm_fp4:.0%}, reads "
            f"{self.moe_bandwidth:.0%} of dense + {self.moe_layer_latency_us:.3g} us per layer, "
            f"per step {self.step_overhead_ms:.3g} ms, per request {self.ttft_overhead_ms:.3g} ms, queue x{self.queue_factor:.3g}"
        ) + (f"; step x{self.step_scale:.3f} to measured rows" if self.step_scale != 1.0 else "")


ENGINE_FACTORS = ("step_overhead_ms", "ttft_overhead_ms", "queue_factor")
MOE_GEMM_FACTORS = {"bf16": "moe_gemm_bf16", "fp8": "moe_gemm_fp8", "fp4": "moe_gemm_fp4"}  # by compute precision
MOE_FACTORS = (*MOE_GEMM_FACTORS.values(), "moe_bandwidth", "moe_layer_latency_us")
SCALE_OUT_FACTORS = ("scale_out", "scale_out_latency_us")
STEP_SCALES = ("step_scale",)  # set by measured rows (modeled_engine.py), never fitted
KERNEL_FACTORS = tuple(f.name for f in fields(Efficiency)
                       if f.name not in (*ENGINE_FACTORS, *SCALE_OUT_FACTORS, *STEP_SCALES, "source", "basis"))  # fmt: skip



def step_ms(shape: EngineShape | ShapeBatch, eff: Efficiency, decode_batch, decode_context, prefill_prompts=0.0,
            prefill_isl=0.0):  # fmt: skip
    """One iteration (`_unscaled_step_ms`), x the step scale measured rows put on the engine (`Efficiency.
    step_scale`). Arguments may be arrays (broadcast)."""
    total = _unscaled_step_ms(shape, eff, decode_batch, decode_context, prefill_prompts, prefill_isl)
    return total * eff.step_scale if eff.step_scale != 1.0 else total


def _unscaled_step_ms(shape: EngineShape | ShapeBatch, eff: Efficiency, decode_batch, decode_context,
                      prefill_prompts=0.0, prefill_isl=0.0):  # fmt: skip
    """One iteration: a decode token for each of `decode_batch` sequences holding `decode_context` tokens, fused with
    `prefill_prompts` prompts of `prefill_isl` tokens (module docstring). Arguments may be arrays (broadcast).

    Pipeline stages: the decoding sequences run as m = min(PP, sequences) micro-batches (prompts whole in one),
    each crossing the PP stages in turn, so a sequence waits PP stage times of its micro-batch, plus PP - 1 hops
    of its activations between nodes.
    Speculative decoding: each decoding sequence verifies k + 1 tokens, after k steps of the draft."""
    decode_batch = np.asarray(decode_batch, dtype=float)
    prompts = np.asarray(prefill_prompts, dtype=float)
    isl = np.asarray(prefill_isl, dtype=float)
    pp = _num(shape.pp)
    spec = shape.speculation
    verified = decode_batch * (spec.draft_tokens + 1 if spec is not None else 1)
    # decoding sequences split into micro-batches; a prompt is not split (it rides whole in one micro-batch, so
    # a step never gets faster by adding work to it)
    micro = np.maximum(np.minimum(pp, decode_batch), 1.0)
    stage = _stage_ms(shape, eff, verified / micro, decode_batch / micro, decode_context, prompts, isl)
    hop_ms = 0.0
    if shape.hop_bytes_per_s:
        hop_bytes = (verified / micro + prompts * isl) * shape.arch.hidden * ACTIVATION_BYTES
        hop_ms = (pp - 1) * (eff.allreduce_latency_us * 1e-3 + hop_bytes / shape.hop_bytes_per_s * 1e3)
    total = pp * stage + eff.step_overhead_ms + hop_ms
    if spec is not None:
        draft_ms = spec.draft_tokens * (_unscaled_step_ms(shape.draft, eff, decode_batch, decode_context) - eff.step_overhead_ms)
        total = total + np.where(decode_batch > 0, draft_ms, 0.0)
    return total


def decode_steps(shape: EngineShape, eff: Efficiency, decode_context: float):
    """batch -> `step_ms(shape, eff, batch, decode_context)` for one engine's decode steps (no prompt in them), an
    array of batches in, an array out: the open loop asks for some 25 of them a solve, 80 us each through the general
    step. The batch-free terms are computed once, and the operations on the batch are the general step's, in its
    order, less those that change nothing with no prompt (adding 0, x 1): the same floats, to the bit (tested against
    `step_ms` over engines and batches). Engines of several pipeline stages, with speculative decoding or an
    inter-stage hop take the general step."""
    if shape.pp != 1 or shape.speculation is not None or shape.hop_bytes_per_s:
        return lambda batch: step_ms(shape, eff, batch, decode_context)
    a, precision = shape.arch, shape.precision
    tp, dp, ep, pp = float(shape.tp), float(shape.dp), float(shape.ep), 1.0
    stage_gpus = tp * dp
    layers = a.layers / pp
    bandwidth = shape.bandwidth_bytes_per_s * eff.bandwidth
    routed = float(a.experts) > 1
    moe_bandwidth, moe_gemm = (eff.moe_bandwidth, eff.moe_gemm(precision)) if routed else (1.0, 1.0)
    spread_by = ep if ep > 1 else tp
    attention_weights = a.attention_params / tp * shape.layer_bytes_per_param
    head_weights = a.lm_head_params * LM_HEAD_BYTES / (tp * pp)
    twice_layers, expert_params = 2 * layers, a.experts_per_token * a.mlp_params
    linear_flops = shape.peak_flops * eff.gemm(precision)
    twice_head, head_ranks, head_flops = 2 * a.lm_head_params, dp * tp * pp, shape.bf16_flops * eff.gemm_bf16
    depth = a.hidden / (a.hidden + eff.gemm_depth_half)
    k = eff.sharpness
    mlp_width = a.active_mlp_width
    kv_bytes, kv_rate = shape.kv_bytes_per_token_per_gpu, shape.bandwidth_bytes_per_s * eff.kv_bandwidth
    context = float(np.asarray(decode_context, dtype=float))
    fixed = layers * _layer_latency_us(a, eff, precision) * 1e-3
    # the all-reduces of an engine split by TP alone (`allreduce_ms`): none at TP 1; with expert parallelism the
    # general all-reduce and all-to-all
    ring = min(shape.link_bytes_per_s * eff.link, max(shape.scale_out_bytes_per_s * eff.scale_out, 1e-9)) \
        if tp > shape.domain_gpus else shape.link_bytes_per_s * eff.link
    wire_share = 2 * (tp - 1) / np.maximum(tp, 1)
    wire_latency_s = eff.scale_out_latency_us * 1e-6 if tp > shape.domain_gpus else 0.0
    reduce_scale, latency_s = 2.0 * layers, eff.allreduce_latency_us * 1e-6
    overhead, scale = eff.step_overhead_ms, eff.step_scale

    def steps(batch):
        tokens = np.asarray(batch, dtype=float)
        rank_tokens = tokens / dp
        expert_reads = a.mlp_params_read(tokens) / spread_by
        busiest = 1.0 if ep <= 1 else busiest_rank_load(a.experts, a.experts_per_token, ep, tokens)
        weights = layers * (attention_weights + expert_reads * shape.expert_bytes_per_param / moe_bandwidth) + head_weights
        routed_flops = expert_params * tokens if ep <= 1 else expert_params * tokens * busiest
        compute_s = (twice_layers * (a.attention_params * rank_tokens / tp + routed_flops / stage_gpus / moe_gemm)
                     / linear_flops + twice_head * tokens / head_ranks / head_flops) / depth  # fmt: skip
        linear_s = ((weights / bandwidth) ** k + compute_s**k) ** (1.0 / k)
        routed_tokens = tokens if ep <= 1 else tokens * busiest
        elementwise_s = layers * (rank_tokens * NORM_PASSES * a.hidden + routed_tokens * 3 * mlp_width / stage_gpus) * ACTIVATION_BYTES / bandwidth
        kv_s = tokens / dp * context * kv_bytes / kv_rate
        total = (linear_s + elementwise_s + kv_s) * 1e3
        if ep > 1:
            total = total + allreduce_ms(shape, eff, tokens, busiest)
        elif tp > 1:
            wire_s = wire_share * rank_tokens * a.hidden * ACTIVATION_BYTES / ring + wire_latency_s
            total = total + reduce_scale * (latency_s + wire_s) * 1e3
        total = total + fixed + overhead
        return total * scale if scale != 1.0 else total

    return steps


def _stage_ms(shape: EngineShape | ShapeBatch, eff: Efficiency, decode_tokens, decode_seqs, decode_context, prompts, isl):
    """One pipeline stage (layers / PP) of tp x dp GPUs on one micro-batch, per GPU of the busiest rank.
    Attention runs on DP ranks of TP GPUs, each with its share of the sequences; experts split by TP (EP 1) or
    spread whole over the stage's GPUs (EP = TP x DP) process every token routed to them."""
    a, tp, precision = shape.arch, _num(shape.tp), shape.precision
    dp, ep, pp = (_num(v) for v in (shape.dp, shape.ep, shape.pp))
    stage_gpus = tp * dp
    tokens = decode_tokens + prompts * isl
    rank_tokens = tokens / dp
    layers = a.layers / pp
    bandwidth = shape.bandwidth_bytes_per_s * eff.bandwidth
    routed = _num(a.experts) > 1  # a mixture of experts: grouped GEMMs at their own efficiencies
    moe_bandwidth, moe_gemm = _where(routed, eff.moe_bandwidth, 1.0), _where(routed, eff.moe_gemm(precision), 1.0)
    expert_reads = a.mlp_params_read(tokens) / _where(ep > 1, ep, tp)  # split by TP, or whole experts over EP
    busiest = _busiest(a, ep, tokens)  # the busiest EP rank's tokens / mean
    weights = (
        layers * (a.attention_params / tp * shape.layer_bytes_per_param
                  + expert_reads * shape.expert_bytes_per_param / moe_bandwidth)
        + a.lm_head_params * LM_HEAD_BYTES / (tp * pp)
    )
    depth = a.hidden / (a.hidden + eff.gemm_depth_half)
    expert_params = a.experts_per_token * a.mlp_params
    compute_s = (
        2 * layers * (a.attention_params * rank_tokens / tp + expert_params * tokens * busiest / stage_gpus / moe_gemm)
        / (shape.peak_flops * eff.gemm(precision))
        + 2 * a.lm_head_params * (decode_tokens + prompts) / (dp * tp * pp) / (shape.bf16_flops * eff.gemm_bf16)
    ) / depth
    k = eff.sharpness
    linear_s = ((weights / bandwidth) ** k + compute_s**k) ** (1.0 / k)
    elementwise_s = layers * (rank_tokens * NORM_PASSES * a.hidden + tokens * busiest * 3 * a.active_mlp_width / stage_gpus) * ACTIVATION_BYTES / bandwidth
    kv_s = decode_seqs / dp * np.asarray(decode_context, dtype=float) * shape.kv_bytes_per_token_per_gpu / pp / (
        shape.bandwidth_bytes_per_s * eff.kv_bandwidth
    )
    causal_flops = prompts / dp * 2 * layers * isl**2 * a.heads * a.head_dim
    attention_s = kv_s + causal_flops / (tp * shape.bf16_flops * eff.attention(precision))
    return ((linear_s + elementwise_s + attention_s) * 1e3 + allreduce_ms(shape, eff, tokens, busiest)
            + layers * _layer_latency_us(a, eff, precision) * 1e-3)  # fmt: skip


def _busiest(a: ModelShape, ep, tokens):
    """routing.busiest_rank_load of the step's tokens: 1 without expert parallelism (every rank holds every expert's
    share), the same value the law gives there, without building its arrays."""
    if isinstance(ep, float) and ep <= 1:
        return 1.0
    return busiest_rank_load(a.experts, a.experts_per_token, ep, tokens)


def _layer_latency_us(a: ModelShape, eff: Efficiency, precision):
    """Fixed kernel latencies of one layer: the precision's, and a mixture of experts' routing kernels."""
    return eff.layer_latency_us(precision) + _where(_num(a.experts) > 1, eff.moe_layer_latency_us, 0.0)


def fixed_ms(shape: EngineShape | ShapeBatch, eff: Efficiency):
    """What every iteration pays whatever it holds: per-layer kernel latencies and the engine's own overhead (x the
    step scale, as `step_ms` counts them)."""
    fixed = shape.arch.layers * _layer_latency_us(shape.arch, eff, shape.precision) * 1e-3 + eff.step_overhead_ms
    return fixed * eff.step_scale if eff.step_scale != 1.0 else fixed


def allreduce_ms(shape: EngineShape | ShapeBatch, eff: Efficiency, tokens, busiest=None):
    """Per layer of one stage: with experts split by TP, 2 all-reduces of a rank's tokens x hidden bf16 activations
    over its TP GPUs (ring algorithm over the GPU link; 0 at TP 1). With expert parallelism, 1 all-reduce (the
    attention) and an all-to-all that sends each token to its k experts and back (dispatch and combine): per GPU
    2 x tokens / GPUs x k x hidden x 2 B x (EP-1)/EP over the link.

    Beyond one link domain of D GPUs (a board of 8; 72 in an NVL72): a ring over TP > D GPUs runs at the scale-out
    network's pace (per GPU and direction, x e_scale_out) and pays its latency; an all-to-all over EP > D GPUs sends
    the share 1 - D/EP of its bytes across that network, and each of its two phases waits the network's latency.
    `busiest`: the busiest EP rank's load (routing.busiest_rank_load of these tokens), where the caller has it."""
    tp, dp, ep, pp = (_num(v) for v in (shape.tp, shape.dp, shape.ep, shape.pp))
    layers = shape.arch.layers / pp
    rank_tokens = np.asarray(tokens, dtype=float) / dp
    link = shape.link_bytes_per_s * eff.link
    latency_s = eff.allreduce_latency_us * 1e-6
    domain = shape.domain_gpus
    scale_out = max(shape.scale_out_bytes_per_s * eff.scale_out, 1e-9)
    scale_out_latency_s = eff.scale_out_latency_us * 1e-6
    ring = _where(tp > domain, np.minimum(link, scale_out), link)
    wire_s = (2 * (tp - 1) / np.maximum(tp, 1) * rank_tokens * shape.arch.hidden * ACTIVATION_BYTES / ring
              + _where(tp > domain, scale_out_latency_s, 0.0))  # fmt: skip
    reduces = _where(ep > 1, 1.0, 2.0)
    reduce_ms = _where(tp > 1, reduces * layers * (latency_s + wire_s) * 1e3, 0.0)
    if isinstance(ep, float) and ep <= 1:  # no all-to-all: the expression below is 0 there
        return reduce_ms + np.zeros_like(rank_tokens)
    # the busiest rank receives (dispatch) and sends back (combine) its routed tokens' activations
    if busiest is None:
        busiest = busiest_rank_load(shape.arch.experts, shape.arch.experts_per_token, ep, tokens)
    dispatch_bytes = 2 * np.asarray(tokens, dtype=float) * busiest / (tp * dp) * shape.arch.experts_per_token * shape.arch.hidden * ACTIVATION_BYTES
    within_s = dispatch_bytes * (np.minimum(ep, domain) - 1) / np.maximum(ep, 1) / link
    off_domain = 1 - np.minimum(domain, ep) / np.maximum(ep, 1)  # the share of an all-to-all's bytes leaving the domain
    across_s = np.where(ep > domain, 2 * scale_out_latency_s, 0.0) + dispatch_bytes * off_domain / scale_out
    all_to_all_ms = _where(ep > 1, layers * (2 * latency_s + within_s + across_s) * 1e3, 0.0)
    return reduce_ms + all_to_all_ms


def prefill_ms(shape: EngineShape, eff: Efficiency, isl: int, batch: int = 1) -> float:
    """One iteration prefilling `batch` prompts of `isl` tokens, nothing decoding."""
    return float(step_ms(shape, eff, 0.0, 0.0, batch, isl))


def decode_step_ms(shape: EngineShape, eff: Efficiency, batch: int, context_tokens: float) -> float:
    """One generated token for each of `batch` sequences holding `context_tokens` each."""
    return float(step_ms(shape, eff, batch, context_tokens))


