"""The fleet's cost families beyond its nodes' own lines (docs/optimizer.md, "Costs"): the on-prem site's racks and
networks in whole units, and what rentals are billed per start (start-up, minimum billing). Each `add_*` adds its
rows and its annual cost terms to the FleetModel (planner/optimize/model.py), which `cost_expression` sums."""

from __future__ import annotations

import math
from collections import defaultdict

import pulp

from planner.catalog import Catalog
from planner.cloud import DAYS_PER_YEAR
from planner.infrastructure import fabric_ports, nodes_per_rack
from planner.optimize.variables import FleetModel
from planner.scenario import Scenario


def add_racks(model: FleetModel, catalog: Catalog, site) -> None:
    """Racks of whole nodes, one system per rack: R[s] >= (N[s] + S[s]) / q[s], R[s] in Z>=0, with q[s] = max(1,
    min(floor(kW_rack / kW[s]), floor(RU_rack / RU[s]))) nodes of s per rack, and racks = sum_s R[s]. A rack-scale
    system (catalog `rack_scale`: GB200 NVL72) is its own rack: no R[s] (planner.infrastructure.rack_count)."""
    nodes: dict[str, list] = defaultdict(list)
    for key, hardware in model.hardware.items():
        if hardware.pricing == "capex":
            nodes[hardware.system].append(model.fixed_nodes[key])
    for system_id, spare in model.spares.items():
        nodes[system_id].append(spare)
    racks = pulp.LpVariable("racks", lowBound=0, cat=pulp.LpInteger)
    model.infrastructure["racks"] = racks
    per_system = []
    for index, (system_id, terms) in enumerate(sorted(nodes.items())):
        system = catalog.systems[system_id]
        per_rack = None if system.rack_scale else nodes_per_rack(system.power_kw, system.rack_units, site)
        if per_rack is None:
            continue
        upper = math.ceil(sum(var.upBound if var.upBound is not None else 1000 for var in terms) / per_rack)
        system_racks = pulp.LpVariable(f"racks_{index}", lowBound=0, upBound=upper, cat=pulp.LpInteger)
        model.infrastructure[f"racks:{system_id}"] = system_racks
        model.problem += per_rack * system_racks >= pulp.lpSum(terms), f"racks_of_system_{index}"
        per_system.append(system_racks)
    model.problem += racks == pulp.lpSum(per_system), "racks"


def add_rentals(model: FleetModel, scenario: Scenario) -> None:
    """Rentals billed per start, over the day of `Scenario.rental_day` (planner.cloud.RentalDay: periods in the order
    listed, b[t] hours a day each, K(tau), r(tau), t*(tau)), for every h rented per period:
        s[h,t] >= M[h,t] - M[h,t-1]     starts (t-1 the period before in the day; none before a chain's first)
        M[h,t] >= sum_{tau: t in K(tau)} s[h,tau] + sum_{tau: t*(tau) = t} (s[h,tau] - y[h,tau])     minimum billing
        0 <= y[h,tau] <= s[h,tau]       rentals started in tau that stop at the end of K(tau), billed r(tau) more
        M[h,t] = M[h,t']                every t, t' where the minimum billing covers the whole day
    costing 365 usd_per_hour[h] (L sum_t s[h,t] + sum_tau r(tau) y[h,tau]) a year (r(tau) s[h,tau] where K(tau)
    reaches a chain's end). A rental started in tau is billed L + max(D, m - L) for D hours of periods; it may as well
    run through K(tau) (billed anyway), so the counts it keeps up there are free, and it either stops at the end of
    K(tau) (paying r) or runs into t*(tau) (then past its minimum)."""
    day = scenario.rental_day
    if day is None:
        return
    for index, (key, hardware) in enumerate(model.hardware.items()):
        if hardware.fixed:
            continue
        nodes = {t: model.period_nodes.get((key, t), 0) for t in day.order}
        if not any(isinstance(n, pulp.LpVariable) for n in nodes.values()):
            continue
        if day.constant:
            for t, name in enumerate(day.order[1:]):
                model.problem += nodes[name] == nodes[day.order[0]], f"rented_all_day_{index}_{t}"
        starts = {t: pulp.LpVariable(f"s_{index}_{i}", lowBound=0) for i, t in enumerate(day.order)}
        short = {t: pulp.LpVariable(f"y_{index}_{i}", lowBound=0) for i, t in enumerate(day.order)
                 if day.after[t] is not None}  # fmt: skip
        for i, t in enumerate(day.order):
            before = day.previous(t)
            model.problem += starts[t] >= nodes[t] - (nodes[before] if before is not None else 0), f"starts_{index}_{i}"
            model.starts[(key, t)] = starts[t]
        for i, t in enumerate(short):
            model.problem += short[t] <= starts[t], f"stops_short_{index}_{i}"
            model.stops_short[(key, t)] = short[t]
        for i, t in enumerate(day.order):
            held = [starts[tau] for tau in day.order if t in day.window[tau]]
            held += [starts[tau] - short[tau] for tau in short if day.after[tau] == t]
            if len(held) > 1 or (held and t not in day.window[t]):
                model.problem += nodes[t] >= pulp.lpSum(held), f"minimum_billing_{index}_{i}"
        per_day = [day.start_up_hours * var for var in starts.values()]
        per_day += [day.residual[t] * short[t] for t in short]
        per_day += [day.residual[t] * starts[t] for t in day.order if day.residual[t] > 0 and day.after[t] is None]
        model.rental_cost.append(DAYS_PER_YEAR * hardware.usd_per_hour * pulp.lpSum(per_day))


