"""Layer 3 of the performance model: the roofline (provenance 'modeled').

One engine iteration (a forward pass of the batch) on an instance of TP GPUs, per GPU (docs/perf-model.md):

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

Steady state of in-flight batching at concurrency C (closed loop): B = min(C, KV capacity) requests run, the rest
wait for a slot. X requests/s, r = (B-1)/B, and for one request among the B:

    rho  = X r Delta                      time share of the others' prompts (Delta: what one adds to a compute-bound step)
    n    = X r (OSL-1) ITL                others decoding at a time (Little's law on the decode phase)
    ITL  = D(1 + n) / (1 - rho)           decode steps of the batch, stretched by the prompts fused into them
    TTFT = t0 + [B > 1] (D(1 + n)/2 + q rho / (2 (1 - rho)) Delta) + P(n)
                                          request overhead, the step in progress, the prompts ahead (M/D/1 with
                                          Kingman's arrival-variability factor q), the own prompt's step
    E2E  = TTFT + (OSL - 1) ITL,   X = B / E2E

D(b) is the decode step of b sequences (linear between b = 1 and B), P(n) the own prompt's step beside n decoding
sequences. X x E2E rises strictly with X, so the equation has exactly one root; `steady_state_curve` bisects for it
at every concurrency at once and raises `SteadyStateError` unless X x E2E = B to 1e-9. At C = 1 it gives
TTFT = t0 + prefill and ITL = one decode step of batch 1. Beyond the KV capacity the C - B waiting requests wait
(C - B) / X for a slot (added to TTFT and E2E).

These are means (the ITL above is a request's mean gap, TPOT). At a percentile p (50 to 99.9, planner/metrics.py)
TTFT and TPOT are their deterministic part plus the p-quantile of a Gamma distribution with the mean and variance of
their random part (the step in progress, the M/D/1 wait, the wait for a slot; the number of prompts fused into one
request's decode steps), and ITL, one gap between tokens, is the decode step plus the prompt chunks the step carries
under the engine's token budget (`TokenGaps`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import cached_property

import numpy as np

from planner.catalog import (
    EMBEDDING_BYTES,
    MXFP4_BITS,
    PRECISION_SPECS,
    Gpu,
    ModelArch,
    compute_precision,
)
from planner.perf.types import DEFAULT_TOKEN_BUDGET, PrefixCache, SteadyStateError, prompt_terms  # noqa: F401 (defined in the light module, used here)
from planner.perf.routing import busiest_rank_load

ACTIVATION_BYTES = 2.0  # bf16 activations (all-reduce, norms, MLP activation)
LM_HEAD_BYTES = 2.0  # quantized checkpoints keep the LM head in bf16
NORM_PASSES = 8  # two fused add + RMSNorm per layer, each reading and writing the residual and the normed copy
COMPUTE_BOUND_TOKENS = 1e6  # a step this large is compute-bound on any GPU: what a prompt adds to it is its full cost




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
    source: str = ""
    basis: str = "measured"

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
        )


ENGINE_FACTORS = ("step_overhead_ms", "ttft_overhead_ms", "queue_factor")
MOE_GEMM_FACTORS = {"bf16": "moe_gemm_bf16", "fp8": "moe_gemm_fp8", "fp4": "moe_gemm_fp4"}  # by compute precision
MOE_FACTORS = (*MOE_GEMM_FACTORS.values(), "moe_bandwidth", "moe_layer_latency_us")
SCALE_OUT_FACTORS = ("scale_out", "scale_out_latency_us")
KERNEL_FACTORS = tuple(f.name for f in fields(Efficiency)
                       if f.name not in (*ENGINE_FACTORS, *SCALE_OUT_FACTORS, "source", "basis"))  # fmt: skip


@dataclass(frozen=True)
class ModelShape:
    """Parameter counts a step reads and multiplies, from the published architecture (fields may be arrays: a
    batch of engines)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    attention_params: float  # per layer: Q, K, V, O projections
    mlp_params: float  # per layer: the dense MLP, or one expert
    experts: int  # 1 for a dense model
    experts_per_token: int
    lm_head_params: float

    @property
    def active_layer_params(self):
        return self.layers * (self.attention_params + self.experts_per_token * self.mlp_params)

    @property
    def active_mlp_width(self):
        """Intermediate activations per token and layer (all routed experts)."""
        return self.experts_per_token * self.mlp_params / (3 * self.hidden)

    def mlp_params_read(self, tokens):
        """MLP weights per layer a step of `tokens` tokens reads: every expert a token is routed to, once."""
        fraction = 1.0 - (1.0 - self.experts_per_token / self.experts) ** np.maximum(tokens, 0.0)
        touched = np.where(np.asarray(self.experts) > 1, self.experts * fraction, 1.0)
        return touched * self.mlp_params

    def layer_params_read(self, tokens):
        """Layer weights a step of `tokens` tokens reads (attention and the experts touched, every layer)."""
        return self.layers * (self.attention_params + self.mlp_params_read(tokens))


