"""Catalogs: GPUs, systems (on-prem servers, cloud instances), model architectures, benchmark tables.

Loaded from `catalogs/*.yaml` and `catalogs/benchmarks/*.csv` into frozen, validated objects.
Every entry carries the `source` of its numbers.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

import pandas as pd
from pydantic import Field

from planner.errors import PlannerInputError, unknown_id_message
from planner.loading import StrictModel, read_yaml, validate_model

Precision = Literal["bf16", "fp16", "fp8", "fp4"]
PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "fp8", "fp4")
BYTES_PER_PARAM: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5}


class Gpu(StrictModel):
    id: str
    architecture: Literal["ampere", "ada", "hopper", "blackwell"]
    name: str
    memory_gb: float = Field(gt=0)
    mem_bw_tb_per_s: float = Field(gt=0)
    tflops_by_precision: dict[Precision, float]
    link: Literal["nvlink", "pcie"]
    link_gb_per_s: float = Field(gt=0)
    tdp_w: float = Field(gt=0)
    form_factor: Literal["sxm", "pcie"]
    notes: str = ""
    source: str = Field(min_length=1)

    @property
    def precisions(self) -> tuple[str, ...]:
        return tuple(p for p in PRECISIONS if p in self.tflops_by_precision)


class System(StrictModel):
    """A node: an on-prem server bought once, or a cloud instance rented by the hour."""

    id: str
    kind: Literal["on-prem", "cloud"]
    name: str
    gpu: str
    gpus_per_node: int = Field(gt=0)
    price_usd: float | None = Field(default=None, gt=0)
    power_kw: float | None = Field(default=None, gt=0)
    rack_units: int | None = Field(default=None, gt=0)
    provider: str | None = None
    region: str | None = None
    usd_per_hour: float | None = Field(default=None, gt=0)
    spot_usd_per_hour_min: float | None = Field(default=None, gt=0)
    spot_usd_per_hour_max: float | None = Field(default=None, gt=0)
    price_source_kind: Literal["list-price", "estimate", "reserved"] | None = None
    notes: str = ""
    source: str = Field(min_length=1)


class MoeSpec(StrictModel):
    experts: int = Field(gt=0)
    experts_per_token: int = Field(gt=0)
    active_params_b: float = Field(gt=0)


class ModelArch(StrictModel):
    """A model's architecture; fields not published are left out (None), never guessed."""

    id: str
    name: str = ""
    params_b: float = Field(gt=0)
    layers: int | None = Field(default=None, gt=0)
    hidden: int | None = Field(default=None, gt=0)
    heads: int | None = Field(default=None, gt=0)
    kv_heads: int | None = Field(default=None, gt=0)
    head_dim: int | None = Field(default=None, gt=0)
    ffn: int | None = Field(default=None, gt=0)
    vocab: int | None = Field(default=None, gt=0)
    max_context: int | None = Field(default=None, gt=0)
    moe: MoeSpec | None = None
    notes: str = ""
    source: str = Field(min_length=1)

    def weight_gb(self, precision: str) -> float:
        """Weight memory in GB (1e9 bytes): params x bytes per parameter of the precision."""
        return self.params_b * BYTES_PER_PARAM[precision]

    def kv_bytes_per_token(self, kv_bytes_per_element: float = 2.0) -> float | None:
        """2 (K and V) x layers x kv_heads x head_dim x bytes per element; None when the architecture is unknown."""
        if self.layers is None or self.kv_heads is None or self.head_dim is None:
            return None
        return 2 * self.layers * self.kv_heads * self.head_dim * kv_bytes_per_element


class BenchmarkRow(StrictModel):
    """One measured point of a benchmark table (a CSV row), with its source."""

    table: str
    line: int
    source: str = Field(min_length=1)
    model: str
    gpu: str
    gpus: int = Field(gt=0)
    tp: int | None = Field(default=None, gt=0)
    precision: Precision | None = None
    isl: int | None = Field(default=None, gt=0)
    osl: int | None = Field(default=None, gt=0)
    concurrency: int | None = Field(default=None, gt=0)
    run_kind: Literal["online", "offline", "server", "max-throughput"] = "online"
    ttft_ms: float | None = Field(default=None, gt=0)
    ttft_ms_bound: float | None = Field(default=None, gt=0)
    itl_ms: float | None = Field(default=None, gt=0)
    itl_ms_bound: float | None = Field(default=None, gt=0)
    request_throughput_rps: float | None = Field(default=None, gt=0)
    output_tokens_per_s: float | None = Field(default=None, gt=0)
    per: Literal["instance", "node"]
    notes: str = ""


class SourcedValue(StrictModel):
    value: float
    source: str = Field(min_length=1)


class CatalogDefaults(StrictModel):
    """Scenario defaults with their sources (catalogs/defaults.yaml)."""

    words_per_token: SourcedValue
    peak_quantile: SourcedValue
    amortization_years: SourcedValue
    usd_per_kwh: SourcedValue
    pue: SourcedValue
    utilization_power_factor: SourcedValue
    maintenance_fraction_per_year: SourcedValue
    memory_reserve_fraction: SourcedValue


