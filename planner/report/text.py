"""Human output: one screen, tables through rich (plain text when not a terminal)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from planner.metrics import LABELS, LATENCY_METRICS, percentile_label
from planner.metrics import limits as metric_limits
from planner.perf.serving import engine_named
from planner.perf.types import Layout
from planner.plan import PER_PERIOD_ROLES, SIZING_TEXT, Plan
from planner.report.formatting import CAPEX_INCL_SITE, SERVERS_CAPEX, capex_text, workload_configurations
from planner.report.simulation_text import print_repair, print_simulation, sizing_line, verdict_line  # noqa: F401 (the CLI's names)
from planner.scenario import Scenario

if TYPE_CHECKING:  # the answers' types, for the signatures: the report layer does not import the API
    from planner.answers import DeploymentResult, PeakAnswer, PerfAnswer, UsersAnswer
    from planner.landscape import CurveAnswer


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _engine(line) -> str:
    """'TP2 fp8 b50 5000/500': tensor parallelism, precision, max batch, engine max ISL/OSL (not stated by the row)."""
    parts = [f"TP{line.tp}" if line.tp else "", line.precision or "", f"b{line.max_batch}" if line.max_batch else ""]
    stated = " ".join(p for p in parts if p)
    unstated = [name for name, p in zip(("TP", "precision", "batch"), parts) if not p]
    if unstated:
        stated = (stated + " " if stated else "") + f"({'/'.join(unstated)} not stated)"
    return f"{stated} {line.engine_isl}/{line.engine_osl}"


_ORIGIN = re.compile(r"(?:^|between |and )\[([^\]]+)\]")


def _origins(workload) -> str:
    """' [my-lab]' when rows of user catalogs served the workload (their citations start with '[name]')."""
    names = sorted({name for a in workload.assignments for name in _ORIGIN.findall(a.source)})
    return escape(f" [{', '.join(names)}]") if names else ""


def _print_precisions(plan: Plan, console: Console) -> None:
    """The precision decision: per workload the precisions it runs, those it was allowed and why, and what the
    formats its default left out (fp4) would save, or why there is no figure (plans saved before it: nothing)."""
    decisions = plan.workload_precisions or {}
    if not decisions and not plan.precision_note:
        return
    console.print("[bold]Precision[/bold]")
    for name, decision in decisions.items():
        note = decision.get("note") if isinstance(decision, dict) else None
        console.print(escape(f"- {note or name}"), soft_wrap=True)
    if plan.precision_note:
        console.print(escape(f"- {plan.precision_note}"), soft_wrap=True)


def print_plan(plan: Plan, console: Console) -> None:
    console.print(f"[bold]Plan for {plan.scenario}[/bold]: {plan.status} ({plan.solver}, {plan.solve_seconds:.2f} s"
                  + (f", gap {plan.mip_gap:.2%}" if plan.status == "feasible" and plan.mip_gap is not None else "")
                  + ")")  # fmt: skip
    for warning in plan.warnings:
        console.print(f"[bold yellow]warning:[/bold yellow] {escape(warning)}")
    console.print(escape(f"Sizing: {SIZING_TEXT.get(plan.sizing, plan.sizing)}" + (f"; {plan.sizing_note}" if plan.sizing_note else "")),
                  soft_wrap=True)  # fmt: skip
    buy = Table(title="What to buy or rent", title_justify="left")
    for column in ("system", "how", "period", "nodes", "GPUs", "USD/year", "each node runs"):
        buy.add_column(column, justify="right" if column in ("nodes", "GPUs", "USD/year") else "left")
    for line in plan.lines:
        runs = line.runs or (_engine(line) if line.role != "spare" else f"idle spare ({line.cost_note or 'N+k'})")
        buy.add_row(line.system, line.role, line.period, str(line.nodes), str(line.gpus), f"{line.annual_cost_usd:,.0f}",
                    escape(runs))  # fmt: skip
    console.print(buy)
    totals = plan.totals
    nodes = totals.nodes
    console.print(
        f"Total: {nodes} node{'s' if nodes != 1 else ''} (cloud counted at its peak), {totals.gpus} GPUs, "
        f"{capex_text(totals)}, {totals.power_kw:,.1f} kW, {totals.rack_units} RU: "
        f"[bold]{plan.objective_usd_per_year:,.0f} USD/year[/bold]"
    )
    parts = [(name, value) for name, value in vars(totals.cost_breakdown).items() if value]
    if len(parts) > 1:
        console.print("  = " + " + ".join(f"{value:,.0f} {name.removesuffix('_usd').replace('_', ' ')}" for name, value in parts))
    loads = Table(title="Capacity vs demand per workload (busiest period)", title_justify="left")
    for column in ("workload", "ISL/OSL", "demand rps", "capacity rps", "at", "TTFT ms", "TPOT ms", "ITL ms", "E2E ms",
                   "provenance"):  # fmt: skip
        loads.add_column(column, justify="left" if column in ("workload", "provenance") else "right")
    for w in plan.workloads:
        configurations = workload_configurations(w)
        several = len(configurations) > 1  # the workload's row is the worst of them; a row each below it
        loads.add_row(
            w.name, f"{w.isl_tokens}/{w.osl_tokens}", f"{w.demand_rps:,.4g}", f"{w.capacity_rps:,.4g}",
            percentile_label(w.percentile) + (f", worst of {len(configurations)} configurations" if several else ""),
            *(_ms(getattr(w, m)) for m in LATENCY_METRICS), w.provenance + _origins(w),
        )
        for label, a in configurations if several else ():
            loads.add_row(escape(f"  {label}"), f"{a.bucket_isl}/{a.bucket_osl}", "", "", percentile_label(w.percentile),
                          *(_ms(getattr(a, m)) for m in LATENCY_METRICS), a.provenance)  # fmt: skip
    console.print(loads)
    if plan.robustness is not None:
        r = plan.robustness
        terms = []
        if r.perf_margin:
            terms.append(f"throughput derated {r.perf_margin:.0%}")
        if r.confidence is not None:
            terms.append(f"each modeled line at the edge of its expected-error band covering {r.confidence:.0%}")
        if r.forecasts:
            terms.append(f"demand of forecasts {', '.join(r.forecasts)} (x " +
                         ", ".join(f"{w} {f:g}" for w, f in sorted(r.demand_scales.items())) + ")")
        if r.nominal_objective_usd_per_year is None:
            console.print(f"Robust plan ({'; '.join(terms)}); the nominal scenario itself has no feasible plan")
        else:
            console.print(
                f"Robust plan ({'; '.join(terms)}): {r.cost_of_robustness_usd_per_year:+,.0f} USD/year against the nominal "
                f"plan's {r.nominal_objective_usd_per_year:,.0f}, which holds up to {r.nominal_demand_multiplier_limit:.3g} x "
                "demand / throughput"
            )
    if len(plan.periods) > 1:
        by_period = Table(title="Demand / capacity (rps) per period", title_justify="left")
        by_period.add_column("period")
        for w in plan.workloads:
            by_period.add_column(w.name, justify="right")
        for index, period in enumerate(plan.periods):
            by_period.add_row(period, *(f"{w.periods[index].demand_rps:,.4g} / {w.periods[index].capacity_rps:,.4g}" for w in plan.workloads))
        console.print(by_period)
    _print_precisions(plan, console)
    console.print("[bold]Why[/bold]")
    for w in plan.workloads:
        console.print(escape(f"- {w.name}: demand {w.demand_note}; {w.why}"), soft_wrap=True)
    for limit in plan.binding_limits:
        console.print(f"- binding: {limit}", soft_wrap=True)
    if plan.prefix_cache_note:
        console.print(escape(f"- {plan.prefix_cache_note}"), soft_wrap=True)
    stats = plan.candidates
    console.print(
        f"({stats.generated} configurations tried: {stats.pruned_memory} do not fit, {stats.pruned_latency} miss a "
        f"latency limit, {stats.pruned_dominated} dominated; {stats.kept} kept. Reasons: --json)"
    )
    if any(i.tp is None or i.precision is None for i in plan.instances):
        console.print("not stated: the benchmark source gives no TP / precision / batch for that engine")


def print_validation(scenario: Scenario, console: Console) -> None:
    console.print(f"{scenario.file}: OK - scenario '{scenario.name}', deployment {scenario.deployment}")
    for note in scenario.metrics_notes:
        console.print(f"- metrics: {note}", soft_wrap=True, markup=False)
    for w in scenario.workloads:
        limits = ", ".join(
            f"{LABELS[metric]} P{w.slo.percentile:g} <= {value:g} ms" for metric, value in metric_limits(w.slo)
        ) or f"no latency limit (percentile {w.slo.percentile:g})"
        console.print(
            f"- {w.name}: {w.model}, ISL {w.isl_tokens} / OSL {w.osl_tokens} tokens, peak {w.peak_rps:g} rps "
            f"({w.demand_note}), {w.mode}, {limits}", soft_wrap=True,
        )
    console.print("- systems: " + ", ".join(f"{o.system} ({o.pricing})" for o in scenario.offers), soft_wrap=True)
    if len(scenario.periods) > 1:
        for period in scenario.periods:
            demand = ", ".join(f"{name} {value:g}" for name, value in period.demand_rps.items())
            console.print(f"- period {period.name}: {period.hours_per_year:g} h/year, peak rps {demand}", soft_wrap=True)
    limits = scenario.limits
    given = [f"headroom {limits.headroom_fraction:g}"] + [
        f"{name} {value}" for name, value in (
            ("power_kw", limits.power_kw), ("rack_units", limits.rack_units), ("capex_usd", limits.capex_usd),
            ("max_gpus", limits.max_gpus or None), ("spares per system", limits.spare_nodes_per_system or None),
            ("spare fraction", limits.spare_fraction or None),
            ("max engine variants", limits.max_engine_variants),
        ) if value is not None
    ]  # fmt: skip
    console.print("- limits: " + ", ".join(given), soft_wrap=True)


def _latencies(point) -> str:
    """'TTFT 1.2 ms, TPOT ..., ITL ..., E2E ...' of a point."""
    return ", ".join(f"{LABELS[m]} {_ms(getattr(point, m))} ms" for m in LATENCY_METRICS)


def _layout_text(result) -> str:
    if result.tp is None:
        return "TP not stated"
    return Layout(result.tp, result.dp, result.ep, result.pp).label


def perf_miss_line(answer: PerfAnswer) -> str:
    """`planner perf` without an answer, in one line: what was asked, then why each configuration tried gives none
    ('no answer for llama-3.1-405b on H100-SXM-80GB, ISL 1000 / OSL 100, TP1: at TP1 bf16, does not fit: ...')."""
    query = answer.query
    asked = [f"{query.model} on {query.gpu}"]
    if query.isl is not None or query.osl is not None:
        asked.append(f"ISL {query.isl if query.isl is not None else 'any'} / OSL {query.osl if query.osl is not None else 'any'}")
    if query.layout is not None:
        asked.append(query.layout.label)
    elif query.tp is not None:
        asked.append(f"TP{query.tp}")
    if query.precision is not None:
        asked.append(query.precision)
    if query.concurrency is not None:
        asked.append(f"concurrency {query.concurrency}")
    if query.rate_rps is not None:
        asked.append(f"{query.rate_rps:,.4g} requests/s arriving at random")
    reasons = [_MISS_PART.sub(r"at \1, ", part.strip()) for part in (answer.miss_reason or "no reason given").split("; ")]
    return f"no answer for {', '.join(asked)}: {'; '.join(reasons)}"


_MISS_PART = re.compile(r"^((?:TP|DEP|DP)\S* (?:bf16|fp16|fp8|fp4|w4a16|w4a8|precision not stated)): ")


def print_perf(answer: PerfAnswer, gpus_per_node: int, console: Console) -> None:
    result = answer.result
    if result is None:
        console.print(escape(perf_miss_line(answer)), soft_wrap=True)
        return
    console.print(
        f"{result.model} on {result.gpu}, {_layout_text(result)}, {result.precision or 'precision not stated'}, "
        f"{engine_named(result.engine, result.engine_version)}, "
        f"ISL {result.isl} / OSL {result.osl}, "
        + (f"{answer.query.rate_rps:,.4g} requests/s arriving at random (a batch of {result.concurrency} at P99)"
           if answer.query.rate_rps is not None else f"concurrency {result.concurrency or 'not stated'}")
    )  # fmt: skip
    console.print(f"{_latencies(result)} (at {percentile_label(result.percentile) if result.statistic != 'mean' else 'the mean'}"
                  f"{'' if result.statistic in ('mean', 'median') or result.percentile is not None else ', the row states its ' + result.statistic})")
    rps_node = result.rps_per_node(gpus_per_node)
    console.print(
        f"{result.request_throughput_rps or 0:,.4g} requests/s and {result.output_tokens_per_s or 0:,.5g} output tokens/s "
        f"per instance; {result.instances_per_node(gpus_per_node)} instance(s) per {gpus_per_node}-GPU node = "
        f"{rps_node or 0:,.4g} requests/s per node"
    )
    if result.memory is not None:
        console.print(f"memory: {result.memory.reason}; max concurrency by memory {result.memory.max_concurrency_by_memory}")
    console.print(escape(f"provenance: {result.provenance} - {result.source}"), soft_wrap=True)
    if result.expected_error:
        error = result.expected_error
        bands = f"throughput ±{error['throughput']:.0%}, TTFT ±{error['ttft']:.0%}, TPOT ±{error['tpot']:.0%}"
        if result.error_known:
            console.print(f"expected error (80% of held-out errors of its class): {bands}")
        else:
            console.print(f"expected error: unknown (80% of its class's held-out errors reach {bands}: too wide to be an "
                          "answer; --confidence leaves such engines out of a plan)")  # fmt: skip
    for note in result.derivations:
        console.print(escape(f"  ({note})"), soft_wrap=True)


def print_peak(answer: PeakAnswer, console: Console) -> None:
    console.print(
        f"peak {answer.peak_rps:g} requests/s at the {answer.quantile:g} quantile of Poisson arrivals with mean "
        f"{answer.mean_rps:g} ({answer.peak_rps / answer.mean_rps - 1:+.0%} over the mean)" if answer.mean_rps > 0 else
        f"peak {answer.peak_rps:g} requests/s"
    )  # fmt: skip


def print_users(answer: UsersAnswer, console: Console) -> None:
    console.print(
        f"{answer.rps:g} requests/s x 3600 x {answer.hours_per_day:g} h = {answer.requests_per_day:,.0f} requests/day; "
        f"at {answer.requests_per_user:g} requests per person: {answer.daily_active_users:,} daily active users"
    )


_CATALOG_COLUMNS = {
    "gpus": ("id", "memory_gb", "mem_bw_tb_per_s", "tflops_by_precision", "link", "tdp_w", "aliases"),
    "systems": ("id", "kind", "gpu", "gpus_per_node", "price_usd", "usd_per_hour", "power_kw", "rack_units"),
    "models": ("id", "params_b", "layers", "hidden", "heads", "kv_heads", "head_dim", "max_context", "moe", "aliases"),
    "benchmarks": ("origin", "model", "gpu", "tp", "precision", "isl", "osl", "concurrency", "statistic", "ttft_ms",
                   "tpot_ms", "itl_ms", "request_throughput_rps", "output_tokens_per_s", "per", "table"),
    "calibration": ("architecture", "basis", "kernel_iterations", "kernel_median_error", "kernel_worst_error",
                    "engine_rows", "engine_median_error", "engine_rows_by_catalog"),
}  # fmt: skip


def _catalog_cell(column: str, value) -> str:
    if value is None or value == [] or value == ():
        return ""
    if column == "aliases":
        names = list(value)
        return ", ".join(names[:2]) + (f" (+{len(names) - 2})" if len(names) > 2 else "")
    if column == "engine_rows_by_catalog":  # {'shipped': 14, 'lab': 7}: whose rows the engine fit rests on
        return ", ".join(f"{name} {count}" for name, count in value.items())
    if column == "moe":
        shared = f" + {value['shared_experts']} shared" if value.get("shared_experts") else ""
        return f"{value['experts']} top-{value['experts_per_token']}{shared}, {value['active_params_b']:g} B active"
    return str(value)


def print_catalog(kind: str, entries: list[dict], console: Console) -> None:
    table = Table(title=f"catalog {kind}", title_justify="left")
    columns = _CATALOG_COLUMNS[kind]
    for column in columns:
        table.add_column(column)
    for entry in entries:
        table.add_row(*(escape(_catalog_cell(c, entry.get(c))) for c in columns))
    console.print(table)
    for entry in entries:  # calibration: what user catalogs' rows did to each generation's engine factors
        if entry.get("user_catalogs"):
            console.print(f"{escape(entry['architecture'])}: {escape(entry['user_catalogs']['note'])}", soft_wrap=True)
    console.print("Each entry names its source: see --json.")


def print_curve(answer: CurveAnswer, console: Console) -> None:
    q = answer.query
    how = (", requests arriving at random (open loop; batch: the running batch's P99)" if q.open_loop
           else ", a fixed concurrency (closed loop, as a benchmark runs)")  # fmt: skip
    table = Table(title=f"{q.model} on {q.gpu}, TP{q.tp} {q.precision}, ISL {q.isl} / OSL {q.osl}{how}, latencies at "
                        f"{percentile_label(answer.percentile)}", title_justify="left")  # fmt: skip
    first = "batch P99" if q.open_loop else "concurrency"
    for column in (first, "TTFT ms", "TPOT ms", "ITL ms", "E2E ms", "tok/s per GPU", "tok/s per user",
                   "rps per node", "provenance"):  # fmt: skip
        table.add_column(column, justify="left" if column == "provenance" else "right")
    points = sorted(answer.data_points + answer.modeled_points,
                    key=lambda p: (p.request_throughput_rps or 0, p.provenance) if q.open_loop else (p.concurrency or 0, p.provenance))  # fmt: skip
    for p in points:
        mark = " <- chosen" if answer.chosen is not None and p == answer.chosen else ""
        table.add_row(
            str(p.concurrency or "not stated"), *(_ms(getattr(p, m)) for m in LATENCY_METRICS),
            f"{(p.output_tokens_per_s or 0) / p.gpus_per_instance:,.0f}", f"{1000 / p.tpot_ms:,.1f}" if p.tpot_ms else "-",
            f"{p.rps_per_node(answer.gpus_per_node) or 0:,.3g}",
            p.provenance + mark,
        )
    console.print(table)
    if answer.chosen is not None:
        c = answer.chosen
        console.print(f"chosen under the limits: {first} {c.concurrency or 'not stated'} ({c.provenance}), "
                      f"{_latencies(c)}, {c.rps_per_node(answer.gpus_per_node) or 0:,.4g} rps per node")  # fmt: skip
    elif answer.miss_reason:
        console.print(f"no point meets the limits: {answer.miss_reason}", soft_wrap=True)
    if answer.landscape is not None:
        landscape = answer.landscape
        front = Table(title=f"Pareto front of {len(landscape.points)} engine points (tokens/s per GPU vs per user)",
                      title_justify="left")  # fmt: skip
        for column in ("engine", "concurrency", "tok/s per GPU", "tok/s per user", "meets limits", "provenance"):
            front.add_column(column, justify="left" if column in ("engine", "provenance") else "right")
        for p in landscape.front:
            front.add_row(p.engine, str(p.concurrency or "not stated"), f"{p.tokens_per_gpu:,.0f}",
                          f"{p.tokens_per_user:,.1f}", "yes" if p.meets_limits else "no", p.provenance)  # fmt: skip
        console.print(front)
        console.print(landscape.chosen_note, soft_wrap=True)


def print_compare(results: tuple[DeploymentResult, ...], console: Console) -> None:
    table = Table(title="On-prem vs cloud vs hybrid", title_justify="left")
    for column in ("deployment", "status", "USD/year", "USD per M output tokens", "USD per GPU-hour", "GPUs",
                   "peak nodes", f"{SERVERS_CAPEX} USD", f"{CAPEX_INCL_SITE} USD"):  # fmt: skip
        table.add_column(column, justify="left" if column in ("deployment", "status") else "right")
    for r in results:
        plan = r.plan
        if plan is None:
            table.add_row(r.deployment, r.no_plan_status, "-", "-", "-", "-", "-", "-", "-")
            continue
        per_million, per_gpu_hour = r.usd_per_million_output_tokens, r.usd_per_gpu_hour
        status = plan.status + (f" (gap {plan.mip_gap:.2%})" if plan.status == "feasible" and plan.mip_gap is not None else "")
        table.add_row(
            r.deployment, status, f"{plan.objective_usd_per_year:,.0f}",
            "-" if per_million is None else f"{per_million:,.3f}", "-" if per_gpu_hour is None else f"{per_gpu_hour:,.2f}",
            str(plan.totals.gpus), str(plan.totals.peak_concurrent_nodes), f"{plan.totals.servers_capex_usd:,.0f}",
            f"{plan.totals.capex_incl_site_usd:,.0f}",
        )
    console.print(table)
    from planner.answers import break_even

    even = break_even(results)
    if even is not None:
        console.print(even.describe() + ".", soft_wrap=True)
    for r in results:
        if r.plan is not None:
            systems = ", ".join(f"{n} x {s}" for s, n in r.plan.totals.nodes_by_system.items())
            several = len(r.plan.totals.nodes_by_system) > 1 and any(line.role in PER_PERIOD_ROLES for line in r.plan.lines)
            console.print(f"- {r.deployment}: {systems}" + (" (each system at its own peak)" if several else ""), soft_wrap=True)
        else:
            console.print(f"- {r.deployment}: " + "; ".join(r.infeasible), soft_wrap=True)
    sides: dict[str, list[str]] = {}
    for r in results:
        if r.note and r.plan is not None:
            sides.setdefault(r.note, []).append(r.deployment)
    for note, deployments in sides.items():
        console.print(f"Note ({', '.join(deployments)}): {note}.", soft_wrap=True)
    console.print("Peak nodes and GPUs: what runs at once in the busiest period. Output tokens per year use each "
                  "workload's mean rate where the scenario gives one, else its peak.")


def print_trace_analysis(answer, console: Console, block_yaml: str, written_to: str | None) -> None:
    """One screen: traffic summary, the busiest periods (or the daily profile), lengths, engine variants."""
    a = answer.analysis
    console.print(
        f"{a.path}: {a.requests:,} requests over {a.duration_s / 3600:.2f} h, mean {a.mean_rps:.4g} rps; "
        f"ISL mean {a.isl_mean:.0f}, OSL mean {a.osl_mean:.0f} tokens"
    )
    b = a.busiest
    console.print(
        f"busiest period ({a.period_s:g} s): mean {b.mean_rps:.4g} rps; busiest second at P{a.quantile * 100:g}: "
        f"{b.observed_peak_rps:g} seen, {b.poisson_peak_rps:g} by the Poisson rule"
    )
    if a.profile:
        table = Table(title="Daily profile (scenario periods)")
        for column in ("period", "hours/year", "mean rps", "demand factor"):
            table.add_column(column, justify="left" if column == "period" else "right")
        for slot in a.profile:
            table.add_row(slot.name, f"{slot.hours_per_year:g}", f"{slot.mean_rps:.4g}", f"{slot.demand_factor:.3f}")
        console.print(table)
    histogram = Table(title="Requests by ISL (rows) x OSL (columns), tokens <= bin edge")
    histogram.add_column("ISL \\ OSL", justify="right")
    for edge in a.histogram.osl_edges:
        histogram.add_column(f"{edge}", justify="right")
    for edge, row in zip(a.histogram.isl_edges, a.histogram.counts):
        histogram.add_row(f"{edge}", *(f"{c:,}" if c else "" for c in row))
    console.print(histogram)
    variants = Table(title=f"Engine variants ({len(a.variants)}): every request fits one")
    for column in ("max ISL", "max OSL", "share", "mean ISL", "mean OSL"):
        variants.add_column(column, justify="right")
    for v in a.variants:
        variants.add_row(f"{v.max_isl_tokens}", f"{v.max_osl_tokens}", f"{v.share:.1%}", f"{v.mean_isl_tokens:.0f}",
                         f"{v.mean_osl_tokens:.0f}")  # fmt: skip
    console.print(variants)
    console.print(
        f"padding waste: {a.padding_fraction:.1%} of reserved tokens "
        f"(one variant at the maxima: {a.single_variant_padding_fraction:.1%})"
    )
    if a.prefix_hit_rate is not None:
        console.print(f"prefix cache (from the trace's block hashes): {a.prefix_hit_rate:.1%} of requests find part of "
                      f"their prompt cached, {a.prefix_tokens:,} tokens on average; the block says prefix_cache")  # fmt: skip
    if answer.scaled:
        console.print(f"demand: {answer.scaled}")
    if answer.kept:
        console.print(f"kept from the base scenario's workload of that name: {', '.join(answer.kept)} (the trace gives "
                      "its lengths and demand only)")  # fmt: skip
    for note in a.notes:
        console.print(escape(f"note: {note}"))
    name = answer.block["workloads"][0]["name"]
    made = [w for w in (answer.scenario_document or answer.block)["workloads"] if isinstance(w, dict) and w.get("name") == name]
    if all(w.get("mode") != "offline" and not w.get("slo") for w in made):
        console.print("note: a trace records no latency limits, so the block has no slo: add one (slo: {ttft_ms: ..., "
                      "itl_ms: ...}), or the plan sizes this workload at maximum throughput and warns", markup=False)  # fmt: skip
    if written_to:
        console.print(f"written: {written_to}")
    else:
        console.print("\nScenario block (paste into a scenario, or use --base SCENARIO --out FILE):")
        console.print(block_yaml, markup=False, highlight=False, soft_wrap=True)


def print_ingest(result, written_to: str, console: Console) -> None:
    """The rows written, and how to plan with them."""
    table = Table(title=f"{len(result.rows)} benchmark rows -> {written_to}")
    for column in ("ISL/OSL", "concurrency", "statistic", "TTFT ms", "TPOT ms", "ITL ms", "rps", "output tok/s", "source"):
        table.add_column(column, justify="left" if column == "source" else "right")
    for row in result.rows:
        table.add_row(
            f"{row.isl}/{row.osl}", str(row.concurrency or row.run_kind), row.statistic, _ms(row.ttft_ms),
            _ms(row.tpot_ms), _ms(row.itl_ms),
            f"{row.request_throughput_rps:.4g}", f"{row.output_tokens_per_s:,.0f}" if row.output_tokens_per_s else "-",
            row.source,
        )  # fmt: skip
    console.print(table)
    for note in result.notes:
        console.print(escape(note if note.startswith("warning:") else f"note: {note}"))
    folder = Path(written_to).parent
    catalog_dir = folder.parent if folder.name == "benchmarks" else None
    if catalog_dir is not None:
        console.print(f"plan with them: planner plan SCENARIO --catalog {catalog_dir}")
    else:
        console.print("the planner reads rows from <catalog>/benchmarks/*.csv: move the file there, then "
                      "planner plan SCENARIO --catalog <catalog>")  # fmt: skip


def print_sensitivity(result, console: Console) -> None:
    """One grid per latency scale: rows throughput scale, columns demand scale; each cell says whether the
    nominal plan holds and what a plan made for that point costs."""
    console.print(
        f"Nominal plan for {result.scenario}: {result.nominal_nodes} nodes, {result.nominal_objective_usd_per_year:,.0f} "
        f"USD/year. It serves up to {result.demand_multiplier_limit:.3g} x the demand at nominal throughput"
        f"{result.headroom_note}: it holds where demand scale / throughput scale <= that."
    )
    for latency in sorted({p.latency_scale for p in result.points}, reverse=True):
        points = [p for p in result.points if p.latency_scale == latency]
        demands = sorted({p.demand_scale for p in points})
        table = Table(title=f"latency limits x {latency:g}: nominal plan holds? / cost of a plan for the point (USD/year)")
        table.add_column("throughput x", justify="right")
        for d in demands:
            table.add_column(f"demand x {d:g}", justify="right")
        for t in sorted({p.throughput_scale for p in points}, reverse=True):
            cells = []
            for d in demands:
                p = next(q for q in points if q.throughput_scale == t and q.demand_scale == d)
                cost = f"{p.plan_objective_usd_per_year:,.0f}" if p.plan_objective_usd_per_year is not None else p.plan_status
                cells.append(("ok" if p.nominal_holds else "[bold red]breaks[/bold red]") + f" / {cost}")
            table.add_row(f"{t:g}", *cells)
        console.print(table)
    broken = [p for p in result.points if not p.nominal_holds and p.nominal_reason]
    if broken:
        console.print(escape(f"first break: throughput x {broken[0].throughput_scale:g}, demand x {broken[0].demand_scale:g}, "
                             f"latency x {broken[0].latency_scale:g}: {broken[0].nominal_reason}"), soft_wrap=True)


def print_sweep(result, console: Console, written_to: str | None) -> None:
    """Counts by status, the cheapest points, and the Pareto front."""
    records = list(result.records)
    statuses: dict[str, int] = {}
    for r in records:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    console.print(f"{len(records)} points: " + ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())))
    fields = list(result.sweep.points[0])
    shown = result.front or sorted((r for r in records if r.get("objective_usd_per_year") is not None),
                                   key=lambda r: r["objective_usd_per_year"])[:10]  # fmt: skip
    table = Table(title="Pareto front" if result.front else "Cheapest points")
    for column in ("point", *fields, "status", "USD/year", "nodes", "GPUs"):
        table.add_column(column, justify="right")
    for r in shown:
        table.add_row(str(r["point"]), *(f"{r[f]:.4g}" if isinstance(r[f], float) else str(r[f]) for f in fields),
                      r["status"], f"{r['objective_usd_per_year']:,.0f}", str(r["nodes"]), str(r["gpus"]))  # fmt: skip
    console.print(table)
    if written_to:
        console.print(f"all points: {written_to}")
