"""The fleet integer program (design.md, "The integer program"; docs/optimizer.md is the math of record).

Hardware and configuration are separate decisions: integer nodes per hardware offer (what to buy or rent), and
integer engine units per configuration and period (what those nodes run), tied by the GPUs of each node.

Notations
---------
w, b            workload w and its length bucket b (share s[w,b] of w's requests)
t in T          periods, h[t] hours per year
h in H          hardware offers (site, pricing, system) with G[h] GPUs per node; H_fix: bought on-prem (capex) or
                reserved cloud, H_dem: on-demand cloud
c in C          configurations (an engine: model, layout, precision, max batch, engine ISL/OSL) on the nodes of
                h(c); C_agg aggregated engines, C_pre prefill-only and C_dec decode-only ones (disaggregated pools)
unit of c       g[c] GPUs holding k[c] instances of c. Nodes shared across models: the smallest slot of the
                node's chain (1, 2, 4, ... GPUs, then the whole node) that holds an instance; not shared: the whole
                node. Slot sizes divide each other and G[h], so GPUs counted per node always pack into nodes.
(w,b,c) in O    options: c serves bucket (w,b) within w's limits at rho[w,b,c] requests/s per unit
N[h]   in Z>=0  nodes of h in H_fix, the same in every period (bought once, or reserved for the year)
M[h,t] in Z>=0  nodes of h in H_dem rented in period t
U[c,t] in Z>=0  units of c running in period t (one U[c] for every period when c runs on H_fix and nodes are
                not reconfigured between periods)
x[w,b,c,t] >= 0 requests/s of bucket (w,b) routed to c in period t
d[w,t]          peak demand of w in period t; H the headroom fraction
S[s]   in Z>=0  spare on-prem nodes of system s (N + k), with used[s] in {0,1}
use[v] in {0,1} engine variant v is built (only with a variant limit)
split[w] in {0,1} workload w is served by prefill and decode pools (only with fleet.disaggregated: auto)

minimize   sum_{h in H_fix} cost[h] N[h] + sum_{h in H_dem, t} usd_per_hour[h] h[t] M[h,t] + sum_s cost[s] S[s]
subject to sum_{c in C_agg + C_pre} x[w,b,c,t] = d[w,t] s[w,b] (1 + H)    demand, every (w,b,t)
           sum_{c in C_pre} x[w,b,c,t] = sum_{c in C_dec} x[w,b,c,t]         prefill-decode flow, every (w,b,t)
           sum_{b, C_pre} x <= D[w,t] split[w];  sum_{b, C_agg} x <= D[w,t] (1 - split[w])   one way per workload
           sum_{(w,b)} x[w,b,c,t] / rho[w,b,c] <= U[c,t]                   engine capacity, every (c,t)
           sum_{c on h} g[c] U[c,t] <= G[h] N[h]  (or G[h] M[h,t])         node room, every (h,t)
           sum power_kw (N + S) <= P;  sum rack_units (N + S) <= R;  sum capex_usd (N + S) <= K   budgets
           sum_{h on GPU g} G[h] (N[h] or M[h,t]) + spares of g <= A[g]                GPUs, every (g,t)
           sum_{h of s} N[h] <= B[s] used[s];  S[s] = k used[s]                        spares N + k
           sum_{c of v} U[c,t] <= B[v] use[v];  sum_v use[v] <= V                      engine variants
           sum_{h} G[h] (N[h] or M[h,t]) >= ceil(LP GPUs of t) per GPU-compatible pool  valid, see add_gpu_floor

Counts are integers per hardware and per configuration, never one binary per node (symmetric binaries make CBC
crawl). design.md writes the demand constraint with >=; routing more than the demand never lowers the cost, and
equality makes x the requests/s actually sent to each configuration, which the report shows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pulp

from planner.candidates import Candidate, CandidateSet, Option, enumerate_candidates, unit_rate
from planner.catalog import Catalog
from planner.errors import InfeasiblePlanError, PlannerInputError, SolverStoppedError
from planner.metrics import LABELS, LATENCY_METRICS
from planner.metrics import limits as metric_limits
from planner.perf.engines import ENGINE_NAMES, engine_label
from planner.plan import (
    Assignment,
    CostBreakdown,
    InstanceAllocation,
    PeriodLoad,
    Plan,
    PlanLine,
    Route,
    Totals,
    WorkloadResult,
    configuration_key,
)
from planner.scenario import Scenario

SOLVERS = ("cbc", "highs", "ortools")
_TOLERANCE = 1e-6
CBC_THREADS = 1  # deterministic: the same inputs give the same plan


@dataclass(frozen=True)
class Hardware:
    """One hardware offer: what is bought or rented, with its per-node figures."""

    key: tuple[str, str, str]  # (site, pricing, system)
    site: str
    pricing: str
    system: str
    gpu: str
    gpus_per_node: int
    annual_cost_usd: float
    usd_per_hour: float | None
    capex_usd: float
    power_kw: float
    rack_units: int
    cost_note: str

    @property
    def fixed(self) -> bool:
        return self.pricing in ("capex", "reserved")


def hardware_of(candidate: Candidate) -> tuple[str, str, str]:
    return (candidate.site, candidate.pricing, candidate.system)


def members_by_hardware(cset: CandidateSet) -> dict[tuple[str, str, str], list[Candidate]]:
    """The configurations of each hardware offer, in candidate order."""
    members: dict[tuple, list[Candidate]] = defaultdict(list)
    for c in cset.candidates:
        members[hardware_of(c)].append(c)
    return members


def hardware_list(cset: CandidateSet) -> dict[tuple[str, str, str], Hardware]:
    """The hardware offers the candidates run on (their per-node figures come from the offer)."""
    hardware = {}
    for c in cset.candidates:
        key = hardware_of(c)
        if key not in hardware:
            hardware[key] = Hardware(
                key, c.site, c.pricing, c.system, c.gpu, c.gpus_per_node, c.annual_cost_usd, c.usd_per_hour,
                c.capex_usd, c.power_kw, c.rack_units, c.cost_note,
            )  # fmt: skip
    return dict(sorted(hardware.items()))


@dataclass
class FleetModel:
    """The PuLP problem with its named variables, as built by the `define_*` / `add_*` functions below."""

    problem: pulp.LpProblem
    hardware: dict[tuple, Hardware] = field(default_factory=dict)
    members: dict[tuple, list[Candidate]] = field(default_factory=dict)  # configurations c of each h
    fixed_nodes: dict[tuple, pulp.LpVariable] = field(default_factory=dict)  # N[h]
    period_nodes: dict[tuple[tuple, str], pulp.LpVariable] = field(default_factory=dict)  # M[h,t]
    units: dict[tuple[str, str], pulp.LpVariable] = field(default_factory=dict)  # U[c,t] (the same var for all t if fixed)
    routed: dict[tuple[str, int, str, str], pulp.LpVariable] = field(default_factory=dict)  # x[w,b,c,t]
    spares: dict[str, pulp.LpVariable] = field(default_factory=dict)  # S[s]
    system_used: dict[str, pulp.LpVariable] = field(default_factory=dict)  # used[s]
    variant_used: dict[tuple, pulp.LpVariable] = field(default_factory=dict)  # use[v]
    spare_figures: dict[str, dict[str, float]] = field(default_factory=dict)  # per-node figures of spare systems
    unit_bounds: dict[tuple[str, str], int] = field(default_factory=dict)  # ceil(all the load c can take in t)
    split: dict[str, pulp.LpVariable] = field(default_factory=dict)  # split[w]: w served disaggregated

    def nodes(self, hardware: tuple, period: str):
        """N[h] for bought/reserved hardware, M[h,t] for on-demand."""
        if self.hardware[hardware].fixed:
            return self.fixed_nodes[hardware]
        return self.period_nodes.get((hardware, period), 0)


def bucket_demand(scenario: Scenario) -> dict[tuple[str, int, str], float]:
    """d[w,t] s[w,b] (1 + H) for every bucket and period with demand."""
    headroom = 1.0 + scenario.limits.headroom_fraction
    demand = {}
    for period in scenario.periods:
        for workload in scenario.workloads:
            for index, bucket in enumerate(workload.buckets):
                value = period.demand_rps[workload.name] * bucket.share * headroom
                if not math.isfinite(value):  # the scenario loader bounds every rate; never drop a demand silently
                    raise PlannerInputError(scenario.file, f"workloads[{workload.name}]",
                                            f"demand in period {period.name} is not a finite rate ({value})")
                if value > 0:
                    demand[(workload.name, index, period.name)] = value
    return demand


def unit_load(cset: CandidateSet, demand: dict, candidate: Candidate, period: str) -> float:
    """Units of c that all the demand it can serve in period t would keep busy."""
    return sum(
        demand.get((o.workload, o.bucket, period), 0.0) / unit_rate(o, candidate) for o in cset.options_of(candidate.key)
    )


def node_bound(model: FleetModel, cset: CandidateSet, scenario: Scenario, demand: dict, hardware: Hardware, periods) -> int:
    """Most nodes of h worth having in these periods. Without a variant limit: each bucket h can serve, all of it,
    on the configuration of h that needs the fewest GPUs for it (whole units); more nodes than that never help,
    since everything routed to h could move onto those configurations. With one: every unit bound of h. Without
    reconfiguration, bought/reserved nodes hold every configuration's units at once: the sum of their bounds."""
    members = model.members.get(hardware.key, [])
    if hardware.fixed and not scenario.reconfigure_between_periods:
        # the same units all year: each configuration at its own busiest period, side by side
        gpus = sum(c.gpus_per_unit * max(model.unit_bounds[(c.key, p.name)] for p in periods) for c in members)
        return math.ceil(gpus / hardware.gpus_per_node - 1e-9)
    most = 0
    for period in periods:
        if scenario.limits.max_engine_variants is None:
            # per bucket and stage (a disaggregated bucket may put both its pools on h)
            best: dict[tuple[str, int, str], float] = {}
            for c in members:
                for o in cset.options_of(c.key):
                    cell = (o.workload, o.bucket, period.name)
                    if cell in demand:
                        gpus = math.ceil(demand[cell] / unit_rate(o, c) - 1e-9) * c.gpus_per_unit
                        best[(*cell[:2], c.stage)] = min(best.get((*cell[:2], c.stage), math.inf), gpus)
            gpus = sum(best.values())
        else:
            gpus = sum(c.gpus_per_unit * model.unit_bounds[(c.key, period.name)] for c in members)
        most = max(most, math.ceil(gpus / hardware.gpus_per_node - 1e-9))
    return most


