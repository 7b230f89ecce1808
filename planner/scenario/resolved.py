"""The resolved scenario: frozen dataclasses the planner's stages read (token lengths, peak rates, offers, costs)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from planner import cloud as cloud_market
from planner.cloud import CommitmentSpec, SpotSpec, SystemOffer, cloud_offers  # noqa: F401 (SystemOffer: read as scenario.SystemOffer)
from planner.infrastructure import Figure, Infrastructure, annuity_factor
from planner.metrics import METRICS_VERSION
from planner.metrics import limits as slo_limits
from planner.perf.types import DEFAULT_TOKEN_BUDGET
from planner.scenario.spec import PER_PERIOD_PRICING


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
class Limits:
    headroom_fraction: float
    power_kw: float | None
    rack_units: int | None
    capex_usd: float | None
    max_gpus: dict[str, int]
    spare_nodes_per_system: int
    max_engine_variants: int | None
    spare_fraction: float = 0.0  # spares per system: max(k, ceil(f x bought nodes)) (optimize/model.add_spare_nodes)


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
    sizing: str = "random-arrivals"  # perf.sizing: random-arrivals (open loop) | closed-loop (the course's method)
    cloud_software: Figure | None = None  # software licences per GPU per year of rented nodes (prorated per hour)
    cloud_minimum_billing_hours: float = 0.0  # sites.cloud.minimum_billing_hours (billed_hours)
    cloud_start_up_hours: float = 0.0  # sites.cloud.start_up_minutes / 60 (billed_hours, demand_headroom)
    cloud_start_up_source: str = "scenario"  # where the lead time comes from: the scenario, or the catalog default's source
    cloud_demand_growth_per_hour: float = 0.0  # sites.cloud.demand_growth_per_hour
    spot_max_share: float = 1.0  # sites.cloud.spot.max_share

    @property
    def rental_day(self) -> cloud_market.RentalDay | None:
        """The day over which nodes rented per period are billed per rental (start-up and minimum billing:
        planner.cloud.rental_day); None where nothing is rented per period or a rental costs only its hours."""
        if not self.elastic:
            return None
        return cloud_market.rental_day(self.periods, self.cloud_minimum_billing_hours, self.cloud_start_up_hours)

    @property
    def elastic(self) -> bool:
        """Whether any node is rented per period (on demand or spot)."""
        return any(o.pricing in PER_PERIOD_PRICING for o in self.offers)

    @property
    def demand_headroom(self) -> float:
        """g L when nodes are rented per period (planner.cloud.demand_headroom), else 0: the share of what a node
        rented per period carries that it holds in reserve while further nodes start (optimize.model.capacity_rate)."""
        if not self.elastic:
            return 0.0
        return cloud_market.demand_headroom(self.cloud_demand_growth_per_hour, self.cloud_start_up_hours)
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
    site_notes: tuple[str, ...] = ()  # a site the run derived from the catalog (--deployment beyond the file's sites)
    metrics_migrated: bool = False  # a limit was read by the version-1 rule (itl_ms as tpot_ms): plans say so
    # the precision default of workloads without `precisions:` (planner.perf.plan_precisions): False, the
    # quality-keeping formats; True only in the plan's one extra solve that prices fp4 (docs/optimizer.md, "Precision")
    lower_precisions: bool = False


