"""The report's sections: typed text, tables and figures, one function per section (the decision first, then
the comparison, latencies at the SLO's percentile, the verdict, sensitivity, precision, assumptions, the plan)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
from matplotlib.figure import Figure

from planner.answers import DecisionInputs, PlannedScenario, output_tokens_per_year
from planner.landscape import main_assignment
from planner.plan import SIZING_TEXT
from planner.metrics import LABELS, LATENCY_METRICS, percentile_label
from planner.metrics import limits as metric_limits
from planner.perf.engines import ENGINE_NAMES
from planner.report import plots
from planner.report.bom import build_bom
from planner.report.formatting import CAPEX_INCL_SITE, SERVERS_CAPEX, capex_text
from planner.simulate.wording import interval_text

SERVERS_CAPEX_HEADER = f"{SERVERS_CAPEX[:1].upper()}{SERVERS_CAPEX[1:]} (USD)"  # 'Servers capex (USD)'
CAPEX_INCL_SITE_HEADER = f"{CAPEX_INCL_SITE[:1].upper()}{CAPEX_INCL_SITE[1:]} (USD)"  # 'Capex incl. site (USD)'

SEED_REQUESTS_PER_USER = 3  # seed 001, case C2: "3 requests per person"


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[pd.DataFrame] = field(default_factory=list)
    figures: list[tuple[str, Figure, str]] = field(default_factory=list)  # (file name, figure, caption)


@dataclass
class Report:
    title: str
    sections: list[Section]

    def figures(self) -> list[tuple[str, Figure, str]]:
        return [f for s in self.sections for f in s.figures]


def _ms(value) -> str:
    return "-" if value is None else f"{value:,.1f}"


def requirements_section(planned: PlannedScenario) -> Section:
    rows = []
    for w in planned.scenario.workloads:
        slo = w.slo
        limits = ", ".join(f"{LABELS[m]} P{slo.percentile:g} <= {v:g} ms" for m, v in metric_limits(slo)) or "none"
        lengths = "; ".join(f"{b.isl_tokens}/{b.osl_tokens} ({b.share:.0%})" for b in w.buckets)
        rows.append({"Workload": w.name, "Model": w.model, "ISL/OSL tokens (share)": lengths, "Mode": w.mode,
                     "Peak requests/s": f"{w.peak_rps:g}", "Demand": w.demand_note, "Latency limits": limits})  # fmt: skip
    periods = pd.DataFrame([
        {"Period": p.name, "Hours/year": f"{p.hours_per_year:g}", **{f"{w} (requests/s)": f"{v:g}" for w, v in p.demand_rps.items()}}
        for p in planned.scenario.periods
    ])  # fmt: skip
    return Section(
        "Requirements as read",
        [f"Scenario `{planned.scenario.file}`: deployment {planned.scenario.deployment}; words are converted at "
         f"{planned.scenario.words_per_token:g} words per token. Peak requests/s to size for, per period:"],
        [pd.DataFrame(rows), periods],
    )  # fmt: skip


def plan_section(planned: PlannedScenario) -> Section:
    plan = planned.plan
    bom = build_bom(plan, planned.scenario, planned.catalog)
    frame = bom.frame()[["item", "how", "period", "gpu", "count", "gpus", "runs", "unit_price_usd", "unit",
                         "extended_price_usd", "annual_cost_usd", "power_kw", "rack_units"]]  # fmt: skip
    breakdown = ", ".join(
        f"{name.removesuffix('_usd').replace('_', ' ')} {value:,.0f}" for name, value in vars(plan.totals.cost_breakdown).items() if value
    )
    gap = f", gap {plan.mip_gap:.2%} at the time limit" if plan.status == "feasible" and plan.mip_gap is not None else ""
    paragraphs = [
        f"Status **{plan.status}** ({plan.solver}{gap}). Annual cost **{plan.objective_usd_per_year:,.0f} USD** "
        f"({breakdown}); {capex_text(plan.totals)}, {plan.totals.power_kw:,.1f} kW, "
        f"{plan.totals.rack_units} rack units, {plan.totals.gpus} GPUs.",
        "Why this plan: " + (" ".join(f"**{w.name}**: {w.why}." for w in plan.workloads)),
    ]
    if plan.binding_limits:
        paragraphs.append("Binding limits: " + "; ".join(plan.binding_limits) + ".")
    if plan.prefix_cache_note:
        paragraphs.append(plan.prefix_cache_note[0].upper() + plan.prefix_cache_note[1:] + ".")
    sizing = getattr(plan, "sizing", "random-arrivals")  # plans saved before sizing was named: the default's
    paragraphs.append("Sizing: " + SIZING_TEXT.get(sizing, sizing) + (f"; {plan.sizing_note}" if getattr(plan, "sizing_note", "") else "") + ".")
    stats = plan.candidates
    paragraphs.append(
        f"{stats.generated} configurations tried: {stats.pruned_memory} do not fit in memory, {stats.pruned_latency} "
        f"miss a latency limit, {stats.pruned_dominated} are dominated by another; {stats.kept} kept."
    )
    return Section("The plan", paragraphs, [frame])


def operating_points_section(planned: PlannedScenario) -> Section:
    rows = []
    for w in planned.plan.workloads:
        for a in w.assignments:
            rows.append({
                "Workload": w.name, "Bucket ISL/OSL": f"{a.bucket_isl}/{a.bucket_osl}", "System": a.system,
                "How paid": a.pricing, "TP": a.tp or "not stated", "Precision": a.precision or "not stated",
                "Concurrency": a.concurrency or "not stated",
                "At": f"P{w.percentile:g}",
                **{f"{LABELS[m]} (ms)": _ms(getattr(a, m)) for m in LATENCY_METRICS},
                "Requests/s per node": f"{a.rps_per_node:,.4g}", "Provenance": a.provenance,
            })  # fmt: skip
    return Section(
        "Operating points",
        ["Each row: the point chosen on the latency-throughput curve of the configuration serving the bucket "
         "(measured rows first, interpolation, then the calibrated roofline: see provenance)."],
        [pd.DataFrame(rows)],
    )  # fmt: skip


def economics_section(planned: PlannedScenario) -> Section:
    plan, scenario = planned.plan, planned.scenario
    tokens = output_tokens_per_year(scenario)
    requests = sum(p.traffic_rps[w.name] * 3600 * p.hours_per_year for p in scenario.periods for w in scenario.workloads)
    rows = []
    for w in scenario.workloads:
        per_year = sum(p.traffic_rps[w.name] * 3600 * p.hours_per_year for p in scenario.periods)
        per_user = w.requests_per_user or SEED_REQUESTS_PER_USER
        rows.append({"Workload": w.name, "Requests/day": f"{per_year / 365:,.0f}", "Requests per person": f"{per_user:g}",
                     "Daily active users": f"{per_year / 365 / per_user:,.0f}"})  # fmt: skip
    paragraphs = [
        f"Output tokens per year: {tokens:,.0f}; requests per year: {requests:,.0f} (each workload's mean rate where "
        "the scenario gives one, else its peak: an upper bound on traffic).",
        f"Cost per million output tokens: **{plan.objective_usd_per_year / (tokens / 1e6):,.3f} USD**; cost per request: "
        f"**{plan.objective_usd_per_year / requests:,.5f} USD**." if tokens and requests else "No traffic.",
        f"Daily active users: requests per day / requests per person (the scenario's, else the seed's "
        f"{SEED_REQUESTS_PER_USER}).",
    ]
    return Section("Economics", paragraphs, [pd.DataFrame(rows)])


# ---- the decision: what to buy or rent, what drives it, how it compares, whether it holds ----------------------

HOURS_PER_YEAR = 8760
VERBS = {"bought": "buy", "spare": "buy as spares", "reserved": "reserve all year"}
PER_PERIOD_VERBS = {"on-demand": "rent on demand", "spot": "rent as spot"}


def _usd_per_gpu_hour(plan, scenario) -> float | None:
    """Annual cost / the GPU-hours it pays for (bought and reserved GPUs all year, rented ones for their period's
    hours: planner.api.gpu_hours_per_year, as `planner compare` counts them)."""
    from planner.answers import gpu_hours_per_year

    hours = gpu_hours_per_year(plan, scenario)
    return plan.objective_usd_per_year / hours if hours else None


def _engine_words(item) -> str:
    """'TP2 fp4 TensorRT-LLM b512 1000/300' of an assignment: layout, precision, serving engine, batch cap, engine
    lengths, and its pool where disaggregated."""
    layout = item.layout or (f"TP{item.tp}" if item.tp else "TP not stated")
    parts = [layout, item.precision or "precision not stated",
             ENGINE_NAMES.get(item.engine, item.engine), f"b{item.max_batch}" if item.max_batch else "",
             f"{item.engine_isl}/{item.engine_osl}", "" if item.stage == "aggregated" else f"{item.stage} pool",
             "speculative" if item.speculative else ""]  # fmt: skip
    return " ".join(part for part in parts if part)


def _gpu_load(plan) -> dict[str, tuple[str, float]]:
    """Per workload: its busiest period and the GPUs' worth of engine time its routes take there (requests/s /
    requests/s per instance x GPUs per instance)."""
    from planner.plan import configuration_key

    per_instance = {configuration_key(a): a.gpus_per_instance for a in plan.instances}
    load: dict[tuple[str, str], float] = {}
    for route in plan.routing:
        if route.rps <= 0 or not route.rps_per_instance:
            continue
        gpus = per_instance.get(configuration_key(route)) or route.tp or 1
        key = (route.workload, route.period)
        load[key] = load.get(key, 0.0) + route.rps / route.rps_per_instance * gpus
    out: dict[str, tuple[str, float]] = {}
    for (workload, period), value in load.items():
        if value > out.get(workload, ("", -1.0))[1]:
            out[workload] = (period, value)
    return out


def _overall_verdict(verification: dict | None) -> tuple[str, str]:
    """(verdict, one line for people) of a simulation document; ('', why) where there is none to read."""
    if verification is None:
        return "", "not simulated: run with --verify"
    items = [i for i in verification.get("workloads") or [] if isinstance(i, dict)]
    verdict = str(verification.get("verdict") or "")
    named = lambda v: ", ".join(f"{i.get('workload')} ({i.get('period')})" for i in items if i.get("verdict") == v)  # noqa: E731
    if verdict == "misses":
        return verdict, f"a limit is conclusively MISSED by {named('misses')}: the simulated percentile's interval lies above it"
    if verdict == "inconclusive":
        return verdict, (f"inconclusive: no conclusive miss, but {named('inconclusive')} could not be decided (an "
                         "interval straddles its limit)")  # fmt: skip
    if verdict == "holds":
        return verdict, "holds: every simulated limit holds (the estimate and its interval's upper end within it)"
    return verdict, "nothing could be simulated"


def decision_section(planned: PlannedScenario, inputs: DecisionInputs) -> Section:
    """What to buy or rent, the annual cost, and what drives it, from the plan's own fields."""
    plan, scenario, catalog = planned.plan, planned.scenario, planned.catalog
    bom = build_bom(plan, scenario, catalog)
    hours = {p.name: p.hours_per_year for p in scenario.periods}
    actions, others = [], []
    for line in bom.lines:
        if line.item not in catalog.systems:  # infrastructure, support, software: the BOM table lists them
            others.append(line.item)
            continue
        verb = VERBS.get(line.how) or (f"{PER_PERIOD_VERBS[line.how]} in {line.period} ({hours.get(line.period, 0):,.0f} h/year)"
                                       if line.how in PER_PERIOD_VERBS else line.how)  # fmt: skip
        actions.append(f"{verb} {line.count} x {line.description} (`{line.item}`, {line.gpus} x {line.gpu})")
    per_gpu_hour = _usd_per_gpu_hour(plan, planned.scenario)
    gap = f", gap {plan.mip_gap:.2%}" if plan.status == "feasible" and plan.mip_gap is not None else ""
    decision = f"**Decision: {'; '.join(actions) or 'nothing to buy or rent'}.**"
    if others:
        items = ", ".join(dict.fromkeys(others))
        decision += f" With them, {len(others)} other item{'s' if len(others) != 1 else ''} of the bill of materials ({items}: see The plan)."
    decision += f" Annual cost **{plan.objective_usd_per_year:,.0f} USD/year**"
    if per_gpu_hour is not None:
        decision += f" ({per_gpu_hour:,.2f} USD per GPU-hour paid for: owned all year, rented for its hours)"
    decision += (f"; {capex_text(plan.totals)}; {plan.totals.power_kw:,.1f} kW. Plan {plan.status} "
                 f"({plan.solver}{gap}).")  # fmt: skip
    paragraphs = [decision]
    limits = {w.name: w.slo for w in scenario.workloads}
    drivers = []
    for w in plan.workloads:
        main = main_assignment(plan, w.name)
        busiest = max(w.periods, key=lambda p: p.demand_rps, default=None)
        where = f" in {busiest.period}" if busiest is not None and len(w.periods) > 1 else ""
        text = f"**{w.name}**: {w.demand_rps:,.4g} requests/s at its peak{where}"
        if main is not None:
            text += (f", served mostly by {w.model} {_engine_words(main)} on `{main.system}` ({main.pricing}) at "
                     f"{main.rps_per_node:,.4g} requests/s per node")  # fmt: skip
            tightest = _tightest(main, limits[w.name]) if w.name in limits else None
            if tightest is not None:
                metric, value, limit = tightest
                text += (f"; its tightest latency is {LABELS[metric]} at {percentile_label(w.percentile)}: "
                         f"{value:,.1f} ms of its {limit:g} ms limit ({value / limit:.0%})")  # fmt: skip
        drivers.append(text)
    paragraphs.append("What drives it. " + "; ".join(drivers) + ".")
    load = _gpu_load(plan)
    if load:
        name, (period, gpus) = max(load.items(), key=lambda item: item[1][1])
        running = sum(a.gpus for a in plan.instances if a.period == period)
        of = f" of the {running} GPUs running then" if running else ""
        paragraphs.append(f"The busiest workload is **{name}**: in {period} its requests keep {gpus:,.1f} GPUs' worth of "
                          f"engines busy{of} (requests/s / requests/s per instance x GPUs per instance).")  # fmt: skip
    given = [name for name, value in (("power", scenario.limits.power_kw), ("rack units", scenario.limits.rack_units),
                                      ("capex", scenario.limits.capex_usd), ("GPUs", scenario.limits.max_gpus or None))
             if value is not None]  # fmt: skip
    if plan.binding_limits:
        paragraphs.append("Binding limits (budgets that cost money): " + "; ".join(plan.binding_limits) + ".")
    elif given:
        paragraphs.append(f"No budget binds: the scenario's {', '.join(given)} limits leave the cheapest fleet as it is.")
    else:
        paragraphs.append("No budget binds: the scenario sets no power, rack-unit, capex or GPU limit; the cost follows "
                          "the demand and the latency limits.")  # fmt: skip
    stats = plan.candidates
    systems = ", ".join(f"{count} x `{system}`" for system, count in plan.totals.nodes_by_system.items())
    why = (f"Why {systems or 'this fleet'}: of {stats.generated} engine configurations tried on the systems the "
           f"scenario allows ({', '.join(sorted({o.system for o in scenario.offers}))}), {stats.pruned_memory} do not "
           f"fit in memory, {stats.pruned_latency} miss a latency limit and {stats.pruned_dominated} are dominated by a "
           f"cheaper one; of the {stats.kept} kept, the solver picked the cheapest mix that serves every period.")  # fmt: skip
    paragraphs.append(why)
    if inputs.comparison:
        others = []
        for r in inputs.comparison:
            if r.plan is None or r.deployment == plan.deployment:
                continue
            delta = r.plan.objective_usd_per_year / plan.objective_usd_per_year - 1 if plan.objective_usd_per_year else 0.0
            others.append(f"{r.deployment} alone {r.plan.objective_usd_per_year:,.0f} USD/year ({delta:+.0%})")
        if others:
            paragraphs.append(f"Against the alternatives (this plan is {plan.deployment}): " + "; ".join(others) + ".")
    _, verdict = _overall_verdict(inputs.verification)
    paragraphs.append(f"Simulation: {verdict}.")
    note = getattr(plan, "precision_note", "") or ""
    if note:
        paragraphs.append(f"Precision: {note}.")
    if plan.warnings:
        paragraphs.append("Before trusting the plan: " + "; ".join(plan.warnings) + ".")
    return Section("Decision summary", paragraphs)


