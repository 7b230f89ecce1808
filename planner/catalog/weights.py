"""How a model's parameters split and how its weights are stored at a precision: the one rule the memory fit, the
catalog and the performance model's weight reads share (stage 1 of the performance model, kept with the catalog
because the catalog's memory figures need it; docs/perf-model.md, "Precisions")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.catalog.entries import EMBEDDING_BYTES, MXFP4_BITS, PRECISION_SPECS, ModelArch


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



def weight_gb(model: ModelArch, precision: str) -> float:
    """Weight memory in GB (1e9 bytes) at the precision: params x bytes per parameter, the parts of a 4-bit
    checkpoint that stay bf16 at 2 B (`weight_format`)."""
    return weight_format(model, precision).total_bytes / 1e9


def supports_roofline(model: ModelArch) -> bool:
    return None not in (model.layers, model.hidden, model.kv_heads, model.head_dim)

