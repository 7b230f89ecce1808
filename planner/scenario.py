"""Scenarios: the workloads to serve, their latency limits, where nodes may come from, and the limits.

`load_scenario(path, catalog)` reads YAML, validates its structure (pydantic, unknown fields rejected) and then
checks it against the catalog (one `check_*` function per rule). The result is a frozen `Scenario` whose
workloads carry resolved token lengths and peak request rates.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from planner.catalog import Catalog, InputModel, Name, Precision, clean_name
from planner.infrastructure import FINANCE_FIELDS, INFRASTRUCTURE_FIELDS, Figure, Infrastructure, annuity_factor
from planner.errors import PlannerInputError, clip_text, did_you_mean, unknown_id_message
from planner.loading import read_yaml, validate_model
from planner.metrics import MAX_PERCENTILE, METRICS_VERSION, MIN_PERCENTILE, percentile_problem
from planner.metrics import limits as slo_limits
from planner.perf.types import DEFAULT_TOKEN_BUDGET
from planner.requirements import peak_rps_from_mean, rps_from_users, words_to_tokens

# Sane ranges for every number a scenario gives: beyond them a value is a typo or an attack, and the arithmetic
# downstream (Poisson quantiles, costs, the solver's coefficients) would overflow or lose all precision.
MAX_RPS = 1e6  # a million requests/s: far beyond any single fleet
MAX_MS = 1e7  # a latency limit of ~2.8 hours
MAX_FACTOR = 1e3  # a demand factor or forecast scale
MAX_PERIOD_RPS = 1e7  # a workload's demand in one period, after its factor and Poisson quantile
MAX_USD = 1e13  # a capex budget
MAX_NODES = 1_000_000
PositiveUsd = Annotated[float, Field(gt=0, le=1e9)]
PositiveUsdPerHour = Annotated[float, Field(gt=0, le=1e5)]
DemandFactor = Annotated[float, Field(ge=0, le=MAX_FACTOR)]

HOURS_PER_YEAR = 8760.0

WorkloadMode = Literal["streaming", "sequential", "offline"]
Deployment = Literal["on-prem", "cloud", "hybrid"]
SolverName = Literal["cbc", "highs", "ortools"]


# a workload's, period's, forecast's or scenario's name: in the one normal form of catalog names (NFKC, no
# invisible characters, whitespace collapsed: catalog.normalize_name), so that look-alikes are one name
LabelName = Annotated[str, Field(min_length=1, max_length=100), AfterValidator(clean_name)]


class SloSpec(InputModel):
    """Latency limits (planner/metrics.py, docs/metrics.md), each at `percentile`. Streaming cares for TTFT and
    TPOT/ITL, sequential for E2E, offline for none (seed 002)."""

    ttft_ms: float | None = Field(default=None, gt=0, le=MAX_MS)
    tpot_ms: float | None = Field(default=None, gt=0, le=MAX_MS)
    itl_ms: float | None = Field(default=None, gt=0, le=MAX_MS)
    e2e_ms: float | None = Field(default=None, gt=0, le=MAX_MS)
    percentile: float = 50.0

    @field_validator("percentile", mode="before")
    @classmethod
    def _percentile_in_range(cls, value):
        """50 to 99.9; a fraction (0.95) is the slip of writing a quantile, and gets 'did you mean 95?'."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"must be a number from {MIN_PERCENTILE:g} to {MAX_PERCENTILE:g} (got {str(value)[:80]})")
        problem = percentile_problem(value)
        if problem:
            raise ValueError(problem)
        return float(value)


class UsersSpec(InputModel):
    """Demand as people: daily active users x requests each, spread over the working hours."""

    daily_active_users: float = Field(gt=0, le=1e11)
    requests_per_user: float = Field(gt=0, le=1e6)
    working_hours_per_day: float = Field(gt=0, le=24)


class BucketSpec(InputModel):
    """A cell of the workload's ISL x OSL histogram: `share` of its requests have these lengths. With
    `max_isl_tokens`/`max_osl_tokens` the bucket is a class of requests: throughput is priced at its (typical)
    lengths, and an engine serving it must hold the maxima."""

    isl_tokens: int = Field(gt=0, le=100_000_000)
    osl_tokens: int = Field(gt=0, le=100_000_000)
    share: float = Field(gt=0, le=1)
    max_isl_tokens: int | None = Field(default=None, gt=0, le=100_000_000)
    max_osl_tokens: int | None = Field(default=None, gt=0, le=100_000_000)

    @model_validator(mode="after")
    def _max_covers_length(self) -> "BucketSpec":
        for length, maximum in (("isl_tokens", "max_isl_tokens"), ("osl_tokens", "max_osl_tokens")):
            if getattr(self, maximum) is not None and getattr(self, maximum) < getattr(self, length):
                raise ValueError(f"{maximum} ({getattr(self, maximum)}) must be >= {length} ({getattr(self, length)})")
        return self


class PrefixCacheSpec(InputModel):
    """Prompts that start with a prefix the engine keeps cached (a system prompt, a conversation's history): each
    prompt's first `prefix_tokens` are found in the cache by a share `hit_rate` of requests (perf.types.PrefixCache).
    `planner workload analyze` derives both from a trace that names its prompts' prefixes."""

    prefix_tokens: int = Field(gt=0, le=100_000_000)
    hit_rate: float = Field(gt=0, le=1)


class WorkloadSpec(InputModel):
    name: LabelName
    model: Name
    isl_tokens: int | None = Field(default=None, gt=0, le=100_000_000)
    osl_tokens: int | None = Field(default=None, gt=0, le=100_000_000)
    words_in: float | None = Field(default=None, gt=0, le=100_000_000)
    words_out: float | None = Field(default=None, gt=0, le=100_000_000)
    buckets: list[BucketSpec] | None = Field(default=None, min_length=1)
    peak_rps: float | None = Field(default=None, ge=0, le=MAX_RPS)
    mean_rps: float | None = Field(default=None, ge=0, le=MAX_RPS)
    users: UsersSpec | None = None
    peak_quantile: float | None = Field(default=None, gt=0, lt=1)
    mode: WorkloadMode = "streaming"
    slo: SloSpec = Field(default_factory=SloSpec)
    precisions: list[Precision] | None = Field(default=None, min_length=1)  # [] would allow nothing
    # serving engines the plan may run this workload on (planner/perf/engines.py); the integer program picks among
    # them with everything else. Default: the reference TensorRT-LLM-class engine the catalog's rows measured
    engines: list[Literal["trtllm", "vllm", "sglang"]] = Field(default_factory=lambda: ["trtllm"], min_length=1)
    prefix_cache: PrefixCacheSpec | None = None  # None: every prompt prefilled whole (a cold cache)

    @model_validator(mode="after")
    def _one_way_each(self) -> "WorkloadSpec":
        if self.buckets is not None:
            if any(v is not None for v in (self.isl_tokens, self.osl_tokens, self.words_in, self.words_out)):
                raise ValueError("give lengths either as buckets or as isl/osl (tokens or words), not both")
            total = sum(b.share for b in self.buckets)
            if abs(total - 1.0) > 1e-6:
                raise ValueError(f"bucket shares must add up to 1 (they add up to {total:g})")
        else:
            if (self.isl_tokens is None) == (self.words_in is None):
                raise ValueError("give the input length once: isl_tokens or words_in (or buckets)")
            if (self.osl_tokens is None) == (self.words_out is None):
                raise ValueError("give the output length once: osl_tokens or words_out (or buckets)")
        given = [k for k in ("peak_rps", "mean_rps", "users") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "give the demand exactly once: peak_rps, mean_rps (+ peak_quantile) or users "
                f"(daily_active_users, requests_per_user, working_hours_per_day); got {given or 'none'}"
            )
        if self.peak_rps is not None and "peak_quantile" in self.model_fields_set:
            raise ValueError("peak_quantile applies to mean_rps or users, not to peak_rps")
        if self.mode == "offline" and slo_limits(self.slo):
            raise ValueError("an offline workload has no latency limit: remove slo limits or use mode streaming/sequential")
        return self