def define_unit_variables(model: FleetModel, cset: CandidateSet, scenario: Scenario, demand: dict) -> None:
    """U[c,t] in Z>=0, bounded by the units all the demand c can serve would keep busy (a tight box helps branch
    and bound). Without reconfiguration a configuration on bought/reserved nodes has one U[c] for the year."""
    for index, c in enumerate(cset.candidates):
        bounds = {p.name: math.ceil(unit_load(cset, demand, c, p.name) - 1e-9) for p in scenario.periods}
        model.unit_bounds.update({(c.key, p): b for p, b in bounds.items()})
        if c.fixed and not scenario.reconfigure_between_periods:
            var = pulp.LpVariable(f"U_{index}", 0, max(bounds.values()), cat=pulp.LpInteger)
            model.units.update({(c.key, p.name): var for p in scenario.periods})
            continue
        for t, period in enumerate(scenario.periods):
            if bounds[period.name] > 0:
                model.units[(c.key, period.name)] = pulp.LpVariable(
                    f"U_{index}_{t}", 0, bounds[period.name], cat=pulp.LpInteger
                )


def define_node_variables(model: FleetModel, cset: CandidateSet, scenario: Scenario, demand: dict) -> None:
    """N[h] in Z>=0 for bought/reserved h; M[h,t] in Z>=0 for on-demand h, each bounded by node_bound."""
    for index, hardware in enumerate(model.hardware.values()):
        if hardware.fixed:
            upper = node_bound(model, cset, scenario, demand, hardware, scenario.periods)
            model.fixed_nodes[hardware.key] = pulp.LpVariable(f"N_{index}", 0, upper, cat=pulp.LpInteger)
            continue
        for t, period in enumerate(scenario.periods):
            upper = node_bound(model, cset, scenario, demand, hardware, (period,))
            if upper > 0:
                model.period_nodes[(hardware.key, period.name)] = pulp.LpVariable(
                    f"M_{index}_{t}", 0, upper, cat=pulp.LpInteger
                )


def define_routing_variables(model: FleetModel, cset: CandidateSet, demand: dict) -> None:
    """x[w,b,c,t] >= 0 for every option (w,b,c) and period t where (w,b) has demand."""
    periods_of: dict[tuple[str, int], list[str]] = defaultdict(list)
    for workload, bucket, period in demand:
        periods_of[(workload, bucket)].append(period)
    index = 0
    for option in cset.options:
        for period in periods_of.get((option.workload, option.bucket), []):
            model.routed[(option.workload, option.bucket, option.candidate, period)] = pulp.LpVariable(
                f"x_{index}", lowBound=0
            )
            index += 1


def add_demand_constraints(model: FleetModel, cset: CandidateSet, demand: dict) -> None:
    """sum_{c in C_agg} x[w,b,c,t] + sum_{c in C_pre} x[w,b,c,t] = d[w,t] s[w,b] (1 + H) for every bucket and
    period with demand: a request runs on an aggregated engine, or starts on a prefill instance."""
    routed_by_cell: dict[tuple[str, int, str], list] = defaultdict(list)
    for (workload, bucket, key, period), var in model.routed.items():
        if cset.candidate(key).stage != "decode":
            routed_by_cell[(workload, bucket, period)].append(var)
    for index, (cell, value) in enumerate(sorted(demand.items())):
        model.problem += pulp.lpSum(routed_by_cell.get(cell, [])) == value, f"demand_{index}"


def add_prefill_decode_flow(model: FleetModel, cset: CandidateSet) -> None:
    """sum_{c in C_pre} x[w,b,c,t] = sum_{c in C_dec} x[w,b,c,t] for every bucket and period: every request a
    prefill pool takes, a decode pool finishes (the ratio of their instances follows from their rates)."""
    flow: dict[tuple[str, int, str], dict[str, list]] = defaultdict(lambda: {"prefill": [], "decode": []})
    for (workload, bucket, key, period), var in model.routed.items():
        stage = cset.candidate(key).stage
        if stage != "aggregated":
            flow[(workload, bucket, period)][stage].append(var)
    for index, (cell, sides) in enumerate(sorted(flow.items())):
        model.problem += pulp.lpSum(sides["prefill"]) == pulp.lpSum(sides["decode"]), f"prefill_decode_{index}"


def add_serving_mode(model: FleetModel, cset: CandidateSet, scenario: Scenario, demand: dict) -> None:
    """One way of serving per workload (fleet.disaggregated: auto), with split[w] in {0,1}:
    sum_{b, c in C_pre} x[w,b,c,t] <= D[w,t] split[w],  sum_{b, c in C_agg} x[w,b,c,t] <= D[w,t] (1 - split[w])
    for every period t, D[w,t] = sum_b d[w,t] s[w,b] (1 + H)."""
    if scenario.disaggregated != "auto":
        return
    total: dict[tuple[str, str], float] = defaultdict(float)
    for (workload, _, period), value in demand.items():
        total[(workload, period)] += value
    terms: dict[tuple[str, str], dict[str, list]] = defaultdict(lambda: {"prefill": [], "aggregated": []})
    for (workload, _, key, period), var in model.routed.items():
        stage = cset.candidate(key).stage
        if stage != "decode":
            terms[(workload, period)][stage].append(var)
    for index, workload in enumerate(w.name for w in scenario.workloads):
        cells = {p: terms[(workload, p)] for (w, p) in list(terms) if w == workload}
        if not any(c["prefill"] for c in cells.values()) or not any(c["aggregated"] for c in cells.values()):
            continue
        split = pulp.LpVariable(f"split_{index}", cat=pulp.LpBinary)
        model.split[workload] = split
        for t, (period, sides) in enumerate(sorted(cells.items())):
            bound = total[(workload, period)]
            model.problem += pulp.lpSum(sides["prefill"]) <= bound * split, f"split_pre_{index}_{t}"
            model.problem += pulp.lpSum(sides["aggregated"]) <= bound * (1 - split), f"split_agg_{index}_{t}"


def add_engine_capacity(model: FleetModel, cset: CandidateSet) -> None:
    """sum_(w,b) x[w,b,c,t] / rho[w,b,c] <= U[c,t] for every configuration and period."""
    rate = {(o.workload, o.bucket, o.candidate): unit_rate(o, cset.candidate(o.candidate)) for o in cset.options}
    load: dict[tuple[str, str], list] = defaultdict(list)
    for (workload, bucket, key, period), var in model.routed.items():
        load[(key, period)].append(var * (1.0 / rate[(workload, bucket, key)]))
    for index, ((key, period), terms) in enumerate(sorted(load.items(), key=lambda kv: kv[0])):
        model.problem += pulp.lpSum(terms) <= model.units.get((key, period), 0), f"capacity_{index}"


def add_node_room(model: FleetModel, cset: CandidateSet, scenario: Scenario) -> None:
    """sum_{c on h} g[c] U[c,t] <= G[h] N[h] (or G[h] M[h,t]) for every hardware offer and period: the units
    running in a period fit in the GPUs of the nodes (whole slots of a divisibility chain always pack)."""
    index = 0
    for key, hardware in model.hardware.items():
        for period in scenario.periods:
            terms = [
                c.gpus_per_unit * model.units[(c.key, period.name)] for c in model.members[key]
                if (c.key, period.name) in model.units
            ]  # fmt: skip
            if terms:
                model.problem += pulp.lpSum(terms) <= hardware.gpus_per_node * model.nodes(key, period.name), f"room_{index}"
                index += 1
            if hardware.fixed and not scenario.reconfigure_between_periods and terms:
                break  # the same units in every period: one row says it


