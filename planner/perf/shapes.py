"""Stage 1 of the performance model: what one engine instance is made of. The model's shape (parameters a step reads
and multiplies, planner/catalog/weights.py) on a GPU under a layout (TP, attention DP, experts over EP, pipeline
stages), at a precision, with or without speculative decoding, and the bytes its KV cache keeps per token."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import cached_property

import numpy as np

from planner.catalog import PRECISION_SPECS, Gpu, ModelArch, compute_precision
from planner.catalog.weights import ModelShape, WeightFormat, model_shape, supports_roofline, weight_format

__all__ = [
    "ACTIVATION_BYTES", "LM_HEAD_BYTES", "EngineShape", "ModelShape", "ShapeBatch", "Speculation", "WeightFormat",
    "kv_bytes_for", "kv_bytes_per_token_per_gpu", "model_shape", "supports_roofline", "weight_format",
]  # fmt: skip

ACTIVATION_BYTES = 2.0  # bf16 activations (all-reduce, norms, MLP activation)
LM_HEAD_BYTES = 2.0  # quantized checkpoints keep the LM head in bf16


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

    @property
    def tokens_per_decoder(self) -> float:
        """Tokens one decoding sequence puts into an iteration: the k + 1 a speculative step verifies, else 1."""
        return float(self.speculation.draft_tokens + 1) if self.speculation is not None else 1.0

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

    @cached_property
    def peak_flops(self) -> float:
        """The tensor rate of the compute precision (a weight-only format multiplies at its activations')."""
        return self.gpu.tflops_by_precision[compute_precision(self.precision)] * 1e12

    @cached_property
    def bf16_flops(self) -> float:
        rates = self.gpu.tflops_by_precision
        return rates.get("bf16", rates.get("fp16", rates[compute_precision(self.precision)])) * 1e12

    @cached_property
    def bandwidth_bytes_per_s(self) -> float:
        return self.gpu.mem_bw_tb_per_s * 1e12

    @cached_property
    def link_bytes_per_s(self) -> float:
        """Per direction: the catalog gives the datasheet's total of both directions."""
        return self.gpu.link_gb_per_s * 1e9 / 2

    @cached_property
    def domain_gpus(self) -> float:
        """GPUs one link domain joins (a board, an NVL72 rack); unknown: as if it held the whole stage."""
        return float(self.gpu.domain_gpus) if self.gpu.domain_gpus and self.gpu.scale_out_gb_per_s else math.inf

    @cached_property
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




def tensor_split_refusal(model: ModelArch, tp: int) -> str | None:
    """Why engines refuse to split this model's attention over `tp` GPUs, or None: the tensor-parallel size must
    divide the attention heads, and the KV heads either split evenly or are replicated a whole number of times
    (vLLM, SGLang and TensorRT-LLM check both when they load a model). A model whose heads are not published is
    not checked."""
    if tp <= 1 or model.heads is None:
        return None
    if model.heads % tp:
        return (f"TP{tp}: the {model.heads} attention heads of {model.id} do not split evenly over {tp} GPUs "
                "(engines require the tensor-parallel size to divide the attention heads)")  # fmt: skip
    kv = model.kv_heads
    if kv is not None and kv % tp and tp % kv:
        return (f"TP{tp}: the {kv} KV heads of {model.id} neither split evenly over {tp} GPUs nor replicate a whole "
                "number of times across them")  # fmt: skip
    return None