def comparison_section(planned: PlannedScenario, inputs: DecisionInputs) -> Section:
    """On-prem, cloud and hybrid side by side (`planner compare`), or why there is no table."""
    sites = {offer.site for offer in planned.scenario.offers}
    title = "On-prem, cloud and hybrid"
    if inputs.comparison is None:
        note = inputs.comparison_note or (
            f"The scenario has one site ({', '.join(sorted(sites))}): there is nothing to set side by side."
            if len(sites) < 2 else f"Not compared here: `planner compare {planned.scenario.file}` plans each side.")  # fmt: skip
        return Section(title, [note])
    rows = []
    for r in inputs.comparison:
        plan = r.plan
        if plan is None:
            rows.append({"Deployment": r.deployment, "Status": r.no_plan_status, "Annual cost (USD/year)": "",
                         "USD per GPU-hour": "", "GPUs": "", "Nodes": "", SERVERS_CAPEX_HEADER: "", CAPEX_INCL_SITE_HEADER: "",
                         "USD per million output tokens": "", "Systems": "",
                         "Note": "; ".join(r.infeasible) or r.note})  # fmt: skip
            continue
        per_gpu_hour = r.usd_per_gpu_hour
        per_million = r.usd_per_million_output_tokens
        rows.append({
            "Deployment": r.deployment, "Status": plan.status, "Annual cost (USD/year)": f"{plan.objective_usd_per_year:,.0f}",
            "USD per GPU-hour": "" if per_gpu_hour is None else f"{per_gpu_hour:,.2f}", "GPUs": f"{plan.totals.gpus:,}",
            "Nodes": f"{plan.totals.nodes:,}",
            SERVERS_CAPEX_HEADER: f"{plan.totals.servers_capex_usd:,.0f}",
            CAPEX_INCL_SITE_HEADER: f"{plan.totals.capex_incl_site_usd:,.0f}",
            "USD per million output tokens": "" if per_million is None else f"{per_million:,.3f}",
            "Systems": ", ".join(f"{n} x {s}" for s, n in plan.totals.nodes_by_system.items()), "Note": r.note,
        })  # fmt: skip
    paragraphs = [
        "Each deployment planned on its own sites (`planner compare`): annual cost, USD per GPU-hour (annual cost / "
        "the GPU-hours it pays for: owned GPUs all year, rented ones for their period's hours), GPUs, nodes (cloud "
        "ones at their peak), servers capex and capex incl. site (with the site's racks, PDUs, networks, storage and installation), and status; a side that could not be planned "
        "says why."
    ]  # fmt: skip
    from planner.answers import break_even

    even = break_even(inputs.comparison)
    if even is not None:
        paragraphs.append(even.describe() + ".")
    return Section(title, paragraphs, [pd.DataFrame(rows)])


