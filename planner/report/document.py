"""The plan report: Markdown and self-contained HTML with PNG plots, for procurement, finance and reviews.

`build_report(planned)` gathers the content (typed sections of text, tables and figures); `write_report` writes
report.md, report.html (images embedded) and the PNGs into a folder.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from planner.api import PlannedScenario, curve_in_catalog, output_tokens_per_year
from planner.perf import PerfQuery
from planner.report import plots
from planner.report.bom import build_bom, markdown_table
from planner.report.files import prepare_report_folder, slug, write_bytes_atomic, write_text_atomic

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
        limits = ", ".join(f"{n} <= {v:g} ms" for n, v in (("TTFT", slo.ttft_ms), ("ITL", slo.itl_ms), ("E2E", slo.e2e_ms)) if v) or "none"
        lengths = "; ".join(f"{b.isl_tokens}/{b.osl_tokens} ({b.share:.0%})" for b in w.buckets)
        rows.append({"workload": w.name, "model": w.model, "ISL/OSL tokens (share)": lengths, "mode": w.mode,
                     "peak rps": f"{w.peak_rps:g}", "demand": w.demand_note, "latency limits": limits})  # fmt: skip
    periods = pd.DataFrame([
        {"period": p.name, "hours/year": f"{p.hours_per_year:g}", **{w: f"{v:g}" for w, v in p.demand_rps.items()}}
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
        f"({breakdown}); capex {plan.totals.capex_usd:,.0f} USD, {plan.totals.power_kw:,.1f} kW, "
        f"{plan.totals.rack_units} rack units, {plan.totals.gpus} GPUs.",
        "Why this plan: " + (" ".join(f"**{w.name}**: {w.why}." for w in plan.workloads)),
    ]
    if plan.binding_limits:
        paragraphs.append("Binding limits: " + "; ".join(plan.binding_limits) + ".")
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
                "workload": w.name, "bucket ISL/OSL": f"{a.bucket_isl}/{a.bucket_osl}", "system": a.system, "how": a.pricing,
                "TP": a.tp or "n/s", "precision": a.precision or "n/s", "concurrency": a.concurrency or "n/s",
                "TTFT ms": _ms(a.ttft_ms), "ITL ms": _ms(a.itl_ms), "E2E ms": _ms(a.e2e_ms),
                "rps/node": f"{a.rps_per_node:,.4g}", "provenance": a.provenance,
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
        rows.append({"workload": w.name, "requests/day": f"{per_year / 365:,.0f}", "requests per person": f"{per_user:g}",
                     "daily active users": f"{per_year / 365 / per_user:,.0f}"})  # fmt: skip
    paragraphs = [
        f"Output tokens per year: {tokens:,.0f}; requests per year: {requests:,.0f} (each workload's mean rate where "
        "the scenario gives one, else its peak: an upper bound on traffic).",
        f"Cost per million output tokens: **{plan.objective_usd_per_year / (tokens / 1e6):,.3f} USD**; cost per request: "
        f"**{plan.objective_usd_per_year / requests:,.5f} USD**." if tokens and requests else "No traffic.",
        f"Daily active users: requests per day / requests per person (the scenario's, else the seed's "
        f"{SEED_REQUESTS_PER_USER}).",
    ]
    return Section("Economics", paragraphs, [pd.DataFrame(rows)])


def plots_section(planned: PlannedScenario) -> Section:
    plan, scenario, catalog = planned.plan, planned.scenario, planned.catalog
    section = Section("Plots")
    workloads = {w.name: w for w in scenario.workloads}
    for w in plan.workloads:
        if not w.assignments:
            continue
        main = max(w.assignments, key=lambda a: a.rps)
        slo = workloads[w.name].slo
        query = PerfQuery(w.model, catalog.systems[main.system].gpu, main.bucket_isl, main.bucket_osl, main.tp,
                          main.precision, None, slo.ttft_ms, slo.itl_ms, slo.e2e_ms)  # fmt: skip
        answer = curve_in_catalog(query, catalog, catalog.systems[main.system].gpus_per_node)
        y_axis = "ttft" if slo.ttft_ms is not None or slo.itl_ms is None else "itl"
        name = f"curve-{slug(w.name, 'workload')}.png"
        if any(existing == name for existing, _, _ in section.figures):  # two names with the same slug
            name = f"curve-{slug(w.name, 'workload')}-{len(section.figures) + 1}.png"
        section.figures.append((
            name, plots.curve_figure(answer, "tokens-per-gpu", y_axis),
            f"Latency-throughput curve of {w.name} on {main.system} (TP {main.tp or 'n/s'}, {main.precision or 'n/s'}), "
            "its limit and the chosen point.",
        ))  # fmt: skip
    section.figures.append(("demand-capacity.png", plots.demand_capacity_figure(plan, scenario),
                            "Demand vs capacity over the periods, capacity stacked by system and how it is paid for."))  # fmt: skip
    section.figures.append(("cost-breakdown.png", plots.cost_breakdown_figure(plan), "Annual cost by kind."))
    section.figures.append(("lengths.png", plots.lengths_figure(plan, scenario),
                            "Request lengths of the workloads and the engine variants of the plan."))  # fmt: skip
    return section


def build_report(planned: PlannedScenario) -> Report:
    return Report(
        f"Inference fleet plan: {planned.plan.scenario}",
        [requirements_section(planned), plan_section(planned), operating_points_section(planned),
         economics_section(planned), plots_section(planned)],  # fmt: skip
    )


def to_markdown(report: Report) -> str:
    lines = [f"# {report.title}", ""]
    for section in report.sections:
        lines += [f"## {section.title}", ""]
        for paragraph in section.paragraphs:
            lines += [paragraph, ""]
        for table in section.tables:
            lines += [markdown_table(table), ""]
        for name, _, caption in section.figures:
            lines += [f"![{caption}]({name})", "", f"*{caption}*", ""]
    return "\n".join(lines)


def to_html(report: Report, images: dict[str, bytes]) -> str:
    """One self-contained page: tables as HTML, the PNGs embedded as data URIs."""
    import re

    def inline(text: str) -> str:
        escaped = html.escape(text)
        escaped = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", escaped)
        return re.sub(r"`(.+?)`", r"<code>\1</code>", escaped)

    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(report.title)}</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:1em 0;font-size:0.85em}td,th{border:1px solid #ccc;padding:3px 6px}"
        "th{background:#f0f0f0}img{max-width:100%}figcaption{font-style:italic;color:#555}</style></head><body>",
        f"<h1>{html.escape(report.title)}</h1>",
    ]
    for section in report.sections:
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        parts += [f"<p>{inline(p)}</p>" for p in section.paragraphs]
        parts += [table.to_html(index=False, na_rep="", border=0) for table in section.tables]
        for name, _, caption in section.figures:
            data = base64.b64encode(images[name]).decode("ascii")
            parts.append(f"<figure><img alt='{html.escape(caption)}' src='data:image/png;base64,{data}'>"
                         f"<figcaption>{html.escape(caption)}</figcaption></figure>")  # fmt: skip
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_report(report: Report, folder: Path, force: bool = False) -> list[Path]:
    """report.md, report.html and one PNG per figure; returns the files written. The folder must be new, empty or
    hold a previous report (replaced whole) unless `force`; every file is rendered first, then written atomically."""
    import io

    folder = Path(folder)
    prepare_report_folder(folder, force)
    images = {}
    for name, figure, _ in report.figures():
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", metadata={"Software": None})
        images[name] = buffer.getvalue()
        plots.plt.close(figure)
    markdown, page = to_markdown(report), to_html(report, images)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in images.items():
        write_bytes_atomic(folder / name, data)
        written.append(folder / name)
    write_text_atomic(folder / "report.md", markdown)
    write_text_atomic(folder / "report.html", page)
    return [folder / "report.md", folder / "report.html", *written]