class _DefaultsFile(StrictModel):
    defaults: CatalogDefaults


class CatalogFiles(StrictModel):
    gpus: list[Gpu] = Field(default_factory=list)
    systems: list[System] = Field(default_factory=list)
    models: list[ModelArch] = Field(default_factory=list)


class Catalog(StrictModel):
    """Everything the planner knows about hardware, prices, models and measured performance."""

    directory: str
    defaults: CatalogDefaults
    gpus: dict[str, Gpu]
    systems: dict[str, System]
    models: dict[str, ModelArch]
    benchmarks: tuple[BenchmarkRow, ...]

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


BENCHMARK_COLUMNS: tuple[str, ...] = (
    "source", "model", "gpu", "gpus", "tp", "precision", "isl", "osl", "concurrency", "run_kind",
    "ttft_ms", "ttft_ms_bound", "itl_ms", "itl_ms_bound", "request_throughput_rps", "output_tokens_per_s",
    "per", "notes",
)  # fmt: skip
_REQUIRED_BENCHMARK_COLUMNS = ("source", "model", "gpu", "gpus", "per")


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
    return data[key] or []


def _unique(entries: list, file: Path, what: str) -> dict:
    by_id: dict = {}
    for index, entry in enumerate(entries):
        if entry.id in by_id:
            raise PlannerInputError(str(file), f"{what}[{index}].id", f"duplicate id '{entry.id}'")
        by_id[entry.id] = entry
    return by_id


def _csv_value(raw: object) -> object:
    """pandas reads an empty cell as NaN; the models want None."""
    if raw is None or (isinstance(raw, float) and math.isnan(raw)):
        return None
    if isinstance(raw, str):
        raw = raw.strip()
        return raw or None
    return raw


def load_benchmark_table(path: Path) -> list[BenchmarkRow]:
    """Read one benchmark CSV into rows; a bad row raises PlannerInputError naming file, line and column."""
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise PlannerInputError(str(path), "", f"cannot read CSV: {exc}") from exc
    missing = [c for c in _REQUIRED_BENCHMARK_COLUMNS if c not in frame.columns]
    if missing:
        raise PlannerInputError(str(path), missing[0], f"missing column; required: {', '.join(_REQUIRED_BENCHMARK_COLUMNS)}")
    unknown = [c for c in frame.columns if c not in BENCHMARK_COLUMNS]
    if unknown:
        raise PlannerInputError(str(path), unknown[0], f"unknown column; allowed: {', '.join(BENCHMARK_COLUMNS)}")
    rows = []
    for index, record in enumerate(frame.to_dict(orient="records")):
        line = index + 2  # header is line 1
        values = {k: _csv_value(v) for k, v in record.items()}
        values = {k: v for k, v in values.items() if v is not None}
        values.update(table=path.name, line=line)
        rows.append(validate_model(BenchmarkRow, values, f"{path} line {line}"))
    return rows


def load_catalog(directory: Path | str | None = None) -> Catalog:
    """Load and cross-check a catalog directory (default: the shipped one)."""
    directory = Path(directory) if directory is not None else default_catalog_dir()
    if not directory.is_dir():
        raise PlannerInputError(str(directory), "", "catalog directory not found")
    parts: dict[str, list] = {}
    for key in ("gpus", "systems", "models"):
        file = directory / f"{key}.yaml"
        entries = _load_entries(file, key)
        parts[key] = getattr(validate_model(CatalogFiles, {key: entries}, str(file)), key)
    gpus = _unique(parts["gpus"], directory / "gpus.yaml", "gpus")
    systems = _unique(parts["systems"], directory / "systems.yaml", "systems")
    models = _unique(parts["models"], directory / "models.yaml", "models")
    for index, system in enumerate(parts["systems"]):
        if system.gpu not in gpus:
            raise PlannerInputError(
                str(directory / "systems.yaml"),
                f"systems[{index}:{system.id}].gpu",
                unknown_id_message("GPU", system.gpu, gpus, "planner catalog gpus"),
            )
    rows: list[BenchmarkRow] = []
    bench_dir = directory / "benchmarks"
    for table in sorted(bench_dir.glob("*.csv")) if bench_dir.is_dir() else []:
        for row in load_benchmark_table(table):
            where = f"{table} line {row.line}"
            if row.model not in models:
                raise PlannerInputError(where, "model", unknown_id_message("model", row.model, models, "planner catalog models"))
            if row.gpu not in gpus:
                raise PlannerInputError(where, "gpu", unknown_id_message("GPU", row.gpu, gpus, "planner catalog gpus"))
            rows.append(row)
    defaults_file = directory / "defaults.yaml"
    defaults = validate_model(_DefaultsFile, read_yaml(defaults_file), str(defaults_file)).defaults
    return Catalog(directory=str(directory), defaults=defaults, gpus=gpus, systems=systems, models=models, benchmarks=tuple(rows))