class OnPremSite(InputModel):
    systems: list[Name] = Field(min_length=1)
    # None: the catalog default (catalogs/defaults.yaml names each one's source)
    amortization_years: float | None = Field(default=None, ge=0.1, le=50)
    usd_per_kwh: float | None = Field(default=None, ge=0, le=10)
    pue: float | None = Field(default=None, ge=1.0, le=5.0)
    utilization_power_factor: float | None = Field(default=None, gt=0, le=1.0)
    maintenance_fraction_per_year: float | None = Field(default=None, ge=0, le=1.0)
    space_usd_per_rack_unit_per_year: float = Field(default=0.0, ge=0, le=1e6)
    price_usd: dict[Name, PositiveUsd] = Field(default_factory=dict)
    # finance and running costs beyond the servers (issue 34; planner/infrastructure.py); None: the catalog default
    cost_of_capital_per_year: float | None = Field(default=None, ge=0, le=1.0)
    software_usd_per_gpu_per_year: float | None = Field(default=None, ge=0, le=1e6)
    facility_usd_per_kw_per_month: float | None = Field(default=None, ge=0, le=1e5)
    installation_fraction_of_capex: float | None = Field(default=None, ge=0, le=1.0)
    infrastructure: "InfrastructureSpec" = Field(default_factory=lambda: InfrastructureSpec())


class InfrastructureSpec(InputModel):
    """Racks, PDUs and networks of the on-prem site (BOM lines and costs); `include: false` leaves them out (and
    the facility and software figures too: the servers alone, as before issue 34). Each figure None: the catalog
    default (catalogs/defaults.yaml, with its source)."""

    include: bool = True
    rack_units_per_rack: int | None = Field(default=None, ge=1, le=100)
    kw_per_rack: float | None = Field(default=None, gt=0, le=1000)
    rack_usd: float | None = Field(default=None, ge=0, le=1e7)
    pdus_per_rack: int | None = Field(default=None, ge=0, le=16)
    pdu_usd: float | None = Field(default=None, ge=0, le=1e6)
    fabric_port_gbit_per_s: float | None = Field(default=None, ge=1, le=1e5)
    fabric_switch_ports: int | None = Field(default=None, ge=2, le=1024)
    fabric_switch_usd: float | None = Field(default=None, ge=0, le=1e7)
    fabric_link_usd: float | None = Field(default=None, ge=0, le=1e6)
    frontend_ports_per_node: int | None = Field(default=None, ge=0, le=64)
    frontend_switch_ports: int | None = Field(default=None, ge=2, le=1024)
    frontend_switch_usd: float | None = Field(default=None, ge=0, le=1e7)
    frontend_link_usd: float | None = Field(default=None, ge=0, le=1e6)


OnPremSite.model_rebuild()


class CloudSite(InputModel):
    systems: list[Name] = Field(min_length=1)
    usd_per_hour: dict[Name, PositiveUsdPerHour] = Field(default_factory=dict)
    # a reserved / committed price per system: a constant count all year, like on-prem
    reserved_usd_per_hour: dict[Name, PositiveUsdPerHour] = Field(default_factory=dict)
    # software licences per GPU per year, prorated per hour rented (None: the catalog default, as on-prem)
    software_usd_per_gpu_per_year: float | None = Field(default=None, ge=0, le=1e6)
    # each rental is billed at least this many hours (0: per-second billing, as AWS, GCP and Azure bill GPU VMs
    # on demand; 730: a monthly minimum). Periods recur daily (hours_per_year / 365 a day): a minimum longer than
    # a period's daily block bills the block up; one of a day or more makes on-demand nodes rented all year
    minimum_billing_hours: float = Field(default=0.0, ge=0, le=8760)


class SitesSpec(InputModel):
    on_prem: OnPremSite | None = None
    cloud: CloudSite | None = None


class LimitsSpec(InputModel):
    headroom_fraction: float = Field(default=0.0, ge=0, le=10)
    power_kw: float | None = Field(default=None, gt=0, le=1e8)
    rack_units: int | None = Field(default=None, gt=0, le=1e8)
    capex_usd: float | None = Field(default=None, gt=0, le=MAX_USD)
    max_gpus: dict[Name, Annotated[int, Field(ge=0, le=1e8)]] = Field(default_factory=dict)  # GPU id -> GPUs available (in any period)
    spare_nodes_per_system: int = Field(default=0, ge=0, le=1000)  # N + k: k idle on-prem nodes per system in use
    max_engine_variants: int | None = Field(default=None, gt=0, le=100_000)


class PeriodSpec(InputModel):
    """A named part of the day/week: its hours per year and each workload's demand as a factor of its peak
    (or of its mean, when the workload gives a mean). Workloads not listed keep factor 1."""

    name: LabelName
    hours_per_year: float = Field(gt=0, le=8760)
    demand_factor: dict[LabelName, DemandFactor] = Field(default_factory=dict)


class SpeculativeSpec(InputModel):
    """Speculative decoding as an engine option: `draft_tokens` proposed per step by the model's own
    multi-token-prediction head (`method: mtp`) or a smaller `draft_model`, each accepted with probability
    `acceptance_rate` (measure it on your traffic: it depends on the data). Engines are tried with and without it."""

    method: Literal["mtp", "draft"]
    draft_tokens: int = Field(default=3, ge=1, le=16)
    acceptance_rate: float = Field(gt=0, lt=1)
    draft_model: Name | None = None

    @model_validator(mode="after")
    def _draft_named(self) -> "SpeculativeSpec":
        if (self.method == "draft") != (self.draft_model is not None):
            raise ValueError("method 'draft' needs draft_model (a catalog model id); method 'mtp' takes none")
        return self


class EngineSpec(InputModel):
    """The engine settings the candidate enumeration tries. MoE models are also tried with attention data
    parallelism and expert parallelism over 2 to all of a node's GPUs (`expert_parallel`); a model that fits no
    single node is tried over `max_pipeline_nodes` nodes at most (TP in a node, pipeline stages across nodes)."""

    max_batch_ladder: list[Annotated[int, Field(gt=0, le=100_000)]] = Field(default_factory=lambda: [8, 32, 128, 512], min_length=1)
    tp_ladder: list[Literal[1, 2, 4, 8]] = Field(default_factory=lambda: [1, 2, 4, 8], min_length=1)
    expert_parallel: bool = True
    max_pipeline_nodes: int = Field(default=4, ge=1, le=64)
    speculative: SpeculativeSpec | None = None
    # tokens one iteration carries: every decoding sequence's token and prompt chunks up to it (chunked prefill;
    # vLLM's max_num_batched_tokens, TensorRT-LLM's max_num_tokens); the token gaps (itl_ms) depend on it
    token_budget: int = Field(default=DEFAULT_TOKEN_BUDGET, ge=64, le=1_000_000)


