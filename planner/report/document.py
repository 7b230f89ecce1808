"""The plan report: Markdown and self-contained HTML with PNG plots, for procurement, finance and reviews.

`build_report(planned)` gathers the content (typed sections of text, tables and figures); `write_report` writes
report.md, report.html (images embedded) and the PNGs into a folder.
"""

from __future__ import annotations

import base64
import dataclasses
import re
import struct
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from planner.answers import DecisionInputs, PlannedScenario
from planner.landscape import Landscape, curve_in_catalog, main_assignment, workload_landscapes
from planner.perf import Layout, PerfQuery, is_modeled, modeled_points
from planner.perf.roofline import supports_roofline
from planner.report import plots
from planner.report.bom import markdown_table
from planner.report.files import (
    REPORT_FILES,
    InputPaths,
    prepare_report_folder,
    slug,
    write_bytes_atomic,
    write_text_atomic,  # fmt: skip
)
from planner.report.formatting import format_frame
from planner.report.sections import (  # noqa: F401 (re-exported)
    HOURS_PER_YEAR,
    PER_PERIOD_VERBS,
    SEED_REQUESTS_PER_USER,
    VERBS,
    Report,
    Section,
    assumptions_section,
    binding_metric,
    comparison_section,
    decision_section,
    economics_section,
    latency_section,
    operating_points_section,
    plan_section,
    precision_section,
    requirements_section,
    sensitivity_section,
    verdict_section,
)


def _figure_name(section: Section, stem: str) -> str:
    name = f"{stem}.png"
    if any(existing == name for existing, _, _ in section.figures):  # two workload names with the same slug
        name = f"{stem}-{len(section.figures) + 1}.png"
    return name


def _reference_engine(landscape: Landscape | None, gpu: str) -> tuple[int, str] | None:
    """For a measured row of a whole system (no TP, no precision): the modeled engine on the same GPU with the
    most tokens/s per GPU within the limits, whose curve the plot draws beside the row."""
    if landscape is None:
        return None
    usable = [p for p in landscape.points if p.gpu == gpu and p.tp and p.precision and p.meets_limits
              and is_modeled(p.provenance)]  # fmt: skip
    if not usable:
        return None
    best = max(usable, key=lambda p: (p.tokens_per_gpu, -p.tp))
    return best.tp, best.precision


def curve_plot(planned: PlannedScenario, workload_name: str, landscape: Landscape | None) -> tuple[Figure, str] | None:
    """The latency-throughput curve of the configuration carrying most of the workload: modeled over
    concurrency, the measured rows on it, the limit and the chosen point."""
    catalog = planned.catalog
    main = main_assignment(planned.plan, workload_name)
    if main is None:
        return None
    workload = next(w for w in planned.scenario.workloads if w.name == workload_name)
    slo, system = workload.slo, catalog.systems[main.system]
    # the plan's view: requests arriving at random (open loop), the curve over their rate
    query = PerfQuery(workload.model, system.gpu, main.bucket_isl, main.bucket_osl, main.tp, main.precision, None,
                      slo.ttft_ms, slo.itl_ms, slo.e2e_ms, slo.tpot_ms, planned.scenario.token_budget,
                      arrivals="poisson", engine=main.engine, prefix_cache=workload.prefix_cache)  # fmt: skip
    sources, percentile = planned.scenario.perf_sources, slo.percentile
    answer = curve_in_catalog(query, catalog, system.gpus_per_node, sources, percentile)
    note = None
    if main.stage != "aggregated":  # the curve is of an aggregated engine: the plan's pools are not on it
        answer = dataclasses.replace(answer, chosen=None)
        note = (f"the plan serves {workload_name} disaggregated ({main.stage} pool shown): this aggregated curve of "
                "the same engine is for reference; the pools' points are in the operating points table")  # fmt: skip
    elif is_modeled(main.provenance) and main.tp and main.precision:
        layout = _planned_layout(main)
        if layout.beyond_tp:  # the curve of the plan's engine (attention DP, EP, pipeline stages), not TP alone's
            curve = modeled_points(dataclasses.replace(query, concurrency=None, ttft_ms=None, tpot_ms=None,
                                                       itl_ms=None, e2e_ms=None), catalog, main.tp, main.precision,
                                   percentile, engine_lengths=(main.engine_isl, main.engine_osl), layout=layout,
                                   hop_bytes_per_s=_hop(system, layout))  # fmt: skip
            answer = dataclasses.replace(answer, modeled_points=() if isinstance(curve, str) else tuple(
                p for p in curve if is_modeled(p.provenance)))  # fmt: skip
        # the plan's point: its engine (lengths, layout) at the rate each of its instances serves; never the TP
        # curve's own best where the plan runs another layout
        planned_point = _planned_point(planned, workload_name, main, query, percentile)
        answer = dataclasses.replace(answer, chosen=planned_point if planned_point or layout.beyond_tp else answer.chosen)
    elif main.concurrency:  # a measured row the plan runs: its point, not the curve's own best
        same = [p for p in answer.data_points + answer.modeled_points if p.concurrency == main.concurrency]
        same.sort(key=lambda p: p.provenance != main.provenance)
        answer = dataclasses.replace(answer, chosen=same[0] if same else answer.chosen)
    modeled_label, no_model = None, None
    engine = f"{main.layout or f'TP{main.tp}'} {main.precision}" if main.tp else "engine not stated by the row"
    if not answer.modeled_points:
        reference = _reference_engine(landscape, system.gpu) if main.tp is None else None
        if reference is not None:
            tp, precision = reference
            stand_in = curve_in_catalog(dataclasses.replace(query, tp=tp, precision=precision), catalog,
                                        system.gpus_per_node, sources, percentile)  # fmt: skip
            answer = dataclasses.replace(answer, modeled_points=stand_in.modeled_points)
            modeled_label = (f"modeled TP{tp} {precision} over the arrival rate: the roofline's best engine within the "
                             "limits (the measured row states no engine)")  # fmt: skip
        elif not supports_roofline(catalog.models[workload.model]):
            no_model = f"the architecture of {workload.model} is not published, so the roofline cannot draw it"
        elif "modeled" not in sources:
            no_model = "the scenario reads benchmark rows only (perf.sources)"
        else:
            no_model = answer.miss_reason or "no modeled engine meets the limits"
    y_axis, shown = binding_metric(main, slo)
    caption = (f"Latency-throughput curve of {workload_name} on {main.system} ({engine}), ISL {main.bucket_isl} / "
               f"OSL {main.bucket_osl}, {shown}: the modeled curve over the rate of requests arriving at random (as "
               f"the plan sizes an instance; cN: its running batch at P99), the measured points (cN: each at its "
               f"benchmark's concurrency), the limit and the chosen operating point.")  # fmt: skip
    if no_model:
        note = f"no modeled curve: {no_model}"
    return plots.curve_figure(answer, "tokens-per-gpu", y_axis, modeled_label, note), caption


