"""Catalogs: GPUs, systems (on-prem servers, cloud instances), model architectures, benchmark tables.

Loaded from `catalogs/*.yaml` and `catalogs/benchmarks/*.csv` into frozen, validated objects.
Every entry carries the `source` of its numbers.
"""

from __future__ import annotations

import csv
import difflib
import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (AfterValidator, ConfigDict, Field, PrivateAttr, field_validator,
                      model_validator)

from planner.errors import PlannerInputError, unknown_id_message
from planner.loading import MAX_TABLE_BYTES, StrictModel, open_bounded, read_yaml, short_repr, validate_model

ComputePrecision = Literal["bf16", "fp16", "fp8", "fp4"]  # a tensor-core rate (Gpu.tflops_by_precision)
Precision = Literal["bf16", "fp16", "fp8", "fp4", "w4a16", "w4a8"]  # an engine's precision: weights and compute


@dataclass(frozen=True)
class PrecisionSpec:
    """What an engine precision means: how its quantized weights are stored and which tensor cores multiply them.

    `weight_bits`: bits per weight of the quantized layers, block scales included (MXFP4: 4 bits + an e8m0 scale
    per 32 = 4.25; NVFP4: + an fp8 scale per 16 = 4.5). At 4 bits the embedding table and LM head stay bf16, and a
    model shipped in fp4 keeps its published MXFP4 experts and bf16 rest (`planner.perf.roofline.weight_format`).
    `compute`: the tensor-core precision whose `tflops_by_precision` entry gives the rate and whose kernel factors
    (GEMM efficiency, per-layer latency, attention) apply; a weight-only format dequantizes in the GEMM.
    `kv_bytes`: the KV cache element."""

    name: str
    weight_bits: float
    compute: str
    kv_bytes: float
    used: str = ""

    @property
    def weight_bytes(self) -> float:
        return self.weight_bits / 8

    @property
    def four_bit(self) -> bool:
        return self.weight_bits < 8


MXFP4_BITS = 4.25  # 4-bit E2M1 values + one e8m0 scale per 32 (gpt-oss's published experts)
EMBEDDING_BYTES = 2.0  # the embedding table and LM head of a 4-bit checkpoint stay bf16
PRECISION_SPECS: dict[str, PrecisionSpec] = {spec.name: spec for spec in (
    PrecisionSpec("bf16", 16, "bf16", 2.0, "bfloat16 weights and GEMMs"),
    PrecisionSpec("fp16", 16, "fp16", 2.0, "float16 weights and GEMMs (the bf16 rate)"),
    PrecisionSpec("fp8", 8, "fp8", 1.0, "FP8 weights and GEMMs, FP8 KV cache (Hopper, Ada, Blackwell, CDNA 3/4)"),
    PrecisionSpec("fp4", 4.5, "fp4", 1.0, "NVFP4 weights and FP4 GEMMs, FP8 KV cache (Blackwell, CDNA 4 MXFP4)"),
    PrecisionSpec("w4a16", MXFP4_BITS, "bf16", 2.0,
                  "4-bit weights dequantized to bf16 in the GEMM: vLLM Marlin MXFP4/GPTQ/AWQ on Hopper, Ampere, AMD"),
    PrecisionSpec("w4a8", MXFP4_BITS, "fp8", 1.0,
                  "4-bit weights with FP8 activations, FP8 KV cache: TensorRT-LLM MXFP4 x FP8 on Hopper and Blackwell"),
)}  # fmt: skip
PRECISIONS: tuple[str, ...] = tuple(PRECISION_SPECS)
WEIGHT_ONLY_PRECISIONS: tuple[str, ...] = tuple(p for p, s in PRECISION_SPECS.items() if s.compute != p)
# bytes per weight of the quantized layers (block scales included); a model's whole: `ModelArch.weight_gb`
BYTES_PER_PARAM: dict[str, float] = {p: s.weight_bytes for p, s in PRECISION_SPECS.items()}
SHIPPED_LAYER = "shipped"
assert set(PRECISIONS) == set(Precision.__args__), "Precision and PRECISION_SPECS name the same precisions"


def compute_precision(precision: str) -> str:
    """The tensor-core precision an engine precision multiplies at (w4a16 -> bf16, w4a8 -> fp8)."""
    return PRECISION_SPECS[precision].compute


MAX_NAME_CHARS = 200  # an id, alias or name of a catalog entry; longer is a paste accident, not a name


def normalize_name(name: str) -> str:
    """The one form of a name that ids and aliases are matched in: Unicode NFKC (full-width and compatibility
    characters as their plain forms), format characters removed (Unicode category Cf: zero-width spaces and joiners
    U+200B-U+200D, word joiner U+2060, byte-order mark U+FEFF, soft hyphen, bidi marks), whitespace runs as one
    space, no space at either end. Two names that look alike are then one name."""
    text = unicodedata.normalize("NFKC", name)
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    return " ".join(text.split())


def name_problem(name: str) -> str | None:
    """Why a name (after `normalize_name`) cannot name an entry, or None."""
    cleaned = normalize_name(name)
    if not cleaned:
        return f"a name with visible characters (got {short_repr(name)}: empty once spaces and invisible characters are removed)"
    if len(cleaned) > MAX_NAME_CHARS:
        return f"a name of at most {MAX_NAME_CHARS} characters (got {len(cleaned):,})"
    return None


def clean_name(name: str) -> str:
    """A name field's value in normal form (`normalize_name`); ValueError when it is empty or too long."""
    problem = name_problem(name)
    if problem:
        raise ValueError(problem)
    return normalize_name(name)


# a catalog id or alias, or a name that refers to one (a scenario's model, systems, GPUs): stored normalized
Name = Annotated[str, AfterValidator(clean_name)]
Alias = Name


class InputModel(StrictModel):
    """What users write in catalogs and scenarios: a StrictModel (booleans are never numbers there either)."""