PerfSource = Literal["measured", "interpolated", "aic", "modeled"]
PerfSourceChoice = Literal["auto", "tables", "model", "aic"]


class PerfSpec(InputModel):
    """Which layers of the performance model may answer (data first: a layer answers only where those before it
    have nothing for the workload on that system). `source` is the short form of `--perf-source`: auto (rows,
    then the calibrated roofline, and aic where installed for what the roofline would extrapolate), tables, model
    or aic."""

    sources: list[PerfSource] = Field(default_factory=lambda: ["measured", "interpolated", "modeled"], min_length=1)
    source: PerfSourceChoice | None = None

    @model_validator(mode="after")
    def _one_way(self) -> "PerfSpec":
        if self.source is not None and "sources" in self.model_fields_set:
            raise ValueError("give perf.source (auto, tables, model, aic) or perf.sources (a list of layers), not both")
        return self


class ForecastSpec(InputModel):
    """One demand forecast: each named workload's demand x its factor (workloads not named keep 1)."""

    name: LabelName
    scale: dict[LabelName, DemandFactor] = Field(default_factory=dict)


class RobustnessSpec(InputModel):
    """Plan on purpose for being wrong: capacity derated by `perf_margin`, demand for every forecast."""

    perf_margin: float = Field(default=0.0, ge=0, lt=1)
    # size each modeled line at the pessimistic edge of its expected-error band covering this share of its class's
    # held-out errors (planner/perf/engines.py): throughput / (1 + band); measured rows are not derated
    confidence: float | None = Field(default=None, gt=0, lt=1)
    demand_forecasts: list[ForecastSpec] = Field(default_factory=list)


class FleetSpec(InputModel):
    """How nodes may be used. `reconfigure_between_periods`: a bought or reserved node may run different engine
    instances in different periods (night-time batch on the daytime chat fleet). `share_nodes_across_models`: one
    node's GPUs may host instances of several configurations and models (engines pinned to GPU subsets). Both
    false: a node runs one engine configuration all year (a "one model per server" policy)."""

    reconfigure_between_periods: bool = True
    share_nodes_across_models: bool = True
    # disaggregated prefill/decode pools (KV cache sent over the nodes' network): never (default: it needs an
    # RDMA fabric and a serving stack such as Dynamo or llm-d), auto (the integer program chooses per workload),
    # always (every workload that has TTFT/ITL limits to split)
    disaggregated: Literal["auto", "never", "always"] = "never"


class SolverSpec(InputModel):
    name: SolverName = "cbc"
    time_limit_s: float = Field(default=60.0, gt=0, le=1e6)


class ScenarioSpec(InputModel):
    name: LabelName
    description: str = Field(default="", max_length=5000)
    # English runs at ~0.75 words per token; outside 0.1-10 a word count cannot mean tokens any more
    words_per_token: float | None = Field(default=None, ge=0.1, le=10)
    # 2: slo.itl_ms is one gap between tokens; absent or 1: the file predates it, and its itl_ms is tpot_ms
    metrics_version: Literal[1, 2] | None = None
    deployment: Deployment = "on-prem"
    workloads: list[WorkloadSpec] = Field(min_length=1)
    sites: SitesSpec
    periods: list[PeriodSpec] | None = Field(default=None, min_length=1)
    limits: LimitsSpec = Field(default_factory=LimitsSpec)
    engine: EngineSpec = Field(default_factory=EngineSpec)
    perf: PerfSpec = Field(default_factory=PerfSpec)
    solver: SolverSpec = Field(default_factory=SolverSpec)
    fleet: FleetSpec = Field(default_factory=FleetSpec)
    catalog: str | list[str] | None = None  # user catalog directories layered over the shipped one
    robustness: RobustnessSpec = Field(default_factory=RobustnessSpec)