def _on_prem_sum(model: FleetModel, attribute: str) -> pulp.LpAffineExpression:
    """sum over bought nodes (and spares) of a per-node figure (power_kw, rack_units, capex_usd)."""
    terms = [getattr(h, attribute) * model.fixed_nodes[k] for k, h in model.hardware.items() if h.pricing == "capex"]
    for system_id, spare in model.spares.items():
        terms.append(model.spare_figures[system_id][attribute] * spare)
    return pulp.lpSum(terms)


def add_power_limit(model: FleetModel, power_kw: float | None) -> None:
    """sum power_kw (N + S) <= P over on-prem nodes (cloud power is in the hourly price)."""
    if power_kw is not None:
        model.problem += _on_prem_sum(model, "power_kw") <= power_kw, "power_limit"


def add_rack_limit(model: FleetModel, rack_units: int | None) -> None:
    """sum rack_units (N + S) <= R."""
    if rack_units is not None:
        model.problem += _on_prem_sum(model, "rack_units") <= rack_units, "rack_limit"


def add_capex_limit(model: FleetModel, capex_usd: float | None) -> None:
    """sum capex_usd (N + S) <= K."""
    if capex_usd is not None:
        model.problem += _on_prem_sum(model, "capex_usd") <= capex_usd, "capex_limit"


def gpus_in_use(model: FleetModel, catalog: Catalog, gpu: str, period: str) -> pulp.LpAffineExpression:
    """sum_{h on GPU g} G[h] (N[h] or M[h,t]) + GPUs of the spares of g."""
    terms = [h.gpus_per_node * model.nodes(k, period) for k, h in model.hardware.items() if h.gpu == gpu]
    for system_id, spare in model.spares.items():
        system = catalog.systems[system_id]
        if system.gpu == gpu:
            terms.append(system.gpus_per_node * spare)
    return pulp.lpSum(terms)


def add_gpu_availability(model: FleetModel, scenario: Scenario, catalog: Catalog, skip: frozenset = frozenset()) -> None:
    """sum_{h on GPU g} G[h] (N[h] or M[h,t]) + spares of g <= A[g] in every period t."""
    for gpu, available in sorted(scenario.limits.max_gpus.items()):
        if f"gpus:{gpu}" in skip:
            continue
        for t, period in enumerate(scenario.periods):
            model.problem += gpus_in_use(model, catalog, gpu, period.name) <= available, f"gpus_{_safe(gpu)}_{t}"


def add_spare_nodes(model: FleetModel, scenario: Scenario, catalog: Catalog) -> None:
    """N + k: S[s] = k used[s], sum_{h of s} N[h] <= B[s] used[s] for every on-prem system s."""
    k = scenario.limits.spare_nodes_per_system
    if k <= 0:
        return
    bought = [h for h in model.hardware.values() if h.pricing == "capex"]
    for index, system_id in enumerate(sorted({h.system for h in bought})):
        members = [h for h in bought if h.system == system_id]
        used = pulp.LpVariable(f"used_{index}", cat=pulp.LpBinary)
        spare = pulp.LpVariable(f"S_{index}", lowBound=0, cat=pulp.LpInteger)
        upper = max(1, sum(int(model.fixed_nodes[h.key].upBound or 0) for h in members))
        model.problem += pulp.lpSum(model.fixed_nodes[h.key] for h in members) <= upper * used, f"spare_use_{index}"
        model.problem += spare == k * used, f"spare_count_{index}"
        model.system_used[system_id], model.spares[system_id] = used, spare
        sample = members[0]
        model.spare_figures[system_id] = {
            "power_kw": sample.power_kw, "rack_units": sample.rack_units, "capex_usd": sample.capex_usd,
            "annual_cost_usd": sample.annual_cost_usd,
        }  # fmt: skip


def add_variant_limit(model: FleetModel, cset: CandidateSet, scenario: Scenario) -> None:
    """sum_{c of v} U[c,t] <= B[v,t] use[v] in every period; sum_v use[v] <= V. B[v,t] is the sum of the unit
    variables' own upper bounds: a year-round U[c] (bought/reserved nodes not reconfigured) is bounded by its
    busiest period, never by period t's demand (which capped it at a quiet period's bound: a wrong optimum)."""
    limit = scenario.limits.max_engine_variants
    if limit is None:
        return
    by_variant: dict[tuple, list[Candidate]] = defaultdict(list)
    for c in cset.candidates:
        by_variant[c.variant].append(c)
    for index, (variant, members) in enumerate(sorted(by_variant.items(), key=lambda kv: str(kv[0]))):
        use = pulp.LpVariable(f"use_{index}", cat=pulp.LpBinary)
        model.variant_used[variant] = use
        for t, period in enumerate(scenario.periods):
            units = [model.units[(c.key, period.name)] for c in members if (c.key, period.name) in model.units]
            upper = sum(unit.upBound for unit in units)
            if units:
                model.problem += pulp.lpSum(units) <= max(1, upper) * use, f"variant_{index}_{t}"
    model.problem += pulp.lpSum(model.variant_used.values()) <= limit, "variant_limit"


def add_gpu_floor(model: FleetModel, cset: CandidateSet, scenario: Scenario, demand: dict) -> None:
    """Valid inequality, per period t: sum_h G[h] (N[h] or M[h,t]) >= ceil(L[t]) where L[t] = sum over buckets of
    d[w,b,t] x (fewest GPUs per request/s of any option of the bucket). Any plan serves t on at least L[t] GPUs,
    and the GPUs of whole nodes are a multiple of the gcd of the node sizes: rounding L[t] up to that cuts off
    fractional-node LP solutions."""
    fewest: dict[tuple[str, int], float] = {}
    for o in cset.options:
        c = cset.candidate(o.candidate)
        per_rps = c.gpus_per_unit / unit_rate(o, c)
        fewest[(o.workload, o.bucket)] = min(fewest.get((o.workload, o.bucket), math.inf), per_rps)
    step = math.gcd(*(h.gpus_per_node for h in model.hardware.values()))  # GPUs of whole nodes come in these steps
    for t, period in enumerate(scenario.periods):
        floor = sum(fewest[cell[:2]] * value for cell, value in demand.items() if cell[2] == period.name and cell[:2] in fewest)
        if floor <= 0:
            continue
        floor = step * math.ceil(floor / step - 1e-9)
        terms = [h.gpus_per_node * model.nodes(k, period.name) for k, h in model.hardware.items()]
        model.problem += pulp.lpSum(terms) >= floor, f"gpu_floor_{t}"


def add_instance_floor(model: FleetModel, cset: CandidateSet, scenario: Scenario, demand: dict) -> None:
    """Valid inequality, per model m and period t: sum_{c of m} U[c,t] >= ceil(sum over m's buckets of
    d[w,b,t] / (most requests/s any unit of m serves of the bucket)). Summing the engine-capacity rows of m's
    configurations gives the bound; units are whole, so its ceiling holds too. It says what the LP relaxation
    forgets: a model with any demand in a period runs at least one whole instance."""
    fastest: dict[tuple[str, int], float] = {}
    configs_of: dict[str, list[Candidate]] = defaultdict(list)
    model_of = {w.name: w.model for w in scenario.workloads}
    for c in cset.candidates:
        configs_of[c.model].append(c)
    for o in cset.options:
        rate = unit_rate(o, cset.candidate(o.candidate))
        fastest[(o.workload, o.bucket)] = max(fastest.get((o.workload, o.bucket), 0.0), rate)
    for t, period in enumerate(scenario.periods):
        need: dict[str, float] = defaultdict(float)
        for (workload, bucket, name), value in demand.items():
            if name == period.name and (workload, bucket) in fastest:
                need[model_of[workload]] += value / fastest[(workload, bucket)]
        for index, (model_id, units) in enumerate(sorted(need.items())):
            terms = [model.units[(c.key, period.name)] for c in configs_of[model_id] if (c.key, period.name) in model.units]
            if terms and units > 0:
                model.problem += pulp.lpSum(terms) >= math.ceil(units - 1e-9), f"instance_floor_{t}_{index}"


def cost_expression(model: FleetModel, scenario: Scenario) -> pulp.LpAffineExpression:
    """sum_{H_fix} cost[h] N[h] + sum_{H_dem,t} usd_per_hour[h] h[t] M[h,t] + sum_s cost[s] S[s]."""
    terms = [h.annual_cost_usd * model.fixed_nodes[k] for k, h in model.hardware.items() if h.fixed]
    hours = {p.name: p.hours_per_year for p in scenario.periods}
    for (key, period), var in model.period_nodes.items():
        terms.append(model.hardware[key].usd_per_hour * hours[period] * var)
    for system_id, spare in model.spares.items():
        terms.append(model.spare_figures[system_id]["annual_cost_usd"] * spare)
    return pulp.lpSum(terms)