class Gpu(InputModel):
    id: Name
    # other names the field uses for it: short names (A100, H100), aiconfigurator systems (h200_sxm),
    # SkyPilot accelerators (H100, A100-80GB); matched without regard to case (`Catalog.resolve`)
    aliases: tuple[Alias, ...] = ()
    # NVIDIA Ampere/Ada/Hopper/Blackwell (data centre), Blackwell GB202 (RTX PRO 6000 / RTX 5090), AMD CDNA 3/4
    architecture: Literal["ampere", "ada", "hopper", "blackwell", "blackwell-gb202", "cdna3", "cdna4"]
    name: str
    memory_gb: float = Field(gt=0, le=1e5)
    mem_bw_tb_per_s: float = Field(gt=0, le=1e3)
    tflops_by_precision: dict[ComputePrecision, Annotated[float, Field(gt=0, le=1e6)]]
    link: Literal["nvlink", "pcie", "infinity-fabric"]
    link_gb_per_s: float = Field(gt=0, le=1e6)
    tdp_w: float = Field(gt=0, le=1e5)
    form_factor: Literal["sxm", "pcie", "oam", "superchip"]
    # the GPUs one `link` domain joins (8 on an HGX/DGX board, 72 in a GB200 NVL72), and the scale-out network
    # beyond it, per GPU and direction (GB/s): where an engine's experts or attention TP span several domains, their
    # traffic crosses it (None: not known; such layouts are then modeled as if the domain held them, and say so)
    domain_gpus: int | None = Field(default=None, ge=1, le=100_000)
    scale_out_gb_per_s: float | None = Field(default=None, gt=0, le=1e5)
    notes: str = ""
    source: str = Field(min_length=1)

    @property
    def precisions(self) -> tuple[str, ...]:
        """The engine precisions it runs: those whose compute precision has a tensor rate here (w4a16 where bf16
        is, w4a8 where fp8 is)."""
        return tuple(p for p in PRECISIONS if compute_precision(p) in self.tflops_by_precision)


class System(InputModel):
    """A node: an on-prem server bought once, or a cloud instance rented by the hour."""

    id: Name
    aliases: tuple[Alias, ...] = ()  # e.g. the provider's own instance name
    kind: Literal["on-prem", "cloud"]
    name: str
    gpu: Name
    gpus_per_node: int = Field(gt=0, le=100_000)
    price_usd: float | None = Field(default=None, gt=0, le=1e9)
    power_kw: float | None = Field(default=None, gt=0, le=1e4)
    rack_units: int | None = Field(default=None, gt=0, le=1_000)
    provider: str | None = None
    region: str | None = None
    usd_per_hour: float | None = Field(default=None, gt=0, le=1e5)
    spot_usd_per_hour_min: float | None = Field(default=None, gt=0, le=1e5)
    spot_usd_per_hour_max: float | None = Field(default=None, gt=0, le=1e5)
    price_source_kind: Literal["list-price", "estimate", "reserved"] | None = None
    # the node's scale-out network (RDMA NICs for GPU traffic), all ports together: what moves a KV cache from a
    # prefill to a decode instance, and activations between pipeline stages; None where not published
    network_gbit_per_s: float | None = Field(default=None, gt=0, le=1e6)
    notes: str = ""
    source: str = Field(min_length=1)

    def network_bytes_per_s(self, gpus: int) -> float | None:
        """The share of the node's network that `gpus` of its GPUs drive (one NIC per GPU on the HGX designs)."""
        if self.network_gbit_per_s is None:
            return None
        return self.network_gbit_per_s / 8 * 1e9 * min(gpus, self.gpus_per_node) / self.gpus_per_node


class MoeSpec(InputModel):
    """Mixture of experts: `experts` routed experts per MoE layer, `experts_per_token` of them per token, plus
    `shared_experts` every token uses. `active_params_b` is the published per-token count; the roofline splits the
    parameters into always-read weights and routed experts from it and `params_b` (perf/roofline.model_shape)."""

    experts: int = Field(gt=0, le=100_000)
    experts_per_token: int = Field(gt=0, le=100_000)
    shared_experts: int = Field(default=0, ge=0, le=1_000)
    active_params_b: float = Field(gt=0, le=1e6)

    @model_validator(mode="after")
    def _top_k_within_experts(self):
        if self.experts_per_token > self.experts:
            raise ValueError(f"experts_per_token ({self.experts_per_token}) exceeds experts ({self.experts})")
        return self


class MlaSpec(InputModel):
    """Multi-head latent attention (DeepSeek-V2/V3): the cache keeps one compressed latent of `kv_lora_rank`
    elements plus `rope_head_dim` decoupled RoPE key elements per token and layer, shared by all heads, so it is
    neither split by TP nor multiplied by heads."""

    kv_lora_rank: int = Field(gt=0, le=100_000)
    rope_head_dim: int = Field(ge=0, le=100_000)


