"""Read-back: the solved program's values as a Plan (lines, totals, routes, instances, per-workload results,
warnings)."""

from __future__ import annotations

from collections import defaultdict

from planner.candidates import DECODE_NETWORK_REASON, DECODE_PRUNED, Candidate, CandidateSet, Option, unit_rate
from planner.catalog import Catalog
from planner.metrics import LABELS, LATENCY_METRICS
from planner.metrics import limits as metric_limits
from planner.infrastructure import BREAKDOWN_OF_KIND, infrastructure_lines
from planner.optimize.gaps import catalog_gap_warnings, rental_assumptions
from planner.optimize.model import _TOLERANCE, FleetModel, spare_policy
from planner.optimize.packing import _ROLE, node_lines
from planner.optimize.solve import SolveOutcome
from planner.scenario import HOURS_PER_YEAR
from planner.perf.serving import engine_named
from planner.plan import (
    PER_PERIOD_ROLES,
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


def _read_plan(scenario, cset: CandidateSet, catalog: Catalog, model: FleetModel, solver: str, outcome: SolveOutcome) -> Plan:
    fixed = {key: int(round(var.value() or 0.0)) for key, var in model.fixed_nodes.items()}
    rented = {key: int(round(var.value() or 0.0)) for key, var in model.period_nodes.items()}
    units = {key: int(round(var.value() or 0.0)) for key, var in model.units.items()}
    spares = {s: int(round(var.value() or 0.0)) for s, var in model.spares.items()}
    routed = {key: max(0.0, var.value() or 0.0) for key, var in model.routed.items()}

    lines = node_lines(scenario, cset, model, fixed, rented, units)
    in_use = defaultdict(int)
    for line in lines:
        if line.site == "on-prem":
            in_use[line.system] += line.nodes
    for system_id, count in sorted(spares.items()):
        if count > 0:
            _, policy = spare_policy(in_use[system_id], scenario.limits.spare_nodes_per_system, scenario.limits.spare_fraction)
            figures = model.spare_figures[system_id]
            system = catalog.systems[system_id]
            lines.append(PlanLine(
                site="on-prem", system=system_id, gpu=system.gpu, model="(spare)", tp=None, precision=None,
                max_batch=None, engine_isl=0, engine_osl=0, nodes=count, gpus=system.gpus_per_node * count,
                period="all", role="spare", annual_cost_usd=round(figures["annual_cost_usd"] * count, 2),
                capex_usd=round(figures["capex_usd"] * count, 2), power_kw=round(figures["power_kw"] * count, 6),
                cost_note=policy, runs="idle: a spare",
            ))  # fmt: skip
    infrastructure = infrastructure_lines(scenario, catalog, lines)
    objective = sum(line.annual_cost_usd for line in lines) + sum(line.annual_cost_usd for line in infrastructure)
    totals = _totals(scenario, cset, catalog, lines, infrastructure)
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
        infrastructure=infrastructure,
        fleet={"reconfigure_between_periods": scenario.reconfigure_between_periods,
               "share_nodes_across_models": scenario.share_nodes_across_models},
        warnings=(plan_warnings(scenario, workloads) + shared_engine_warnings(routing)
                  + catalog_calibration_warnings(scenario, catalog) + decode_placement_warnings(cset)
                  + catalog_gap_warnings(scenario, catalog, cset) + rental_assumptions(scenario, lines)),
    )  # fmt: skip


def plan_warnings(scenario, workloads) -> tuple[str, ...]:
    """What a reader must know before trusting the plan: a latency limit read by the metrics-version-1 rule (its
    itl_ms as tpot_ms, docs/metrics.md); a streaming or sequential workload with no latency limit, sized at each
    engine's highest throughput whatever its latency there (a TTFT of minutes), with the latencies it came to."""
    warnings = list(scenario.metrics_notes) if scenario.metrics_migrated else []
    warnings += scenario.site_notes  # a site this run derived from the catalog (--deployment beyond the file's)
    covered = sum(p.hours_per_year for p in scenario.periods)
    if covered < HOURS_PER_YEAR - 0.5:
        per_day = (" (hours_per_year counts hours in a year: a period of 10 hours every day is 3,650; these look "
                   "like hours per day or per week)") if covered <= 168 else ""  # fmt: skip
        warnings.append(
            f"the periods cover {covered:,.6g} of the year's {HOURS_PER_YEAR:,.0f} hours: rented nodes, energy and "
            f"every hourly cost count those hours only, and the other {HOURS_PER_YEAR - covered:,.6g} hours are "
            f"planned as having no demand{per_day}"
        )  # fmt: skip
    day = scenario.rental_day
    if day is not None and len(day.order) > 1:
        order = " -> ".join(day.order) + (f" -> {day.order[0]}" if day.cyclic else " (then no demand until the next day)")
        warnings.append(
            f"nodes rented per period are billed per rental ({scenario.cloud_start_up_hours * 60:g} min of start-up, "
            f"a {scenario.cloud_minimum_billing_hours:g} h minimum): the periods are taken as a day in the order "
            f"listed, {order}, and a node rented through consecutive periods is one rental: list the periods in the "
            "order they come"
        )  # fmt: skip
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