@dataclass(frozen=True)
class Slo:
    """Latency limits in ms at `percentile` (planner/metrics.py: itl_ms one token gap, tpot_ms a request's mean
    gap), after the metrics-version rule."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    itl_ms: float | None = None
    e2e_ms: float | None = None
    percentile: float = 50.0

    @property
    def limited(self) -> tuple[str, ...]:
        return tuple(metric for metric, _ in slo_limits(self))


@dataclass(frozen=True)
class Bucket:
    isl_tokens: int
    osl_tokens: int
    share: float
    max_isl_tokens: int | None = None
    max_osl_tokens: int | None = None

    @property
    def engine_lengths(self) -> tuple[int, int]:
        """The (ISL, OSL) an engine serving this bucket must hold."""
        return (self.max_isl_tokens or self.isl_tokens, self.max_osl_tokens or self.osl_tokens)


@dataclass(frozen=True)
class Workload:
    """A workload with its lengths in tokens and the peak request rate it must be sized for.

    `isl_tokens`/`osl_tokens` are the share-weighted means of the buckets (one bucket when lengths are given
    directly). `mean_rps` is set when demand was given as a mean: period peaks then come from the Poisson quantile.
    """

    name: str
    model: str
    isl_tokens: int
    osl_tokens: int
    buckets: tuple[Bucket, ...]
    peak_rps: float
    mean_rps: float | None
    peak_quantile: float | None
    requests_per_user: float | None
    demand_note: str
    mode: str
    slo: Slo
    precisions: tuple[str, ...] | None
    engines: tuple[str, ...] = ("trtllm",)
    prefix_cache: object | None = None  # perf.types.PrefixCache: prompts partly served from the engine's cache


@dataclass(frozen=True)
class Period:
    """A period with its weight in hours per year and the peak demand (rps) of each workload in it."""

    name: str
    hours_per_year: float
    demand_rps: dict[str, float]  # peak to size for
    traffic_rps: dict[str, float]  # the mean when the scenario gives one (for tokens per year), else the peak


@dataclass(frozen=True)
class OnPremCosts:
    amortization_years: float
    usd_per_kwh: float
    pue: float
    utilization_power_factor: float
    maintenance_fraction_per_year: float
    space_usd_per_rack_unit_per_year: float
    cost_of_capital_per_year: float = 0.0
    software_usd_per_gpu_per_year: float = 0.0
    facility_usd_per_kw_per_month: float = 0.0
    installation_fraction_of_capex: float = 0.0
    # every figure above with its source and kind (planner.infrastructure.Figure), for the BOM and the report
    figures: dict = dataclasses.field(default_factory=dict)
    # the site's racks and networks (None: left out, `infrastructure: {include: false}`)
    infrastructure: Infrastructure | None = None

    @property
    def annuity(self) -> float:
        """a(r, n): yearly payment per USD of capex (planner.infrastructure.annuity_factor)."""
        return annuity_factor(self.cost_of_capital_per_year, self.amortization_years)


@dataclass(frozen=True)
class SystemOffer:
    """A system the scenario allows, with the price that applies (catalog or scenario override)."""

    system: str
    site: str  # "on-prem" | "cloud"
    pricing: str  # "capex" (on-prem) | "on-demand" (cloud, per period) | "reserved" (cloud, constant all year)
    price_usd: float | None
    usd_per_hour: float | None
    power_kw: float | None
    rack_units: int | None
    price_note: str


@dataclass(frozen=True)
class Limits:
    headroom_fraction: float
    power_kw: float | None
    rack_units: int | None
    capex_usd: float | None
    max_gpus: dict[str, int]
    spare_nodes_per_system: int
    max_engine_variants: int | None


@dataclass(frozen=True)
class Scenario:
    name: str
    file: str
    description: str
    deployment: str
    words_per_token: float
    workloads: tuple[Workload, ...]
    periods: tuple[Period, ...]
    offers: tuple[SystemOffer, ...]
    on_prem_costs: OnPremCosts | None
    limits: Limits
    perf_sources: tuple[str, ...]
    max_batch_ladder: tuple[int, ...]
    tp_ladder: tuple[int, ...]
    solver: str
    time_limit_s: float
    perf_margin: float = 0.0  # plan for throughput (1 - margin) x what the perf model says
    cloud_software: Figure | None = None  # software licences per GPU per year of rented nodes (prorated per hour)
    cloud_minimum_billing_hours: float = 0.0  # sites.cloud.minimum_billing_hours (billed_hours)

    def billed_hours(self, period_name: str) -> float:
        """Hours a year an on-demand node rented for a period is billed: its hours, or with a minimum billing of m
        hours per rental and the period recurring daily, 365 x max(hours / 365, m) (at most 8760)."""
        hours = next(p.hours_per_year for p in self.periods if p.name == period_name)
        minimum = self.cloud_minimum_billing_hours
        if minimum <= 0 or hours >= 8760:
            return hours
        return min(8760.0, 365.0 * max(hours / 365.0, minimum))
    confidence: float | None = None  # plan each modeled line at the edge of its error band covering this share
    demand_forecasts: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()  # (name, ((workload, factor), ...))
    reconfigure_between_periods: bool = True  # fleet: a bought/reserved node may run other instances per period
    share_nodes_across_models: bool = True  # fleet: one node's GPUs may host instances of several configurations
    disaggregated: str = "never"  # fleet: auto | never | always
    expert_parallel: bool = True  # engine: MoE layouts with attention DP and EP
    max_pipeline_nodes: int = 4  # engine: pipeline stages across nodes for models no node holds
    speculation: object | None = None  # engine: perf.roofline.Speculation, tried beside plain decoding
    token_budget: int = DEFAULT_TOKEN_BUDGET  # engine: tokens one iteration carries (decodes + prompt chunks)
    metrics_version: int = METRICS_VERSION  # as the file said (1: its itl_ms was read as tpot_ms)
    metrics_notes: tuple[str, ...] = ()  # how the file's latency limits were read (the metrics-version rule)
    metrics_migrated: bool = False  # a limit was read by the version-1 rule (itl_ms as tpot_ms): plans say so
    # the precision default of workloads without `precisions:` (planner.perf.plan_precisions): False, the
    # quality-keeping formats; True only in the plan's one extra solve that prices fp4 (docs/optimizer.md, "Precision")
    lower_precisions: bool = False


# ---- checks against the catalog: one function per rule, all raising PlannerInputError ----


def resolve_names(spec: ScenarioSpec, catalog: Catalog, file: str) -> ScenarioSpec:
    """The spec with every model, system and GPU name replaced by its catalog id (an alias such as
    'meta-llama/Llama-3.3-70B-Instruct', 'p5.48xlarge' or 'H100' is accepted wherever an id is); an unknown name
    raises PlannerInputError with the closest id ("did you mean")."""
    workloads = [
        w.model_copy(update={"model": catalog.resolve("model", w.model, file, f"workloads[{i}:{w.name}].model")})
        for i, w in enumerate(spec.workloads)
    ]
    sites = {}
    for site_key, price_fields in (("on_prem", ("price_usd",)), ("cloud", ("usd_per_hour", "reserved_usd_per_hour"))):
        site = getattr(spec.sites, site_key)
        if site is None:
            continue
        update = {"systems": [catalog.resolve("system", name, file, f"sites.{site_key}.systems[{index}]")
                              for index, name in enumerate(site.systems)]}  # fmt: skip
        for price_field in price_fields:
            update[price_field] = {
                catalog.resolve("system", name, file, f"sites.{site_key}.{price_field}.{name}"): value
                for name, value in getattr(site, price_field).items()
            }
        sites[site_key] = site.model_copy(update=update)
    max_gpus = {catalog.resolve("gpu", gpu, file, f"limits.max_gpus.{gpu}"): count for gpu, count in spec.limits.max_gpus.items()}
    engine = spec.engine
    if engine.speculative is not None and engine.speculative.draft_model is not None:
        draft = catalog.resolve("model", engine.speculative.draft_model, file, "engine.speculative.draft_model")
        engine = engine.model_copy(update={"speculative": engine.speculative.model_copy(update={"draft_model": draft})})
    return spec.model_copy(update={
        "workloads": workloads, "sites": spec.sites.model_copy(update=sites),
        "limits": spec.limits.model_copy(update={"max_gpus": max_gpus}), "engine": engine,
    })  # fmt: skip


def check_speculation(spec: ScenarioSpec, catalog: Catalog, file: str) -> None:
    """Speculative decoding applies to every workload's engines, so each workload's model must be able to run it:
    `method: mtp` drafts with the model's own multi-token-prediction layers (catalog `mtp_layers`); a draft model
    proposes tokens the target verifies, so it must have an architecture the roofline can time and the target's
    vocabulary (catalog `vocab`: a draft of another tokenizer proposes tokens the target cannot accept)."""
    speculative = spec.engine.speculative
    if speculative is None:
        return
    from planner.perf.roofline import supports_roofline

    field = "engine.speculative.draft_model"
    draft = catalog.models[speculative.draft_model] if speculative.draft_model is not None else None
    if draft is not None and not supports_roofline(draft):
        raise PlannerInputError(file, field, f"'{draft.id}' has no published architecture (layers, hidden, heads) to "
                                "time its draft steps; allowed: a catalog model with one")  # fmt: skip
    for index, workload in enumerate(spec.workloads):
        model = catalog.models[workload.model]
        whose = f"workload {workload.name}'s model {model.id}"
        if speculative.method == "mtp" and not model.mtp_layers:
            raise PlannerInputError(
                file, "engine.speculative.method",
                f"'mtp' drafts with the model's multi-token-prediction layers, and the catalog states none for {whose} "
                "(catalog field mtp_layers); allowed: method 'draft' with a draft_model, or 'mtp' for models whose "
                f"entry gives mtp_layers ({', '.join(m for m, a in sorted(catalog.models.items()) if a.mtp_layers) or 'none'}); "
                "add mtp_layers to the model's entry where its config.json has num_nextn_predict_layers or "
                "mtp_num_hidden_layers > 0",
            )  # fmt: skip
        if draft is None:
            continue
        unknown = [m.id for m in (draft, model) if m.vocab is None]
        if unknown:
            raise PlannerInputError(
                file, field,
                f"the catalog does not state the vocabulary of {' and '.join(unknown)} (catalog field vocab), so draft "
                f"model {draft.id} cannot be checked to share the tokenizer of {whose}; add vocab to the entry",
            )  # fmt: skip
        if draft.vocab != model.vocab:
            same = [m for m, a in sorted(catalog.models.items())
                    if a.vocab == model.vocab and m != model.id and supports_roofline(a)]  # fmt: skip
            raise PlannerInputError(
                file, field,
                f"draft model {draft.id} has a vocabulary of {draft.vocab:,} tokens and {whose} one of "
                f"{model.vocab:,}: a draft must share the target's tokenizer; allowed: a model of vocab "
                f"{model.vocab:,} ({', '.join(same) or 'none in the catalog'})",
            )  # fmt: skip


def check_unique_workload_names(spec: ScenarioSpec, file: str) -> None:
    seen: set[str] = set()
    for index, workload in enumerate(spec.workloads):
        if workload.name in seen:
            raise PlannerInputError(file, f"workloads[{index}].name", f"duplicate workload name '{workload.name}'")
        seen.add(workload.name)


def check_lengths_fit_context(spec: ScenarioSpec, workloads: list[Workload], catalog: Catalog, file: str) -> None:
    for index, workload in enumerate(workloads):
        context = catalog.models[workload.model].max_context
        for bucket_index, bucket in enumerate(workload.buckets):
            if context is not None and bucket.isl_tokens + bucket.osl_tokens > context:
                field = "isl_tokens" if spec.workloads[index].buckets is None else f"buckets[{bucket_index}]"
                raise PlannerInputError(
                    file,
                    f"workloads[{index}:{workload.name}].{field}",
                    f"input + output = {bucket.isl_tokens} + {bucket.osl_tokens} tokens exceeds the context of "
                    f"{workload.model} ({context} tokens); allowed: isl + osl <= {context}",
                )


SITES_OF_DEPLOYMENT = {"on-prem": ("on_prem",), "cloud": ("cloud",), "hybrid": ("on_prem", "cloud")}  # sites.<key> each needs


def check_sites_match_deployment(spec: ScenarioSpec, file: str) -> None:
    for site in SITES_OF_DEPLOYMENT[spec.deployment]:
        if getattr(spec.sites, site) is None:
            raise PlannerInputError(file, f"sites.{site}", f"deployment '{spec.deployment}' needs a sites.{site} block")


def check_site_systems(spec: ScenarioSpec, catalog: Catalog, file: str) -> None:
    for site_key, kind in (("on_prem", "on-prem"), ("cloud", "cloud")):
        site = getattr(spec.sites, site_key)
        if site is None:
            continue
        ids_of_kind = [s for s, v in catalog.systems.items() if v.kind == kind]
        for index, system_id in enumerate(site.systems):
            field = f"sites.{site_key}.systems[{index}]"
            if system_id not in catalog.systems:  # resolve_names has mapped known names to ids
                raise PlannerInputError(
                    file, field, unknown_id_message(f"{kind} system", system_id, ids_of_kind, "planner catalog systems")
                )
            if catalog.systems[system_id].kind != kind:
                raise PlannerInputError(
                    file, field, f"'{system_id}' is a {catalog.systems[system_id].kind} system, not {kind}; "
                    f"list it under sites.{'cloud' if kind == 'on-prem' else 'on_prem'}"
                )
        price_fields = ("price_usd",) if site_key == "on_prem" else ("usd_per_hour", "reserved_usd_per_hour")
        for price_field in price_fields:
            _check_price_overrides(site, site_key, price_field, file)


def _check_price_overrides(site, site_key: str, price_field: str, file: str) -> None:
    for system_id, value in getattr(site, price_field).items():
        if system_id not in site.systems:
            raise PlannerInputError(
                file, f"sites.{site_key}.{price_field}.{system_id}",
                f"price given for a system not listed in sites.{site_key}.systems ({', '.join(site.systems)})",
            )
        if value <= 0:
            raise PlannerInputError(file, f"sites.{site_key}.{price_field}.{system_id}", f"must be > 0 (got {value})")


def check_prices_known(spec: ScenarioSpec, catalog: Catalog, file: str) -> None:
    """A system the scenario allows must have a price (catalog or override), and on-prem ones a power figure."""
    if spec.sites.on_prem is not None:
        for system_id in spec.sites.on_prem.systems:
            system = catalog.systems[system_id]
            if system.price_usd is None and system_id not in spec.sites.on_prem.price_usd:
                raise PlannerInputError(
                    file, f"sites.on_prem.systems: {system_id}",
                    f"the catalog has no purchase price for '{system_id}' (none public); "
                    f"give one as sites.on_prem.price_usd.{system_id}: <USD> or remove the system",
                )
            if system.power_kw is None:
                raise PlannerInputError(
                    file, f"sites.on_prem.systems: {system_id}",
                    f"the catalog has no power figure for '{system_id}'; add power_kw to its catalog entry or remove it",
                )
    if spec.sites.cloud is not None:
        for system_id in spec.sites.cloud.systems:
            if catalog.systems[system_id].usd_per_hour is None and system_id not in spec.sites.cloud.usd_per_hour:
                raise PlannerInputError(
                    file, f"sites.cloud.systems: {system_id}",
                    f"the catalog has no hourly price for '{system_id}'; give sites.cloud.usd_per_hour.{system_id}",
                )


def perf_layers(source: str) -> tuple[str, ...]:
    from planner.perf import PERF_SOURCE_LAYERS

    return PERF_SOURCE_LAYERS[source]


def check_forecasts(spec: ScenarioSpec, file: str) -> None:
    names = {w.name for w in spec.workloads}
    seen: set[str] = set()
    for index, forecast in enumerate(spec.robustness.demand_forecasts):
        where = f"robustness.demand_forecasts[{index}:{forecast.name}]"
        if forecast.name in seen:
            raise PlannerInputError(file, f"{where}.name", f"duplicate forecast name '{forecast.name}'")
        seen.add(forecast.name)
        for workload, factor in forecast.scale.items():
            if workload not in names:
                raise PlannerInputError(
                    file, f"{where}.scale.{workload}",
                    f"unknown workload '{workload}'.{did_you_mean(workload, names)} Workloads: {', '.join(sorted(names))}",
                )  # fmt: skip
            if factor < 0:
                raise PlannerInputError(file, f"{where}.scale.{workload}", f"must be >= 0 (got {factor:g})")


# ---- resolution ----


def resolve_workload(spec: WorkloadSpec, words_per_token: float, default_quantile: float) -> Workload:
    """Lengths in tokens (words at `words_per_token`) and the peak rate to size for."""
    if spec.buckets is not None:
        buckets = tuple(Bucket(b.isl_tokens, b.osl_tokens, b.share, b.max_isl_tokens, b.max_osl_tokens) for b in spec.buckets)
    else:
        isl = spec.isl_tokens if spec.isl_tokens is not None else words_to_tokens(spec.words_in, words_per_token)
        osl = spec.osl_tokens if spec.osl_tokens is not None else words_to_tokens(spec.words_out, words_per_token)
        buckets = (Bucket(int(isl), int(osl), 1.0),)
    mean, quantile = None, None
    if spec.peak_rps is not None:
        peak, note = spec.peak_rps, "peak_rps as given"
    else:
        if spec.mean_rps is not None:
            mean, what = spec.mean_rps, f"mean {spec.mean_rps:g} rps"
        else:
            users = spec.users
            mean = rps_from_users(users.daily_active_users, users.requests_per_user, users.working_hours_per_day)
            what = (
                f"{users.daily_active_users:g} users x {users.requests_per_user:g} requests over "
                f"{users.working_hours_per_day:g} h = mean {mean:.6g} rps"
            )
        explicit_none = "peak_quantile" in spec.model_fields_set and spec.peak_quantile is None
        if explicit_none:
            peak, note = mean, f"{what}, sized for the mean (peak_quantile: null)"
        else:
            quantile = spec.peak_quantile if spec.peak_quantile is not None else default_quantile
            peak = peak_rps_from_mean(mean, quantile)
            note = f"{what}, Poisson {quantile:g} quantile -> {peak:g} rps"
    return Workload(
        name=spec.name,
        model=spec.model,
        isl_tokens=round(sum(b.isl_tokens * b.share for b in buckets)),
        osl_tokens=round(sum(b.osl_tokens * b.share for b in buckets)),
        buckets=buckets,
        peak_rps=_clean_rate(peak),
        mean_rps=mean,
        peak_quantile=quantile,
        requests_per_user=spec.users.requests_per_user if spec.users is not None else None,
        demand_note=note,
        mode=spec.mode,
        slo=Slo(spec.slo.ttft_ms, spec.slo.tpot_ms, spec.slo.itl_ms, spec.slo.e2e_ms, spec.slo.percentile),
        precisions=tuple(spec.precisions) if spec.precisions is not None else None,
        engines=tuple(dict.fromkeys(spec.engines)),
        prefix_cache=_prefix_cache(spec.prefix_cache),
    )


def _prefix_cache(spec: PrefixCacheSpec | None):
    from planner.perf.types import PrefixCache

    return None if spec is None else PrefixCache(spec.prefix_tokens, spec.hit_rate)


def _clean_rate(value: float) -> float:
    return round(float(value), 9)  # float noise must not buy a node: 678720 x 3 / 28800 is 70.7


def period_demand_rps(workload: Workload, factor: float) -> float:
    """Peak demand of a workload in a period: factor x peak, or the Poisson quantile of factor x mean."""
    if workload.mean_rps is None:
        return _clean_rate(workload.peak_rps * factor)
    mean = workload.mean_rps * factor
    if workload.peak_quantile is None:
        return _clean_rate(mean)
    return _clean_rate(peak_rps_from_mean(mean, workload.peak_quantile))


def resolve_periods(spec: ScenarioSpec, workloads: list[Workload], file: str) -> tuple[Period, ...]:
    """The scenario's periods (default: one period, the whole year at peak demand)."""
    if spec.periods is None:
        return (Period("all", HOURS_PER_YEAR, {w.name: w.peak_rps for w in workloads}, _traffic(workloads, {})),)
    names = {w.name for w in workloads}
    periods = []
    for index, period in enumerate(spec.periods):
        for name, factor in period.demand_factor.items():
            field = f"periods[{index}:{period.name}].demand_factor.{name}"
            if name not in names:
                raise PlannerInputError(file, field, f"unknown workload; allowed: {', '.join(sorted(names))}")
            if factor < 0:
                raise PlannerInputError(file, field, f"must be >= 0 (got {factor:g})")
        demand = {w.name: period_demand_rps(w, period.demand_factor.get(w.name, 1.0)) for w in workloads}
        for name, rps in demand.items():
            if not math.isfinite(rps) or rps > MAX_PERIOD_RPS:
                raise PlannerInputError(
                    file, f"periods[{index}:{period.name}].demand_factor.{name}",
                    f"the period's demand of {name} comes to {rps:.4g} rps; allowed: a finite rate up to "
                    f"{MAX_PERIOD_RPS:,.0f} rps (check the workload's rate and this factor)",
                )  # fmt: skip
        periods.append(Period(period.name, period.hours_per_year, demand, _traffic(workloads, period.demand_factor)))
    return tuple(periods)


