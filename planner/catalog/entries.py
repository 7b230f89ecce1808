"""Catalog entries: GPUs, systems, model architectures, benchmark rows, step tables, the defaults and `Catalog`
(frozen, validated pydantic models; every entry carries the `source` of its numbers)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import (
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    field_validator,
    model_validator,
)

from planner.catalog.names import Alias, Name, closest_name, name_index, resolve_name
from planner.errors import PlannerInputError, unknown_id_message
from planner.loading import StrictModel

ComputePrecision = Literal["bf16", "fp16", "fp8", "fp4"]  # a tensor-core rate (Gpu.tflops_by_precision)
Precision = Literal["bf16", "fp16", "fp8", "fp4", "w4a16", "w4a8"]  # an engine's precision: weights and compute


@dataclass(frozen=True)
class PrecisionSpec:
    """What an engine precision means: how its quantized weights are stored and which tensor cores multiply them.

    `weight_bits`: bits per weight of the quantized layers, block scales included (MXFP4: 4 bits + an e8m0 scale
    per 32 = 4.25; NVFP4: + an fp8 scale per 16 = 4.5). At 4 bits the embedding table and LM head stay bf16, and a
    model shipped in fp4 keeps its published MXFP4 experts and bf16 rest (`planner.catalog.weights.weight_format`).
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
# bytes per weight of the quantized layers (block scales included); a model's whole: `planner.catalog.weights.weight_gb`
BYTES_PER_PARAM: dict[str, float] = {p: s.weight_bytes for p, s in PRECISION_SPECS.items()}
SHIPPED_LAYER = "shipped"
assert set(PRECISIONS) == set(Precision.__args__), "Precision and PRECISION_SPECS name the same precisions"


def compute_precision(precision: str) -> str:
    """The tensor-core precision an engine precision multiplies at (w4a16 -> bf16, w4a8 -> fp8)."""
    return PRECISION_SPECS[precision].compute



class InputModel(StrictModel):
    """What users write in catalogs and scenarios: a StrictModel (booleans are never numbers there either)."""


class MeasuredKernels(InputModel):
    """Microbenchmarks of one GPU on one harness: what its kernels reach, beside the datasheet's peaks. A generation
    without timed serving kernels borrows another's fitted fractions of peak, rescaled by how this GPU's measured
    fractions compare with the donor GPU's on the same harness (planner/perf/transfer.py)."""

    harness: str = Field(min_length=1)  # rows compare only within one harness (same tool, same sizes)
    gemm_fp8_tflops: float | None = Field(default=None, gt=0, le=1e6)  # large square FP8 GEMMs (median of sizes)
    hbm_tb_per_s: float | None = Field(default=None, gt=0, le=1e3)  # STREAM-like kernels (median of kernels)
    attention_bf16_tflops: float | None = Field(default=None, gt=0, le=1e6)  # Flash Attention 2 forward
    notes: str = ""
    source: str = Field(min_length=1)


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
    measured_kernels: MeasuredKernels | None = None
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
    # how firm the price is: a published list price (on demand), a reserved/capacity-block list price, an estimate
    # derived from published figures (press reports, a reseller's quote), or a placeholder (no public figure: an
    # order of magnitude to replace with a quote)
    price_source_kind: Literal["list-price", "estimate", "reserved", "placeholder"] | None = None
    # the node's scale-out network (RDMA NICs for GPU traffic), all ports together: what moves a KV cache from a
    # prefill to a decode instance, and activations between pipeline stages; None where not published
    network_gbit_per_s: float | None = Field(default=None, gt=0, le=1e6)
    # the node is a whole rack (GB200 NVL72): its enclosure, power shelves and busbar come with it, so it takes one
    # rack position of its own and no site rack or rack PDUs (planner/infrastructure.py `rack_count`)
    rack_scale: StrictBool = False
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
    # the serving engine's release the row measured, as its source states it ('' where it does not: the row then
    # answers as 'version not stated'; planner/perf/engines.py)
    engine_version: str = Field(default="", max_length=80)
    # the serving engine the row measured (trtllm, vllm, sglang: planner/perf/serving.py); '' is the reference
    # TensorRT-LLM-class engine, as every shipped row. A row answers and anchors only its own engine's queries
    engine: Literal["", "trtllm", "vllm", "sglang", "atom"] = ""

    @property
    def serving_engine(self) -> str:
        """The engine the row measured: its `engine`, or the reference engine where it states none."""
        return self.engine or "trtllm"
    # empty: a measurement. 'aic:<package>:<backend>:<db>': an estimate of NVIDIA's operator-level database
    # materialized by `planner tables build` (never used to calibrate the roofline)
    provenance: str | None = Field(default=None, pattern=r"^(measured|aic:[^,]+)$")

    @property
    def is_measurement(self) -> bool:
        return self.provenance in (None, "measured")

    @property
    def point_key(self) -> tuple:
        """The operating point a row measures (of its serving engine): a row of a higher catalog layer at the same
        point replaces it."""
        return (self.model, self.gpu, self.gpus, self.tp, self.precision, self.isl, self.osl, self.concurrency,
                self.run_kind, self.per, self.statistic, self.serving_engine)  # fmt: skip

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
    "cloud_start_up_minutes": (0.0, 1440.0, True),
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
# counts of things (rack units, PDUs, switch ports, ports per node): whole numbers in the catalog as in a scenario
# (planner/scenario/spec.py types the same names as int); 1.5 PDUs would be truncated to 1 where it is used
WHOLE_DEFAULTS = frozenset({"rack_units_per_rack", "pdus_per_rack", "fabric_switch_ports", "frontend_ports_per_node",
                            "frontend_switch_ports"})  # fmt: skip
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
    # how long before its period a rented node starts (billed): sites.cloud.start_up_minutes where not given
    cloud_start_up_minutes: SourcedValue = SourcedValue(value=0.0, source="not in this catalog: rented nodes start at once",
                                                        kind="placeholder")  # fmt: skip
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
        if info.field_name in WHOLE_DEFAULTS and not float(value.value).is_integer():
            raise ValueError(f"value must be a whole number (a count; got {value.value:g})")
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
    # the user layers whose rows may refit their GPU generation's engine factors (catalog.yaml `calibrate:
    # generation`); the others' rows calibrate only the engines they measured
    generation_layers: tuple[str, ...] = ()
    defaults: CatalogDefaults
    gpus: dict[str, Gpu]
    systems: dict[str, System]
    models: dict[str, ModelArch]
    benchmarks: tuple[BenchmarkRow, ...]
    steps: tuple[StepTable, ...] = ()
    # per system, the layer whose entry gave its price (planner.catalog.files.PRICE_FIELDS): (the layer's origin,
    # 'shipped' or the user catalog's name; the file; the price_source_kind that entry states, None where it states
    # none). A system without one has no price from any catalog file
    price_layers: dict[str, tuple[str, str, str | None]] = Field(default_factory=dict)
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


