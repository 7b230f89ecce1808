"""What is tried on a hardware offer: its per-node cost lines (a bought node's annuity, power and space; a
rental's rate), the engines' max lengths per model, the layouts (TP, attention DP with EP, pipeline stages), the
allotment unit of an instance on a node, and the candidate's key."""

from __future__ import annotations

from collections import defaultdict

from planner.catalog import Catalog
from planner.perf import (
    PerfResult,
)
from planner.perf.engines import DEFAULT_ENGINE
from planner.perf.types import Layout
from planner.workers import can_fork, executor, map_on_ray, worker_count  # noqa: F401 (worker_count: read by tests as candidates.worker_count)
from planner.scenario import HOURS_PER_YEAR, OnPremCosts, Scenario, SystemOffer



def on_prem_annual_cost_usd(price_usd: float, power_kw: float, rack_units: int, costs: OnPremCosts) -> tuple[float, str]:
    """A bought node's line: capex x a(r, n) (the annuity: planner/infrastructure.py) + kW x utilization x PUE x
    $/kWh x 8760 h + RU x space $/RU/year. Support, facility, software and installation are lines of their own
    (planner.infrastructure.node_extras_usd_per_year, in the objective through optimize/model.py)."""
    capital = price_usd * costs.annuity
    energy = power_kw * costs.utilization_power_factor * costs.pue * costs.usd_per_kwh * HOURS_PER_YEAR
    space = rack_units * costs.space_usd_per_rack_unit_per_year
    amortized = (f"{price_usd:,.0f} USD / {costs.amortization_years:g} y" if costs.cost_of_capital_per_year <= 0 else
                 f"{price_usd:,.0f} USD x annuity {costs.annuity:.4f} ({costs.amortization_years:g} y at "
                 f"{costs.cost_of_capital_per_year:.1%})")  # fmt: skip
    note = (
        f"{amortized} + {power_kw:g} kW x {costs.utilization_power_factor:g}"
        f" x PUE {costs.pue:g} x {costs.usd_per_kwh:g} USD/kWh x 8760 h"
        + (f" + {rack_units} RU x {costs.space_usd_per_rack_unit_per_year:g} USD/RU/y" if space else "")
    )
    return capital + energy + space, note


def offer_costs(offer: SystemOffer, scenario: Scenario) -> dict:
    """Per-node cost fields of a candidate on this offer."""
    if offer.pricing == "capex":
        annual, note = on_prem_annual_cost_usd(offer.price_usd, offer.power_kw, offer.rack_units or 0, scenario.on_prem_costs)
        return dict(annual_cost_usd=annual, usd_per_hour=None, capex_usd=offer.price_usd, power_kw=offer.power_kw,
                    rack_units=offer.rack_units or 0, cost_note=note)  # fmt: skip
    if offer.pricing == "reserved":
        term = f", {offer.term_months:g}-month term" if offer.term_months else ""
        return dict(annual_cost_usd=offer.usd_per_hour * HOURS_PER_YEAR, usd_per_hour=None, capex_usd=0.0, power_kw=0.0,
                    rack_units=0, cost_note=f"reserved {offer.usd_per_hour:g} USD/h x 8760 h{term}")  # fmt: skip
    if offer.pricing == "spot":
        note = f"spot {offer.usd_per_hour:g} USD/h x hours of each period, capacity x {offer.capacity_factor:.3g}"
    else:
        note = f"on demand {offer.usd_per_hour:g} USD/h x hours of each period"
    return dict(annual_cost_usd=0.0, usd_per_hour=offer.usd_per_hour, capex_usd=0.0, power_kw=0.0, rack_units=0,
                cost_note=note)  # fmt: skip


def engine_lengths_by_model(scenario: Scenario) -> dict[str, list[tuple[int, int]]]:
    """Engine max (ISL, OSL) variants per model: every bucket cell, and each workload's envelope of its buckets."""
    lengths: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for workload in scenario.workloads:
        cells = {b.engine_lengths for b in workload.buckets}
        lengths[workload.model] |= cells
        lengths[workload.model].add((max(i for i, _ in cells), max(o for _, o in cells)))
    return {model: sorted(values) for model, values in lengths.items()}