def _traffic(workloads: list[Workload], factors: dict[str, float]) -> dict[str, float]:
    return {
        w.name: (w.mean_rps if w.mean_rps is not None else w.peak_rps) * factors.get(w.name, 1.0) for w in workloads
    }


def check_periods(spec: ScenarioSpec, file: str) -> None:
    if spec.periods is None:
        return
    seen: set[str] = set()
    for index, period in enumerate(spec.periods):
        if period.name in seen:
            raise PlannerInputError(file, f"periods[{index}].name", f"duplicate period name '{period.name}'")
        seen.add(period.name)
    total = sum(p.hours_per_year for p in spec.periods)
    if total > HOURS_PER_YEAR + 1e-6:
        raise PlannerInputError(
            file, "periods", f"hours_per_year add up to {total:g}; allowed: at most {HOURS_PER_YEAR:g} (a year)"
        )


def check_limits(spec: ScenarioSpec, catalog: Catalog, file: str) -> None:
    for gpu, count in spec.limits.max_gpus.items():
        field = f"limits.max_gpus.{gpu}"
        if gpu not in catalog.gpus:
            raise PlannerInputError(file, field, unknown_id_message("GPU", gpu, catalog.gpus, "planner catalog gpus"))
        if count < 0:
            raise PlannerInputError(file, field, f"must be >= 0 (got {count})")