def _periods_of(plan, workload: str, assignment) -> list[tuple[str, float]]:
    """(period, requests/s) where the assignment's configuration serves the workload's bucket."""
    from planner.plan import route_matches

    served: dict[str, float] = {}
    for route in plan.routing:
        if route.workload == workload and route.rps > 0 and route_matches(assignment, route):
            served[route.period] = served.get(route.period, 0.0) + route.rps
    return [(p, served[p]) for p in plan.periods if p in served]


def latency_section(planned: PlannedScenario) -> Section:
    """Every engine configuration serving a workload (requests/s > 0): its latencies at the workload's percentile
    next to the limits, met or missed; then demand vs capacity per workload and period with the engines behind it."""
    plan, scenario = planned.plan, planned.scenario
    slos = {w.name: w.slo for w in scenario.workloads}
    percentiles = {w.percentile for w in plan.workloads}
    uniform = len(percentiles) == 1
    at = percentile_label(next(iter(percentiles))) if uniform else ""
    rows = []
    for w in plan.workloads:
        limits = dict(metric_limits(slos[w.name])) if w.name in slos else {}
        for a in w.assignments:
            if a.rps <= 0:
                continue
            row = {"Workload": w.name, "Engine": f"{w.model} {_engine_words(a)}", "System": a.system, "How paid": a.pricing,
                   "Bucket ISL/OSL": f"{a.bucket_isl}/{a.bucket_osl}",
                   "Periods (requests/s)": "; ".join(f"{p} {rps:,.4g}" for p, rps in _periods_of(plan, w.name, a))
                   or f"{a.rps:,.4g}"}  # fmt: skip
            if not uniform:
                row["At"] = percentile_label(w.percentile)
            missed, unstated = [], []
            for metric in LATENCY_METRICS:
                value, limit = getattr(a, metric), limits.get(metric)
                suffix = f" at {at}" if uniform else ""
                row[f"{LABELS[metric]}{suffix} (ms)"] = _ms(value) if value is not None else "not stated"
                row[f"{LABELS[metric]} limit (ms)"] = f"{limit:,g}" if limit is not None else ""
                if limit is not None and value is None:
                    unstated.append(LABELS[metric])
                elif limit is not None and value > limit * (1 + 1e-9):
                    missed.append(f"{LABELS[metric]} {value:,.1f} > {limit:g}")
            row["Within the limits"] = ("MISSED: " + ", ".join(missed) if missed
                                        else f"not stated by the row: {', '.join(unstated)}" if unstated
                                        else "met" if limits else "no limit set")  # fmt: skip
            rows.append(row)
    frame = pd.DataFrame(rows)
    if not frame.empty:  # a limit column no workload sets is left out
        frame = frame[[c for c in frame.columns if not (c.endswith("limit (ms)") and not any(frame[c]))]]
    capacity = plots.capacity_by_workload(plan)
    loads = []
    for w in plan.workloads:
        for index, period in enumerate(plan.periods):
            load = w.periods[index] if index < len(w.periods) else None
            if load is None:
                continue
            parts = capacity.get((w.name, period), {})
            loads.append({
                "Workload": w.name, "Period": period, "Demand (requests/s)": f"{load.demand_rps:,.4g}",
                "Capacity (requests/s)": f"{load.capacity_rps:,.4g}",
                "Utilization": f"{load.demand_rps / load.capacity_rps:.0%}" if load.capacity_rps else "",
                "Served by (requests/s of capacity)": "; ".join(f"{label} {value:,.4g}" for label, value in parts.items()),
            })  # fmt: skip
    paragraphs = [
        "One row per engine configuration that serves a workload: its latencies at the operating point, at the "
        f"workload's percentile{f' ({at})' if uniform else ''}, next to the workload's limits. Several engines "
        "serving one workload each have their row. Then demand vs capacity per workload and period (capacity never "
        "added across workloads; a disaggregated workload's prefill and decode pools counted once)."
    ]  # fmt: skip
    return Section("Latency against the limits, per engine", paragraphs, [frame, pd.DataFrame(loads)])


