"""What the library answers, as typed objects: the results `planner.api` returns and the report layer reads
(a plan with its scenario and catalog, the sides of a comparison and their break-even, a decision report's inputs,
the answers of `perf`, `peak` and `users`). Below both, so that the report takes them without importing the API."""

from __future__ import annotations

from dataclasses import dataclass

from planner.catalog import Catalog
from planner.perf.types import PerfQuery, PerfResult
from planner.plan import PER_PERIOD_ROLES, Plan
from planner.scenario import Scenario


@dataclass(frozen=True)
class PerfAnswer:
    """`planner perf` output: the point (or the miss) plus node normalization facts."""

    query: PerfQuery
    result: PerfResult | None
    miss_reason: str | None
    percentile: float | None = None  # the latencies' percentile (None: means)


@dataclass(frozen=True)
class PeakAnswer:
    mean_rps: float
    quantile: float
    peak_rps: float


@dataclass(frozen=True)
class UsersAnswer:
    rps: float
    hours_per_day: float
    requests_per_user: float
    requests_per_day: float
    daily_active_users: int


@dataclass(frozen=True)
class PlannedScenario:
    """A plan with what it was made from: what the BOM and the report need."""

    plan: Plan
    scenario: Scenario
    catalog: Catalog


@dataclass(frozen=True)
class DeploymentResult:
    """One side of `planner compare`: the plan of one deployment, or why there is none."""

    deployment: str
    plan: Plan | None
    infeasible: tuple[str, ...]
    output_tokens_per_year: float
    no_plan_status: str = "infeasible"  # or "stopped": the time limit came before any plan
    note: str = ""  # what was derived for this side (a cloud site the scenario does not have), or why it is missing

    @property
    def usd_per_million_output_tokens(self) -> float | None:
        if self.plan is None or self.output_tokens_per_year <= 0:
            return None
        return self.plan.objective_usd_per_year / (self.output_tokens_per_year / 1e6)


    @property
    def usd_per_gpu_hour(self) -> float | None:
        """The plan's annual cost over the GPU-hours it pays for (`gpu_hours`)."""
        if self.plan is None or self.gpu_hours <= 0:
            return None
        return self.plan.objective_usd_per_year / self.gpu_hours

    gpu_hours: float = 0.0  # GPU-hours a year the plan pays for (gpu_hours_per_year)


def gpu_hours_per_year(plan: Plan, scenario: Scenario) -> float:
    """GPU-hours a plan pays for in a year: bought, spare and reserved GPUs all year (8,760 h), on-demand ones for
    the hours of their period."""
    hours = {period.name: period.hours_per_year for period in scenario.periods}
    return sum(line.gpus * (hours[line.period] if line.role in PER_PERIOD_ROLES else 8760.0) for line in plan.lines)


@dataclass(frozen=True)
class BreakEven:
    """When buying beats renting (`planner compare`): on-prem costs `on_prem_usd_per_gpu_hour` for every hour of
    the year it owns its GPUs, the cloud `cloud_usd_per_gpu_hour` for each hour it rents one. Owning is cheaper when
    its GPUs would otherwise be rented more than `utilization` of the year (`hours_per_year`, `months` of
    continuous use); the cloud plan rents its GPUs `cloud_utilization` of the year at its peak count."""

    on_prem_usd_per_gpu_hour: float
    cloud_usd_per_gpu_hour: float
    utilization: float
    hours_per_year: float
    months: float
    cloud_utilization: float | None
    cheaper: str  # on-prem | cloud: at the cloud plan's own use

    def describe(self) -> str:
        reach = (f"on-prem is cheaper when its GPUs would be rented more than {self.utilization:.0%} of the year "
                 f"({self.hours_per_year:,.0f} h, {self.months:.1f} months of continuous use)")
        if self.utilization >= 1:
            reach = "on-prem is never cheaper: owning a GPU all year costs more than renting it all year"
        use = ("" if self.cloud_utilization is None else
               f"; the cloud plan rents its peak GPUs {self.cloud_utilization:.0%} of the year, so {self.cheaper} is cheaper here")
        return (f"Break-even: on-prem {self.on_prem_usd_per_gpu_hour:,.2f} USD per GPU-hour owned, cloud "
                f"{self.cloud_usd_per_gpu_hour:,.2f} USD per GPU-hour rented; {reach}{use}")  # fmt: skip


def break_even(results) -> BreakEven | None:
    """The break-even of `compare`'s on-prem and cloud sides (None unless both have a plan)."""
    sides = {r.deployment: r for r in results if r.plan is not None}
    if "on-prem" not in sides or "cloud" not in sides:
        return None
    on_prem, cloud = sides["on-prem"], sides["cloud"]
    owned, rented = on_prem.usd_per_gpu_hour, cloud.usd_per_gpu_hour
    if not owned or not rented:
        return None
    utilization = owned / rented
    peak = cloud.plan.totals.peak_concurrent_gpus
    used = cloud.gpu_hours / (peak * 8760.0) if peak else None
    cheaper = "on-prem" if on_prem.plan.objective_usd_per_year < cloud.plan.objective_usd_per_year else "cloud"
    return BreakEven(round(owned, 4), round(rented, 4), round(utilization, 4), round(min(utilization, 1.0) * 8760.0, 1),
                     round(min(utilization, 1.0) * 12.0, 2), None if used is None else round(used, 4), cheaper)  # fmt: skip


def output_tokens_per_year(scenario: Scenario) -> float:
    """sum over periods and workloads of traffic rps x mean OSL x 3600 x hours (the mean rate where one is given)."""
    osl = {w.name: sum(b.osl_tokens * b.share for b in w.buckets) for w in scenario.workloads}
    return sum(
        period.traffic_rps[name] * osl[name] * 3600 * period.hours_per_year
        for period in scenario.periods for name in osl
    )  # fmt: skip


@dataclass(frozen=True)
class DecisionInputs:
    """What `planner report` adds to a plan: on-prem, cloud and hybrid side by side, the simulation's verdict and
    the sensitivity grid, each absent (None) with a note that says why."""

    comparison: tuple[DeploymentResult, ...] | None = None  # None: not compared (comparison_note says why)
    comparison_note: str = ""
    verification: dict | None = None  # `planner simulate --json`'s document (planner.simulate.document.simulation_document)
    verification_source: str = ""  # simulated for this report, or the plan file's (`planner plan --verify --json`)
    sensitivity: object | None = None  # planner.robustness.Sensitivity
    sensitivity_note: str = ""