def _planned_point(planned: PlannedScenario, workload_name: str, main, query: PerfQuery, percentile: float):
    """The roofline's point of the plan's main assignment: its engine at the requests/s one of its instances
    serves (the route's), at the workload's percentile; None where the plan has no such route."""
    route = next((r for r in planned.plan.routing if r.workload == workload_name and r.system == main.system
                  and r.tp == main.tp and r.precision == main.precision and r.bucket_isl == main.bucket_isl
                  and r.bucket_osl == main.bucket_osl and r.stage == main.stage and r.layout == main.layout
                  and r.engine == main.engine and r.rps_per_instance > 0), None)  # fmt: skip
    if route is None:
        return None
    layout = _planned_layout(main)
    points = modeled_points(dataclasses.replace(query, rate_rps=route.rps_per_instance), planned.catalog, main.tp,
                            main.precision, percentile, engine_lengths=(main.engine_isl, main.engine_osl),
                            layout=layout, hop_bytes_per_s=_hop(planned.catalog.systems[main.system], layout))  # fmt: skip
    return None if isinstance(points, str) else points[0]


def _planned_layout(main) -> Layout:
    """The assignment's engine layout: TP alone, or with attention DP, EP and pipeline stages as the plan names it."""
    if main.layout and any(part in main.layout for part in ("DP", "EP", "PP")):
        return Layout.parse(main.layout)
    return Layout(main.tp)


def _hop(system, layout: Layout) -> float:
    """The network between pipeline stages (as candidates price them): the stage's share of the node's NICs."""
    return (system.network_bytes_per_s(layout.tp * layout.dp) or 0.0) if layout.pp > 1 else 0.0


def plots_section(planned: PlannedScenario) -> Section:
    plan, scenario = planned.plan, planned.scenario
    section = Section("Plots")
    landscapes = {landscape.workload: landscape for landscape in workload_landscapes(planned)}
    for w in plan.workloads:
        landscape = landscapes.get(w.name)
        drawn = curve_plot(planned, w.name, landscape)
        if drawn is not None:
            section.figures.append((_figure_name(section, f"curve-{slug(w.name, 'workload')}"), *drawn))
        if landscape is not None:
            section.figures.append((
                _figure_name(section, f"engines-{slug(w.name, 'workload')}"), plots.landscape_figure(landscape),
                f"Every engine {w.name} could run on (ISL {landscape.isl} / OSL {landscape.osl}): output tokens/s per "
                f"GPU against tokens/s per user (1000 / TPOT), {len(landscape.points)} points, the Pareto front and "
                f"the plan's point ({landscape.chosen_note}).",
            ))  # fmt: skip
    section.figures.append(("demand-capacity.png", plots.demand_capacity_figure(plan, scenario),
                            "Demand vs capacity per workload and period: one bar per workload (requests/s are never "
                            "added across workloads), its capacity stacked by system and how it is paid for, its peak "
                            "demand as the black mark; a workload served disaggregated counts its prefill and decode "
                            "pools once (the lesser of the two: a request needs both)."))  # fmt: skip
    section.figures.append(("cost-breakdown.png", plots.cost_breakdown_figure(plan), "Annual cost by kind."))
    section.figures.append(("lengths.png", plots.lengths_figure(plan, scenario),
                            "Request lengths of the workloads and the engine variants of the plan."))  # fmt: skip
    return section