class ModelArch(InputModel):
    """A model's architecture; fields not published are left out (None), never guessed."""

    id: Name
    # Hugging Face repository ids and served names the field uses ('meta-llama/Llama-3.3-70B-Instruct',
    # 'meta/llama3-8b-instruct'); matched without regard to case (`Catalog.resolve`)
    aliases: tuple[Alias, ...] = ()
    name: str = ""
    params_b: float = Field(gt=0, le=1e6)  # billions: 1e6 is a typo, not a model
    layers: int | None = Field(default=None, gt=0)
    hidden: int | None = Field(default=None, gt=0)
    heads: int | None = Field(default=None, gt=0)
    kv_heads: int | None = Field(default=None, gt=0)
    head_dim: int | None = Field(default=None, gt=0)
    ffn: int | None = Field(default=None, gt=0)
    vocab: int | None = Field(default=None, gt=0)
    max_context: int | None = Field(default=None, gt=0)
    moe: MoeSpec | None = None
    mla: MlaSpec | None = None
    # layers that keep K and V of the whole context; the others attend to a short sliding window (gpt-oss: 128
    # tokens) or keep a fixed-size linear-attention state (Qwen3.5/3.6), negligible next to a long context
    kv_layers: int | None = Field(default=None, gt=0)
    # multi-token-prediction layers the checkpoint ships (config.json num_nextn_predict_layers, DeepSeek-V3/R1, or
    # mtp_num_hidden_layers, Qwen3.5/3.6): what `engine.speculative.method: mtp` drafts with; None: not stated (no MTP)
    mtp_layers: int | None = Field(default=None, ge=0, le=64)
    # the precision of the published checkpoint's weights (gpt-oss: MXFP4 experts; DeepSeek-V3: FP8): what a run
    # "without quantization" serves
    checkpoint_precision: Precision = "bf16"
    notes: str = ""
    source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _parts_within_the_whole(self):
        if self.kv_layers is not None and self.layers is not None and self.kv_layers > self.layers:
            raise ValueError(f"kv_layers ({self.kv_layers}) exceeds layers ({self.layers})")
        if self.moe is not None and self.moe.active_params_b > self.params_b:
            raise ValueError(f"moe.active_params_b ({self.moe.active_params_b:g}) exceeds params_b ({self.params_b:g})")
        return self

    def weight_gb(self, precision: str) -> float:
        """Weight memory in GB (1e9 bytes) at the precision: params x bytes per parameter, the parts of a 4-bit
        checkpoint that stay bf16 at 2 B (`planner.perf.roofline.weight_format`)."""
        from planner.perf.roofline import weight_format

        return weight_format(self, precision).total_bytes / 1e9

    @property
    def cache_layers(self) -> int | None:
        """Layers whose KV cache grows with the context."""
        return self.kv_layers if self.kv_layers is not None else self.layers

    def kv_bytes_per_token(self, kv_bytes_per_element: float = 2.0) -> float | None:
        """2 (K and V) x cache layers x kv_heads x head_dim x bytes per element, or with MLA cache layers x
        (kv_lora_rank + rope_head_dim) x bytes per element; None when the architecture is unknown."""
        if self.mla is not None and self.layers is not None:
            return self.cache_layers * (self.mla.kv_lora_rank + self.mla.rope_head_dim) * kv_bytes_per_element
        if self.layers is None or self.kv_heads is None or self.head_dim is None:
            return None
        return 2 * self.cache_layers * self.kv_heads * self.head_dim * kv_bytes_per_element


class BenchmarkRow(StrictModel):
    """One measured point of a benchmark table (a CSV row), with its source."""

    table: str
    line: int
    origin: str = SHIPPED_LAYER
    path: str = ""
    source: str = Field(min_length=1)
    model: str
    gpu: str
    gpus: int = Field(gt=0, le=100_000)
    tp: int | None = Field(default=None, gt=0, le=100_000)
    precision: Precision | None = None
    isl: int | None = Field(default=None, gt=0, le=100_000_000)
    osl: int | None = Field(default=None, gt=0, le=100_000_000)
    concurrency: int | None = Field(default=None, gt=0, le=10_000_000)
    # online: a fixed concurrency (closed loop); request-rate: the client offered a rate (open loop), the
    # concurrency recorded is the mean in flight by Little's law; max-throughput: every request sent at once
    run_kind: Literal["online", "offline", "server", "max-throughput", "request-rate"] = "online"
    # latencies (planner/metrics.py): tpot_ms a request's mean gap between tokens, itl_ms one token gap, each the
    # run's `statistic` over its requests (token gaps for itl_ms); a _bound only says 'below this'
    ttft_ms: float | None = Field(default=None, gt=0, le=1e8)
    ttft_ms_bound: float | None = Field(default=None, gt=0, le=1e8)
    tpot_ms: float | None = Field(default=None, gt=0, le=1e7)
    tpot_ms_bound: float | None = Field(default=None, gt=0, le=1e7)
    itl_ms: float | None = Field(default=None, gt=0, le=1e7)
    statistic: Literal["mean", "median", "p90", "p95", "p99"] = "mean"
    request_throughput_rps: float | None = Field(default=None, gt=0, le=1e6)  # per instance or node
    output_tokens_per_s: float | None = Field(default=None, gt=0, le=1e9)
    per: Literal["instance", "node"]
    notes: str = ""
    # empty: a measurement. 'aic:<package>:<backend>:<db>': an estimate of NVIDIA's operator-level database
    # materialized by `planner tables build` (never used to calibrate the roofline)
    provenance: str | None = Field(default=None, pattern=r"^(measured|aic:[^,]+)$")

    @property
    def is_measurement(self) -> bool:
        return self.provenance in (None, "measured")

    @property
    def point_key(self) -> tuple:
        """The operating point a row measures: a row of a higher catalog layer at the same point replaces it."""
        return (self.model, self.gpu, self.gpus, self.tp, self.precision, self.isl, self.osl, self.concurrency,
                self.run_kind, self.per, self.statistic)  # fmt: skip

    @property
    def citation(self) -> str:
        """Whose row it is and where: '<source> (<table> line N)', prefixed by the user catalog's name."""
        where = f"{self.source} ({self.table} line {self.line})"
        return where if self.origin == SHIPPED_LAYER else f"[{self.origin}] {where}"


class SourcedValue(InputModel):
    value: float
    source: str = Field(min_length=1)
    # cited: a published figure; estimate: derived from published ones or a range; placeholder: no public figure,
    # an order of magnitude to replace with a quote (the BOM and report list every line priced from one)
    kind: Literal["cited", "estimate", "placeholder"] = "cited"