def _offers(spec: ScenarioSpec, catalog: Catalog) -> tuple[SystemOffer, ...]:
    offers = []
    use_on_prem = spec.deployment in ("on-prem", "hybrid") and spec.sites.on_prem is not None
    use_cloud = spec.deployment in ("cloud", "hybrid") and spec.sites.cloud is not None
    if use_on_prem:
        for system_id in spec.sites.on_prem.systems:
            system = catalog.systems[system_id]
            override = spec.sites.on_prem.price_usd.get(system_id)
            offers.append(
                SystemOffer(
                    system=system_id, site="on-prem", pricing="capex",
                    price_usd=override if override is not None else system.price_usd,
                    usd_per_hour=None, power_kw=system.power_kw, rack_units=system.rack_units,
                    price_note="scenario override" if override is not None else f"catalog ({system.price_source_kind or 'source'})",
                )
            )
    if use_cloud:
        for system_id in spec.sites.cloud.systems:
            system = catalog.systems[system_id]
            override = spec.sites.cloud.usd_per_hour.get(system_id)
            # a catalog price that is itself a reservation (capacity block) buys a constant count
            pricing = "reserved" if system.price_source_kind == "reserved" and override is None else "on-demand"
            note = "scenario override" if override is not None else f"catalog ({system.price_source_kind or 'source'})"
            if pricing == "on-demand" and spec.sites.cloud.minimum_billing_hours >= 24:  # no rental follows a day
                pricing = "reserved"
                note += f"; rented all year: each rental is billed at least {spec.sites.cloud.minimum_billing_hours:g} h"
            offers.append(
                SystemOffer(
                    system=system_id, site="cloud", pricing=pricing, price_usd=None,
                    usd_per_hour=override if override is not None else system.usd_per_hour,
                    power_kw=None, rack_units=None, price_note=note,
                )
            )
            reserved = spec.sites.cloud.reserved_usd_per_hour.get(system_id)
            if reserved is not None:
                offers.append(
                    SystemOffer(
                        system=system_id, site="cloud", pricing="reserved", price_usd=None, usd_per_hour=reserved,
                        power_kw=None, rack_units=None, price_note="scenario reserved price",
                    )
                )
    return tuple(offers)


