"""The scenario file as written: pydantic models of its blocks (unknown fields refused, every number in a sane
range). `planner.scenario` checks a spec against the catalog and resolves it."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StrictBool, field_validator, model_validator

from planner.catalog import InputModel, Name, Precision, clean_name, default_bounds
from planner.catalog.entries import WHOLE_DEFAULTS
from planner.cloud import CommitmentSpec, SpotSpec, SystemOffer, cloud_offers  # noqa: F401 (SystemOffer: read as scenario.SystemOffer)
from planner.metrics import MAX_PERCENTILE, MIN_PERCENTILE, percentile_problem
from planner.metrics import limits as slo_limits
from planner.perf.serving import EngineSpec as EngineChoice
from planner.perf.types import DEFAULT_TOKEN_BUDGET

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
PER_PERIOD_PRICING = frozenset({"on-demand", "spot"})  # rented per period; capex and reserved: a count all year

WorkloadMode = Literal["streaming", "sequential", "offline"]
Deployment = Literal["on-prem", "cloud", "hybrid"]
SolverName = Literal["cbc", "highs", "ortools"]


# a workload's, period's, forecast's or scenario's name: in the one normal form of catalog names (NFKC, no
# invisible characters, whitespace collapsed: catalog.normalize_name), so that look-alikes are one name
LabelName = Annotated[str, Field(min_length=1, max_length=100), AfterValidator(clean_name)]


def _engine_label(text: str) -> str:
    """A serving engine, optionally pinned to a release ('vllm', 'vllm@0.19'; planner/perf/serving.py EngineSpec)."""
    return EngineChoice.parse(text).label


EngineLabel = Annotated[str, Field(min_length=1, max_length=80), AfterValidator(_engine_label)]


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
    # `engine@version` pins a calibrated release line (planner/perf/engines.py pinned); without one, the newest
    engines: list[EngineLabel] = Field(default_factory=lambda: ["trtllm"], min_length=1)
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


def _default_override(name: str):
    """A scenario figure that replaces catalog default `name` (None: the default), within the same range as the
    default itself (catalog.DEFAULT_RANGES: one table for both)."""
    return Field(default=None, **default_bounds(name))


class OnPremSite(InputModel):
    systems: list[Name] = Field(min_length=1)
    # None: the catalog default (catalogs/defaults.yaml names each one's source)
    amortization_years: float | None = _default_override("amortization_years")
    usd_per_kwh: float | None = _default_override("usd_per_kwh")
    pue: float | None = _default_override("pue")
    utilization_power_factor: float | None = _default_override("utilization_power_factor")
    maintenance_fraction_per_year: float | None = _default_override("maintenance_fraction_per_year")
    space_usd_per_rack_unit_per_year: float = Field(default=0.0, ge=0, le=1e6)
    price_usd: dict[Name, PositiveUsd] = Field(default_factory=dict)
    # finance and running costs beyond the servers (issue 34; planner/infrastructure.py); None: the catalog default
    cost_of_capital_per_year: float | None = _default_override("cost_of_capital_per_year")
    software_usd_per_gpu_per_year: float | None = _default_override("software_usd_per_gpu_per_year")
    facility_usd_per_kw_per_month: float | None = _default_override("facility_usd_per_kw_per_month")
    installation_fraction_of_capex: float | None = _default_override("installation_fraction_of_capex")
    infrastructure: "InfrastructureSpec" = Field(default_factory=lambda: InfrastructureSpec())


class InfrastructureSpec(InputModel):
    """Racks, PDUs and networks of the on-prem site (BOM lines and costs); `include: false` leaves them out (and
    the facility and software figures too: the servers alone, as before issue 34). Each figure None: the catalog
    default (catalogs/defaults.yaml, with its source)."""

    include: StrictBool = True
    rack_units_per_rack: int | None = _default_override("rack_units_per_rack")
    kw_per_rack: float | None = _default_override("kw_per_rack")
    rack_usd: float | None = _default_override("rack_usd")
    pdus_per_rack: int | None = _default_override("pdus_per_rack")
    pdu_usd: float | None = _default_override("pdu_usd")
    fabric_port_gbit_per_s: float | None = _default_override("fabric_port_gbit_per_s")
    fabric_switch_ports: int | None = _default_override("fabric_switch_ports")
    fabric_switch_usd: float | None = _default_override("fabric_switch_usd")
    fabric_link_usd: float | None = _default_override("fabric_link_usd")
    frontend_ports_per_node: int | None = _default_override("frontend_ports_per_node")
    frontend_switch_ports: int | None = _default_override("frontend_switch_ports")
    frontend_switch_usd: float | None = _default_override("frontend_switch_usd")
    frontend_link_usd: float | None = _default_override("frontend_link_usd")
    # shared storage bought with each node (a node extra, as capital: planner/infrastructure.py)
    storage_tb_per_node: float | None = _default_override("storage_tb_per_node")
    storage_usd_per_tb: float | None = _default_override("storage_usd_per_tb")


OnPremSite.model_rebuild()
# the counts are whole numbers here as in the catalog's defaults: one list of them (catalog WHOLE_DEFAULTS)
assert {name for name, f in InfrastructureSpec.model_fields.items() if f.annotation == int | None} == WHOLE_DEFAULTS


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
    # committed prices (1 month, 1 or 3 years...): a constant count all year; the cheapest per hour is offered
    commitments: list[CommitmentSpec] = Field(default_factory=list, max_length=20)
    # spot nodes: per period at the spot price, capacity derated by interruptions (planner/cloud.py)
    spot: SpotSpec | None = None
    # lead time of a rented node: started this long before its period (billed), and the time an unforeseen rise
    # of demand (demand_growth_per_hour, a share of demand per hour) must be absorbed by the running fleet
    # (None: the catalog default, catalogs/defaults.yaml cloud_start_up_minutes)
    start_up_minutes: float | None = _default_override("cloud_start_up_minutes")
    demand_growth_per_hour: float = Field(default=0.0, ge=0, le=10)


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
    # spares as a share of the nodes in use, per system: ceil(f x N) (0.05: one per 20); with k, the larger applies
    spare_fraction: float = Field(default=0.0, ge=0, le=1)
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
    expert_parallel: StrictBool = True
    max_pipeline_nodes: int = Field(default=4, ge=1, le=64)
    speculative: SpeculativeSpec | None = None
    # tokens one iteration carries: every decoding sequence's token and prompt chunks up to it (chunked prefill;
    # vLLM's max_num_batched_tokens, TensorRT-LLM's max_num_tokens); the token gaps (itl_ms) depend on it
    token_budget: int = Field(default=DEFAULT_TOKEN_BUDGET, ge=64, le=1_000_000)


PerfSource = Literal["measured", "interpolated", "aic", "modeled"]
PerfSourceChoice = Literal["auto", "tables", "model", "aic"]
Sizing = Literal["random-arrivals", "closed-loop"]


class PerfSpec(InputModel):
    """Which layers of the performance model may answer (data first: a layer answers only where those before it
    have nothing for the workload on that system). `source` is the short form of `--perf-source`: auto (rows,
    then the calibrated roofline, and aic where installed for what the roofline would extrapolate), tables, model
    or aic."""

    sources: list[PerfSource] = Field(default_factory=lambda: ["measured", "interpolated", "modeled"], min_length=1)
    source: PerfSourceChoice | None = None
    # what an engine's capacity is read off (docs/perf-model.md, sizing): `random-arrivals` (the default), the open
    # loop: requests arriving at random, a benchmark row speaking through the model anchored on it; `closed-loop`,
    # the course's method: a benchmark's closed-loop curve read at the limits (the seed cases' golden answers)
    sizing: Sizing = "random-arrivals"

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

    reconfigure_between_periods: StrictBool = True
    share_nodes_across_models: StrictBool = True
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