DEFAULT_RANGES = {  # (lowest, highest, lowest allowed itself): beyond them a default is a typo, and divides by zero
    "words_per_token": (0.1, 10.0, True), "peak_quantile": (0.0, 1.0, False), "amortization_years": (0.1, 50.0, True),
    "usd_per_kwh": (0.0, 10.0, True), "pue": (1.0, 5.0, True), "utilization_power_factor": (0.0, 1.0, False),
    "maintenance_fraction_per_year": (0.0, 1.0, True), "memory_reserve_fraction": (0.0, 0.9, True),
    # on-prem infrastructure and finance (issue 34): planner/infrastructure.py
    "cost_of_capital_per_year": (0.0, 1.0, True), "software_usd_per_gpu_per_year": (0.0, 1e6, True),
    "facility_usd_per_kw_per_month": (0.0, 1e5, True), "installation_fraction_of_capex": (0.0, 1.0, True),
    "rack_units_per_rack": (1.0, 100.0, True), "kw_per_rack": (0.1, 1000.0, True), "rack_usd": (0.0, 1e7, True),
    "pdus_per_rack": (0.0, 16.0, True), "pdu_usd": (0.0, 1e6, True),
    "fabric_port_gbit_per_s": (1.0, 1e5, True), "fabric_switch_ports": (2.0, 1024.0, True),
    "fabric_switch_usd": (0.0, 1e7, True), "fabric_link_usd": (0.0, 1e6, True),
    "frontend_ports_per_node": (0.0, 64.0, True), "frontend_switch_ports": (2.0, 1024.0, True),
    "frontend_switch_usd": (0.0, 1e7, True), "frontend_link_usd": (0.0, 1e6, True),
    "storage_tb_per_node": (0.0, 1e4, True), "storage_usd_per_tb": (0.0, 1e6, True),
}  # fmt: skip
INFRASTRUCTURE_DEFAULTS = tuple(list(DEFAULT_RANGES)[list(DEFAULT_RANGES).index("cost_of_capital_per_year"):])


def default_bounds(name: str) -> dict[str, float]:
    """The Field bounds of a scenario figure that overrides catalog default `name` (planner/scenario/spec.py): the range
    of DEFAULT_RANGES, so that the catalog and the scenario accept the same values (`ge` where the lowest value is
    allowed itself, else `gt`; whole numbers as ints, as an integer field's message says them)."""
    low, high, low_allowed = DEFAULT_RANGES[name]
    low, high = (int(v) if float(v).is_integer() else v for v in (low, high))
    return {"ge" if low_allowed else "gt": low, "le": high}


class CatalogDefaults(InputModel):
    """Scenario defaults with their sources (catalogs/defaults.yaml), each within DEFAULT_RANGES."""

    words_per_token: SourcedValue
    peak_quantile: SourcedValue
    amortization_years: SourcedValue
    usd_per_kwh: SourcedValue
    pue: SourcedValue
    utilization_power_factor: SourcedValue
    maintenance_fraction_per_year: SourcedValue
    memory_reserve_fraction: SourcedValue
    cost_of_capital_per_year: SourcedValue
    software_usd_per_gpu_per_year: SourcedValue
    facility_usd_per_kw_per_month: SourcedValue
    installation_fraction_of_capex: SourcedValue
    rack_units_per_rack: SourcedValue
    kw_per_rack: SourcedValue
    rack_usd: SourcedValue
    pdus_per_rack: SourcedValue
    pdu_usd: SourcedValue
    fabric_port_gbit_per_s: SourcedValue
    fabric_switch_ports: SourcedValue
    fabric_switch_usd: SourcedValue
    fabric_link_usd: SourcedValue
    frontend_ports_per_node: SourcedValue
    frontend_switch_ports: SourcedValue
    frontend_switch_usd: SourcedValue
    frontend_link_usd: SourcedValue
    storage_tb_per_node: SourcedValue
    storage_usd_per_tb: SourcedValue

    @field_validator("*")
    @classmethod
    def _in_range(cls, value: SourcedValue, info) -> SourcedValue:
        low, high, low_allowed = DEFAULT_RANGES[info.field_name]
        if not ((low <= value.value if low_allowed else low < value.value) and value.value <= high):
            bracket = "[" if low_allowed else "("
            raise ValueError(f"value must be in {bracket}{low:g}, {high:g}] (got {value.value:g})")
        return value


class _DefaultsFile(InputModel):
    defaults: CatalogDefaults


STEP_COLUMNS: tuple[str, ...] = (
    "source", "model", "gpu", "tp", "precision", "decode_batch", "decode_context_tokens", "prefill_prompts",
    "prefill_isl", "time_ms", "provenance",
)  # fmt: skip
# the same with the engine's layout beyond TP: attention DP ranks and expert parallelism (1, or TP x DP)
STEP_COLUMNS_LAYOUT: tuple[str, ...] = (*STEP_COLUMNS[:4], "dp", "ep", *STEP_COLUMNS[4:])
STEP_INTEGER_COLUMNS = ("tp", "dp", "ep", "decode_batch", "decode_context_tokens", "prefill_prompts", "prefill_isl")


class StepTable:
    """Timed engine iterations of one CSV (`calibration/*.csv`): a decode token for each of `decode_batch`
    sequences of `decode_context_tokens`, fused with `prefill_prompts` prompts of `prefill_isl` tokens, took
    `time_ms`. The roofline's kernel efficiencies are fitted to them (perf/calibration.py). `columns` holds the
    validated values by column; `frame` is them as a pandas frame (built on first use)."""

    __slots__ = ("_frame", "columns", "origin", "path")

    def __init__(self, path: str, origin: str, columns: dict[str, list]):
        self.path, self.origin, self.columns, self._frame = path, origin, columns, None

    @property
    def frame(self):
        if self._frame is None:
            import pandas as pd  # slow to import: where the calibration fits run

            frame = pd.DataFrame(self.columns)
            self._frame = frame.astype({c: "int64" for c in STEP_INTEGER_COLUMNS} | {"time_ms": float})
        return self._frame

    def __len__(self) -> int:
        return len(self.columns["time_ms"])

    def __repr__(self) -> str:
        return f"StepTable({self.path!r}, {len(self)} rows)"