def build_scenario(spec: ScenarioSpec, catalog: Catalog, file: str) -> Scenario:
    """Check a validated spec against the catalog and resolve it."""
    check_unique_workload_names(spec, file)
    spec = resolve_names(spec, catalog, file)
    check_sites_match_deployment(spec, file)
    check_site_systems(spec, catalog, file)
    check_prices_known(spec, catalog, file)
    check_periods(spec, file)
    check_limits(spec, catalog, file)
    check_forecasts(spec, file)
    check_speculation(spec, catalog, file)
    spec, metrics_notes, metrics_migrated = migrate_metrics(spec, file)
    defaults = catalog.defaults
    words_per_token = spec.words_per_token if spec.words_per_token is not None else defaults.words_per_token.value
    workloads = [resolve_workload(w, words_per_token, defaults.peak_quantile.value) for w in spec.workloads]
    check_lengths_fit_context(spec, workloads, catalog, file)
    on_prem = spec.sites.on_prem
    costs = None
    if on_prem is not None:

        def pick(name: str) -> float:
            given = getattr(on_prem, name)
            return given if given is not None else getattr(defaults, name).value

        included = on_prem.infrastructure.include
        figures = {name: _figure(getattr(on_prem, name), getattr(defaults, name))
                   for name in ("amortization_years", "usd_per_kwh", "pue", "utilization_power_factor", *FINANCE_FIELDS)}
        if not included:  # the servers alone: no facility, software or infrastructure
            for name in ("software_usd_per_gpu_per_year", "facility_usd_per_kw_per_month"):
                figures[name] = Figure(0.0, "sites.on_prem.infrastructure.include: false", "user")
        infrastructure = Infrastructure({name: _figure(getattr(on_prem.infrastructure, name), getattr(defaults, name))
                                         for name in INFRASTRUCTURE_FIELDS}) if included else None  # fmt: skip
        costs = OnPremCosts(
            pick("amortization_years"), pick("usd_per_kwh"), pick("pue"),
            pick("utilization_power_factor"), pick("maintenance_fraction_per_year"),
            on_prem.space_usd_per_rack_unit_per_year,
            cost_of_capital_per_year=figures["cost_of_capital_per_year"].value,
            software_usd_per_gpu_per_year=figures["software_usd_per_gpu_per_year"].value,
            facility_usd_per_kw_per_month=figures["facility_usd_per_kw_per_month"].value,
            installation_fraction_of_capex=figures["installation_fraction_of_capex"].value,
            figures=figures, infrastructure=infrastructure,
        )
    limits = spec.limits
    return Scenario(
        name=spec.name,
        file=file,
        description=spec.description,
        deployment=spec.deployment,
        words_per_token=words_per_token,
        workloads=tuple(workloads),
        periods=resolve_periods(spec, workloads, file),
        offers=_offers(spec, catalog),
        on_prem_costs=costs,
        cloud_software=(_figure(spec.sites.cloud.software_usd_per_gpu_per_year, defaults.software_usd_per_gpu_per_year)
                        if spec.sites.cloud is not None else None),
        cloud_minimum_billing_hours=spec.sites.cloud.minimum_billing_hours if spec.sites.cloud is not None else 0.0,
        limits=Limits(
            limits.headroom_fraction, limits.power_kw, limits.rack_units, limits.capex_usd, dict(limits.max_gpus),
            limits.spare_nodes_per_system, limits.max_engine_variants,
        ),
        perf_sources=perf_layers(spec.perf.source) if spec.perf.source else tuple(spec.perf.sources),
        max_batch_ladder=tuple(sorted(set(spec.engine.max_batch_ladder))),
        tp_ladder=tuple(sorted(set(spec.engine.tp_ladder))),
        solver=spec.solver.name,
        time_limit_s=spec.solver.time_limit_s,
        perf_margin=spec.robustness.perf_margin,
        confidence=spec.robustness.confidence,
        demand_forecasts=tuple(
            (f.name, tuple(sorted(f.scale.items()))) for f in spec.robustness.demand_forecasts
        ),
        reconfigure_between_periods=spec.fleet.reconfigure_between_periods,
        share_nodes_across_models=spec.fleet.share_nodes_across_models,
        disaggregated=spec.fleet.disaggregated,
        expert_parallel=spec.engine.expert_parallel,
        max_pipeline_nodes=spec.engine.max_pipeline_nodes,
        speculation=_speculation(spec.engine.speculative, catalog),
        token_budget=spec.engine.token_budget,
        metrics_version=spec.metrics_version or 1,
        metrics_notes=metrics_notes,
        metrics_migrated=metrics_migrated,
    )


def migrate_metrics(spec: ScenarioSpec, file: str) -> tuple[ScenarioSpec, tuple[str, ...], bool]:
    """The one rule for files written before metrics version 2 (docs/metrics.md): without `metrics_version: 2`,
    `slo.itl_ms` meant a request's mean gap between tokens, so it is read as `slo.tpot_ms`. Returns the spec in
    today's metrics, what was read how (for `validate`), and whether a limit moved (the plan then says so too)."""
    if spec.metrics_version == METRICS_VERSION:
        return spec, (f"{file}: metrics_version {METRICS_VERSION}: itl_ms limits one gap between tokens, tpot_ms a "
                      "request's mean gap (docs/metrics.md)",), False  # fmt: skip
    workloads, moved = [], []
    for index, workload in enumerate(spec.workloads):
        slo = workload.slo
        if slo.itl_ms is not None and slo.tpot_ms is not None:
            raise PlannerInputError(
                file, f"workloads[{index}:{workload.name}].slo.itl_ms",
                "both itl_ms and tpot_ms in a file without metrics_version 2, where itl_ms means tpot_ms; "
                "add `metrics_version: 2` at the top of the file to limit single token gaps with itl_ms (docs/metrics.md)",
            )  # fmt: skip
        if slo.itl_ms is not None:
            moved.append(f"workload {workload.name}: itl_ms {slo.itl_ms:g} -> tpot_ms {slo.itl_ms:g}")
            slo = slo.model_copy(update={"tpot_ms": slo.itl_ms, "itl_ms": None})
        workloads.append(workload.model_copy(update={"slo": slo}))
    what = ("; its slo.itl_ms meant a request's mean gap between tokens, today's tpot_ms: " + "; ".join(moved)
            if moved else " (it sets no itl_ms limit, so nothing moves)")  # fmt: skip
    note = (f"{file}: no metrics_version, read as version 1{what}. Add `metrics_version: 2` to the file to use "
            "today's names (itl_ms = one gap between tokens; docs/metrics.md)")  # fmt: skip
    return spec.model_copy(update={"workloads": workloads}), (note,), bool(moved)


def _figure(given: float | None, default) -> Figure:
    """A cost figure as the scenario gives it, or the catalog default with its source and kind."""
    if given is not None:
        return Figure(float(given), "scenario", "user")
    return Figure(default.value, default.source, default.kind)


def _speculation(spec: SpeculativeSpec | None, catalog: Catalog):
    """The engine option as the roofline's Speculation (its draft model, resolved by `resolve_names` and checked by
    `check_speculation`, from the catalog)."""
    if spec is None:
        return None
    from planner.perf.roofline import Speculation

    draft = catalog.models[spec.draft_model] if spec.draft_model is not None else None
    return Speculation(spec.method, spec.draft_tokens, spec.acceptance_rate, draft)


def _spec(path: Path | str, catalog: Catalog, overrides: ScenarioOverrides | None) -> ScenarioSpec:
    """A scenario file read and validated, with one run's overrides."""
    file = str(path)
    return apply_overrides(validate_model(ScenarioSpec, read_yaml(Path(path)), file), overrides, catalog, file)


def _deployment_variants(spec: ScenarioSpec, catalog: Catalog, file: str) -> dict[str, Scenario]:
    """The scenario once per deployment whose sites it has."""
    return {
        deployment: build_scenario(spec.model_copy(update={"deployment": deployment}), catalog, file)
        for deployment, sites in SITES_OF_DEPLOYMENT.items() if all(getattr(spec.sites, s) is not None for s in sites)
    }  # fmt: skip