def model_shape(model: ModelArch) -> ModelShape:
    """Split the parameters into attention, MLP (per expert) and LM head. Where the FFN width or the vocabulary is
    not published, the MLP gets what the attention leaves of the (active) parameters, and no LM head is counted.
    A mixture of experts whose per-layer formula misses its published totals by more than 3% (dense first layers,
    shared experts, latent attention, experts in every other layer) is split by the totals instead (`_moe_split`)."""
    hidden, kv_heads, head_dim = model.hidden, model.kv_heads, model.head_dim
    heads = model.heads or (hidden // head_dim)
    attention = float(hidden * head_dim * (2 * heads + 2 * kv_heads))
    experts = model.moe.experts if model.moe else 1
    top_k = model.moe.experts_per_token if model.moe else 1
    if model.ffn is None or model.vocab is None:
        active = (model.moe.active_params_b if model.moe else model.params_b) * 1e9
        mlp = max(active / model.layers - attention, 0.0) / top_k
        return ModelShape(model.layers, hidden, heads, kv_heads, head_dim, attention, mlp, experts, top_k, 0.0)
    mlp, lm_head = float(3 * hidden * model.ffn), float(model.vocab * hidden)
    if model.moe is not None and experts > top_k:
        split = _moe_split(model, attention, mlp, lm_head)
        if split is not None:
            attention, mlp = split
    return ModelShape(model.layers, hidden, heads, kv_heads, head_dim, attention, mlp, experts, top_k, lm_head)


def _moe_split(model: ModelArch, attention: float, mlp: float, lm_head: float) -> tuple[float, float] | None:
    """(always-read params per layer, one routed expert's params per layer) from the published totals, or None when
    the per-layer formula already gives them within 3%. Active parameters are those a token multiplies by: the LM
    head counts, the input embedding (a lookup) does not, as OpenAI's gpt-oss card counts them:

        total  = always + E x expert + LM head + embedding,   active = always + k x expert + LM head
        expert = (total - active - embedding) / (E - k),      always = active - k x expert - LM head

    'always' holds attention (MLA projections included), shared experts and dense layers, spread over the layers."""
    moe, layers = model.moe, model.layers
    total, active = model.params_b * 1e9, moe.active_params_b * 1e9
    embedding = lm_head  # the input table has the LM head's shape (untied in every MoE model of the catalog)
    formula_total = layers * (attention + moe.experts * mlp) + lm_head + embedding
    formula_active = layers * (attention + moe.experts_per_token * mlp) + lm_head
    if abs(formula_total / total - 1) <= 0.03 and abs(formula_active / active - 1) <= 0.03:
        return None
    expert = (total - active - embedding) / (moe.experts - moe.experts_per_token)
    always = active - moe.experts_per_token * expert - lm_head
    if expert <= 0 or always <= 0:
        return None
    return always / layers, expert / layers


@dataclass(frozen=True)
class WeightFormat:
    """Bytes per parameter of each part of a model at a precision: the one rule the memory fit (`memory.py`) and
    the roofline's weight reads share. `layer`: the always-read layer weights (attention, router, shared experts,
    dense layers; a dense model's MLP is `expert`); `expert`: the MLP, or one routed expert's; `tables`: the
    embedding table and LM head. The parameter counts are `model_shape`'s split of the published total."""

    layer: float
    expert: float
    tables: float
    layer_params: float  # always-read layer parameters (all layers)
    expert_params: float  # MLP or routed-expert parameters (all layers, all experts)
    table_params: float  # embedding table and LM head

    @property
    def total_bytes(self) -> float:
        return self.layer * self.layer_params + self.expert * self.expert_params + self.tables * self.table_params

    @property
    def expert_bytes(self) -> float:
        return self.expert * self.expert_params


def weight_format(model: ModelArch, precision: str) -> WeightFormat:
    """How a model's weights are stored at a precision (docs/perf-model.md, "Precisions"):

    - 8 and 16 bits: every parameter at the precision's bytes (params x bytes, as the memory fit always had it);
    - 4 bits (fp4, w4a16, w4a8): the layers' linear weights at the format's bits (block scales included), the
      embedding table and LM head in bf16 (2 B); a mixture of experts shipped in fp4 (gpt-oss: MXFP4 experts,
      bf16 attention, router and embeddings) keeps that checkpoint: routed experts at 4.25 bits, the rest 2 B.

    The embedding table and LM head are vocabulary x hidden each (one of them where the published total leaves
    room for one only: tied embeddings); without a published vocabulary every parameter is a layer's."""
    spec = PRECISION_SPECS[precision]
    total = model.params_b * 1e9
    tables = expert = 0.0
    if supports_roofline(model):
        shape = model_shape(model)
        lm_head = float(shape.lm_head_params)
        layer_total = shape.layers * (shape.attention_params + shape.experts * shape.mlp_params)
        tables = min(max(total - layer_total, lm_head), 2 * lm_head, total)
        expert = min(shape.layers * shape.experts * shape.mlp_params, total - tables)
    layer = total - tables - expert
    if not spec.four_bit:
        return WeightFormat(spec.weight_bytes, spec.weight_bytes, spec.weight_bytes, layer, expert, tables)
    if model.checkpoint_precision == "fp4" and model.moe is not None:
        return WeightFormat(EMBEDDING_BYTES, MXFP4_BITS / 8, EMBEDDING_BYTES, layer, expert, tables)
    return WeightFormat(spec.weight_bytes, spec.weight_bytes, EMBEDDING_BYTES, layer, expert, tables)


@dataclass(frozen=True)
class EngineShape:
    """What the roofline needs of one engine instance."""

    model: ModelArch
    gpu: Gpu
    tp: int
    precision: str
    kv_bytes_per_element: float
    dp: int = 1  # attention data-parallel ranks of tp GPUs each
    ep: int = 1  # expert parallelism: 1 (experts split by TP) or tp x dp (whole experts spread over the stage)
    pp: int = 1  # pipeline stages (nodes), each of tp x dp GPUs and layers / pp
    hop_bytes_per_s: float = 0.0  # network between pipeline stages, per stage (0: no stage boundary to cross)
    speculation: Speculation | None = None

    @cached_property
    def arch(self) -> ModelShape:
        return model_shape(self.model)

    @property
    def gpus(self) -> int:
        return self.tp * self.dp * self.pp

    @cached_property
    def draft(self) -> EngineShape | None:
        """The engine that proposes the draft tokens: the draft model on the same GPUs, or the target's own
        multi-token-prediction head (one more layer of the target)."""
        spec = self.speculation
        if spec is None:
            return None
        model = spec.draft_model or self.model.model_copy(update={"layers": 1})
        return EngineShape(model, self.gpu, self.tp, self.precision, self.kv_bytes_per_element, self.dp,
                           self.ep if spec.draft_model is None else 1, 1)  # fmt: skip

    @cached_property
    def weights(self) -> WeightFormat:
        return weight_format(self.model, self.precision)

    @property
    def weight_bytes(self) -> float:
        return self.weights.total_bytes

    @property
    def layer_bytes_per_param(self) -> float:
        """Bytes of an always-read layer weight (attention, router, shared experts)."""
        return self.weights.layer

    @property
    def expert_bytes_per_param(self) -> float:
        """Bytes of an MLP or routed-expert weight."""
        return self.weights.expert

    @property
    def kv_bytes_per_token(self) -> float:
        return self.model.kv_bytes_per_token(self.kv_bytes_per_element)

    @cached_property
    def kv_bytes_per_token_per_gpu(self) -> float:
        """K and V of the KV heads one GPU holds (a KV head is replicated when TP exceeds the KV heads); a latent
        (MLA) cache is whole on every GPU."""
        return kv_bytes_per_token_per_gpu(self.model, self.tp, self.kv_bytes_per_element)

    @property
    def peak_flops(self) -> float:
        """The tensor rate of the compute precision (a weight-only format multiplies at its activations')."""
        return self.gpu.tflops_by_precision[compute_precision(self.precision)] * 1e12

    @property
    def bf16_flops(self) -> float:
        rates = self.gpu.tflops_by_precision
        return rates.get("bf16", rates.get("fp16", rates[compute_precision(self.precision)])) * 1e12

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.gpu.mem_bw_tb_per_s * 1e12

    @property
    def link_bytes_per_s(self) -> float:
        """Per direction: the catalog gives the datasheet's total of both directions."""
        return self.gpu.link_gb_per_s * 1e9 / 2

    @property
    def domain_gpus(self) -> float:
        """GPUs one link domain joins (a board, an NVL72 rack); unknown: as if it held the whole stage."""
        return float(self.gpu.domain_gpus) if self.gpu.domain_gpus and self.gpu.scale_out_gb_per_s else math.inf

    @property
    def scale_out_bytes_per_s(self) -> float:
        """The scale-out network beyond the domain, per GPU and direction (0: not known)."""
        return (self.gpu.scale_out_gb_per_s or 0.0) * 1e9

    @property
    def crosses_domain(self) -> bool:
        """Whether the experts or the attention TP of one stage span more GPUs than one link domain joins."""
        return max(self.tp, self.ep) > self.domain_gpus


@dataclass(frozen=True)
class Speculation:
    """Speculative decoding: `draft_tokens` k proposed per step by a draft model or the target's MTP head, each
    accepted with probability `acceptance` (given: it depends on the data). A step verifies k + 1 tokens per
    sequence and yields (1 - a^(k+1)) / (1 - a) of them on average (Leviathan et al. 2023)."""

    method: str  # mtp | draft
    draft_tokens: int
    acceptance: float
    draft_model: ModelArch | None = None

    @property
    def tokens_per_step(self) -> float:
        a, k = self.acceptance, self.draft_tokens
        return float(k + 1) if a >= 1 else (1 - a ** (k + 1)) / (1 - a)

    def describe(self) -> str:
        who = f"draft model {self.draft_model.id}" if self.draft_model else "MTP head"
        return (f"speculative decoding ({who}, {self.draft_tokens} draft tokens, acceptance {self.acceptance:g} "
                f"assumed): {self.tokens_per_step:.2f} tokens per step")  # fmt: skip


@dataclass(frozen=True)
class ShapeBatch:
    """Many engine shapes as arrays with EngineShape's attribute names, so `step_ms` times them in one pass
    (calibration fits thousands of iterations at once)."""

    arch: ModelShape
    tp: np.ndarray
    precision: np.ndarray
    layer_bytes_per_param: np.ndarray
    expert_bytes_per_param: np.ndarray
    kv_bytes_per_token_per_gpu: np.ndarray
    peak_flops: np.ndarray
    bf16_flops: np.ndarray
    bandwidth_bytes_per_s: np.ndarray
    link_bytes_per_s: np.ndarray
    dp: np.ndarray | float = 1.0  # a calibration batch holds single-stage engines without speculation, each
    ep: np.ndarray | float = 1.0  # within one link domain
    pp: float = 1.0
    domain_gpus: float = math.inf
    scale_out_bytes_per_s: float = 0.0
    hop_bytes_per_s: float = 0.0
    speculation: None = None
    draft: None = None

    @classmethod
    def of(cls, shapes: list[EngineShape]) -> ShapeBatch:
        arrays = {f.name: np.array([getattr(s.arch, f.name) for s in shapes], dtype=float) for f in fields(ModelShape)}
        column = lambda name: np.array([getattr(s, name) for s in shapes], dtype=float)  # noqa: E731
        return cls(
            arch=ModelShape(**arrays), tp=column("tp"), precision=np.array([s.precision for s in shapes]),
            layer_bytes_per_param=column("layer_bytes_per_param"), expert_bytes_per_param=column("expert_bytes_per_param"),
            kv_bytes_per_token_per_gpu=column("kv_bytes_per_token_per_gpu"),
            peak_flops=column("peak_flops"), bf16_flops=column("bf16_flops"),
            bandwidth_bytes_per_s=column("bandwidth_bytes_per_s"), link_bytes_per_s=column("link_bytes_per_s"),
            dp=column("dp"), ep=column("ep"),
        )  # fmt: skip


def kv_bytes_per_token_per_gpu(model: ModelArch, tp: int, kv_bytes_per_element: float) -> float:
    """KV cache bytes one GPU of a TP engine keeps per token: its share of the KV heads over the cache layers,
    or the whole MLA latent (shared by all heads, so not split by TP)."""
    if model.mla is not None:
        return model.kv_bytes_per_token(kv_bytes_per_element)
    return 2 * model.cache_layers * math.ceil(model.kv_heads / tp) * model.head_dim * kv_bytes_per_element


def kv_bytes_for(precision: str) -> float:
    """KV cache element size: engines computing in fp8 or fp4 (fp8, w4a8, fp4) keep an fp8 KV cache (TensorRT-LLM /
    NIM fp8 profiles); bf16 ones (bf16, fp16, w4a16) a bf16 cache."""
    return PRECISION_SPECS[precision].kv_bytes


def supports_roofline(model: ModelArch) -> bool:
    return None not in (model.layers, model.hidden, model.kv_heads, model.head_dim)


def step_ms(shape: EngineShape | ShapeBatch, eff: Efficiency, decode_batch, decode_context, prefill_prompts=0.0,
            prefill_isl=0.0):  # fmt: skip
    """One iteration: a decode token for each of `decode_batch` sequences holding `decode_context` tokens, fused with
    `prefill_prompts` prompts of `prefill_isl` tokens (module docstring). Arguments may be arrays (broadcast).

    Pipeline stages: the decoding sequences run as m = min(PP, sequences) micro-batches (prompts whole in one),
    each crossing the PP stages in turn, so a sequence waits PP stage times of its micro-batch, plus PP - 1 hops
    of its activations between nodes.
    Speculative decoding: each decoding sequence verifies k + 1 tokens, after k steps of the draft."""
    decode_batch = np.asarray(decode_batch, dtype=float)
    prompts = np.asarray(prefill_prompts, dtype=float)
    isl = np.asarray(prefill_isl, dtype=float)
    pp = np.asarray(shape.pp, dtype=float)
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
        draft_ms = spec.draft_tokens * (step_ms(shape.draft, eff, decode_batch, decode_context) - eff.step_overhead_ms)
        total = total + np.where(decode_batch > 0, draft_ms, 0.0)
    return total


def _stage_ms(shape: EngineShape | ShapeBatch, eff: Efficiency, decode_tokens, decode_seqs, decode_context, prompts, isl):
    """One pipeline stage (layers / PP) of tp x dp GPUs on one micro-batch, per GPU of the busiest rank.
    Attention runs on DP ranks of TP GPUs, each with its share of the sequences; experts split by TP (EP 1) or
    spread whole over the stage's GPUs (EP = TP x DP) process every token routed to them."""
    a, tp, precision = shape.arch, np.asarray(shape.tp, dtype=float), shape.precision
    dp, ep, pp = (np.asarray(v, dtype=float) for v in (shape.dp, shape.ep, shape.pp))
    stage_gpus = tp * dp
    tokens = decode_tokens + prompts * isl
    rank_tokens = tokens / dp
    layers = a.layers / pp
    bandwidth = shape.bandwidth_bytes_per_s * eff.bandwidth
    routed = np.asarray(a.experts) > 1  # a mixture of experts: grouped GEMMs at their own efficiencies
    moe_bandwidth, moe_gemm = np.where(routed, eff.moe_bandwidth, 1.0), np.where(routed, eff.moe_gemm(precision), 1.0)
    expert_reads = a.mlp_params_read(tokens) / np.where(ep > 1, ep, tp)  # split by TP, or whole experts over EP
    busiest = busiest_rank_load(a.experts, a.experts_per_token, ep, tokens)  # the busiest EP rank's tokens / mean
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
    return ((linear_s + elementwise_s + attention_s) * 1e3 + allreduce_ms(shape, eff, tokens)
            + layers * _layer_latency_us(a, eff, precision) * 1e-3)  # fmt: skip


def _layer_latency_us(a: ModelShape, eff: Efficiency, precision):
    """Fixed kernel latencies of one layer: the precision's, and a mixture of experts' routing kernels."""
    return eff.layer_latency_us(precision) + np.where(np.asarray(a.experts) > 1, eff.moe_layer_latency_us, 0.0)


def fixed_ms(shape: EngineShape | ShapeBatch, eff: Efficiency):
    """What every iteration pays whatever it holds: per-layer kernel latencies and the engine's own overhead."""
    return shape.arch.layers * _layer_latency_us(shape.arch, eff, shape.precision) * 1e-3 + eff.step_overhead_ms


def allreduce_ms(shape: EngineShape | ShapeBatch, eff: Efficiency, tokens):
    """Per layer of one stage: with experts split by TP, 2 all-reduces of a rank's tokens x hidden bf16 activations
    over its TP GPUs (ring algorithm over the GPU link; 0 at TP 1). With expert parallelism, 1 all-reduce (the
    attention) and an all-to-all that sends each token to its k experts and back (dispatch and combine): per GPU
    2 x tokens / GPUs x k x hidden x 2 B x (EP-1)/EP over the link.

    Beyond one link domain of D GPUs (a board of 8; 72 in an NVL72): a ring over TP > D GPUs runs at the scale-out
    network's pace (per GPU and direction, x e_scale_out) and pays its latency; an all-to-all over EP > D GPUs sends
    the share 1 - D/EP of its bytes across that network, and each of its two phases waits the network's latency."""
    tp, dp, ep, pp = (np.asarray(v, dtype=float) for v in (shape.tp, shape.dp, shape.ep, shape.pp))
    layers = shape.arch.layers / pp
    rank_tokens = np.asarray(tokens, dtype=float) / dp
    link = shape.link_bytes_per_s * eff.link
    latency_s = eff.allreduce_latency_us * 1e-6
    domain = shape.domain_gpus
    scale_out = max(shape.scale_out_bytes_per_s * eff.scale_out, 1e-9)
    scale_out_latency_s = eff.scale_out_latency_us * 1e-6
    ring = np.where(tp > domain, np.minimum(link, scale_out), link)
    wire_s = (2 * (tp - 1) / np.maximum(tp, 1) * rank_tokens * shape.arch.hidden * ACTIVATION_BYTES / ring
              + np.where(tp > domain, scale_out_latency_s, 0.0))  # fmt: skip
    reduces = np.where(ep > 1, 1.0, 2.0)
    reduce_ms = np.where(tp > 1, reduces * layers * (latency_s + wire_s) * 1e3, 0.0)
    # the busiest rank receives (dispatch) and sends back (combine) its routed tokens' activations
    busiest = busiest_rank_load(shape.arch.experts, shape.arch.experts_per_token, ep, tokens)
    dispatch_bytes = 2 * np.asarray(tokens, dtype=float) * busiest / (tp * dp) * shape.arch.experts_per_token * shape.arch.hidden * ACTIVATION_BYTES
    within_s = dispatch_bytes * (np.minimum(ep, domain) - 1) / np.maximum(ep, 1) / link
    off_domain = 1 - np.minimum(domain, ep) / np.maximum(ep, 1)  # the share of an all-to-all's bytes leaving the domain
    across_s = np.where(ep > domain, 2 * scale_out_latency_s, 0.0) + dispatch_bytes * off_domain / scale_out
    all_to_all_ms = np.where(ep > 1, layers * (2 * latency_s + within_s + across_s) * 1e3, 0.0)
    return reduce_ms + all_to_all_ms


def prefill_ms(shape: EngineShape, eff: Efficiency, isl: int, batch: int = 1) -> float:
    """One iteration prefilling `batch` prompts of `isl` tokens, nothing decoding."""
    return float(step_ms(shape, eff, 0.0, 0.0, batch, isl))


def decode_step_ms(shape: EngineShape, eff: Efficiency, batch: int, context_tokens: float) -> float:
    """One generated token for each of `batch` sequences holding `context_tokens` each."""
    return float(step_ms(shape, eff, batch, context_tokens))


@dataclass(frozen=True)
class SteadyState:
    """One operating point, each latency at the curve's percentile (means where none was asked): `tpot_ms` a
    request's mean gap between tokens, `itl_ms` one token gap (planner/metrics.py)."""

    concurrency: int
    running: int
    ttft_ms: float
    tpot_ms: float
    itl_ms: float
    e2e_ms: float
    request_throughput_rps: float
    output_tokens_per_s: float
    prefill_share: float
    prefill_ms: float
    decode_step_ms: float
    decoding: float  # mean sequences in a decode step
    slot_wait_ms: float = 0.0  # the part of TTFT spent waiting for a KV-cache slot (beyond the capacity)
    chunks_per_step: float = 0.0  # mean prompt chunks a decode step carries (Poisson)
    chunk_ms: float = 0.0  # what one prompt chunk adds to a step


@dataclass(frozen=True)
class _Steps:
    """The step times the steady state needs at each running batch B (arrays over concurrency)."""

    d1: np.ndarray  # decode step of 1
    slope: np.ndarray  # per further decoding sequence
    prefill: np.ndarray  # the own prompt alone
    prefill_slope: np.ndarray  # per sequence decoding beside the own prompt
    delta: np.ndarray  # one prompt fused into the others' step


def _steps(shape: EngineShape, eff: Efficiency, isl: int, osl: float, running: np.ndarray, context: float,
           cache: PrefixCache | None = None) -> _Steps:  # fmt: skip
    n = len(running)
    others = running - 1.0
    per = np.maximum(others, 1.0)
    prompts, length, _ = prompt_terms(isl, cache)  # the mean request's prefill (a cached prefix computes less)
    # two passes over every iteration needed (one array each): first the decode of 1, the prompt alone and the batch
    first = step_ms(shape, eff, np.concatenate([[1.0, 0.0], running]), context,
                    np.concatenate([[0.0, prompts], np.zeros(n)]), length)  # fmt: skip
    d1, alone, batch = first[0], first[1], first[2:]
    # the own prompt shares its step with the others that are decoding (a share of their lives as long as the
    # decode phase); the others' prompts cost what they add to a compute-bound step, whatever the batch (a prompt
    # hidden under a memory-bound step's weight read is the exception at low load, and there prompts are rare)
    decoding = others * max(osl - 1, 0) * d1 / (max(osl - 1, 0) * d1 + alone)
    saturated = COMPUTE_BOUND_TOKENS
    second = step_ms(shape, eff, np.array([saturated, saturated, *decoding]), context,
                     np.array([0.0, prompts, *np.full(n, prompts)]), length)  # fmt: skip
    delta, fused = second[1] - second[0], second[2:]
    busy = others > 0
    return _Steps(
        np.full(n, d1), np.where(busy, (batch - d1) / per, 0.0), np.full(n, alone),
        np.where(decoding > 0, (fused - alone) / np.maximum(decoding, 1e-300), 0.0), np.full(n, delta),
    )  # fmt: skip


def _latencies(x: np.ndarray, s: _Steps, running: np.ndarray, osl: int, eff: Efficiency):
    """Mean latencies at throughput x (requests per ms), in closed form: with u = 1 - rho and
    v = u - x r (OSL-1) slope, the others decoding n = x r (OSL-1) d1 / v, D(1 + n) = d1 u / v and ITL = d1 / v.
    E2E is inf where x is beyond what the engine does (u or v <= 0)."""
    share = (running - 1.0) / running
    m = max(osl - 1, 0)
    u = 1.0 - x * share * s.delta
    v = u - x * share * m * s.slope
    ok = (u > 0) & (v > 0)
    safe_u, safe_v = np.where(ok, u, 1.0), np.where(ok, v, 1.0)
    others = x * share * m * s.d1 / safe_v
    decode = s.d1 * safe_u / safe_v
    itl = np.where(ok, s.d1 / safe_v, np.inf)
    wait = np.where(running > 1, decode / 2 + eff.queue_factor * (1.0 - safe_u) / (2 * safe_u) * s.delta, 0.0)
    ttft = np.where(ok, eff.ttft_overhead_ms + wait + s.prefill + others * s.prefill_slope, np.inf)
    return 1.0 - u, others, decode, wait, ttft, itl, ttft + m * itl


def _root(s: _Steps, running: np.ndarray, osl: int, eff: Efficiency) -> tuple[np.ndarray, np.ndarray]:
    """The throughput X (requests per ms) with X E2E(X) = B. Multiplied by u v, X E2E(X) - B is the cubic
    -B + c1 X + c2 X^2 + c3 X^3, with exactly one root where u, v > 0 (X E2E rises from 0 to infinity there);
    safeguarded Newton on it, inside the bracket (0, min(B / E2E(0), 1 / alpha, 1 / beta)), then bisection on
    X E2E / B - 1 itself. Returns X, and where the root is pinned to the last bits of X."""
    share = (running - 1.0) / running
    m = max(osl - 1, 0)
    alpha, beta = share * s.delta, share * (s.delta + m * s.slope)
    busy = np.where(running > 1, 1.0, 0.0)
    a0 = eff.ttft_overhead_ms + s.prefill
    k2, k4, h = share * m * s.d1 * s.prefill_slope, busy * eff.queue_factor * share * s.delta**2 / 2, busy * s.d1 / 2
    s0 = a0 + h + m * s.d1
    s1 = -a0 * (alpha + beta) + k2 - 2 * h * alpha + k4 - m * s.d1 * alpha
    s2 = a0 * alpha * beta - k2 * alpha + h * alpha**2 - k4 * beta
    c1, c2, c3 = s0 + running * (alpha + beta), s1 - running * alpha * beta, s2
    with np.errstate(divide="ignore"):
        high = np.minimum(running / s0, np.minimum(np.where(alpha > 0, 1 / alpha, np.inf), np.where(beta > 0, 1 / beta, np.inf)))
    low = np.zeros_like(high)
    x = high / 2
    for _ in range(200):
        value = -running + x * (c1 + x * (c2 + x * c3))
        # the cubic is X E2E - B times u v: hold it to 1e-13 of B u v, so that X E2E / B is within 1e-13 of 1
        if np.all(np.abs(value) <= 1e-13 * running * np.maximum((1 - alpha * x) * (1 - beta * x), 1e-300)):
            break
        slope = c1 + x * (2 * c2 + 3 * x * c3)
        above = value >= 0
        high, low = np.where(above, x, high), np.where(above, low, x)
        newton = x - value / np.where(slope > 0, slope, 1.0)
        x = np.where((slope > 0) & (newton >= low) & (newton <= high), newton, (low + high) / 2)
    # near saturation (u v -> 0) the cubic loses digits: finish on X E2E / B - 1 itself, bisecting the bracket
    low, high = np.minimum(low, x), np.maximum(high, x)
    for _ in range(200):
        residual = x * _latencies(x, s, running, osl, eff)[6] / running - 1.0
        done = (np.abs(residual) <= 1e-12) | (high - low <= 4 * np.spacing(high))
        if np.all(done):
            break
        above = residual >= 0
        high, low = np.where(above, x, high), np.where(above, low, x)
        x = np.where(done, x, (low + high) / 2)
    return x, high - low <= 4 * np.spacing(high)


def closed_loop_throughput(shape: EngineShape, eff: Efficiency, isl: int, osl: int, concurrencies,
                           max_running: int | None, cache: PrefixCache | None = None) -> np.ndarray:  # fmt: skip
    """X, requests per ms, of the closed loop at each concurrency (steady_state_curve's throughput alone)."""
    concurrency = np.asarray(concurrencies, dtype=float)
    running = np.maximum(np.minimum(concurrency, max_running) if max_running else concurrency, 1.0)
    per_step = shape.speculation.tokens_per_step if shape.speculation is not None else 1.0
    steps_osl = 1.0 + max(osl - 1, 0) / per_step
    return _root(_steps(shape, eff, isl, steps_osl, running, isl + osl / 2, cache), running, steps_osl, eff)[0]


def steady_state_curve(
    shape: EngineShape,
    eff: Efficiency,
    isl: int,
    osl: int,
    concurrencies,
    max_running: int | None,
    percentile: float | None = None,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    cache: PrefixCache | None = None,
) -> list[SteadyState]:
    """The steady state at each concurrency (module docstring), solved for all of them at once; latencies at
    `percentile` (None: means). `cache`: prompts partly found in a prefix cache (types.prompt_terms)."""
    concurrency = np.asarray(concurrencies, dtype=float)
    running = np.maximum(np.minimum(concurrency, max_running) if max_running else concurrency, 1.0)
    # speculative decoding: the OSL - 1 decode tokens come in (OSL - 1) / e steps of e tokens each; the equations
    # run over steps (a fractional count is a mean), the gaps a user sees are a step / e
    per_step = shape.speculation.tokens_per_step if shape.speculation is not None else 1.0
    real_osl, osl = osl, 1.0 + max(osl - 1, 0) / per_step
    s = _steps(shape, eff, isl, osl, running, isl + real_osl / 2, cache)
    x, pinned = _root(s, running, osl, eff)
    rho, others, decode, wait, ttft, tpot, e2e = _latencies(x, s, running, osl, eff)
    little = x * e2e / running
    # a root pinned to the last bit of X where E2E is that steep (prefills take all the time) is solved as well
    # as floating point can: its TTFT is what Little's law leaves of E2E
    steep = pinned & np.isfinite(little) & (np.abs(little - 1.0) > 1e-9) & (np.abs(little - 1.0) < 1e-3)
    ttft = np.where(steep, running / x - max(osl - 1, 0) * tpot, ttft)
    e2e = np.where(steep, running / x, e2e)
    little = x * e2e / running
    if not np.all(np.abs(little - 1.0) <= 1e-9):
        bad = int(np.argmax(np.abs(np.nan_to_num(little, nan=np.inf) - 1.0)))
        raise SteadyStateError(
            f"steady state did not solve for {shape.model.id} on {shape.gpu.id} TP{shape.tp} {shape.precision} "
            f"ISL {isl} OSL {osl} at concurrency {int(concurrency[bad])}: X x E2E / B = {little[bad]:.9g}"
        )
    queued = concurrency - running
    slot_wait = np.where(queued > 0, queued / x, 0.0)
    gaps = token_gaps(x, s, running, prompt_terms(isl, cache)[2], others, tpot, token_budget)
    ttft_at, tpot_at, itl_at = ttft + slot_wait, tpot, gaps.quantile(decode, None)
    if percentile is not None:
        ttft_at, tpot_at, slot_wait = _tails(x, s, running, osl, rho, decode, wait, ttft, tpot, queued, percentile, eff)
        itl_at = gaps.quantile(decode, percentile)
    e2e_at = ttft_at + max(osl - 1, 0) * tpot_at
    return [
        SteadyState(
            concurrency=int(concurrency[i]), running=int(running[i]), ttft_ms=float(ttft_at[i]),
            tpot_ms=float(tpot_at[i] / per_step), itl_ms=float(itl_at[i] / per_step), e2e_ms=float(e2e_at[i]),
            request_throughput_rps=float(x[i] * 1e3), output_tokens_per_s=float(x[i] * 1e3 * real_osl),
            prefill_share=float(rho[i]), prefill_ms=float(s.prefill[i]), decode_step_ms=float(decode[i]),
            decoding=float(1.0 + others[i]), slot_wait_ms=float(slot_wait[i]),
            chunks_per_step=float(gaps.chunks_per_step[i]), chunk_ms=float(gaps.chunk_ms[i]),
        )  # fmt: skip
        for i in range(len(concurrency))
    ]


@dataclass(frozen=True)
class TokenGaps:
    """The gaps between one request's tokens under chunked prefill: a decode step D of the running batch, plus
    c for each prompt chunk the step carries. An iteration takes `token_budget` tokens: one per decoding sequence,
    the rest for prompt chunks, so a prompt of ISL tokens is cut into k = ceil(ISL / (budget - decoding)) chunks of
    Delta / k each (Delta: what the whole prompt adds to a step). The others' prompts arrive at X (B-1)/B, so a
    step of mean length tau (the mean gap, D / (1 - rho)) carries M ~ Poisson(mu) chunks, mu = X (B-1)/B k tau:

        gap = D + c M,   c = Delta / k,   mean gap = D + rho tau = D / (1 - rho) = the mean TPOT.

    Its p-th percentile is D + c x (the Poisson p-quantile of M): the decode step while fewer than 1 - p of the
    steps carry a chunk, a step with one or more chunks beyond (the stalls vLLM's ITL percentiles show)."""

    chunks_per_step: np.ndarray  # mu
    chunk_ms: np.ndarray  # c

    def quantile(self, decode: np.ndarray, percentile: float | None) -> np.ndarray:
        """The gap at a percentile (None: the mean)."""
        if percentile is None:
            return decode + self.chunk_ms * self.chunks_per_step
        from scipy.stats import poisson  # scipy.stats is slow to import: where it is used

        return decode + self.chunk_ms * poisson.ppf(percentile / 100.0, np.maximum(self.chunks_per_step, 1e-300))


def token_gaps(x, s: _Steps, running, isl: int, others, tpot, token_budget: int) -> TokenGaps:
    """The chunks per step and their cost (`TokenGaps`) at each operating point."""
    room = np.maximum(token_budget - (1.0 + others), 1.0)  # prompt tokens a step takes beside the decoders
    chunks = np.ceil(isl / room)
    rate = x * (running - 1.0) / running  # the others' prompts per ms
    return TokenGaps(rate * chunks * tpot, s.delta / chunks)


def gamma_quantile(mean, var, percentile: float) -> np.ndarray:
    """The p-quantile of a Gamma distribution of this mean and variance (the mean itself where there is no spread)."""
    from scipy.stats import gamma  # scipy.stats is slow to import: where it is used

    mean, var = np.asarray(mean, dtype=float), np.asarray(var, dtype=float)
    spread = (mean > 0) & (var > 0)
    safe_mean, safe_var = np.where(spread, mean, 1.0), np.where(spread, var, 1.0)
    return np.where(spread, gamma.ppf(percentile / 100, safe_mean**2 / safe_var, scale=safe_var / safe_mean), mean)


def _tails(x, s: _Steps, running, osl, rho, decode, wait, ttft, tpot, queued, percentile, eff: Efficiency):
    """TTFT and TPOT at a percentile: the deterministic part + the Gamma quantile of the random part; and the
    slot wait's share of the TTFT quantile."""
    rate = x * (running - 1.0) / running  # the others' prompts per ms
    gap = np.maximum(1.0 - rho, 1e-300)
    busy = running > 1
    # TTFT: the step in progress (uniform over one step), the M/D/1 wait behind prompts, the wait for a slot (Erlang)
    step_mean, step_var = np.where(busy, decode / 2, 0.0), np.where(busy, decode**2 / 12, 0.0)
    md1_mean = wait - step_mean
    md1_var = np.where(busy, md1_mean**2 + eff.queue_factor * rate * s.delta**3 / (3 * gap), 0.0)
    slot_mean = np.where(queued > 0, queued / x, 0.0)
    slot_var = np.where(queued > 0, queued / x**2, 0.0)
    random_mean = step_mean + md1_mean + slot_mean
    random_at = gamma_quantile(random_mean, step_var + md1_var + slot_var, percentile)
    ttft_at = (ttft - wait) + random_at
    # the slot wait's share of the quantile, in proportion to its share of the mean
    slot_at = np.where(random_mean > 0, random_at * slot_mean / np.where(random_mean > 0, random_mean, 1.0), 0.0)
    # TPOT of one request: prompts fused into its OSL-1 decode steps, a branching count of mean m and variance m/(1-rho)^2
    steps = max(osl - 1, 1)
    fused = rate * steps * tpot
    tpot_at = decode + gamma_quantile(fused * s.delta / steps, fused / gap**2 * (s.delta / steps) ** 2, percentile)
    return ttft_at, tpot_at, slot_at


def steady_state(
    shape: EngineShape,
    eff: Efficiency,
    isl: int,
    osl: int,
    concurrency: int,
    max_running: int | None,
    percentile: float | None = None,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
) -> SteadyState:
    """In-flight batching at one concurrency: see the module docstring for the equations."""
    return steady_state_curve(shape, eff, isl, osl, [concurrency], max_running, percentile, token_budget)[0]


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