def verdict_section(inputs: DecisionInputs) -> Section:
    """The simulator's verdict per workload and period: the simulated percentile against each limit."""
    title = "Simulation verdict"
    verification = inputs.verification
    if verification is None:
        return Section(title, ["Not simulated: run with --verify (the plan's fleet under random arrivals at each "
                               "period's peak; each limit holds, misses or is inconclusive)."])  # fmt: skip
    rows = []
    try:
        for item in verification.get("workloads") or []:
            checks = item.get("checks") or []
            base = {"Workload": str(item.get("workload", "")), "Period": str(item.get("period", "")),
                    "Requests/s": f"{float(item.get('rate_rps') or 0):,.4g}"}  # fmt: skip
            if not checks:
                rows.append({**base, "Limit": "", "Simulated (ms)": "", "95% interval (ms)": "", "Limit (ms)": "",
                             "Verdict": str(item.get("verdict", "")), "Note": str(item.get("note", ""))})  # fmt: skip
            for index, check in enumerate(checks):
                low, high = check.get("ci_low_ms"), check.get("ci_high_ms")
                rows.append({
                    **base, "Limit": f"{check.get('metric')} at P{float(check.get('percentile')):g}",
                    "Simulated (ms)": _ms(check.get("simulated_ms")),
                    "95% interval (ms)": interval_text(low, high, _ms, " to "),
                    "Limit (ms)": f"{float(check.get('limit_ms')):,g}", "Verdict": str(check.get("verdict", "")),
                    "Note": "" if index else "; ".join(str(n) for n in (item.get("note"), item.get("seeds_note")) if n),
                })  # fmt: skip
    except (AttributeError, TypeError, ValueError) as error:
        return Section(title, [f"The verification given ({inputs.verification_source}) could not be read: {error}."])
    _, line = _overall_verdict(verification)
    paragraphs = [f"Verdict: **{line}**.", f"Source: {inputs.verification_source}." if inputs.verification_source else ""]
    return Section(title, [p for p in paragraphs if p], [pd.DataFrame(rows)])