def build_report(planned: PlannedScenario, inputs: DecisionInputs | None = None) -> Report:
    """The report's sections, the decision first. `inputs` (planner.api.decision_report) carries the side-by-side
    comparison, the simulation's verdict and the sensitivity grid; without it those sections say how to get them."""
    inputs = inputs or DecisionInputs()
    sections = [
        decision_section(planned, inputs), requirements_section(planned), comparison_section(planned, inputs),
        latency_section(planned), verdict_section(inputs), plan_section(planned), operating_points_section(planned),
        economics_section(planned), sensitivity_section(inputs), precision_section(planned),
        assumptions_section(planned), plots_section(planned),
    ]  # fmt: skip
    sections = [s for s in sections if s is not None]
    for section in sections:  # a table with no rows says nothing: left out
        section.tables = [t for t in section.tables if not t.empty]
    return Report(f"Inference fleet plan: {planned.plan.scenario}", sections)


def to_markdown(report: Report) -> str:
    lines = [f"# {report.title}", ""]
    for section in report.sections:
        lines += [f"## {section.title}", ""]
        for paragraph in section.paragraphs:
            lines += [paragraph, ""]
        for table in section.tables:
            lines += [markdown_table(format_frame(table)), ""]
        for name, _, caption in section.figures:
            lines += [f"![{caption}]({name})", "", f"*{caption}*", ""]
    return "\n".join(lines)


_NUMBER = re.compile(r"^-?[\d,]+(\.\d+)?%?$")


def _inline(text: str):
    """Markdown's **bold** and `code` in a paragraph, as HTML (the text escaped first)."""
    from markupsafe import Markup, escape

    escaped = str(escape(text))
    escaped = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", escaped)
    return Markup(re.sub(r"`(.+?)`", r"<code>\1</code>", escaped))


def _png_size(data: bytes) -> tuple[int, int]:
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk follows the 8-byte signature
    return width, height


def _html_table(frame: pd.DataFrame) -> dict:
    shown = format_frame(frame)
    rows = shown.values.tolist()
    numeric = [bool(column) and all(not v or _NUMBER.match(v) for v in column) and any(column)
               for column in (list(shown[c]) for c in shown.columns)]  # fmt: skip
    return {
        "headers": list(shown.columns), "numeric": numeric,
        "rows": [{"cells": row, "total": bool(row) and row[0] == "TOTAL"} for row in rows],
    }  # fmt: skip


def to_html(report: Report, images: dict[str, bytes]) -> str:
    """One self-contained page rendered from templates/report.html.j2: the same formatted tables as the
    Markdown, the PNGs embedded as data URIs."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    environment = Environment(loader=PackageLoader("planner.report", "templates"), autoescape=True,
                              undefined=StrictUndefined, keep_trailing_newline=True)  # fmt: skip
    environment.filters["inline"] = _inline
    sections = []
    for index, section in enumerate(report.sections, start=1):
        figures = []
        for name, _, caption in section.figures:
            width, height = _png_size(images[name])
            figures.append({"data": base64.b64encode(images[name]).decode("ascii"), "caption": caption,
                            "width": width, "height": height})  # fmt: skip
        sections.append({
            "title": section.title, "anchor": f"s{index}-{slug(section.title.lower(), 'section')}",
            "paragraphs": section.paragraphs, "tables": [_html_table(t) for t in section.tables], "figures": figures,
        })  # fmt: skip
    return environment.get_template("report.html.j2").render(title=report.title, sections=sections)


def write_report(report: Report, folder: Path, force: bool = False, inputs: InputPaths = ()) -> list[Path]:
    """report.md, report.html and one PNG per figure; returns the files written. The folder must be new, empty or
    hold a previous report (the files its manifest lists, replaced) unless `force`, which never removes other
    files; no file written may be one of the command's `inputs` (planner.report.files). Every file is rendered
    first, then written atomically."""
    import io

    folder = Path(folder)
    images = {}
    for name, figure, _ in report.figures():
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", metadata={"Software": None})
        images[name] = buffer.getvalue()
        plots.plt.close(figure)
    markdown, page = to_markdown(report), to_html(report, images)
    prepare_report_folder(folder, [*REPORT_FILES, *images], force, inputs)
    written = []
    for name, data in images.items():
        write_bytes_atomic(folder / name, data)
        written.append(folder / name)
    write_text_atomic(folder / "report.md", markdown)
    write_text_atomic(folder / "report.html", page)
    return [folder / "report.md", folder / "report.html", *written]