class Catalog(StrictModel):
    """Everything the planner knows about hardware, prices, models and measured performance."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, arbitrary_types_allowed=True)

    directory: str
    layers: tuple[str, ...] = (SHIPPED_LAYER,)
    defaults: CatalogDefaults
    gpus: dict[str, Gpu]
    systems: dict[str, System]
    models: dict[str, ModelArch]
    benchmarks: tuple[BenchmarkRow, ...]
    steps: tuple[StepTable, ...] = ()
    # what is derived from this catalog once (calibration fits, row indexes): lives and dies with it
    _derived: dict = PrivateAttr(default_factory=dict)

    @property
    def derived(self) -> dict:
        if self._derived.get("owner") != id(self):  # a model_copy shares the dict: start its own
            self._derived = {"owner": id(self)}
        return self._derived

    def resolve(self, kind: Literal["model", "gpu", "system"], name: str, file: str = "", field: str = "") -> str:
        """The catalog id a name stands for: the id itself or one of its aliases, without regard to case; a model
        also by the repository part of a path ('/models/meta-llama/Llama-3.3-70B-Instruct') or the name after its
        organization; a GPU also with a SkyPilot count ('H100:8'; see `accelerator_count`). An unknown name raises
        PlannerInputError(file, field) with the closest id or alias ("did you mean")."""
        return resolve_name(self._entries(kind), self._name_index(kind), kind, name, file or self.directory, field or kind)

    def did_you_mean(self, kind: str, name: str) -> str:
        """" Did you mean 'id' (alias)?" for the closest id or alias, or ""."""
        return closest_name(self._entries(kind), self._name_index(kind), kind, name)

    def _entries(self, kind: str) -> dict:
        return {"model": self.models, "gpu": self.gpus, "system": self.systems}[kind]

    def _name_index(self, kind: str) -> dict[str, str]:
        key = ("names", kind)
        if key not in self.derived:
            self.derived[key] = name_index(self._entries(kind))
        return self.derived[key]

    def gpu(self, gpu_id: str) -> Gpu:
        if gpu_id not in self.gpus:
            raise PlannerInputError(self.directory, "gpu", unknown_id_message("GPU", gpu_id, self.gpus, "planner catalog gpus"))
        return self.gpus[gpu_id]

    def system(self, system_id: str) -> System:
        if system_id not in self.systems:
            raise PlannerInputError(
                self.directory, "system", unknown_id_message("system", system_id, self.systems, "planner catalog systems")
            )
        return self.systems[system_id]

    def model(self, model_id: str) -> ModelArch:
        if model_id not in self.models:
            raise PlannerInputError(
                self.directory, "model", unknown_id_message("model", model_id, self.models, "planner catalog models")
            )
        return self.models[model_id]

    def gpu_of(self, system_id: str) -> Gpu:
        return self.gpus[self.systems[system_id].gpu]


def _fold(name: str) -> str:
    """A name as ids and aliases are matched: normalized (`normalize_name`), without regard to case."""
    return normalize_name(name).casefold()


_COUNT = re.compile(r"^(?P<name>.+?):(?P<count>\d+)$")


def _strip_count(name: str) -> str:
    match = _COUNT.match(normalize_name(name))
    return match.group("name") if match else name


def accelerator_count(name: str) -> int | None:
    """The count of a SkyPilot accelerator name ('H100:8' -> 8), None without one."""
    match = _COUNT.match(normalize_name(name))
    return int(match.group("count")) if match else None


def _name_candidates(kind: str, name: str) -> list[str]:
    """Folded forms of a name to look up, most specific first."""
    name = normalize_name(name)
    if kind == "gpu":
        name = _strip_count(name)
    candidates = [_fold(name)]
    if kind == "model" and "/" in name:
        parts = [p for p in name.rstrip("/").split("/") if p]
        candidates += [_fold("/".join(parts[-2:])), _fold(parts[-1])] if parts else []
    return candidates


def name_index(entries: dict) -> dict[str, str]:
    """Folded id or alias -> id, for entries with `aliases`. The names after an organization
    ('Llama-3.3-70B-Instruct') are indexed too, unless two entries share one."""
    index: dict[str, str] = {}
    short: dict[str, set[str]] = {}
    for entry_id, entry in entries.items():
        for name in (entry_id, *entry.aliases):
            index[_fold(name)] = entry_id
            if "/" in name:
                short.setdefault(_fold(name.rsplit("/", 1)[1]), set()).add(entry_id)
    for name, ids in short.items():
        if len(ids) == 1 and name not in index:
            index[name] = next(iter(ids))
    return index


def closest_name(entries: dict, index: dict[str, str], kind: str, name: str) -> str:
    """" Did you mean 'id' (alias)?" for the id or alias closest to `name`, or ""."""
    folded = _fold(_strip_count(name) if kind == "gpu" else name)
    close = difflib.get_close_matches(folded, list(index), n=1, cutoff=0.6)
    if not close:
        return ""
    entry_id = index[close[0]]
    named = next((a for a in (entry_id, *entries[entry_id].aliases) if _fold(a) == close[0]), entry_id)
    return f" Did you mean '{entry_id}'" + (f" ({named})" if named != entry_id else "") + "?"


def resolve_name(entries: dict, index: dict[str, str], kind: str, name: str, file: str, field: str) -> str:
    """`Catalog.resolve` over `entries` and their `name_index`; a name empty once normalized, or too long, is
    refused as such (`name_problem`)."""
    problem = name_problem(str(name))
    if problem:
        raise PlannerInputError(file, field, problem)
    for candidate in _name_candidates(kind, str(name)):
        if candidate in index:
            return index[candidate]
    label = {"model": "model", "gpu": "GPU", "system": "system"}[kind]
    raise PlannerInputError(file, field, unknown_id_message(
        label, str(name), entries, f"planner catalog {kind}s", closest_name(entries, index, kind, str(name)), aliases=True,
    ))  # fmt: skip


def check_aliases(entries: dict, kind: str, files: dict[str, Path]) -> None:
    """Every id and alias names one entry: an alias shared by two entries, or equal to another entry's id,
    would make a name mean two things."""
    owner: dict[str, str] = {}
    for entry_id, entry in sorted(entries.items()):
        for name in (entry_id, *entry.aliases):
            folded = _fold(name)
            if owner.setdefault(folded, entry_id) != entry_id:
                raise PlannerInputError(
                    str(files[entry_id]), f"{kind}s[{entry_id}].aliases",
                    f"'{name}' already names {kind} '{owner[folded]}' (names match without regard to case, spaces "
                    "and invisible characters); an id or alias must name one entry",
                )  # fmt: skip


BENCHMARK_COLUMNS: tuple[str, ...] = (
    "source", "model", "gpu", "gpus", "tp", "precision", "isl", "osl", "concurrency", "run_kind", "statistic",
    "ttft_ms", "ttft_ms_bound", "tpot_ms", "tpot_ms_bound", "itl_ms", "request_throughput_rps",
    "output_tokens_per_s", "per", "notes", "provenance",
)  # fmt: skip
# tables written before metrics version 2 (planner/metrics.py) had no tpot_ms column: their itl_ms and itl_ms_bound
# were a request's mean gap, so such a table is read with them as tpot_ms and tpot_ms_bound
_VERSION_1_COLUMNS = {"itl_ms": "tpot_ms", "itl_ms_bound": "tpot_ms_bound"}
_REQUIRED_BENCHMARK_COLUMNS = ("source", "model", "gpu", "gpus", "per")


def benchmark_csv_text(rows) -> str:
    """Rows as a benchmark table (the columns above, whole numbers without decimals), for writing; text a
    spreadsheet would run as a formula (notes, sources from result files) is made inert."""
    import pandas as pd  # slow to import: only where a table is written

    from planner.report.spreadsheet import csv_safe_frame

    records = [{c: getattr(row, c) for c in BENCHMARK_COLUMNS} for row in rows]
    frame = pd.DataFrame(records, columns=list(BENCHMARK_COLUMNS))
    for column in ("gpus", "tp", "isl", "osl", "concurrency"):
        frame[column] = frame[column].astype("Int64")
    return csv_safe_frame(frame).to_csv(index=False, lineterminator="\n", float_format="%.6g")


def default_catalog_dir() -> Path:
    """The shipped catalogs: inside the installed wheel, or at the repository root in a checkout."""
    packaged = Path(__file__).resolve().parent / "_catalogs"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "catalogs"


def _load_entries(path: Path, key: str) -> list:
    data = read_yaml(path)
    if data is None:
        return []
    if not isinstance(data, dict) or set(data) != {key}:
        raise PlannerInputError(str(path), key, f"expected a mapping with the single key '{key}' holding a list")
    entries = data[key] or []
    if not isinstance(entries, list):
        raise PlannerInputError(str(path), key, f"expected a list of entries, got {type(entries).__name__}")
    return entries


def _csv_value(raw: object) -> object:
    """An empty cell (or pandas' NaN) is None for the models."""
    if raw is None or (isinstance(raw, float) and math.isnan(raw)):
        return None
    if isinstance(raw, str):
        raw = raw.strip()
        return raw or None
    return raw


def _csv_records(path: Path) -> tuple[list[str], list[list[str]]]:
    """(header, non-empty records) of a CSV file; an unreadable or empty file, or a record whose field count is not
    the header's, raises PlannerInputError naming its line."""
    try:
        with open_bounded(path, "a catalog table", MAX_TABLE_BYTES, newline="") as handle:
            records = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise PlannerInputError(str(path), "", f"cannot read CSV: {exc}") from exc
    if not records:
        raise PlannerInputError(str(path), "", "empty file (expected a header line and rows)")
    for number, record in enumerate(records[1:], start=2):
        if record and len(record) != len(records[0]):
            raise PlannerInputError(
                str(path), f"line {number}",
                f"{len(record)} fields but the header has {len(records[0])} (quote a field that contains a comma)",
            )
    return list(records[0]), [record for record in records[1:] if record]


def load_benchmark_table(path: Path, origin: str = SHIPPED_LAYER) -> list[BenchmarkRow]:
    """Read one benchmark CSV into rows; a bad row raises PlannerInputError naming file, line and column."""
    header, records = _csv_records(path)
    missing = [c for c in _REQUIRED_BENCHMARK_COLUMNS if c not in header]
    if missing:
        raise PlannerInputError(str(path), missing[0], f"missing column; required: {', '.join(_REQUIRED_BENCHMARK_COLUMNS)}")
    if "tpot_ms" not in header and "tpot_ms_bound" not in header:
        header = [_VERSION_1_COLUMNS.get(c, c) for c in header]
    unknown = [c for c in header if c not in BENCHMARK_COLUMNS]
    if unknown:
        # the header of a file that is not a benchmark table may be anything: quote a little of it, no more
        name = unknown[0] if len(unknown[0]) <= 32 else unknown[0][:29] + "..."
        raise PlannerInputError(str(path), name, f"unknown column; allowed: {', '.join(BENCHMARK_COLUMNS)}")
    rows = []
    for index, record in enumerate(records):
        line = index + 2  # header is line 1
        values = {k: _csv_value(v) for k, v in zip(header, record)}
        values = {k: v for k, v in values.items() if v is not None}
        values.update(table=path.name, line=line, origin=origin, path=str(path))
        rows.append(validate_model(BenchmarkRow, values, f"{path} line {line}"))
    return rows


def load_step_table(path: Path, models: dict, gpus: dict, origin: str = SHIPPED_LAYER) -> StepTable:
    """Read one calibration CSV of timed engine iterations; a bad cell raises PlannerInputError naming its line.
    Plain csv (pandas is slow to import and every catalog load reads these)."""
    names, records = _csv_records(path)
    header = tuple(names)
    if header not in (STEP_COLUMNS, STEP_COLUMNS_LAYOUT):
        raise PlannerInputError(str(path), "header", f"expected the columns {', '.join(STEP_COLUMNS)} (dp and ep after tp "
                                                     "where the engines use attention DP or expert parallelism)")  # fmt: skip
    raw = {name: [record[i] for record in records] for i, name in enumerate(header)}
    if "dp" not in raw:
        raw["dp"] = raw["ep"] = ["1"] * len(records)

    def fail(bad: list[bool], column: str, allowed: str) -> None:
        if any(bad):
            index = bad.index(True)
            raise PlannerInputError(str(path), f"line {index + 2} column {column}", f"{allowed} (got {short_repr(raw[column][index])})")

    def number(text: str) -> float:
        try:
            return float(text)
        except ValueError:
            return math.nan

    fail([v.strip() == "" for v in raw["source"]], "source", "every row names its source")
    fail([v not in models for v in raw["model"]], "model", "a model id of the catalog")
    fail([v not in gpus for v in raw["gpu"]], "gpu", "a GPU id of the catalog")
    fail([g not in gpus or p not in gpus[g].precisions for g, p in zip(raw["gpu"], raw["precision"])], "precision",
         "a precision the GPU supports")  # fmt: skip
    out: dict[str, list] = {name: raw[name] for name in ("source", "model", "gpu", "precision", "provenance")}
    for column in STEP_INTEGER_COLUMNS:
        low = 1 if column in ("tp", "dp", "ep") else 0
        values = [number(v) for v in raw[column]]
        fail([not (v == round(v) and low <= v <= 10_000_000) if math.isfinite(v) else True for v in values], column,
             f"a whole number >= {low}")  # fmt: skip
        out[column] = [int(v) for v in values]
    time_ms = [number(v) for v in raw["time_ms"]]
    fail([not (0 < v < 1e9) for v in time_ms], "time_ms", "a finite time > 0 ms")
    out["time_ms"] = time_ms
    rows = range(len(time_ms))
    fail([out["decode_batch"][i] == 0 and out["prefill_prompts"][i] == 0 for i in rows], "decode_batch",
         "an iteration decodes or prefills something")  # fmt: skip
    fail([(out["prefill_prompts"][i] > 0) != (out["prefill_isl"][i] > 0) for i in rows], "prefill_isl",
         "> 0 exactly when prefill_prompts > 0")  # fmt: skip
    fail([out["decode_batch"][i] > 0 and out["decode_context_tokens"][i] == 0 for i in rows], "decode_context_tokens",
         "> 0 when decode_batch > 0")  # fmt: skip
    fail([out["ep"][i] != 1 and out["ep"][i] != out["tp"][i] * out["dp"][i] for i in rows], "ep", "1 (experts split by TP) or tp x dp")
    return StepTable(str(path), origin, out)


_ENTRY_MODELS: dict[str, type[StrictModel]] = {"gpus": Gpu, "systems": System, "models": ModelArch}


class CatalogManifest(InputModel):
    """`catalog.yaml` of a user catalog: its name in provenance, and whether it adds to the shipped catalog."""

    name: str | None = Field(default=None, min_length=1)
    base: Literal["shipped", "none"] = "shipped"
    description: str = ""
    # the benchmark tables that are this catalog's own; another CSV dropped into its benchmarks/ (e.g. by
    # `planner ingest --out catalogs/benchmarks/x.csv`) is cited as 'local', not as this catalog's
    tables: list[str] | None = None


CatalogDirs = Path | str | Sequence[Path | str] | None


@dataclass(frozen=True)
class _Entry:
    data: dict
    file: Path


def _merge_entries(merged: dict[str, _Entry], entries: list, file: Path, key: str, overlay: bool) -> None:
    """Add one file's entries; an id already known is overridden field by field and must name its own source."""
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise PlannerInputError(str(file), f"{key}[{index}]", "expected a mapping with a string 'id'")
        problem = name_problem(entry["id"])
        if problem:
            raise PlannerInputError(str(file), f"{key}[{index}].id", problem)
        entry_id = normalize_name(entry["id"])  # the form names are matched in: an id and its look-alike are one
        if entry_id in seen:
            raise PlannerInputError(str(file), f"{key}[{index}].id", f"duplicate id '{entry_id}'")
        seen.add(entry_id)
        base = merged.get(entry_id)
        if base is None or not overlay:
            merged[entry_id] = _Entry(dict(entry), file)
            continue
        if "source" not in entry:
            raise PlannerInputError(
                str(file), f"{key}[{index}:{entry_id}].source",
                f"required: an entry overriding {base.file}'s '{entry_id}' must name the source of its figures",
            )
        kept = sorted(set(base.data) - set(entry) - {"id", "source", "notes"})
        data = {**base.data, **entry}
        if kept:
            data["source"] = f"{entry['source']} (overrides {', '.join(sorted(set(entry) - {'id', 'source'}))}); " \
                             f"other fields: {base.data.get('source', '')}"  # fmt: skip
        merged[entry_id] = _Entry(data, file)


def _validated(key: str, merged: dict[str, _Entry]) -> dict:
    """Validate every merged entry, naming the file that last touched it."""
    model_cls = _ENTRY_MODELS[key]
    result = {}
    for entry_id in sorted(merged):
        entry = merged[entry_id]
        try:
            result[entry_id] = validate_model(model_cls, entry.data, str(entry.file))
        except PlannerInputError as error:
            field = f"{key}[{entry_id}]" + (f".{error.field}" if error.field else "")
            raise PlannerInputError(error.file, field, error.problem.message) from None
    return result


def _manifest(directory: Path) -> CatalogManifest:
    file = directory / "catalog.yaml"
    if not file.is_file():
        return CatalogManifest()
    return validate_model(CatalogManifest, read_yaml(file), str(file))


def as_directory_list(directories: CatalogDirs) -> list[Path]:
    """None, one directory or several, as a list."""
    if directories is None:
        return []
    if isinstance(directories, (str, Path)):
        return [Path(directories)]
    return [Path(d) for d in directories]


@dataclass(frozen=True)
class CatalogLayer:
    directory: Path
    origin: str  # 'shipped' or the user catalog's name: how its rows are cited
    own_tables: tuple[str, ...] | None  # the manifest's `tables` (other CSVs there are cited as 'local')


def catalog_layers(directories: CatalogDirs) -> list[CatalogLayer]:
    """The layers from the bottom up: the shipped catalog unless the first user catalog says `base: none`, then
    each user directory in the order given. Each manifest is read once."""
    user = as_directory_list(directories)
    for directory in user:
        if not directory.is_dir():
            raise PlannerInputError(str(directory), "", "catalog directory not found")
    manifests = [_manifest(directory) for directory in user]
    layers: list[CatalogLayer] = []
    if not user or manifests[0].base == "shipped":
        shipped = _manifest(default_catalog_dir())
        layers.append(CatalogLayer(default_catalog_dir(), SHIPPED_LAYER, _tables(shipped)))
    for directory, manifest in zip(user, manifests):
        if directory.resolve() == default_catalog_dir().resolve() and layers and layers[0].origin == SHIPPED_LAYER:
            continue  # the shipped catalog named explicitly: nothing to add
        layers.append(CatalogLayer(directory, manifest.name or str(directory), _tables(manifest)))
    return layers


def _tables(manifest: CatalogManifest) -> tuple[str, ...] | None:
    return None if manifest.tables is None else tuple(manifest.tables)


_MEASURED_FIELDS = ("ttft_ms", "ttft_ms_bound", "tpot_ms", "tpot_ms_bound", "itl_ms", "request_throughput_rps",
                    "output_tokens_per_s")  # fmt: skip


def _check_no_conflicting_rows(rows: list[BenchmarkRow]) -> None:
    """One source measuring one engine point twice with different results is ambiguous (the planner would take
    the better one without a word): refused, naming both lines. Different sources at one point are kept."""
    seen: dict[tuple, BenchmarkRow] = {}
    for row in rows:
        key = (row.source, *row.point_key)
        first = seen.setdefault(key, row)
        if first is not row and any(getattr(first, f) != getattr(row, f) for f in _MEASURED_FIELDS):
            raise PlannerInputError(
                f"{row.path} line {row.line}", "source",
                f"the same engine point as {first.path} line {first.line}, from the same source, with other results; "
                "keep one of them (or name the runs apart in `source`)",
            )  # fmt: skip


def _rows_with_ids(rows: list[BenchmarkRow], models: dict, gpus: dict) -> list[BenchmarkRow]:
    """Rows whose model or GPU is written as an alias ('meta-llama/Llama-3.1-8B-Instruct', 'H100') get the id; a
    name of neither raises with "did you mean"."""
    model_names, gpu_names = name_index(models), name_index(gpus)
    out = []
    for row in rows:
        where = f"{row.path} line {row.line}"
        model = row.model if row.model in models else resolve_name(models, model_names, "model", row.model, where, "model")
        gpu = row.gpu if row.gpu in gpus else resolve_name(gpus, gpu_names, "gpu", row.gpu, where, "gpu")
        out.append(row if (model, gpu) == (row.model, row.gpu) else row.model_copy(update={"model": model, "gpu": gpu}))
    return out


def load_catalog(directories: CatalogDirs = None) -> Catalog:
    """Load the shipped catalog with user catalogs layered over it (or a standalone catalog), cross-checked.

    A user directory may hold any of gpus.yaml, systems.yaml, models.yaml, defaults.yaml and benchmarks/*.csv.
    Its entries add to the layers below; an entry with a known id overrides the fields it gives; a benchmark
    row at the same operating point (model, GPU, GPUs, TP, precision, ISL, OSL, concurrency, run kind, per)
    replaces the rows of the layers below (rows of one layer never replace each other). Every row keeps its origin ('shipped' or the user catalog's name).
    """
    layers = catalog_layers(directories)
    merged: dict[str, dict[str, _Entry]] = {key: {} for key in _ENTRY_MODELS}
    defaults_raw: dict = {}
    layers_rows: list[list[BenchmarkRow]] = []
    step_files: list[tuple[Path, str]] = []
    for depth, layer in enumerate(layers):
        directory, origin, own_tables = layer.directory, layer.origin, layer.own_tables
        overlay = depth > 0
        for key in _ENTRY_MODELS:
            file = directory / f"{key}.yaml"
            if file.exists() or file.is_symlink() or not overlay:  # not a regular file: read_yaml says so by name
                _merge_entries(merged[key], _load_entries(file, key), file, key, overlay)
        defaults_file = directory / "defaults.yaml"
        if defaults_file.exists() or defaults_file.is_symlink() or not overlay:
            data = read_yaml(defaults_file)
            if not isinstance(data, dict) or not isinstance(data.get("defaults"), dict) or set(data) != {"defaults"}:
                raise PlannerInputError(str(defaults_file), "defaults", "expected a mapping with the single key 'defaults'")
            defaults_raw.update({name: (value, defaults_file) for name, value in data["defaults"].items()})
        bench_dir = directory / "benchmarks"
        layer_rows = [
            row for table in (sorted(bench_dir.glob("*.csv")) if bench_dir.is_dir() else [])
            for row in load_benchmark_table(table, origin if own_tables is None or table.name in own_tables else "local")
        ]  # fmt: skip
        layers_rows.append(layer_rows)
        calibration_dir = directory / "calibration"
        step_files.extend((table, origin) for table in (sorted(calibration_dir.glob("*.csv")) if calibration_dir.is_dir() else []))
    gpus = _validated("gpus", merged["gpus"])
    systems = _validated("systems", merged["systems"])
    models = _validated("models", merged["models"])
    for key, entries in (("gpu", gpus), ("system", systems), ("model", models)):
        check_aliases(entries, key, {i: e.file for i, e in merged[f"{key}s"].items()})
    for system_id, system in systems.items():
        if system.gpu not in gpus:
            raise PlannerInputError(
                str(merged["systems"][system_id].file), f"systems[{system_id}].gpu",
                unknown_id_message("GPU", system.gpu, gpus, "planner catalog gpus"),
            )
    rows: list[BenchmarkRow] = []
    for layer_rows in layers_rows:  # names resolved first, so that a row naming a model by alias replaces too
        layer_rows = _rows_with_ids(layer_rows, models, gpus)
        _check_no_conflicting_rows(layer_rows)
        replaced = {row.point_key for row in layer_rows}
        rows = [row for row in rows if row.point_key not in replaced] + layer_rows
    defaults_files = sorted({str(file) for _, file in defaults_raw.values()})
    defaults = validate_model(
        _DefaultsFile, {"defaults": {name: value for name, (value, _) in defaults_raw.items()}}, " + ".join(defaults_files)
    ).defaults
    return Catalog(
        directory=" + ".join(str(layer.directory) for layer in layers), layers=tuple(layer.origin for layer in layers),
        defaults=defaults, gpus=gpus, systems=systems, models=models, benchmarks=tuple(rows),
        steps=tuple(load_step_table(path, models, gpus, origin) for path, origin in step_files),
    )