def load_scenario_deployments(path: Path | str, catalog: Catalog, overrides: ScenarioOverrides | None = None) -> dict[str, Scenario]:
    """The scenario once per deployment its sites allow (on-prem, cloud, hybrid), for side-by-side comparison."""
    return _deployment_variants(_spec(path, catalog, overrides), catalog, str(path))


def comparable_deployments(path: Path | str, catalog: Catalog,
                           overrides: ScenarioOverrides | None = None) -> tuple[dict[str, Scenario], dict[str, str]]:  # fmt: skip
    """What `compare` sets side by side: the deployments the scenario's sites allow and, for a scenario with an
    on-prem site but none in the cloud, cloud and hybrid on the catalog's priced cloud instances of the same GPUs
    (at catalog prices, the scenario's on-prem site as it is). Returns (scenarios, a note per deployment that says
    what was derived, or why a deployment is missing)."""
    spec = _spec(path, catalog, overrides)
    notes: dict[str, str] = {}
    if spec.sites.on_prem is not None and spec.sites.cloud is None:
        gpus = sorted({catalog.systems[s].gpu for s in spec.sites.on_prem.systems if s in catalog.systems})
        instances = sorted(
            s for s, system in catalog.systems.items()
            if system.kind == "cloud" and system.gpu in gpus and system.usd_per_hour is not None
        )  # fmt: skip
        if instances:
            spec = spec.model_copy(update={"sites": spec.sites.model_copy(update={"cloud": CloudSite(systems=instances)})})
            note = (f"the scenario has no cloud site: planned on the catalog's instances of the same GPUs "
                    f"({', '.join(gpus)}) at catalog prices: {', '.join(instances)}")  # fmt: skip
            notes = {"cloud": note, "hybrid": note}
        else:
            notes = {"cloud": f"not compared: the scenario has no cloud site and the catalog no priced cloud instance of {', '.join(gpus)}"}
    elif spec.sites.cloud is not None and spec.sites.on_prem is None:
        notes = {"on-prem": "not compared: the scenario has no on-prem site (give sites.on_prem with the systems and prices to weigh)"}
    return _deployment_variants(spec, catalog, str(path)), notes


def scenario_catalog_dirs(path: Path | str) -> list[Path]:
    """The user catalog directories a scenario names (`catalog:`), relative to the scenario file."""
    path = Path(path)
    data = read_yaml(path)
    named = data.get("catalog") if isinstance(data, dict) else None
    if named is None:
        return []
    entries = [named] if isinstance(named, str) else named
    if not isinstance(entries, list) or not all(isinstance(e, str) and e for e in entries):
        raise PlannerInputError(str(path), "catalog", "expected a directory path or a list of them")
    directories = []
    for index, entry in enumerate(entries):
        directory = Path(entry) if Path(entry).is_absolute() else path.parent / entry
        if not directory.is_dir():
            where = "catalog" if isinstance(named, str) else f"catalog[{index}]"
            raise PlannerInputError(str(path), where, f"catalog directory '{entry}' not found (relative to the scenario file)")
        directories.append(directory)
    return directories


@dataclass(frozen=True)
class ScenarioOverrides:
    """What one run changes of a scenario file (`--deployment`, `--systems`, `--precisions`, `--engines`), without a
    copied YAML. `systems` replaces both sites' systems (each system goes to the site of its kind; a site left
    without systems is dropped); `precisions` and `engines` replace every workload's."""

    deployment: str | None = None
    systems: tuple[str, ...] | None = None
    precisions: tuple[str, ...] | None = None
    engines: tuple[str, ...] | None = None

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.deployment, self.systems, self.precisions, self.engines))

    def describe(self) -> str:
        """'deployment cloud; systems a, b' for the echo on the output; each value clipped (`clip_text`: the echo
        comes before the values are checked, and a megabyte pasted into --systems is refused, not echoed)."""
        parts = [(name, value if isinstance(value, str) else ", ".join(value))
                 for name, value in (("deployment", self.deployment), ("systems", self.systems),
                                     ("precisions", self.precisions), ("engines", self.engines)) if value is not None]  # fmt: skip
        return "; ".join(f"{name} {clip_text(value)}" for name, value in parts)

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(self).items() if v is not None}


def apply_overrides(spec: ScenarioSpec, overrides: ScenarioOverrides | None, catalog: Catalog, file: str) -> ScenarioSpec:
    """The scenario spec with one run's overrides (a bad value raises PlannerInputError naming its option)."""
    if not overrides:
        return spec
    from planner.catalog import PRECISIONS
    from planner.perf.engines import ENGINES

    update: dict = {}
    for option, values, allowed in (("--precisions", overrides.precisions, PRECISIONS), ("--engines", overrides.engines, tuple(ENGINES))):
        wrong = [v for v in values or () if v not in allowed]
        if wrong or values == ():
            raise PlannerInputError(file, option, f"one or more of {', '.join(allowed)} (got {', '.join(wrong) or 'nothing'})")
    if overrides.deployment is not None:
        if overrides.deployment not in ("on-prem", "cloud", "hybrid"):
            raise PlannerInputError(file, "--deployment", f"on-prem, cloud or hybrid (got {overrides.deployment!r})")
        missing = [site for site in SITES_OF_DEPLOYMENT[overrides.deployment] if getattr(spec.sites, site) is None]
        if missing and overrides.systems is None:
            raise PlannerInputError(file, "--deployment", f"{overrides.deployment} needs a {' and '.join(m.replace('_', '-') for m in missing)} "
                                    "site, which the scenario does not have: name its systems with --systems")  # fmt: skip
        update["deployment"] = overrides.deployment
    if overrides.systems is not None:
        if not overrides.systems:
            raise PlannerInputError(file, "--systems", "one or more system ids of the catalog")
        chosen = [catalog.resolve("system", name, file, "--systems") for name in overrides.systems]
        sites = {}
        for site, kind, model in (("on_prem", "on-prem", OnPremSite), ("cloud", "cloud", CloudSite)):
            mine = list(dict.fromkeys(s for s in chosen if catalog.systems[s].kind == kind))
            current = getattr(spec.sites, site)
            sites[site] = None if not mine else (current.model_copy(update={"systems": mine}) if current else model(systems=mine))
        update["sites"] = spec.sites.model_copy(update=sites)
        have = {site for site, value in sites.items() if value is not None}
        deployment = update.get("deployment", spec.deployment)
        needs = set(SITES_OF_DEPLOYMENT[deployment])
        if not needs <= have:
            if overrides.deployment is not None:
                raise PlannerInputError(file, "--systems", f"deployment {deployment} needs "
                                        f"{' and '.join(k.replace('_', '-') for k in sorted(needs))} systems among them")
            update["deployment"] = "hybrid" if have == {"on_prem", "cloud"} else "cloud" if "cloud" in have else "on-prem"
    if overrides.precisions is not None or overrides.engines is not None:
        changes = {name: list(values) for name, values in (("precisions", overrides.precisions), ("engines", overrides.engines))
                   if values is not None}  # fmt: skip
        update["workloads"] = [w.model_copy(update=changes) for w in spec.workloads]
    return spec.model_copy(update=update)


def load_scenario(path: Path | str, catalog: Catalog, overrides: ScenarioOverrides | None = None) -> Scenario:
    """Read, validate and resolve a scenario file, with one run's overrides if any; any problem raises
    PlannerInputError (file, field, allowed)."""
    return build_scenario(_spec(path, catalog, overrides), catalog, str(path))
