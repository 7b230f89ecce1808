"""Candidate engine configurations and which workloads each can serve, at what rate per node.

A candidate is one way to run a model on a node: (site, system, model, TP, precision, max batch, engine max
ISL/OSL). Its annual cost per node comes from the scenario's cost assumptions. An option links a workload to a
candidate whose operating point meets the workload's latency limits, with `rps_per_node` from the perf model.
Everything not generated is recorded in `pruned` with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.catalog import Catalog
from planner.perf import TP_LADDER, PerfMiss, PerfQuery, PerfResult, model_precisions, operating_points
from planner.scenario import HOURS_PER_YEAR, OnPremCosts, Scenario, SystemOffer, Workload


@dataclass(frozen=True)
class Candidate:
    key: str
    site: str
    system: str
    gpu: str
    gpus_per_node: int
    model: str
    tp: int | None
    precision: str | None
    max_batch: int | None
    engine_isl: int
    engine_osl: int
    annual_cost_usd: float
    capex_usd: float
    power_kw: float
    rack_units: int
    usd_per_hour: float | None
    cost_note: str


@dataclass(frozen=True)
class Option:
    """Workload `workload` can run on candidate `candidate` at `rps_per_node` within its limits."""

    workload: str
    candidate: str
    rps_per_node: float
    instances_per_node: int
    perf: PerfResult


@dataclass(frozen=True)
class Pruned:
    workload: str
    system: str
    reason: str


@dataclass(frozen=True)
class CandidateSet:
    candidates: tuple[Candidate, ...]
    options: tuple[Option, ...]
    pruned: tuple[Pruned, ...]

    def candidate(self, key: str) -> Candidate:
        return next(c for c in self.candidates if c.key == key)

    def options_for(self, workload: str) -> tuple[Option, ...]:
        return tuple(o for o in self.options if o.workload == workload)


def on_prem_annual_cost_usd(price_usd: float, power_kw: float, costs: OnPremCosts) -> tuple[float, str]:
    """capex / amortization_years + power_kw x utilization x PUE x $/kWh x 8760 h + maintenance x capex."""
    capital = price_usd / costs.amortization_years
    energy = power_kw * costs.utilization_power_factor * costs.pue * costs.usd_per_kwh * HOURS_PER_YEAR
    maintenance = costs.maintenance_fraction_per_year * price_usd
    note = (
        f"{price_usd:,.0f} USD / {costs.amortization_years:g} y + {power_kw:g} kW x {costs.utilization_power_factor:g}"
        f" x PUE {costs.pue:g} x {costs.usd_per_kwh:g} USD/kWh x 8760 h + {costs.maintenance_fraction_per_year:g} x capex"
    )
    return capital + energy + maintenance, note


def cloud_annual_cost_usd(usd_per_hour: float) -> tuple[float, str]:
    """An always-on cloud node for a year (one period): usd_per_hour x 8760 h."""
    return usd_per_hour * HOURS_PER_YEAR, f"{usd_per_hour:g} USD/h x 8760 h"


def _candidate_for(offer: SystemOffer, workload: Workload, point: PerfResult, scenario: Scenario, catalog: Catalog) -> Candidate:
    system = catalog.systems[offer.system]
    if offer.site == "on-prem":
        annual, note = on_prem_annual_cost_usd(offer.price_usd, offer.power_kw, scenario.on_prem_costs)
        capex, power, rack_units = offer.price_usd, offer.power_kw, offer.rack_units or 0
    else:
        annual, note = cloud_annual_cost_usd(offer.usd_per_hour)
        capex, power, rack_units = 0.0, 0.0, 0
    tp = f"tp{point.tp}" if point.tp else f"{point.gpus_per_instance}gpu"
    key = "/".join(
        (
            offer.site, offer.system, workload.model, tp, point.precision or "prec?",
            f"b{point.concurrency}" if point.concurrency else "b?", f"{workload.isl_tokens}x{workload.osl_tokens}",
        )
    )
    return Candidate(
        key=key, site=offer.site, system=offer.system, gpu=system.gpu, gpus_per_node=system.gpus_per_node,
        model=workload.model, tp=point.tp, precision=point.precision, max_batch=point.concurrency,
        engine_isl=workload.isl_tokens, engine_osl=workload.osl_tokens, annual_cost_usd=annual, capex_usd=capex,
        power_kw=power, rack_units=rack_units, usd_per_hour=offer.usd_per_hour, cost_note=note,
    )


def enumerate_candidates(scenario: Scenario, catalog: Catalog) -> CandidateSet:
    """For every workload x allowed system: the engine variants with data whose operating point meets the limits."""
    candidates: dict[str, Candidate] = {}
    options: list[Option] = []
    pruned: list[Pruned] = []
    for workload in scenario.workloads:
        for offer in scenario.offers:
            system = catalog.systems[offer.system]
            query = PerfQuery(
                model=workload.model, gpu=system.gpu, isl=workload.isl_tokens, osl=workload.osl_tokens,
                ttft_ms=workload.slo.ttft_ms, itl_ms=workload.slo.itl_ms, e2e_ms=workload.slo.e2e_ms,
            )
            precisions = model_precisions(catalog, system.gpu)
            if workload.precisions is not None:
                precisions = tuple(p for p in precisions if p in workload.precisions) or tuple(workload.precisions)
            points = operating_points(
                query, catalog,
                tps=tuple(tp for tp in TP_LADDER if tp <= system.gpus_per_node),
                precisions=precisions, sources=scenario.perf_sources, percentile=workload.slo.percentile,
            )
            if isinstance(points, PerfMiss):
                pruned.append(Pruned(workload.name, offer.system, points.reason))
                continue
            for point in points:
                if workload.precisions is not None and point.precision not in workload.precisions:
                    pruned.append(
                        Pruned(workload.name, offer.system, f"precision {point.precision or 'unstated'} not in {list(workload.precisions)}")
                    )
                    continue
                instances = point.instances_per_node(system.gpus_per_node)
                if instances < 1:
                    pruned.append(
                        Pruned(workload.name, offer.system, f"an instance needs {point.gpus_per_instance} GPUs; the node has {system.gpus_per_node}")
                    )
                    continue
                rps_per_node = point.rps_per_node(system.gpus_per_node)
                if not rps_per_node:
                    pruned.append(Pruned(workload.name, offer.system, f"no request throughput in {point.source}"))
                    continue
                candidate = _candidate_for(offer, workload, point, scenario, catalog)
                candidates.setdefault(candidate.key, candidate)
                options.append(Option(workload.name, candidate.key, rps_per_node, instances, point))
    ordered = tuple(candidates[k] for k in sorted(candidates))
    return CandidateSet(ordered, tuple(options), tuple(pruned))