def unit_shape(gpus_per_instance: int, gpus_per_node: int, share_nodes: bool) -> tuple[int, int]:
    """(g, k): GPUs of one allotment unit and the instances it holds. Shared nodes: the smallest slot of the node's
    chain (powers of two dividing the node, then the whole node) that holds an instance; the chain's sizes divide
    each other, so any units whose GPUs add up to at most the nodes' GPUs pack into the nodes. Where slots would
    hold fewer instances than the node (an odd instance size), or nodes are not shared: the whole node."""
    if gpus_per_instance > gpus_per_node:  # an instance over whole nodes: its nodes are the unit
        return gpus_per_instance, 1
    per_node = gpus_per_node // gpus_per_instance
    if share_nodes:
        chain = [2**i for i in range(gpus_per_node.bit_length()) if gpus_per_node % 2**i == 0] + [gpus_per_node]
        slot = min(size for size in chain if size >= gpus_per_instance)
        if (gpus_per_node // slot) * (slot // gpus_per_instance) == per_node:
            return slot, slot // gpus_per_instance
    return gpus_per_node, per_node


def candidate_key(offer: SystemOffer, model: str, point: PerfResult, batch, isl: int, osl: int, speculative: bool = False,
         pinned: bool = False) -> str:  # fmt: skip
    tp_part = Layout(point.tp, point.dp, point.ep, point.pp).label.lower().replace(" ", "-") if point.tp else f"{point.gpus_per_instance}gpu"
    engine = point.engine + (f"@{point.engine_version}" if pinned else "")
    extra = ([point.stage] if point.stage != "aggregated" else []) + (["spec"] if speculative else []) + (
        [engine] if engine != DEFAULT_ENGINE else [])
    return "/".join((offer.site, offer.pricing, offer.system, model, tp_part, point.precision or "prec?",
                     f"b{batch}" if batch else "b?", f"{isl}x{osl}", *extra))  # fmt: skip


def engine_layouts(scenario: Scenario, catalog: Catalog, model_id: str, system_id: str) -> list[Layout]:
    """The layouts tried for a model on a system: TP over the ladder within a node; for a mixture of experts,
    attention data parallelism with expert parallelism over 2 .. all of the node's GPUs (GB200 NVL72: up to 72);
    for a model whose bf16 weights no node holds, TP over a whole node and pipeline stages over 2 .. the
    scenario's max_pipeline_nodes nodes (where the catalog gives the node's network)."""
    model, system = catalog.models[model_id], catalog.systems[system_id]
    node = system.gpus_per_node
    layouts = [Layout(tp) for tp in scenario.tp_ladder if tp <= node]
    if model.moe is not None and scenario.expert_parallel and model.moe.experts > 1:
        sizes = [g for g in (2, 4, 8, 16, 32, 64, 72) if g <= node and g <= model.moe.experts and g in {*scenario.tp_ladder, 16, 32, 64, 72}]
        layouts += [Layout(1, g, g) for g in sizes]
    if pipeline_wanted(scenario, catalog, model_id, system_id) and system.network_gbit_per_s is not None:
        layouts += [Layout(node, pp=n) for n in range(2, scenario.max_pipeline_nodes + 1)]
    return layouts


def pipeline_wanted(scenario: Scenario, catalog: Catalog, model_id: str, system_id: str) -> bool:
    """Whether pipeline stages over several nodes are tried for the model on the system: its bf16 weights exceed
    one node's usable memory and the TP ladder reaches the whole node (they then also need the node's network)."""
    model, system = catalog.models[model_id], catalog.systems[system_id]
    node = system.gpus_per_node
    widest = max((tp for tp in scenario.tp_ladder if tp <= node), default=0)
    usable_gb = catalog.gpus[system.gpu].memory_gb * node * (1 - catalog.defaults.memory_reserve_fraction.value)
    return widest == node and model.params_b * 2 > usable_gb
