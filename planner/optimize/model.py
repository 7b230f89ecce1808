"""The fleet integer program as PuLP rows (docs/optimizer.md is the math of record; the Notations open
planner/optimize/__init__.py): named variables from the `define_*` functions, one `add_*` per constraint family
with its formula in the docstring, the objective in `cost_expression`, all put together by `build_fleet_model`."""

from __future__ import annotations

import dataclasses
import math
import re
from collections import defaultdict

import pulp

from planner.candidates import Candidate, CandidateSet, unit_rate
from planner.catalog import Catalog
from planner.errors import PlannerInputError
from planner.infrastructure import node_extras_usd_per_year
from planner.optimize.billing import add_rentals, add_site_infrastructure
from planner.optimize.variables import FleetModel, Hardware, hardware_list, members_by_hardware
from planner.scenario import PER_PERIOD_PRICING, Scenario

_TOLERANCE = 1e-6


def bucket_demand(scenario: Scenario) -> dict[tuple[str, int, str], float]:
    """d[w,t] s[w,b] (1 + H) for every bucket and period with demand (the start-up headroom g L is held by the
    nodes rented per period, never by the demand: `capacity_rate`)."""
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


def capacity_rate(option, candidate: Candidate, scenario: Scenario) -> float:
    """rho[w,b,c] / (1 + g L[c]): the requests/s a unit of c may be planned to carry. g L[c] = g L (growth per hour
    x start-up lead time, `Scenario.demand_headroom`) on nodes rented per period (on demand, spot), which are
    started for the period and so must hold what demand may rise while they start; 0 on bought and reserved nodes,
    which start nothing: a plan that rents nothing per period is planned as if no such offer existed."""
    rate = unit_rate(option, candidate)
    if candidate.pricing in PER_PERIOD_PRICING:
        return rate / (1.0 + scenario.demand_headroom)
    return rate