def sensitivity_section(inputs: DecisionInputs) -> Section:
    """The nominal plan over demand x throughput scales: whether it holds, and what a plan for each point costs."""
    title = "Sensitivity to demand and throughput"
    result = inputs.sensitivity
    if result is None:
        return Section(title, [(inputs.sensitivity_note or "Not computed: run with --sensitivity") + "."])
    demands = sorted({p.demand_scale for p in result.points})
    rows = []
    for throughput in sorted({p.throughput_scale for p in result.points}, reverse=True):
        row = {"Throughput scale": f"x {throughput:g}"}
        for demand in demands:
            point = next(p for p in result.points if p.throughput_scale == throughput and p.demand_scale == demand)
            cost = (f"{point.plan_objective_usd_per_year:,.0f}" if point.plan_objective_usd_per_year is not None
                    else point.plan_status)  # fmt: skip
            row[f"demand x {demand:g}"] = f"{'holds' if point.nominal_holds else 'BREAKS'} / {cost}"
        rows.append(row)
    paragraphs = [
        f"The nominal plan (planned anew from the scenario: {result.nominal_objective_usd_per_year:,.0f} USD/year, "
        f"{result.nominal_nodes} nodes) serves up to **{result.demand_multiplier_limit:.3g} x** the demand at the "
        f"throughput the plan assumes{result.headroom_note}: it holds where demand scale / throughput scale stays within that. Each cell: "
        "whether the nominal plan holds / what a plan made for that point costs (USD/year)."
    ]  # fmt: skip
    return Section(title, paragraphs, [pd.DataFrame(rows)])