def build_fleet_model(
    scenario: Scenario, cset: CandidateSet, catalog: Catalog, with_limits: bool = True, skip: frozenset = frozenset()
) -> FleetModel:
    """The whole program; `skip` leaves out budgets by name (power, rack, capex, gpus:<id>) for diagnosis.
    Periods with the same demand are one period of the program (merge_equal_periods); every period of the
    scenario still finds its variables under its own name."""
    scenario, members = merge_equal_periods(scenario)
    model = FleetModel(pulp.LpProblem(_safe(scenario.name), pulp.LpMinimize), hardware_list(cset), members_by_hardware(cset))
    demand = bucket_demand(scenario)
    define_unit_variables(model, cset, scenario, demand)
    define_node_variables(model, cset, scenario, demand)
    define_routing_variables(model, cset, demand)
    add_spare_nodes(model, scenario, catalog)
    model.problem += cost_expression(model, scenario), "annual_cost_usd"
    add_demand_constraints(model, cset, demand)
    add_prefill_decode_flow(model, cset)
    add_serving_mode(model, cset, scenario, demand)
    add_engine_capacity(model, cset)
    add_node_room(model, cset, scenario)
    add_variant_limit(model, cset, scenario)
    add_gpu_floor(model, cset, scenario, demand)
    add_instance_floor(model, cset, scenario, demand)
    if with_limits:
        if "power" not in skip:
            add_power_limit(model, scenario.limits.power_kw)
        if "rack" not in skip:
            add_rack_limit(model, scenario.limits.rack_units)
        if "capex" not in skip:
            add_capex_limit(model, scenario.limits.capex_usd)
        add_gpu_availability(model, scenario, catalog, skip)
    _alias_merged_periods(model, members)
    return model


def merge_equal_periods(scenario: Scenario) -> tuple[Scenario, dict[str, list[str]]]:
    """Periods with the same demand of every workload, as one period with their hours added (and the names of
    the periods each stands for). Exact: given the bought/reserved nodes, a period's best units, routing and
    rented nodes serve every period with its demand, and its cost scales with the hours; one program period
    instead of several also spares branch and bound from re-proving the same rounding in each copy."""
    groups: dict[tuple, list] = {}
    for period in scenario.periods:
        signature = tuple(period.demand_rps[w.name] for w in scenario.workloads)
        groups.setdefault(signature, []).append(period)
    if len(groups) == len(scenario.periods):
        return scenario, {p.name: [p.name] for p in scenario.periods}
    merged, members = [], {}
    for periods in groups.values():
        first = periods[0]
        merged.append(dataclasses.replace(first, hours_per_year=sum(p.hours_per_year for p in periods)))
        members[first.name] = [p.name for p in periods]
    return dataclasses.replace(scenario, periods=tuple(merged)), members


def _alias_merged_periods(model: FleetModel, members: dict[str, list[str]]) -> None:
    """Every period a merged one stands for gets its variables (read back after the solve)."""
    for variables in (model.units, model.period_nodes, model.routed):
        for key, var in list(variables.items()):
            for name in members.get(key[-1], ())[1:]:
                variables[(*key[:-1], name)] = var


@dataclass(frozen=True)
class SolveOutcome:
    status: str  # optimal | feasible | infeasible | stopped (time limit before any plan)
    mip_gap: float | None  # (objective - best bound) / objective, as the solver's bound gives it
    seconds: float
    best_bound: float | None = None


def solve_model(model: FleetModel, solver: str, time_limit_s: float) -> SolveOutcome:
    """Solve with CBC (default), HiGHS or OR-Tools (SCIP) and read the status from the solver itself. Every
    solver runs to a relative gap of 0: 'optimal' means proven, a time-limit stop with a plan is 'feasible' with
    the gap computed from the solver's best bound, and one without a plan is 'stopped' (never 'infeasible')."""
    started = time.perf_counter()
    if solver == "cbc":
        status, bound = _solve_cbc(model.problem, time_limit_s)
    elif solver == "highs":
        status, bound = _solve_highs(model.problem, time_limit_s)
    elif solver == "ortools":
        status, bound = _solve_ortools(model.problem, time_limit_s)
    else:
        raise PlannerInputError("--solver", "solver", f"unknown solver '{solver}'; allowed: {', '.join(SOLVERS)}")
    gap = None
    if status == "optimal":
        gap = 0.0
    elif status == "feasible" and bound is not None:
        objective = pulp.value(model.problem.objective) or 0.0
        gap = relative_gap(objective, bound)
    return SolveOutcome(status, gap, time.perf_counter() - started, bound)


def relative_gap(objective: float, bound: float) -> float:
    """(objective - bound) / |objective|, unrounded but for float noise (6 significant digits)."""
    gap = max(0.0, objective - bound) / max(abs(objective), 1e-9)
    return float(f"{gap:.6g}")


_PULP_STATUS = {
    pulp.LpSolutionOptimal: "optimal",
    pulp.LpSolutionIntegerFeasible: "feasible",
    pulp.LpSolutionInfeasible: "infeasible",
    pulp.LpSolutionUnbounded: "infeasible",
}


def _pulp_status(problem: pulp.LpProblem) -> str:
    """The solution status, falling back on the problem status: CBC reports an integer-infeasible MIP as
    'no solution found' with problem status 'infeasible'."""
    if problem.sol_status in _PULP_STATUS:
        return _PULP_STATUS[problem.sol_status]
    return "infeasible" if problem.status == pulp.LpStatusInfeasible else "stopped"


def _solve_cbc(problem: pulp.LpProblem, time_limit_s: float) -> tuple[str, float | None]:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "cbc.log"
        problem.solve(pulp.PULP_CBC_CMD(
            msg=False, timeLimit=time_limit_s, threads=CBC_THREADS, logPath=str(log), gapRel=0.0,
        ))  # fmt: skip
        log_text = log.read_text(errors="replace") if log.exists() else ""
    status = _pulp_status(problem)
    if status == "stopped" and "Problem is infeasible" in log_text:
        status = "infeasible"
    return status, _cbc_bound(log_text) if status == "feasible" else None


def _cbc_bound(log_text: str) -> float | None:
    """CBC's best bound on an early stop, from its summary ('Lower bound: ...'), or its last progress line
    ('best possible ...'). Its own 'Gap:' line is rounded to whole hundredths, so the gap is computed from this."""
    found = re.findall(r"^Lower bound:\s+([0-9.eE+-]+)", log_text, flags=re.MULTILINE)
    if found:
        return float(found[-1])
    found = re.findall(r"best possible\s+([0-9.eE+-]+)", log_text)
    return float(found[-1]) if found else None