def decode_placement_warnings(cset) -> tuple[str, ...]:
    """A system left without disaggregated decode pools because its network is slower per GPU than a system that
    may prefill (candidates.CandidateBuilder.decode_network_problem): said once per system, since it changes what the plan
    could have chosen."""
    reasons = {}
    for pruned in cset.pruned:
        if pruned.reason.startswith(DECODE_NETWORK_REASON):
            reasons.setdefault(pruned.system, pruned.reason)
    return tuple(f"{system} hosts no disaggregated decode pool: {reason.removeprefix(DECODE_PRUNED)}"
                 for system, reason in sorted(reasons.items()))  # fmt: skip


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
        site, role, system, _, _, precision, batch, isl, osl, stage, layout, _, engine, version = key
        warnings.append(
            f"{', '.join(sorted(names))} share {system} {layout or ''} {precision} {engine_named(engine, version)} "
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
                engine=c.engine, engine_version=c.engine_version,
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
            speculative=c.speculative, engine=c.engine, engine_version=c.engine_version,
        ))  # fmt: skip
    return tuple(routes)


def _totals(scenario: Scenario, cset: CandidateSet, catalog: Catalog, lines: list[PlanLine], infrastructure=()) -> Totals:
    """On-prem and reserved nodes count once; on-demand cloud nodes at their peak over the periods."""
    fixed_lines = [line for line in lines if line.role not in PER_PERIOD_ROLES]
    nodes_by_system: dict[str, int] = defaultdict(int)
    for line in fixed_lines:
        nodes_by_system[line.system] += line.nodes
    peak_rented: dict[str, int] = defaultdict(int)
    peak_rented_gpus = 0
    for period in scenario.periods:
        rented: dict[str, int] = defaultdict(int)
        for line in lines:
            if line.role in PER_PERIOD_ROLES and line.period == period.name:
                rented[line.system] += line.nodes
        for system_id, count in rented.items():
            peak_rented[system_id] = max(peak_rented[system_id], count)
        peak_rented_gpus = max(peak_rented_gpus, sum(catalog.systems[s].gpus_per_node * n for s, n in rented.items()))
    for system_id, count in peak_rented.items():
        nodes_by_system[system_id] += count
    # what runs at once: the fixed nodes and the busiest period's rented ones (per-system peaks of different
    # periods do not add up)
    fixed_nodes, fixed_gpus = sum(line.nodes for line in fixed_lines), sum(line.gpus for line in fixed_lines)
    concurrent = [(sum(line.nodes for line in lines if line.role in PER_PERIOD_ROLES and line.period == period.name),
                   sum(line.gpus for line in lines if line.role in PER_PERIOD_ROLES and line.period == period.name))
                  for period in scenario.periods]  # fmt: skip
    peak_nodes = fixed_nodes + max((n for n, _ in concurrent), default=0)
    peak_gpus = fixed_gpus + max((g for _, g in concurrent), default=0)
    costs = scenario.on_prem_costs
    capital = energy = maintenance = space = reserved = on_demand = spot = 0.0
    for line in lines:
        if line.site == "on-prem" and costs is not None:
            system = catalog.systems[line.system]
            capital += line.capex_usd * costs.annuity
            energy += line.power_kw * costs.utilization_power_factor * costs.pue * costs.usd_per_kwh * 8760
            space += (system.rack_units or 0) * line.nodes * costs.space_usd_per_rack_unit_per_year
        elif line.role == "reserved":
            reserved += line.annual_cost_usd
        elif line.role == "spot":
            spot += line.annual_cost_usd
        else:
            on_demand += line.annual_cost_usd
    kinds = defaultdict(float)
    for item in infrastructure:  # by the line's kind (support, facility, software; the rest is the site's)
        kinds[BREAKDOWN_OF_KIND[item.kind]] += item.annual_cost_usd
    maintenance = kinds["maintenance"]
    on_demand, spot = on_demand + kinds["cloud_on_demand"], spot + kinds["cloud_spot"]  # rentals' starts and minimums
    breakdown = CostBreakdown(
        round(capital, 2), round(energy, 2), round(maintenance, 2), round(space, 2), round(reserved, 2), round(on_demand, 2),
        facility_usd=round(kinds["facility"], 2), software_usd=round(kinds["software"], 2),
        infrastructure_usd=round(kinds["infrastructure"], 2), cloud_spot_usd=round(spot, 2),
    )
    return Totals(
        nodes_by_system=dict(sorted(nodes_by_system.items())),
        gpus=sum(line.gpus for line in fixed_lines) + peak_rented_gpus,
        capex_usd=round(sum(line.capex_usd for line in fixed_lines), 2),
        power_kw=round(sum(line.power_kw for line in fixed_lines), 6),
        rack_units=sum((catalog.systems[line.system].rack_units or 0) * line.nodes for line in fixed_lines if line.site == "on-prem"),
        annual_cost_usd=round(sum(line.annual_cost_usd for line in lines) + sum(i.annual_cost_usd for i in infrastructure), 2),
        cost_breakdown=breakdown,
        peak_concurrent_nodes=peak_nodes,
        peak_concurrent_gpus=peak_gpus,
        infrastructure_capex_usd=round(sum(i.capex_usd for i in infrastructure), 2),
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
            # the most it carries in any period, and that period (the first of equals)
            if rps > assignments.get((bucket, key), (0.0, ""))[0]:
                assignments[(bucket, key)] = (rps, period.name)
        # a disaggregated request needs both pools: they serve what the smaller of them takes
        served = capacity["aggregated"] + min(capacity["prefill"], capacity["decode"])
        loads.append(PeriodLoad(period.name, round(demand, 6), round(served, 6)))
        if sum(gpus.values()) > sum(pool_gpus.values()):
            pool_gpus = gpus
    several = len(scenario.periods) > 1  # then each share names its period
    chosen = [_assignment(options[k], cset.candidate(k[1]), workload, rps, period if several else None)
              for k, (rps, period) in sorted(assignments.items())]  # fmt: skip
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


def _assignment(option: Option, candidate: Candidate, workload, rps: float, period: str | None = None) -> Assignment:
    """What one configuration carries of a workload's bucket: the most `rps` of any period, `period` naming it
    where the plan has several (its `why`: '12 rps of 1000/300 in working-hours on dgx-b200 ...')."""
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
        f"{rps:.4g} rps of {bucket.isl_tokens}/{bucket.osl_tokens}{f' in {period}' if period else ''} on "
        f"{candidate.system} ({candidate.pricing}) at "
        f"{option.rps_per_node:.4g} rps/node = {rps / option.rps_per_node:.2f} nodes of load "
        f"[{point}; {perf.provenance}"
        + (f"; {engine_named(candidate.engine, candidate.engine_version)}, "
           + (f"expected error ±{perf.expected_error['throughput']:.0%} throughput" if perf.error_known else
              f"expected error unknown (held-out throughput band ±{perf.expected_error['throughput']:.0%})")
           if perf.expected_error else "") + "]"
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
        speculative=candidate.speculative, engine=candidate.engine, engine_version=candidate.engine_version,
        expected_error=perf.expected_error,
        point_rps_per_instance=None if perf.point_rps_per_instance is None else round(perf.point_rps_per_instance, 6),
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
                if line.gpu == gpu and (line.role not in PER_PERIOD_ROLES or line.period == period.name)
            )  # fmt: skip
            if used > peak:
                peak, where = used, period.name
        usage.append((f"GPUs of {gpu}: {peak} of {available} used in period {where}" + (" up" if peak >= available else ""), f"gpus:{gpu}"))
    if limits.max_engine_variants is not None:
        variants = {(i.model, i.gpu, i.tp, i.precision, i.max_batch, i.engine_isl, i.engine_osl) for i in instances}
        full = len(variants) >= limits.max_engine_variants
        usage.append((f"engine variants: {len(variants)} of {limits.max_engine_variants} used" + (" up" if full else ""), None))
    return usage