def add_site_infrastructure(model: FleetModel, scenario: Scenario, catalog: Catalog) -> None:
    """The on-prem site's racks and networks in whole units (planner/infrastructure.py), with a(r, n) the annuity:
    racks of whole nodes (`add_racks`), costing a(r, n) (rack + k PDU) each;
    for each network with p ports per node and switches of P ports: ports = sum p (N + S) <= P one + (P/2) L,
    L <= B (1 - one), 2 S >= L (one switch, or leaves and spines), costing a(r, n) (switch (one + L + S)
    + link (ports + (P/2) L))."""
    costs = scenario.on_prem_costs
    if costs is None or costs.infrastructure is None or not any(h.pricing == "capex" for h in model.hardware.values()):
        return
    site, annuity = costs.infrastructure, costs.annuity
    add_racks(model, catalog, site)
    model.infrastructure_cost.append(annuity * (site.rack_usd + site.pdus_per_rack * site.pdu_usd) * model.infrastructure["racks"])
    per_node = {
        "fabric": lambda system: fabric_ports(system.network_gbit_per_s, site),
        "frontend": lambda system: int(site.frontend_ports_per_node),
    }
    for network, ports_of in per_node.items():
        switch_ports = int(getattr(site, f"{network}_switch_ports"))
        terms, most = [], 0.0
        for key, hardware in model.hardware.items():
            if hardware.pricing == "capex":
                ports = ports_of(catalog.systems[hardware.system])
                terms.append(ports * model.fixed_nodes[key])
                most += ports * (model.fixed_nodes[key].upBound or 1000)
        for system_id, spare in model.spares.items():
            ports = ports_of(catalog.systems[system_id])
            terms.append(ports * spare)
            most += ports * (spare.upBound or 1000)
        if most <= 0:
            continue
        ports = pulp.lpSum(terms)
        one = pulp.LpVariable(f"{network}_one_switch", cat=pulp.LpBinary)
        leaves = pulp.LpVariable(f"{network}_leaves", lowBound=0, cat=pulp.LpInteger)
        spines = pulp.LpVariable(f"{network}_spines", lowBound=0, cat=pulp.LpInteger)
        model.infrastructure.update({f"{network}_one_switch": one, f"{network}_leaves": leaves, f"{network}_spines": spines})
        model.problem += ports <= switch_ports * one + (switch_ports // 2) * leaves, f"{network}_ports"
        model.problem += leaves <= math.ceil(most / (switch_ports // 2)) * (1 - one), f"{network}_one_or_leaves"
        model.problem += 2 * spines >= leaves, f"{network}_spines"
        switch_usd, link_usd = getattr(site, f"{network}_switch_usd"), getattr(site, f"{network}_link_usd")
        model.infrastructure_cost.append(annuity * (switch_usd * (one + leaves + spines)
                                                    + link_usd * (ports + (switch_ports // 2) * leaves)))  # fmt: skip