@contextlib.contextmanager
def quiet_stdout():
    """Discard what a native library prints on file descriptor 1 (HiGHS' banner comes before any option can
    silence it), so `--json` output stays one JSON document and the terminal stays clean."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no real stdout (embedded use): nothing to guard
        yield
        return
    try:
        with open(os.devnull, "w") as sink:
            os.dup2(sink.fileno(), 1)
        yield
    finally:
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL(None).fflush(None)
        os.dup2(saved, 1)
        os.close(saved)


def _solve_highs(problem: pulp.LpProblem, time_limit_s: float) -> tuple[str, float | None]:
    with quiet_stdout():
        problem.solve(pulp.HiGHS(msg=False, timeLimit=time_limit_s, threads=1, gapRel=0.0))
    status = _pulp_status(problem)
    highs = getattr(problem, "solverModel", None)
    bound = None
    if highs is not None and status == "feasible":
        value = highs.getInfo().mip_dual_bound
        bound = float(value) if math.isfinite(value) else None
    return status, bound


def _solve_ortools(problem: pulp.LpProblem, time_limit_s: float) -> tuple[str, float | None]:
    """OR-Tools' SCIP on the same model exported as MPS, in a child process (see planner/ortools_worker.py);
    values are written back into the PuLP variables."""
    with tempfile.TemporaryDirectory() as tmp:
        mps, out = Path(tmp) / "fleet.mps", Path(tmp) / "result.json"
        problem.writeMPS(str(mps))
        completed = subprocess.run(
            [sys.executable, "-m", "planner.ortools_worker", str(mps), str(time_limit_s), str(out)],
            capture_output=True, text=True, timeout=time_limit_s + 120, check=False,
        )  # fmt: skip
        if completed.returncode != 0 or not out.exists():
            raise RuntimeError(f"OR-Tools worker failed: {completed.stderr.strip()[-2000:]}")
        result = json.loads(out.read_text())
    status = result["status"]
    if status in ("optimal", "feasible"):
        for var in problem.variables():
            var.varValue = result["values"].get(var.name, 0.0)
    elif status not in ("infeasible",):
        status = "stopped"
    bound = result["bound"] if status == "feasible" and result.get("bound") is not None else None
    return status, bound


def plan(
    scenario: Scenario,
    catalog: Catalog,
    solver: str | None = None,
    time_limit_s: float | None = None,
    progress: Callable[..., None] | None = None,
) -> Plan:
    """Size the fleet for `scenario`: the cheapest nodes that serve every workload's demand in every period
    within its limits. Raises InfeasiblePlanError with a diagnosis when no plan exists."""
    solver = solver or scenario.solver
    if solver not in SOLVERS:
        raise PlannerInputError("--solver", "solver", f"unknown solver '{solver}'; allowed: {', '.join(SOLVERS)}")
    cset = enumerate_candidates(scenario, catalog, progress)
    if progress is not None:
        limit = time_limit_s if time_limit_s is not None else scenario.time_limit_s
        progress(0, None, f"solving the integer program ({solver}, at most {limit:g} s)")
    return solve_candidates(scenario, cset, catalog, solver, time_limit_s)


def solve_candidates(
    scenario: Scenario, cset: CandidateSet, catalog: Catalog, solver: str | None = None, time_limit_s: float | None = None
) -> Plan:
    """The integer program over a candidate set already priced (the robust and sensitivity modes reuse one)."""
    solver = solver or scenario.solver
    time_limit_s = time_limit_s if time_limit_s is not None else scenario.time_limit_s
    check_every_workload_has_options(scenario, cset)
    model = build_fleet_model(scenario, cset, catalog)
    outcome = solve_model(model, solver, time_limit_s)
    if outcome.status == "infeasible":
        raise InfeasiblePlanError(diagnose_limits(scenario, cset, catalog, solver, time_limit_s))
    if outcome.status == "stopped":
        raise SolverStoppedError(solver, time_limit_s)
    result = _read_plan(scenario, cset, catalog, model, solver, outcome)
    return dataclasses.replace(result, binding_limits=costly_limits(scenario, cset, catalog, solver, time_limit_s, result))


def check_every_workload_has_options(scenario: Scenario, cset: CandidateSet) -> None:
    """A bucket with demand that no candidate can serve makes the plan infeasible before any solve: say why."""
    stages: dict[tuple[str, int], set] = defaultdict(set)
    for o in cset.options:
        stages[(o.workload, o.bucket)].add(cset.candidate(o.candidate).stage)
    # served aggregated, or by both pools (a prefill pool without a decode pool serves nothing)
    served = {cell for cell, s in stages.items() if "aggregated" in s or {"prefill", "decode"} <= s}
    demand = bucket_demand(scenario)
    problems = []
    for workload in scenario.workloads:
        missing = [
            b for b in range(len(workload.buckets))
            if (workload.name, b) not in served and any((workload.name, b, p.name) in demand for p in scenario.periods)
        ]  # fmt: skip
        if missing:
            problems.append(_why_unserved(workload, missing, cset))
    if problems:
        raise InfeasiblePlanError(problems)


def _why_unserved(workload, missing: list[int], cset: CandidateSet) -> str:
    """In words: the latency limit below what the fastest fitting configuration reaches, or no fit, or no data."""
    what = "" if len(workload.buckets) == 1 else " (buckets " + ", ".join(
        f"{workload.buckets[b].isl_tokens}/{workload.buckets[b].osl_tokens}" for b in missing
    ) + ")"
    pruned = [p for p in cset.pruned if p.workload == workload.name]
    fastest = cset.fastest.get(workload.name, {})
    at = f" at P{workload.slo.percentile:g}"
    below = [
        f"{LABELS[key]}{at} {limit:g} ms is below the fastest candidate's {fastest[key].value_ms:,.0f} ms ({fastest[key].label})"
        for key, limit in metric_limits(workload.slo)
        if key in fastest and fastest[key].value_ms > limit
    ]  # fmt: skip
    if below:
        return f"workload {workload.name}{what}: " + "; ".join(below)
    if pruned and all(p.kind == "memory" for p in pruned):
        return f"workload {workload.name}{what}: does not fit in memory on any allowed system ({pruned[-1].system}: {pruned[-1].reason})"
    reasons = list(dict.fromkeys(f"{p.system}: {p.reason}" for p in pruned if p.kind != "memory"))
    reasons = reasons or list(dict.fromkeys(f"{p.system}: {p.reason}" for p in pruned))
    shown = "; ".join(reasons[:4]) + (f"; and {len(reasons) - 4} more" if len(reasons) > 4 else "")
    return f"workload {workload.name}{what}: no candidate can serve it ({shown or 'no system allowed'})"


def diagnose_limits(scenario: Scenario, cset: CandidateSet, catalog: Catalog, solver: str, time_limit_s: float) -> list[str]:
    """Which budget cannot be met: for each, the least it can be while demand is served and the other budgets
    hold, against its limit."""
    limits = scenario.limits
    checks = [
        ("power", "power budget", lambda m: _on_prem_sum(m, "power_kw"), limits.power_kw, "kW"),
        ("rack", "rack-unit budget", lambda m: _on_prem_sum(m, "rack_units"), limits.rack_units, "RU"),
        ("capex", "capex budget", lambda m: _on_prem_sum(m, "capex_usd"), limits.capex_usd, "USD"),
    ]
    for gpu, available in sorted(limits.max_gpus.items()):
        for period in scenario.periods:
            checks.append((
                f"gpus:{gpu}",
                f"GPUs available of {gpu}" + (f" in period {period.name}" if len(scenario.periods) > 1 else ""),
                lambda m, g=gpu, p=period.name: gpus_in_use(m, catalog, g, p),
                available, "GPUs",
            ))  # fmt: skip
    problems, stopped = [], False
    for key, label, expression, limit, unit in checks:
        if limit is None:
            continue
        model = build_fleet_model(scenario, cset, catalog, skip=frozenset({key}))
        model.problem.setObjective(expression(model))
        outcome = solve_model(model, solver, time_limit_s)
        stopped = stopped or outcome.status in ("stopped", "feasible")
        if outcome.status == "optimal":
            least = pulp.value(model.problem.objective) or 0.0
            if least > limit + _TOLERANCE:
                problems.append(f"{label} {limit:,.6g} {unit} < {least:,.6g} {unit} needed at minimum")
        elif outcome.status == "feasible" and outcome.best_bound is not None and outcome.best_bound > limit + _TOLERANCE:
            # a re-solve stopped by its time limit proves only its bound
            problems.append(f"{label} {limit:,.6g} {unit} < {outcome.best_bound:,.6g} {unit}, a lower bound on what is "
                            "needed (the re-solve stopped at its time limit)")
    if not problems:
        model = build_fleet_model(scenario, cset, catalog, with_limits=False)
        status = solve_model(model, solver, time_limit_s).status
        if status == "stopped" or (stopped and status != "infeasible"):
            problems.append(f"the diagnosis stopped at its time limit of {time_limit_s:g} s: raise --time-limit to learn "
                            "which limit is too tight")
        elif status == "infeasible":
            problems.append(
                f"at most {limits.max_engine_variants} engine variants cannot serve every workload bucket"
                if limits.max_engine_variants is not None else "the workloads cannot be served together"
            )
        else:
            given = [label for _, label, _, limit, _ in checks if limit is not None]
            problems.append(
                f"the limits together ({', '.join(dict.fromkeys(given))}) cannot all be met at once: relax one of them"
            )
    return problems


def _read_plan(scenario, cset: CandidateSet, catalog: Catalog, model: FleetModel, solver: str, outcome: SolveOutcome) -> Plan:
    fixed = {key: int(round(var.value() or 0.0)) for key, var in model.fixed_nodes.items()}
    rented = {key: int(round(var.value() or 0.0)) for key, var in model.period_nodes.items()}
    units = {key: int(round(var.value() or 0.0)) for key, var in model.units.items()}
    spares = {s: int(round(var.value() or 0.0)) for s, var in model.spares.items()}
    routed = {key: max(0.0, var.value() or 0.0) for key, var in model.routed.items()}

    lines = node_lines(scenario, cset, model, fixed, rented, units)
    for system_id, count in sorted(spares.items()):
        if count > 0:
            figures = model.spare_figures[system_id]
            system = catalog.systems[system_id]
            lines.append(PlanLine(
                site="on-prem", system=system_id, gpu=system.gpu, model="(spare)", tp=None, precision=None,
                max_batch=None, engine_isl=0, engine_osl=0, nodes=count, gpus=system.gpus_per_node * count,
                period="all", role="spare", annual_cost_usd=round(figures["annual_cost_usd"] * count, 2),
                capex_usd=round(figures["capex_usd"] * count, 2), power_kw=round(figures["power_kw"] * count, 6),
                cost_note=f"N+{scenario.limits.spare_nodes_per_system} spare", runs="idle: a spare",
            ))  # fmt: skip
    objective = sum(line.annual_cost_usd for line in lines)
    totals = _totals(scenario, cset, catalog, lines)
    instances = _instances(scenario, cset, units, routed)
    workloads = tuple(_workload_result(w, scenario, cset, routed, units) for w in scenario.workloads)
    routing = _routing(scenario, cset, routed)
    return Plan(
        scenario=scenario.name, deployment=scenario.deployment, status=outcome.status, solver=solver,
        objective_usd_per_year=round(objective, 2), solve_seconds=round(outcome.seconds, 3), mip_gap=outcome.mip_gap,
        lines=tuple(lines), totals=totals, workloads=workloads,
        binding_limits=_binding_limits(scenario, totals, lines, instances),
        candidates=cset.stats,
        periods=tuple(p.name for p in scenario.periods),
        routing=routing,
        instances=instances,
        fleet={"reconfigure_between_periods": scenario.reconfigure_between_periods,
               "share_nodes_across_models": scenario.share_nodes_across_models},
        warnings=(plan_warnings(scenario, workloads) + shared_engine_warnings(routing)
                  + catalog_calibration_warnings(scenario, catalog)),
    )  # fmt: skip


def plan_warnings(scenario, workloads) -> tuple[str, ...]:
    """What a reader must know before trusting the plan: a latency limit read by the metrics-version-1 rule (its
    itl_ms as tpot_ms, docs/metrics.md); a streaming or sequential workload with no latency limit, sized at each
    engine's highest throughput whatever its latency there (a TTFT of minutes), with the latencies it came to."""
    warnings = list(scenario.metrics_notes) if scenario.metrics_migrated else []
    for workload, result in zip(scenario.workloads, workloads):
        slo = workload.slo
        if workload.mode == "offline" or metric_limits(slo):
            continue
        at = ", ".join(f"{name} {value / 1000:,.1f} s" for name, value in
                       (("TTFT", result.ttft_ms), ("E2E", result.e2e_ms)) if value is not None)  # fmt: skip
        warnings.append(
            f"workload '{workload.name}' has no latency limits (slo): it was sized at maximum throughput"
            + (f", where {at}" if at else ", at a point whose latencies are not recorded")
            + "; give slo.ttft_ms / tpot_ms / itl_ms / e2e_ms (or mode: offline for batch work)"
        )  # fmt: skip
    return tuple(warnings)