def precision_section(planned: PlannedScenario) -> Section | None:
    """PRECISION DECISION: what the plan's choice of precision (fp4 / fp8 / bf16) is worth, from
    `Plan.precision_note` and `Plan.precision_saving_usd_per_year` (fields a plan may not carry yet: read with
    defaults). None while the plan says nothing about it."""
    plan = planned.plan
    note = getattr(plan, "precision_note", "") or ""
    saving = getattr(plan, "precision_saving_usd_per_year", None)
    if not note and saving is None:
        return None
    paragraphs = []
    if note:
        paragraphs.append(note[:1].upper() + note[1:] + ("" if note.endswith(".") else "."))
    if saving is not None:
        paragraphs.append(f"What the precision choice saves: **{saving:,.0f} USD/year** against the plan made without it.")
    return Section("Precision decision", paragraphs)


def assumptions_section(planned: PlannedScenario) -> Section:
    """The figures the cost rests on, each with its source: the BOM's Assumptions table (planner.report.bom)."""
    from dataclasses import asdict

    assumptions = build_bom(planned.plan, planned.scenario, planned.catalog).assumptions
    frame = pd.DataFrame([asdict(a) for a in assumptions])
    if not frame.empty:
        frame = frame.astype({"value": object})
    return Section(
        "Assumptions and their sources",
        ["Hours per period, every price and its source, amortization, energy price ($/kWh), PUE, power factor, "
         "maintenance, space and headroom, as the bill of materials states them (`planner bom --format xlsx`: "
         "the Assumptions sheet), with whether each is the scenario's figure or a catalog default (cited, estimate, "
         "or placeholder: get a quote)."],
        [frame],
    )  # fmt: skip