def unit_load(cset: CandidateSet, scenario: Scenario, demand: dict, candidate: Candidate, period: str) -> float:
    """Units of c that all the demand it can serve in period t would keep busy."""
    return sum(
        demand.get((o.workload, o.bucket, period), 0.0) / capacity_rate(o, candidate, scenario)
        for o in cset.options_of(candidate.key)
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
                        gpus = math.ceil(demand[cell] / capacity_rate(o, c, scenario) - 1e-9) * c.gpus_per_unit
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
        bounds = {p.name: math.ceil(unit_load(cset, scenario, demand, c, p.name) - 1e-9) for p in scenario.periods}
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
    """N[h] in Z>=0 for bought/reserved h; M[h,t] in Z>=0 for on-demand h, each bounded by node_bound. Where
    rentals are billed per start (`Scenario.rental_day`), a node may be kept rented through a quiet period rather
    than started again: every M[h,t] is bounded by the busiest period's bound."""
    day = scenario.rental_day
    for index, hardware in enumerate(model.hardware.values()):
        if hardware.fixed:
            upper = node_bound(model, cset, scenario, demand, hardware, scenario.periods)
            model.fixed_nodes[hardware.key] = pulp.LpVariable(f"N_{index}", 0, upper, cat=pulp.LpInteger)
            continue
        uppers = [node_bound(model, cset, scenario, demand, hardware, (period,)) for period in scenario.periods]
        if day is not None:
            uppers = [max(uppers)] * len(uppers)
        for t, (period, upper) in enumerate(zip(scenario.periods, uppers)):
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


def add_demand_constraints(model: FleetModel, cset: CandidateSet, demand: dict, share: pulp.LpVariable | None = None) -> None:
    """sum_{c in C_agg} x[w,b,c,t] + sum_{c in C_pre} x[w,b,c,t] = d[w,t] s[w,b] (1 + H) for every bucket and
    period with demand: a request runs on an aggregated engine, or starts on a prefill instance. With `share`
    (a variable mu, planner/robustness.py) the right-hand side is d[w,t] s[w,b] (1 + H) mu."""
    routed_by_cell: dict[tuple[str, int, str], list] = defaultdict(list)
    for (workload, bucket, key, period), var in model.routed.items():
        if cset.candidate(key).stage != "decode":
            routed_by_cell[(workload, bucket, period)].append(var)
    for index, (cell, value) in enumerate(sorted(demand.items())):
        model.problem += pulp.lpSum(routed_by_cell.get(cell, [])) == (value if share is None else value * share), f"demand_{index}"


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


def add_engine_capacity(model: FleetModel, cset: CandidateSet, scenario: Scenario) -> None:
    """sum_(w,b) x[w,b,c,t] (1 + g L[c]) / rho[w,b,c] <= U[c,t] for every configuration and period: nodes rented
    per period hold the start-up headroom g L on what they carry (`capacity_rate`), bought and reserved ones none."""
    rate = {(o.workload, o.bucket, o.candidate): capacity_rate(o, cset.candidate(o.candidate), scenario) for o in cset.options}
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
    """N + k: S[s] = k used[s], sum_{h of s} N[h] <= B[s] used[s] for every on-prem system s. With a spare
    fraction f (`limits.spare_fraction`): S[s] >= k used[s] and S[s] >= f sum_{h of s} N[h], S[s] integer, so that
    S[s] = max(k used[s], ceil(f N[s])) at the optimum (a spare costs money and frees nothing)."""
    k, fraction = scenario.limits.spare_nodes_per_system, scenario.limits.spare_fraction
    if k <= 0 and fraction <= 0:
        return
    bought = [h for h in model.hardware.values() if h.pricing == "capex"]
    for index, system_id in enumerate(sorted({h.system for h in bought})):
        members = [h for h in bought if h.system == system_id]
        upper = max(1, sum(int(model.fixed_nodes[h.key].upBound or 0) for h in members))
        nodes = pulp.lpSum(model.fixed_nodes[h.key] for h in members)
        spare = pulp.LpVariable(f"S_{index}", lowBound=0, upBound=max(k, math.ceil(fraction * upper - 1e-9)),
                                cat=pulp.LpInteger)  # fmt: skip
        if k > 0:
            used = pulp.LpVariable(f"used_{index}", cat=pulp.LpBinary)
            model.problem += nodes <= upper * used, f"spare_use_{index}"
            if fraction > 0:
                model.problem += spare >= k * used, f"spare_count_{index}"
            else:
                model.problem += spare == k * used, f"spare_count_{index}"
            model.system_used[system_id] = used
        if fraction > 0:  # - 1e-9: 0.1 x 30 = 3.0000000000000004 asks 3 spares, not 4 (as `spare_count` rounds)
            model.problem += spare >= fraction * nodes - 1e-9, f"spare_share_{index}"
        model.spares[system_id] = spare
        sample = members[0]
        model.spare_figures[system_id] = {
            "power_kw": sample.power_kw, "rack_units": sample.rack_units, "capex_usd": sample.capex_usd,
            "annual_cost_usd": sample.annual_cost_usd, "gpus_per_node": sample.gpus_per_node,
        }  # fmt: skip


def spare_policy(nodes: int, k: int, fraction: float) -> tuple[int, str]:
    """The spares of a system with `nodes` bought nodes in use, as `add_spare_nodes`' rows give them at the optimum
    (max(k, ceil(f x nodes)); none without nodes), and a note saying which policy set them."""
    if nodes <= 0:
        return 0, ""
    share = math.ceil(fraction * nodes - 1e-9)
    by_share = f"spare fraction {fraction:g}: ceil({fraction:g} x {nodes} nodes in use) = {share}"
    if fraction <= 0:
        return k, f"N+{k} spare"
    if k <= 0:
        return share, by_share
    if k >= share:
        return k, f"N+{k} spare (the larger of it and the {by_share})"
    return share, f"{by_share} (the larger of it and N+{k})"


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
        per_rps = c.gpus_per_unit / capacity_rate(o, c, scenario)
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
        rate = capacity_rate(o, cset.candidate(o.candidate), scenario)
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


def node_extras(hardware: Hardware, scenario: Scenario) -> float:
    """e[h]: what a node of h adds per year beyond its line (support, facility, software, installation;
    planner.infrastructure.node_extras_usd_per_year); per hour rented for on-demand hardware."""
    extras = sum(node_extras_usd_per_year(hardware.pricing, hardware.capex_usd, hardware.power_kw, hardware.gpus_per_node,
                                          scenario.on_prem_costs, scenario.cloud_software).values())  # fmt: skip
    return extras if hardware.fixed else extras / 8760.0


def cost_expression(model: FleetModel, scenario: Scenario) -> pulp.LpAffineExpression:
    """sum_{H_fix} (cost[h] + e[h]) N[h] + sum_{H_dem,t} (usd_per_hour[h] + e[h]) h[t] M[h,t]
    + sum_s (cost[s] + e[s]) S[s] + the site's racks and networks (`add_site_infrastructure`) + what rentals are
    billed beyond their hours (start-up, minimum billing: `add_rentals`)."""
    terms = [(h.annual_cost_usd + node_extras(h, scenario)) * model.fixed_nodes[k] for k, h in model.hardware.items() if h.fixed]
    hours = {p.name: p.hours_per_year for p in scenario.periods}
    for (key, period), var in model.period_nodes.items():
        hardware = model.hardware[key]
        terms.append((hardware.usd_per_hour + node_extras(hardware, scenario)) * hours[period] * var)
    for system_id, spare in model.spares.items():
        figures = model.spare_figures[system_id]
        extras = node_extras_usd_per_year("capex", figures["capex_usd"], figures["power_kw"], figures["gpus_per_node"],
                                          scenario.on_prem_costs, None)  # fmt: skip
        terms.append((figures["annual_cost_usd"] + sum(extras.values())) * spare)
    terms.extend(model.infrastructure_cost)
    terms.extend(model.rental_cost)
    return pulp.lpSum(terms)


def add_spot_share(model: FleetModel, cset: CandidateSet, scenario: Scenario, demand: dict,
                   share: pulp.LpVariable | None = None) -> None:
    """sum_{c spot} x[w,b,c,t] <= sigma d[w,b,t] for every bucket and period: spot nodes carry at most a share sigma
    (`sites.cloud.spot.max_share`) of each workload's demand, since a reclaimed pool leaves at once."""
    if scenario.spot_max_share >= 1.0:
        return
    spot_routes: dict[tuple[str, int, str, str], list] = defaultdict(list)  # per stage: a request visits each once
    for (workload, bucket, key, period), var in model.routed.items():
        if cset.candidate(key).pricing == "spot":
            spot_routes[(workload, bucket, period, cset.candidate(key).stage)].append(var)
    for index, (cell, variables) in enumerate(sorted(spot_routes.items())):
        value = demand.get(cell[:3], 0.0)
        bound = scenario.spot_max_share * value
        model.problem += pulp.lpSum(variables) <= (bound if share is None else bound * share), f"spot_share_{index}"


def build_fleet_model(
    scenario: Scenario, cset: CandidateSet, catalog: Catalog, with_limits: bool = True, skip: frozenset = frozenset(),
    valid_inequalities: bool = True, demand_share: pulp.LpVariable | None = None,
) -> FleetModel:
    """The whole program; `skip` leaves out budgets by name (power, rack, capex, gpus:<id>) for diagnosis;
    `valid_inequalities=False` leaves out the GPU and instance floors (valid only for the demand as given: a caller
    that scales the demand rows, planner/robustness.py, must not keep them); `demand_share` multiplies every
    demand row's right-hand side by that variable.
    Periods with the same demand are one period of the program (merge_equal_periods); every period of the
    scenario still finds its variables under its own name."""
    scenario, members = merge_equal_periods(scenario)
    model = FleetModel(pulp.LpProblem(_safe(scenario.name), pulp.LpMinimize), hardware_list(cset), members_by_hardware(cset))
    demand = bucket_demand(scenario)
    define_unit_variables(model, cset, scenario, demand)
    define_node_variables(model, cset, scenario, demand)
    define_routing_variables(model, cset, demand)
    add_spare_nodes(model, scenario, catalog)
    add_site_infrastructure(model, scenario, catalog)
    add_rentals(model, scenario)
    model.problem += cost_expression(model, scenario), "annual_cost_usd"
    add_demand_constraints(model, cset, demand, demand_share)
    add_prefill_decode_flow(model, cset)
    add_serving_mode(model, cset, scenario, demand)
    add_engine_capacity(model, cset, scenario)
    add_spot_share(model, cset, scenario, demand, demand_share)
    add_node_room(model, cset, scenario)
    add_variant_limit(model, cset, scenario)
    if valid_inequalities:
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
    if scenario.cloud_minimum_billing_hours > 0 or scenario.cloud_start_up_hours > 0:  # billed per daily block
        return scenario, {p.name: [p.name] for p in scenario.periods}
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


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)