def shared_engine_warnings(routing) -> tuple[str, ...]:
    """Engines that serve several workloads at once: each workload's latencies are modeled at its own requests
    alone (the capacity constraint shares an instance's time between them), while in the mix one workload's prompt
    chunks lengthen the other's token gaps and its prompts queue behind the other's. Said once per engine."""
    sharing: dict[tuple, set[str]] = defaultdict(set)
    for route in routing:
        if route.rps > 0:
            sharing[configuration_key(route)].add(route.workload)
    warnings = []
    for key, names in sorted(sharing.items(), key=lambda kv: kv[0]):
        if len(names) < 2:
            continue
        site, role, system, _, _, precision, batch, isl, osl, stage, layout, _, engine = key
        warnings.append(
            f"{', '.join(sorted(names))} share {system} {layout or ''} {precision} {ENGINE_NAMES.get(engine, engine)} "
            f"engines (batch <= {batch}, built "
            f"for {isl}/{osl}{'' if stage == 'aggregated' else ', ' + stage}): each workload's latencies are modeled "
            "at its own requests alone; in the mix one's prompt chunks lengthen the other's token gaps and its "
            "prompts queue behind the other's (plan --verify simulates the mix)"
        )  # fmt: skip
    return tuple(warnings)


def catalog_calibration_warnings(scenario, catalog: Catalog) -> tuple[str, ...]:
    """What user catalogs' benchmark rows did to the engine factors of the GPU generations the scenario may run on:
    the catalogs named, the factors moved (or why not) and the fit's error before and after (perf/fit_report.py)."""
    from planner.perf.fit_report import calibration_warnings

    generations = {catalog.gpus[catalog.systems[offer.system].gpu].architecture for offer in scenario.offers}
    return calibration_warnings(catalog, generations)


_ROLE = {"capex": "bought", "reserved": "reserved", "on-demand": "on-demand"}