def _tightest(assignment, slo) -> tuple[str, float, float] | None:
    """(metric, value, limit) of the latency closest to its limit at the operating point (largest value / limit);
    None where the point states none of the limited latencies."""
    ratios = [(getattr(assignment, m) / v, m, getattr(assignment, m), v) for m, v in metric_limits(slo)
              if getattr(assignment, m) is not None and v]  # fmt: skip
    return max(ratios)[1:] if ratios else None


def binding_metric(assignment, slo) -> tuple[str, str]:
    """The curve's y axis: the latency whose limit is tightest at the plan's operating point (the largest value /
    limit), e.g. ITL where ITL binds, and the words that say so; TTFT (or the one limited metric) where the point
    states none of its limited latencies."""
    at = percentile_label(slo.percentile)
    tightest = _tightest(assignment, slo)
    if tightest is not None:
        metric, value, limit = tightest
        words = (f"{LABELS[metric]} at {at} shown: the binding limit ({value:,.1f} ms at the operating point, "
                 f"{value / limit:.0%} of its {limit:g} ms limit)")  # fmt: skip
        return metric.removesuffix("_ms"), words
    names = [m for m, _ in metric_limits(slo)]
    metric = "ttft_ms" if "ttft_ms" in names or not names else names[0]
    why = "the operating point states none of its limited latencies" if names else "the workload sets no latency limit"
    return metric.removesuffix("_ms"), f"{LABELS[metric]} at {at} shown ({why})"