def pack_nodes(hardware: Hardware, nodes: int, running: list[tuple[Candidate, int]]) -> list[tuple[tuple[str, int], ...]]:
    """What each of `nodes` nodes runs; each node's content is ((configuration key, instances), ...).

    A unit over whole nodes (pipeline stages, an instance wider than a node) takes that many empty nodes, and
    lists its instances on each. The others go largest first into the nodes in order: unit sizes form a divisibility
    chain of the node size, so a node's free room is always a multiple of the size being placed and filling the
    nodes one after another never fails when the units' GPUs fit (the node-room constraint). Work is linear in
    the nodes per unit size, whatever the number of units."""
    node_gpus = hardware.gpus_per_node
    free = [node_gpus] * nodes
    content: list[dict[str, int]] = [defaultdict(int) for _ in range(nodes)]
    defect = f"units of {hardware.system} do not pack into {nodes} nodes: a planner defect"
    wide = [(c, n) for c, n in running if c.gpus_per_unit > node_gpus]
    narrow = [(c, n) for c, n in running if c.gpus_per_unit <= node_gpus]
    empty = 0  # whole nodes go first, from the start: every node before `empty` is taken
    for candidate, count in sorted(wide, key=lambda item: (-item[0].gpus_per_unit, item[0].key)):
        span = -(-candidate.gpus_per_unit // node_gpus)
        for _ in range(count):
            if empty + span > nodes:
                raise RuntimeError(defect)
            for node in range(empty, empty + span):
                free[node] = 0
                content[node][candidate.key] += candidate.instances_per_unit
            empty += span
    for candidate, count in sorted(narrow, key=lambda item: (-item[0].gpus_per_unit, item[0].key)):
        size, left, node = candidate.gpus_per_unit, count, empty
        while left:
            while node < nodes and free[node] < size:
                node += 1
            if node == nodes:
                raise RuntimeError(defect)
            placed = min(left, free[node] // size)
            free[node] -= placed * size
            content[node][candidate.key] += placed * candidate.instances_per_unit
            left -= placed
    return [tuple(sorted(c.items())) for c in content]


def node_lines(scenario, cset: CandidateSet, model: FleetModel, fixed: dict, rented: dict, units: dict) -> list[PlanLine]:
    """One plan line per group of identical nodes (the same instances in every period): what to buy or rent, and
    in `runs` what those nodes run. Bought/reserved nodes once for the year, on-demand ones per period."""
    hours = {p.name: p.hours_per_year for p in scenario.periods}

    def running(key, period):
        return [(c, units.get((c.key, period), 0)) for c in model.members[key] if units.get((c.key, period), 0) > 0]

    lines = []
    for key, hardware in model.hardware.items():
        if hardware.fixed:
            count = fixed.get(key, 0)
            if count <= 0:
                continue
            per_period = [pack_nodes(hardware, count, running(key, p.name)) for p in scenario.periods]
            schedules = [tuple(packing[i] for packing in per_period) for i in range(count)]
            for schedule, n in _groups(schedules):
                lines.append(_node_line(scenario, cset, hardware, schedule, n, "all", hardware.annual_cost_usd * n))
            continue
        for period in scenario.periods:
            count = rented.get((key, period.name), 0)
            if count <= 0:
                continue
            packing = pack_nodes(hardware, count, running(key, period.name))
            for schedule, n in _groups([(content,) for content in packing]):
                cost = hardware.usd_per_hour * hours[period.name] * n
                lines.append(_node_line(scenario, cset, hardware, schedule, n, period.name, cost, (period.name,)))
    return lines


def _groups(schedules: list[tuple]) -> list[tuple[tuple, int]]:
    """Identical node schedules counted, in the order nodes were filled."""
    counts: dict[tuple, int] = {}
    for schedule in schedules:
        counts[schedule] = counts.get(schedule, 0) + 1
    return list(counts.items())


def _engine_label(c: Candidate) -> str:
    parts = [c.model, c.layout_label, c.precision or "", engine_label(c.engine),
             f"b{c.max_batch}" if c.max_batch else "", "speculative" if c.speculative else "",
             c.stage if c.stage != "aggregated" else ""]  # fmt: skip
    return " ".join(p for p in parts if p) + f" {c.engine_isl}/{c.engine_osl}"



def _across(c: Candidate, gpus_per_node: int) -> str:
    """' across N nodes' for an instance wider than a node (pipeline stages): each of its nodes lists it."""
    span = -(-c.gpus_per_instance // gpus_per_node)
    return f" across {span} nodes" if span > 1 else ""


def _runs(cset: CandidateSet, schedule: tuple, periods: tuple[str, ...], gpus_per_node: int) -> str:
    """Consecutive periods with the same content, in words, with the GPUs left idle."""

    def words(content) -> str:
        idle = gpus_per_node - sum(n * min(cset.candidate(k).gpus_per_instance, gpus_per_node) for k, n in content)
        running = " + ".join(f"{n}x {_engine_label(cset.candidate(k))}" + _across(cset.candidate(k), gpus_per_node)
                             for k, n in content)  # fmt: skip
        if not running:
            return "idle"
        return running + (f" ({idle} GPU{'s' if idle > 1 else ''} idle)" if idle > 0 else "")

    spans: list[list] = []
    for period, content in zip(periods, schedule):
        if spans and spans[-1][2] == content:
            spans[-1][1] = period
        else:
            spans.append([period, period, content])
    if len(spans) == 1:
        return words(spans[0][2]) if len(periods) == 1 else f"all periods: {words(spans[0][2])}"
    return "; ".join(f"{a}{'' if a == b else ' to ' + b}: {words(content)}" for a, b, content in spans)


def _node_line(scenario, cset: CandidateSet, hardware: Hardware, schedule: tuple, nodes: int, period: str,
               annual_cost: float, periods: tuple[str, ...] | None = None) -> PlanLine:
    """A line of identical nodes; its engine fields are the configuration's when the nodes run one configuration
    all year, else what the configurations they run have in common (the models joined by '+')."""
    periods = periods or tuple(p.name for p in scenario.periods)
    configs = [cset.candidate(k) for k in sorted({k for content in schedule for k, _ in content})]

    def common(attribute, mixed):
        values = {getattr(c, attribute) for c in configs}
        return values.pop() if len(values) == 1 else mixed

    layouts = {c.layout_label for c in configs}

    return PlanLine(
        site=hardware.site, system=hardware.system, gpu=hardware.gpu,
        model="+".join(sorted({c.model for c in configs})) or "(idle)",
        tp=common("tp", None), precision=common("precision", None), max_batch=common("max_batch", None),
        engine_isl=common("engine_isl", 0), engine_osl=common("engine_osl", 0), nodes=nodes,
        gpus=hardware.gpus_per_node * nodes, period=period, role=_ROLE[hardware.pricing],
        annual_cost_usd=round(annual_cost, 2), capex_usd=round(hardware.capex_usd * nodes, 2),
        power_kw=round(hardware.power_kw * nodes, 6), cost_note=hardware.cost_note,
        runs=_runs(cset, schedule, periods, hardware.gpus_per_node),
        stage=common("stage", "mixed"), layout=next(iter(layouts)) if len(layouts) == 1 else "", speculative=common("speculative", False),
        engine=common("engine", "mixed"),
    )  # fmt: skip


def _instances(scenario, cset: CandidateSet, units: dict, routed: dict) -> tuple[InstanceAllocation, ...]:
    rps: dict[tuple[str, str], float] = defaultdict(float)
    for (_, _, key, period), value in routed.items():
        rps[(key, period)] += value
    out = []
    for period in scenario.periods:
        for c in cset.candidates:
            count = units.get((c.key, period.name), 0)
            if count <= 0:
                continue
            instances = count * c.instances_per_unit
            out.append(InstanceAllocation(
                period=period.name, site=c.site, role=_ROLE[c.pricing], system=c.system, gpu=c.gpu, model=c.model,
                tp=c.tp, precision=c.precision, max_batch=c.max_batch, engine_isl=c.engine_isl, engine_osl=c.engine_osl,
                gpus_per_instance=c.gpus_per_instance, instances=instances, gpus=instances * c.gpus_per_instance,
                rps=round(rps[(c.key, period.name)], 9), stage=c.stage, layout=c.layout_label, speculative=c.speculative,
                engine=c.engine,
            ))  # fmt: skip
    return tuple(out)


def _routing(scenario: Scenario, cset: CandidateSet, routed: dict) -> tuple[Route, ...]:
    rate = {(o.workload, o.bucket, o.candidate): o for o in cset.options}
    buckets = {w.name: w.buckets for w in scenario.workloads}
    order = {p.name: i for i, p in enumerate(scenario.periods)}
    routes = []
    for (workload, bucket, key, period), rps in sorted(routed.items(), key=lambda kv: (order[kv[0][3]], kv[0][:3])):
        if rps <= _TOLERANCE:
            continue
        c = cset.candidate(key)
        routes.append(Route(
            period=period, workload=workload, bucket_isl=buckets[workload][bucket].isl_tokens,
            bucket_osl=buckets[workload][bucket].osl_tokens, site=c.site, role=_ROLE[c.pricing], system=c.system, model=c.model,
            tp=c.tp, precision=c.precision, max_batch=c.max_batch, engine_isl=c.engine_isl, engine_osl=c.engine_osl,
            rps=round(rps, 9), rps_per_node=rate[(workload, bucket, key)].rps_per_node,
            rps_per_instance=rate[(workload, bucket, key)].rps_per_instance, stage=c.stage, layout=c.layout_label,
            speculative=c.speculative, engine=c.engine,
        ))  # fmt: skip
    return tuple(routes)


def _totals(scenario: Scenario, cset: CandidateSet, catalog: Catalog, lines: list[PlanLine]) -> Totals:
    """On-prem and reserved nodes count once; on-demand cloud nodes at their peak over the periods."""
    fixed_lines = [line for line in lines if line.role != "on-demand"]
    nodes_by_system: dict[str, int] = defaultdict(int)
    for line in fixed_lines:
        nodes_by_system[line.system] += line.nodes
    peak_rented: dict[str, int] = defaultdict(int)
    peak_rented_gpus = 0
    for period in scenario.periods:
        rented: dict[str, int] = defaultdict(int)
        for line in lines:
            if line.role == "on-demand" and line.period == period.name:
                rented[line.system] += line.nodes
        for system_id, count in rented.items():
            peak_rented[system_id] = max(peak_rented[system_id], count)
        peak_rented_gpus = max(peak_rented_gpus, sum(catalog.systems[s].gpus_per_node * n for s, n in rented.items()))
    for system_id, count in peak_rented.items():
        nodes_by_system[system_id] += count
    # what runs at once: the fixed nodes and the busiest period's rented ones (per-system peaks of different
    # periods do not add up)
    fixed_nodes, fixed_gpus = sum(line.nodes for line in fixed_lines), sum(line.gpus for line in fixed_lines)
    concurrent = [(sum(line.nodes for line in lines if line.role == "on-demand" and line.period == period.name),
                   sum(line.gpus for line in lines if line.role == "on-demand" and line.period == period.name))
                  for period in scenario.periods]  # fmt: skip
    peak_nodes = fixed_nodes + max((n for n, _ in concurrent), default=0)
    peak_gpus = fixed_gpus + max((g for _, g in concurrent), default=0)
    costs = scenario.on_prem_costs
    capital = energy = maintenance = space = reserved = on_demand = 0.0
    for line in lines:
        if line.site == "on-prem" and costs is not None:
            system = catalog.systems[line.system]
            per_node_capex = line.capex_usd / line.nodes
            capital += per_node_capex / costs.amortization_years * line.nodes
            energy += line.power_kw * costs.utilization_power_factor * costs.pue * costs.usd_per_kwh * 8760
            maintenance += costs.maintenance_fraction_per_year * line.capex_usd
            space += (system.rack_units or 0) * line.nodes * costs.space_usd_per_rack_unit_per_year
        elif line.role == "reserved":
            reserved += line.annual_cost_usd
        else:
            on_demand += line.annual_cost_usd
    breakdown = CostBreakdown(
        round(capital, 2), round(energy, 2), round(maintenance, 2), round(space, 2), round(reserved, 2), round(on_demand, 2)
    )
    return Totals(
        nodes_by_system=dict(sorted(nodes_by_system.items())),
        gpus=sum(line.gpus for line in fixed_lines) + peak_rented_gpus,
        capex_usd=round(sum(line.capex_usd for line in fixed_lines), 2),
        power_kw=round(sum(line.power_kw for line in fixed_lines), 6),
        rack_units=sum((catalog.systems[line.system].rack_units or 0) * line.nodes for line in fixed_lines if line.site == "on-prem"),
        annual_cost_usd=round(sum(line.annual_cost_usd for line in lines), 2),
        cost_breakdown=breakdown,
        peak_concurrent_nodes=peak_nodes,
        peak_concurrent_gpus=peak_gpus,
    )  # fmt: skip


def _workload_result(workload, scenario: Scenario, cset: CandidateSet, routed: dict, units: dict) -> WorkloadResult:
    options = {(o.bucket, o.candidate): o for o in cset.options if o.workload == workload.name}
    users_of: dict[str, set] = defaultdict(set)
    for o in cset.options:
        users_of[o.candidate].add((o.workload, o.bucket))
    loads, assignments = [], {}
    pool_gpus: dict[str, int] = {"prefill": 0, "decode": 0}
    for period in scenario.periods:
        demand = period.demand_rps[workload.name]
        capacity = {"aggregated": 0.0, "prefill": 0.0, "decode": 0.0}
        gpus = {"prefill": 0, "decode": 0}
        for (bucket, key), option in options.items():
            rps = routed.get((workload.name, bucket, key, period.name), 0.0)
            if rps <= _TOLERANCE:
                continue
            candidate = cset.candidate(key)
            # a configuration only this bucket uses lends it all its instances; shared ones, what was routed
            running = units.get((key, period.name), 0)
            capacity[candidate.stage] += unit_rate(option, candidate) * running if len(users_of[key]) == 1 else rps
            if candidate.stage in gpus:
                gpus[candidate.stage] += running * candidate.gpus_per_unit if len(users_of[key]) == 1 else 0
            assignments.setdefault((bucket, key), 0.0)
            assignments[(bucket, key)] = max(assignments[(bucket, key)], rps)
        # a disaggregated request needs both pools: they serve what the smaller of them takes
        served = capacity["aggregated"] + min(capacity["prefill"], capacity["decode"])
        loads.append(PeriodLoad(period.name, round(demand, 6), round(served, 6)))
        if sum(gpus.values()) > sum(pool_gpus.values()):
            pool_gpus = gpus
    chosen = [_assignment(options[k], cset.candidate(k[1]), workload, rps) for k, rps in sorted(assignments.items())]
    worst = {
        name: max((getattr(a, name) for a in chosen if getattr(a, name) is not None), default=None)
        for name in LATENCY_METRICS
    }
    split = any(a.stage != "aggregated" for a in chosen)
    if split and worst["e2e_ms"] is None and worst["ttft_ms"] is not None and worst["tpot_ms"] is not None:
        # the slowest prefill pool with the slowest decode pool: a bound on any request's E2E
        worst["e2e_ms"] = round(worst["ttft_ms"] + max(workload.osl_tokens - 1, 0) * worst["tpot_ms"], 3)
    peak = max(loads, key=lambda load: load.demand_rps)
    return WorkloadResult(
        name=workload.name, model=workload.model, isl_tokens=workload.isl_tokens, osl_tokens=workload.osl_tokens,
        demand_rps=peak.demand_rps, demand_note=workload.demand_note, capacity_rps=peak.capacity_rps,
        ttft_ms=worst["ttft_ms"], itl_ms=worst["itl_ms"], e2e_ms=worst["e2e_ms"], tpot_ms=worst["tpot_ms"],
        percentile=workload.slo.percentile,
        provenance=",".join(sorted({a.provenance for a in chosen})) or "none",
        why="; ".join(a.why for a in chosen) or "no demand", assignments=tuple(chosen), periods=tuple(loads),
        serving="disaggregated" if split else "aggregated", prefill_gpus=pool_gpus["prefill"],
        decode_gpus=pool_gpus["decode"],
    )  # fmt: skip


def _assignment(option: Option, candidate: Candidate, workload, rps: float) -> Assignment:
    perf = option.perf
    slo = workload.slo
    bounds = {"ttft_ms": perf.ttft_ms_bound, "tpot_ms": perf.tpot_ms_bound, "itl_ms": perf.itl_ms_bound, "e2e_ms": None}
    at = f" P{slo.percentile:g}"
    limits = [
        f"{LABELS[metric]}{at} {value:.4g} ms (limit {limit:g})" if value is not None
        else f"{LABELS[metric]}{at} < {bounds[metric]:g} ms (limit {limit:g})"
        for metric, limit in metric_limits(slo)
        if (value := getattr(perf, metric)) is not None or bounds[metric] is not None
    ]
    point = ", ".join(limits) if limits else "no latency limit: max-throughput point"
    bucket = workload.buckets[option.bucket]
    stage = "" if candidate.stage == "aggregated" else f"{candidate.stage} pool: "
    why = stage + (
        f"{rps:.4g} rps of {bucket.isl_tokens}/{bucket.osl_tokens} on {candidate.system} ({candidate.pricing}) at "
        f"{option.rps_per_node:.4g} rps/node = {rps / option.rps_per_node:.2f} nodes of load "
        f"[{point}; {perf.provenance}"
        + (f"; {ENGINE_NAMES.get(candidate.engine, candidate.engine)}, expected error ±{perf.expected_error['throughput']:.0%} "
           "throughput" if perf.expected_error else "") + "]"
    )
    return Assignment(
        system=candidate.system, site=candidate.site, pricing=candidate.pricing, tp=candidate.tp,
        precision=candidate.precision, max_batch=candidate.max_batch, engine_isl=candidate.engine_isl,
        engine_osl=candidate.engine_osl, bucket_isl=bucket.isl_tokens, bucket_osl=bucket.osl_tokens,
        rps=round(rps, 6), rps_per_node=round(option.rps_per_node, 6), concurrency=perf.concurrency,
        ttft_ms=None if perf.ttft_ms is None else round(perf.ttft_ms, 3),
        itl_ms=None if perf.itl_ms is None else round(perf.itl_ms, 3),
        tpot_ms=None if perf.tpot_ms is None else round(perf.tpot_ms, 3),
        e2e_ms=None if perf.e2e_ms is None else round(perf.e2e_ms, 3),
        provenance=perf.provenance, source=perf.source, why=why, stage=candidate.stage, layout=candidate.layout_label,
        speculative=candidate.speculative, engine=candidate.engine, expected_error=perf.expected_error,
    )  # fmt: skip


def _binding_limits(scenario: Scenario, totals: Totals, lines: list[PlanLine], instances) -> tuple[str, ...]:
    """The budgets the plan uses up (a first reading; costly_limits replaces it with what re-solves show)."""
    return tuple(label for label, _ in _limit_usage(scenario, totals, lines, instances) if label.endswith("used up"))


def _limit_usage(scenario: Scenario, totals: Totals, lines, instances) -> list[tuple[str, str | None]]:
    """(what the plan uses of each limit set, the budget's skip name for a re-solve without it)."""
    limits = scenario.limits
    usage = []
    for key, label, used, limit, unit in (
        ("power", "power budget", totals.power_kw, limits.power_kw, "kW"),
        ("rack", "rack-unit budget", totals.rack_units, limits.rack_units, "RU"),
        ("capex", "capex budget", totals.capex_usd, limits.capex_usd, "USD"),
    ):
        if limit is not None:
            exhausted = used >= limit - _TOLERANCE * max(1.0, limit)
            usage.append((f"{label}: {used:,.6g} of {limit:,.6g} {unit} used" + (" up" if exhausted else ""), key))
    for gpu, available in sorted(limits.max_gpus.items()):
        peak, where = 0, scenario.periods[0].name
        for period in scenario.periods:
            used = sum(
                line.gpus for line in lines
                if line.gpu == gpu and (line.role != "on-demand" or line.period == period.name)
            )  # fmt: skip
            if used > peak:
                peak, where = used, period.name
        usage.append((f"GPUs of {gpu}: {peak} of {available} used in period {where}" + (" up" if peak >= available else ""), f"gpus:{gpu}"))
    if limits.max_engine_variants is not None:
        variants = {(i.model, i.gpu, i.tp, i.precision, i.max_batch, i.engine_isl, i.engine_osl) for i in instances}
        full = len(variants) >= limits.max_engine_variants
        usage.append((f"engine variants: {len(variants)} of {limits.max_engine_variants} used" + (" up" if full else ""), None))
    return usage


def costly_limits(scenario: Scenario, cset: CandidateSet, catalog: Catalog, solver: str, time_limit_s: float, plan: Plan) -> tuple[str, ...]:
    """The limits that cost money: for each budget the scenario sets, the plan re-solved without it; the budget
    is binding when that optimum is cheaper (whether or not the plan used it up exactly: a power cap can force
    a dearer mix and still leave a few kW unused). Where a re-solve cannot prove its optimum, or for the engine-
    variant limit, a budget counts as binding when the plan uses it up."""
    binding = []
    for label, skip in _limit_usage(scenario, plan.totals, plan.lines, plan.instances):
        if skip is None or plan.status != "optimal":
            if label.endswith("used up"):
                binding.append(label)
            continue
        model = build_fleet_model(scenario, cset, catalog, skip=frozenset({skip}))
        outcome = solve_model(model, solver, time_limit_s)
        cheaper = pulp.value(model.problem.objective) if outcome.status == "optimal" else None
        if cheaper is not None and cheaper < plan.objective_usd_per_year - max(0.01, 1e-7 * plan.objective_usd_per_year):
            binding.append(f"{label}; without it the plan costs {plan.objective_usd_per_year - cheaper:,.0f} USD/year less")
        elif cheaper is None and label.endswith("used up"):
            binding.append(label)
    return tuple(binding)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)
