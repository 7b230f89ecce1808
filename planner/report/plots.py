"""Plots (matplotlib, headless): they read result objects and write PNG files."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
# Every label, title, legend entry and tick of these plots is plain text: names come from users (a workload named
# `cost $\frac{a$` would stop the report with a mathtext syntax error, `$\sqrt{2}$` would render as a root), and
# the planner's own labels use no math. Set once, here, for every text object the plots create, ticks included
# (those are made when a figure is drawn, so a per-label escape would miss category names such as periods).
matplotlib.rcParams.update({"text.parse_math": False, "text.usetex": False})
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from planner.landscape import CurveAnswer  # noqa: E402
from planner.perf import is_modeled  # noqa: E402
from planner.plan import configuration_key  # noqa: E402

X_AXES = {
    "tokens-per-gpu": ("output tokens/s per GPU", lambda p, n: (p.output_tokens_per_s or 0) / p.gpus_per_instance),
    "rps-per-node": ("requests/s per node", lambda p, n: p.rps_per_node(n) or 0),
}
# y axis: label, the point's value (None: not stated), the value of a latency limit in the axis's units
Y_AXES = {
    "ttft": ("TTFT (ms)", lambda p: p.ttft_ms, lambda limit: limit),
    "tpot": ("TPOT: a request's mean gap between tokens (ms)", lambda p: p.tpot_ms, lambda limit: limit),
    "itl": ("ITL: one gap between tokens (ms)", lambda p: p.itl_ms, lambda limit: limit),
    "e2e": ("E2E latency (ms)", lambda p: p.e2e_ms, lambda limit: limit),
    "tokens-per-user": ("output tokens/s per user (1000 / TPOT ms)", lambda p: 1000.0 / p.tpot_ms if p.tpot_ms else None,
                        lambda limit: 1000.0 / limit),
}
Y_LIMITS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2e": "e2e_ms", "tokens-per-user": "tpot_ms"}
MARKED_CONCURRENCIES = (1, 8, 64, 256, 1024)


def si_number(value: float, _position=None) -> str:
    """Tick and label text in k / M / B units: 800k, 1.2M (cost axes ran together as 100000 ... 800000)."""
    magnitude = abs(value)
    for threshold, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if magnitude >= threshold:
            return f"{value / threshold:.3g}{suffix}"
    return f"{value:.3g}" if magnitude else "0"


def _si_axis(axis) -> None:
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(si_number))


def _legend_outside(figure: Figure, axes, columns: int = 1) -> None:
    """The legend under the axes, never over bars, bubbles or curves."""
    import textwrap

    handles, labels = axes.get_legend_handles_labels()
    labels = ["\n".join(textwrap.wrap(label, 95 // columns)) for label in labels]
    if handles:
        axes.legend(handles, labels, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=columns,
                    frameon=False)  # fmt: skip


def _marked(points, xs, open_loop: bool) -> set[int]:
    """Which points of a modeled curve get a 'cN' mark: over concurrency, the round ones (1, 8, 64, ...); over
    the arrival rate, whose batch is whatever the rate makes it, about six spread along the x axis (the last point
    always; one too close to the next mark is skipped: they would overprint)."""
    if not open_loop:
        return {i for i, p in enumerate(points) if p.concurrency in MARKED_CONCURRENCIES}
    if not points:
        return set()
    gap = (max(xs) - min(xs)) / 6 or 1.0
    marks: list[int] = []
    for index, x in enumerate(xs):
        if not marks or abs(x - xs[marks[-1]]) >= gap:
            marks.append(index)
    last = len(points) - 1
    if marks[-1] != last:
        if len(marks) > 1 and abs(xs[last] - xs[marks[-1]]) < gap / 2:
            marks[-1] = last
        else:
            marks.append(last)
    return set(marks)


def _measured_label(points) -> str:
    """The measured rows' legend, saying what their 'cN' marks are and how many rows state no concurrency."""
    unstated = sum(1 for p in points if not p.concurrency)
    if unstated == len(points):
        return "measured rows (concurrency not stated)"
    if unstated:
        return f"measured rows (cN: the benchmark's concurrency; {unstated} of {len(points)} rows state none)"
    return "measured rows (cN: the benchmark's concurrency)"


def _chosen_where(chosen, open_loop: bool) -> str:
    """'c97 (its running batch at P99)' for a modeled point over the arrival rate, 'c16 (the benchmark's
    concurrency)' for a row: the legend names what the point's mark means, as the marks on the curves do."""
    if chosen.concurrency:
        what = "its running batch at P99" if open_loop and is_modeled(chosen.provenance) else "the benchmark's concurrency"
        return f"c{chosen.concurrency} ({what})"
    return "running batch not stated" if open_loop and is_modeled(chosen.provenance) else "the row states no concurrency"


def _at_percentile(label: str, percentile: float | None) -> str:
    """'ITL: one gap between tokens (ms)' -> 'ITL: one gap between tokens at P95 (ms)'."""
    from planner.metrics import percentile_label

    return f"{label.removesuffix(' (ms)')} at {percentile_label(percentile)} (ms)"


def curve_figure(answer: CurveAnswer, x_axis: str = "tokens-per-gpu", y_axis: str = "ttft",
                 modeled_label: str | None = None, note: str | None = None) -> Figure:  # fmt: skip
    """Latency vs throughput, like the seeds' plots: the modeled curve over concurrency (or, for an open-loop query,
    over the rate of requests arriving at random), the measured points on it, the limit as a line and the chosen
    operating point.

    `modeled_label` names the modeled curve when it is not the query's own engine (a measured row of a whole
    system states no TP: the roofline's best engine within the limits stands in); `note` is written on the plot
    (why there is no modeled curve, or no chosen point)."""
    x_label, x_of = X_AXES[x_axis]
    y_label, y_of, y_of_limit = Y_AXES[y_axis]
    nodes = answer.gpus_per_node
    figure, axes = plt.subplots(figsize=(7.5, 5), dpi=110)
    plotted_y: list[float] = []
    plotted_x: list[float] = []

    def series(points):
        kept = [p for p in points if y_of(p) is not None]
        return [x_of(p, nodes) for p in kept], [y_of(p) for p in kept], kept

    open_loop = answer.query.open_loop
    xs, ys, kept = series(list(answer.modeled_points))
    if xs:
        own = ("modeled over the rate of requests arriving at random (roofline; cN: its running batch at P99)"
               if open_loop else "modeled over concurrency (roofline; cN: N requests in flight)")  # fmt: skip
        axes.plot(xs, ys, "-o", markersize=3, color="tab:blue", label=modeled_label or own)
        plotted_y += ys
        plotted_x += xs
        marks = _marked(kept, xs, open_loop)
        for index, (x, y, p) in enumerate(zip(xs, ys, kept)):
            if p.concurrency and index in marks:
                axes.annotate(f"c{p.concurrency}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7,
                              color="tab:blue")  # fmt: skip
    if note:
        import textwrap

        axes.text(0.02, 0.97, "\n".join(textwrap.wrap(note, 105)), transform=axes.transAxes, fontsize=7.5, va="top",
                  color="dimgray")  # fmt: skip
    xs, ys, kept = series(list(answer.data_points))
    if xs:
        axes.plot(xs, ys, "s", markersize=7, color="tab:green", label=_measured_label(kept))
        plotted_y += ys
        plotted_x += xs
        for x, y, p in zip(xs, ys, kept):
            if p.concurrency:
                axes.annotate(f"c{p.concurrency}", (x, y), textcoords="offset points", xytext=(5, -11), fontsize=7,
                              color="tab:green")  # fmt: skip
    limit_ms = getattr(answer.query, Y_LIMITS[y_axis])
    limit = y_of_limit(limit_ms) if limit_ms is not None else None
    if limit is not None:
        words = f"{limit:.4g} tokens/s per user (TPOT {limit_ms:g} ms)" if y_axis == "tokens-per-user" else f"{limit:g} ms"
        axes.axhline(limit, color="tab:red", linestyle="--", label=f"limit {words}")
        plotted_y.append(limit)
    chosen = answer.chosen
    if chosen is not None:
        x, value = x_of(chosen, nodes), y_of(chosen)
        plotted_x.append(x)
        where = _chosen_where(chosen, open_loop)
        if value is not None:
            # a ring around the point, so the measured square under it stays visible
            axes.plot([x], [value], "o", markersize=15, markerfacecolor="none", markeredgewidth=2, color="black",
                      label=f"chosen operating point: {where}; {chosen.provenance}", zorder=5)  # fmt: skip
            plotted_y.append(value)
        else:
            bound_ms = {"ttft": chosen.ttft_ms_bound, "tpot": chosen.tpot_ms_bound, "itl": chosen.itl_ms_bound,
                        "tokens-per-user": chosen.tpot_ms_bound}.get(y_axis)  # fmt: skip
            if bound_ms is not None:
                bound = y_of_limit(bound_ms)
                low, high = (0.0, bound) if y_axis != "tokens-per-user" else (bound, bound * 1.5)
                axes.plot([x, x], [low, high], color="black", linewidth=3, solid_capstyle="butt", zorder=5,
                          label=f"chosen operating point ({chosen.provenance}, {where}): the row states only "
                                f"{'TTFT' if y_axis == 'ttft' else 'ITL' if y_axis == 'itl' else 'TPOT'} < {bound_ms:g} ms, "
                                "so the value lies on this bar")  # fmt: skip
                plotted_y.append(high)
    q = answer.query
    engine = f"TP{q.tp} {q.precision or ''}".strip() if q.tp else "engine (TP, precision) not stated by the row"
    axes.set_title(f"{q.model} on {q.gpu}, {engine}, ISL {q.isl} / OSL {q.osl}", fontsize=9)
    axes.set_xlabel(x_label)
    axes.set_ylabel(_at_percentile(y_label, answer.percentile) if y_axis != "tokens-per-user" else y_label)
    _si_axis(axes.xaxis)
    axes.set_xlim(0, max(plotted_x + [1e-9]) * 1.12)  # no point on the frame
    if plotted_y:
        # latency from zero, up to past the limit and the chosen point: a single point no longer sits on the frame
        top = max(plotted_y)
        reference = [v for v in (limit, y_of(chosen) if chosen else None) if v is not None]
        if y_axis != "tokens-per-user" and reference:
            top = min(top, 2.5 * max(reference))  # the queueing tail beyond the KV capacity would flatten the rest
        axes.set_ylim(0, top * 1.12)
    axes.grid(True, alpha=0.3)
    _legend_outside(figure, axes)
    figure.tight_layout()
    return figure


# one colour per GPU (never orange, the front's, nor red, the limit's), one marker per precision
GPU_COLOURS = ("tab:blue", "tab:green", "tab:purple", "tab:brown", "tab:cyan", "tab:olive", "tab:pink", "tab:gray",
               "navy", "darkgoldenrod")  # fmt: skip
PRECISION_MARKERS = {"fp4": "v", "nvfp4": "v", "fp8": "o", "int8": "^", "bf16": "s", "fp16": "D", "int4": "P"}
OTHER_MARKERS = ("X", "h", "<", ">", "p", "*")


def gpu_short(gpu: str) -> str:
    """'B200-SXM-180GB' -> 'B200': how the charts name a GPU next to an engine."""
    return gpu.split("-")[0] if gpu else gpu


def gpu_colours(gpus) -> dict[str, str]:
    """A colour per GPU, the same GPU always the same colour within a chart (sorted names)."""
    return {gpu: GPU_COLOURS[index % len(GPU_COLOURS)] for index, gpu in enumerate(sorted(set(gpus)))}


def precision_markers(precisions) -> dict:
    markers, spare = {}, iter(OTHER_MARKERS * 4)
    for precision in sorted(set(precisions), key=lambda p: (p is None, str(p))):
        markers[precision] = PRECISION_MARKERS.get(precision) or next(spare)
    return markers


def landscape_figure(landscape, highlight_engine: str | None = None) -> Figure:
    """Throughput per GPU against interactivity (tokens/s per user = 1000/TPOT, a request's mean pace) for every
    engine the workload could run on: a colour per GPU, a marker per precision, filled where the point meets the
    latency limits and hollow where it misses one; the Pareto front over them, the TPOT limit and the plan's point
    (planner.landscape); the curve of `highlight_engine` drawn as a line (`planner curve --y tokens-per-user`).
    Each scatter's gid is 'engines|GPU|precision|within' or '...|misses' (tests read the colours by GPU)."""
    figure, axes = plt.subplots(figsize=(7.5, 5.8), dpi=110)
    points = list(landscape.points)
    colours = gpu_colours(p.gpu for p in points)
    markers = precision_markers(p.precision for p in points)
    for gpu in sorted(colours):
        for precision in markers:
            group = [p for p in points if p.gpu == gpu and p.precision == precision]
            within = [p for p in group if p.meets_limits]
            missing = [p for p in group if not p.meets_limits]
            if missing:
                axes.scatter([p.tokens_per_gpu for p in missing], [p.tokens_per_user for p in missing], s=14,
                             marker=markers[precision], facecolors="none", edgecolors=colours[gpu], alpha=0.45,
                             linewidths=0.7, label="_nolegend_", gid=f"engines|{gpu}|{precision}|misses")  # fmt: skip
            if within:
                axes.scatter([p.tokens_per_gpu for p in within], [p.tokens_per_user for p in within], s=16,
                             marker=markers[precision], color=colours[gpu], alpha=0.75, label="_nolegend_",
                             gid=f"engines|{gpu}|{precision}|within")  # fmt: skip
    for gpu, colour in sorted(colours.items()):  # the legend: a colour per GPU, a marker per precision
        count = sum(1 for p in points if p.gpu == gpu)
        axes.plot([], [], linestyle="none", marker="o", color=colour, label=f"{gpu} ({count} points)")
    for precision, marker in markers.items():
        axes.plot([], [], linestyle="none", marker=marker, color="dimgray", label=precision or "precision not stated")
    meets = sum(1 for p in points if p.meets_limits)
    if points:
        axes.plot([], [], linestyle="none", marker="o", markerfacecolor="none", markeredgecolor="dimgray",
                  label=f"filled: within the latency limits ({meets}); hollow: missing one ({len(points) - meets})")  # fmt: skip
    measured = [p for p in points if not is_modeled(p.provenance)]
    if measured:
        axes.scatter([p.tokens_per_gpu for p in measured], [p.tokens_per_user for p in measured], s=60, marker="o",
                     facecolors="none", edgecolors="black", linewidths=0.8,
                     label=f"measured rows, ringed ({len(measured)})")  # fmt: skip
    highlighted = sorted((p for p in points if p.engine == highlight_engine), key=lambda p: p.concurrency or 0)
    if highlighted:
        axes.plot([p.tokens_per_gpu for p in highlighted], [p.tokens_per_user for p in highlighted], "-o", markersize=3,
                  color="tab:red", alpha=0.6, label=f"{highlight_engine} over its load")  # fmt: skip
    front = landscape.front
    if front:
        axes.plot([p.tokens_per_gpu for p in front], [p.tokens_per_user for p in front], "-", color="tab:orange",
                  linewidth=2, label="Pareto front (no point beats it on both axes)")  # fmt: skip
        engines = []
        right = max(p.tokens_per_gpu for p in points)
        several_gpus = len(colours) > 1
        for point in front:  # name each engine where it enters the front
            if point.engine not in engines:
                engines.append(point.engine)
                offset = (6, 5) if len(engines) % 2 else (6, -11)  # alternate sides: neighbours do not overprint
                leftwards = point.tokens_per_gpu > 0.7 * right  # near the right edge: the name goes to the left
                name = point.engine.split(" ", 1)[-1]
                if several_gpus:
                    name = f"{gpu_short(point.gpu)} {name}"
                axes.annotate(name, (point.tokens_per_gpu, point.tokens_per_user), textcoords="offset points",
                              xytext=(-offset[0], offset[1]) if leftwards else offset,
                              ha="right" if leftwards else "left", fontsize=7,
                              color=colours.get(point.gpu, "tab:orange"))  # fmt: skip
    if landscape.tpot_limit_ms:
        axes.axhline(1000.0 / landscape.tpot_limit_ms, color="tab:red", linestyle="--",
                     label=f"TPOT limit {landscape.tpot_limit_ms:g} ms = {1000.0 / landscape.tpot_limit_ms:.4g} tokens/s per user")  # fmt: skip
    if landscape.chosen is not None:
        c = landscape.chosen
        axes.plot([c.tokens_per_gpu], [c.tokens_per_user], "*", markersize=16, color="black", zorder=5,
                  label=landscape.chosen_note)  # fmt: skip
    else:  # said in the legend, under the axes, not over the points
        axes.plot([], [], " ", label=f"plan's point not shown: {landscape.chosen_note}")
    if not points:
        axes.text(0.5, 0.5, "no engine point states an ITL for this workload", transform=axes.transAxes,
                  ha="center", fontsize=9, color="dimgray")  # fmt: skip
    if landscape.missing_note:
        axes.text(0.02, 0.97, landscape.missing_note, transform=axes.transAxes, fontsize=7.5, va="top", color="dimgray")
    axes.set_xlabel("output tokens/s per GPU")
    axes.set_ylabel("tokens/s per user (1000 / TPOT ms)")
    prefix = f"{landscape.workload}: " if landscape.workload else ""
    axes.set_title(f"{prefix}{landscape.model}, ISL {landscape.isl} / OSL {landscape.osl}: every engine", fontsize=9)
    _si_axis(axes.xaxis)
    values_x = [p.tokens_per_gpu for p in points] + ([landscape.chosen.tokens_per_gpu] if landscape.chosen else [])
    values_y = [p.tokens_per_user for p in points] + ([landscape.chosen.tokens_per_user] if landscape.chosen else [])
    if landscape.tpot_limit_ms:
        values_y.append(1000.0 / landscape.tpot_limit_ms)
    axes.set_xlim(0, max(values_x + [1e-9]) * 1.12)
    axes.set_ylim(0, max(values_y + [1e-9]) * 1.12)
    axes.grid(True, alpha=0.3)
    _legend_outside(figure, axes, columns=2)
    figure.tight_layout()
    return figure


def save_figure(figure: Figure, path: Path) -> None:
    import io

    from planner.report.files import write_bytes_atomic

    buffer = io.BytesIO()
    # fixed metadata: the same inputs give the same bytes
    figure.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(figure)
    write_bytes_atomic(Path(path), buffer.getvalue())


def capacity_by_workload(plan) -> dict[tuple[str, str], dict[str, float]]:
    """Per (workload, period): the requests/s of that workload its engines serve, by 'system (how paid)'.

    Requests/s are never added across workloads (a request of one is not a request of another). An engine
    configuration's instances are shared among the workload buckets routed to it in proportion to the instance
    time each takes (rps / rps per instance), so idle instances count for the workloads they run. A workload served
    disaggregated needs both pools: its capacity is the lesser of its prefill and decode pools', counted once. The
    parts are scaled to the plan's own capacity of the workload in the period (`WorkloadResult.periods`), so the
    figure and the plan's tables show the same number."""
    from collections import defaultdict

    running: dict[tuple, int] = defaultdict(int)
    for allocation in plan.instances:
        running[(configuration_key(allocation), allocation.period)] += allocation.instances
    load: dict[tuple, float] = defaultdict(float)
    for route in plan.routing:
        if route.rps_per_instance:
            load[(configuration_key(route), route.period)] += route.rps / route.rps_per_instance
    raw: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
    for route in plan.routing:
        if route.rps <= 0:
            continue
        key = (configuration_key(route), route.period)
        share = running[key] * route.rps / load[key] if running.get(key) and load.get(key) else route.rps
        stages = raw.setdefault((route.workload, route.period), {})
        label = f"{route.system} ({route.role})"
        stages.setdefault(route.stage, {}).setdefault(label, 0.0)
        stages[route.stage][label] += share
    out = {}
    for workload in plan.workloads:
        for index, period in enumerate(plan.periods):
            stages = raw.get((workload.name, period), {})
            parts = dict(stages.get("aggregated", {}))
            if "prefill" in stages and "decode" in stages:  # a request needs both pools: the lesser serves
                lesser = min((stages["prefill"], stages["decode"]), key=lambda pool: sum(pool.values()))
                for label, value in lesser.items():
                    parts[label] = parts.get(label, 0.0) + value
            total = sum(parts.values())
            stated = workload.periods[index].capacity_rps if index < len(workload.periods) else None
            if stated is not None and total > 0:
                parts = {label: value * stated / total for label, value in parts.items()}
            elif stated:
                parts = {"capacity (not broken down by the plan)": stated}
            out[(workload.name, period)] = parts
    return out


def demand_capacity_figure(plan, scenario) -> Figure:
    """Per period, one bar per workload: its capacity stacked by system and how it is paid for (at the mix of
    requests routed to it; `capacity_by_workload`) and its peak demand as a black mark over the bar. Requests/s
    are never summed across workloads. Each bar series' gid is 'capacity|workload|system (how)', each demand
    mark's 'demand|workload' (tests read them)."""
    periods = list(plan.periods)
    hours = {p.name: p.hours_per_year for p in scenario.periods}
    workloads = [w.name for w in plan.workloads]
    capacity = capacity_by_workload(plan)
    labels = sorted({label for parts in capacity.values() for label in parts})
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colour = {label: colours[index % len(colours)] for index, label in enumerate(labels)}
    count = max(len(workloads), 1)
    width = 0.8 / count
    figure, axes = plt.subplots(figsize=(8.5, 5.4), dpi=110)
    positions = {w: [t + (j - (count - 1) / 2) * width for t in range(len(periods))] for j, w in enumerate(workloads)}
    tops = []
    shown = set()
    for w in workloads:
        bottom = [0.0] * len(periods)
        for label in labels:
            values = [capacity.get((w, p), {}).get(label, 0.0) for p in periods]
            if not any(values):
                continue
            bars = axes.bar(positions[w], values, width=width * 0.92, bottom=bottom, color=colour[label],
                            edgecolor="white", linewidth=0.5, label=label if label not in shown else "_nolegend_")  # fmt: skip
            for bar in bars:
                bar.set_gid(f"capacity|{w}|{label}")
            shown.add(label)
            bottom = [b + v for b, v in zip(bottom, values)]
        tops += bottom
    # the mark's width in points: the bar's, from the axes' width (about 85% of the figure's)
    mark = max(6.0, 8.5 * 72 * 0.85 / max(len(periods), 1) * width * 0.9)
    demands = {}
    for index, w in enumerate(plan.workloads):
        demands[w.name] = [w.periods[t].demand_rps if t < len(w.periods) else 0.0 for t in range(len(periods))]
        line, = axes.plot(positions[w.name], demands[w.name], linestyle="none", marker="_", markersize=mark,
                          markeredgewidth=2.5, color="black", zorder=4,
                          label="_nolegend_")  # fmt: skip
        line.set_gid(f"demand|{w.name}")
        tops += demands[w.name]
    axes.plot([], [], color="black", linewidth=2.5, label="peak demand of the workload (the mark over its bar)")
    top = max(tops + [1e-9])
    if len(periods) * count <= 16:  # each bar says its numbers: small workloads stay readable beside large ones
        for w in workloads:
            for t, p in enumerate(periods):
                served = sum(capacity.get((w, p), {}).values())
                axes.annotate(f"{demands[w][t]:,.3g} / {served:,.3g}", (positions[w][t], max(served, demands[w][t])),
                              textcoords="offset points", xytext=(0, 4), ha="center", fontsize=6.5)  # fmt: skip
    for t, p in enumerate(periods):  # the period over its group of bars
        axes.text(t, 0.985, p, transform=axes.get_xaxis_transform(), ha="center", va="top", fontsize=8,
                  fontweight="bold")  # fmt: skip
    for t in range(1, len(periods)):
        axes.axvline(t - 0.5, color="lightgray", linewidth=0.8)
    axes.set_xticks([x for w in workloads for x in positions[w]], [w for w in workloads for _ in periods])
    axes.set_xlim(-0.5, len(periods) - 0.5)
    axes.set_xlabel("workload in each period (hours per year: " + ", ".join(f"{hours.get(p, 0):g}" for p in periods)
                    + "); above each bar: demand / capacity")  # fmt: skip
    axes.set_ylabel("requests/s of the workload")
    axes.set_title(f"Demand vs capacity per workload and period: {plan.scenario}", fontsize=9)
    axes.set_ylim(0, top * 1.22)
    _si_axis(axes.yaxis)
    axes.grid(True, axis="y", alpha=0.3)
    if len(periods) * count > 6:
        axes.tick_params(axis="x", labelrotation=60)
    _legend_outside(figure, axes, columns=2)
    figure.tight_layout()
    return figure


def cost_breakdown_figure(plan) -> Figure:
    """Annual cost by kind: capex amortized, energy, maintenance, space, reserved and on-demand cloud. Every kind
    has a row and a value, zero included (an empty row would read as missing data)."""
    items = [(name.removesuffix("_usd").replace("_", " "), value) for name, value in vars(plan.totals.cost_breakdown).items()]
    figure, axes = plt.subplots(figsize=(7.5, 4), dpi=110)
    axes.barh([n for n, _ in items], [v for _, v in items], color="tab:blue")
    top = max([v for _, v in items] + [1.0])
    for y, (_, value) in enumerate(items):
        axes.annotate(f"{value:,.0f} USD" if value else "0 USD", (value, y), textcoords="offset points", xytext=(4, -3),
                      fontsize=8, color="black" if value else "dimgray")  # fmt: skip
    axes.set_xlim(0, top * 1.25)  # room for the largest value's label
    axes.set_xlabel("USD per year")
    axes.set_ylabel("cost kind")
    _si_axis(axes.xaxis)
    axes.set_title(f"Annual cost {plan.objective_usd_per_year:,.0f} USD: {plan.scenario}", fontsize=9)
    axes.invert_yaxis()
    figure.tight_layout()
    return figure


def lengths_figure(plan, scenario) -> Figure:
    """The workloads' ISL x OSL buckets (area ~ share of requests) with the engine variants of the plan drawn
    over them as the rectangles of lengths they accept."""
    from matplotlib.patches import Rectangle

    figure, axes = plt.subplots(figsize=(7.5, 5), dpi=110)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, workload in enumerate(scenario.workloads):
        color = colors[index % len(colors)]
        axes.scatter([b.isl_tokens for b in workload.buckets], [b.osl_tokens for b in workload.buckets],
                     s=[40 + 400 * b.share for b in workload.buckets], color=color, alpha=0.7, label=workload.name)  # fmt: skip
    engines = sorted({(i.engine_isl, i.engine_osl) for i in plan.instances})
    for isl, osl in engines:
        axes.add_patch(Rectangle((0, 0), isl, osl, fill=False, linestyle="--", edgecolor="gray"))
        axes.annotate(f"engine {isl}/{osl}", (isl, osl), textcoords="offset points", xytext=(-60, 4), fontsize=7)
    top_isl = max([e[0] for e in engines] + [b.isl_tokens for w in scenario.workloads for b in w.buckets])
    top_osl = max([e[1] for e in engines] + [b.osl_tokens for w in scenario.workloads for b in w.buckets])
    axes.set_xlim(0, top_isl * 1.15)
    axes.set_ylim(0, top_osl * 1.2)
    axes.set_xlabel("input tokens (ISL)")
    axes.set_ylabel("output tokens (OSL)")
    axes.set_title("Request lengths (area ~ share) and engine max lengths", fontsize=9)
    _si_axis(axes.xaxis)
    _si_axis(axes.yaxis)
    _legend_outside(figure, axes, columns=3)
    figure.tight_layout()
    return figure


# sweep fields as axis titles for people (planner sweep --plot)
FIELD_LABELS = {
    "objective_usd_per_year": "Annual cost (USD/year)", "nodes": "Nodes", "gpus": "GPUs",
    "capex_usd": "Servers capex (USD)", "power_kw": "Power (kW)", "rack_units": "Rack units",
}
WORKLOAD_FIELDS = {
    "ttft_ms": "TTFT limit (ms)", "itl_ms": "ITL limit (ms)", "tpot_ms": "TPOT limit (ms)", "e2e_ms": "E2E limit (ms)",
    "percentile": "latency percentile", "peak_rps": "peak demand (requests/s)", "mean_rps": "mean demand (requests/s)",
    "isl_tokens": "input length (tokens)", "osl_tokens": "output length (tokens)",
}
FIELD_UNITS = (("_usd_per_year", "USD/year"), ("_usd_per_hour", "USD/hour"), ("_usd", "USD"), ("_ms", "ms"),
               ("_rps", "requests/s"), ("_kw", "kW"), ("_tokens", "tokens"), ("_per_kwh", "per kWh"))  # fmt: skip


def _field_words(component: str) -> str | None:
    """'itl_ms' -> 'itl (ms)'; None when the name carries no unit suffix."""
    for suffix, unit in FIELD_UNITS:
        if component.endswith(suffix):
            return f"{component.removesuffix(suffix).replace('_', ' ')} ({unit})"
    return None


def axis_label(field: str) -> str:
    """A sweep field or record column as an axis title: 'workloads.chat.slo.itl_ms' -> 'chat: ITL limit (ms)',
    'objective_usd_per_year' -> 'Annual cost (USD/year)'; otherwise the last part of the path with its unit
    ('..._ms' -> '(ms)', '..._usd_per_year' -> '(USD/year)', '..._rps' -> '(requests/s)'), after its parent's name
    where the last part is a name (a system's price: 'dgx-h100: price (USD)')."""
    if field in FIELD_LABELS:
        return FIELD_LABELS[field]
    parts = field.split(".")
    last = parts[-1]
    if len(parts) >= 3 and parts[0] == "workloads":
        return f"{parts[1]}: {WORKLOAD_FIELDS.get(last) or _field_words(last) or last.replace('_', ' ')}"
    words = _field_words(last)
    if words is None and len(parts) >= 2 and _field_words(parts[-2]):
        return f"{last}: {_field_words(parts[-2])}"
    return words or last.replace("_", " ")


def pareto_figure(records: list[dict], x: str, y: str, front: list[dict]) -> Figure:
    """Every sweep point (cost against the varied field) and the Pareto front as a step: a plan made for a
    tighter x meets every looser one, so the least cost stays at a point's level until the next point of the
    front (steps-post), and at the last one beyond it."""
    figure = Figure(figsize=(7, 4.5))
    axes = figure.add_subplot()
    feasible = [r for r in records if r.get(y) is not None]
    axes.scatter([r[x] for r in feasible], [r[y] for r in feasible], s=14, alpha=0.5, label="sweep points")
    if front:
        ordered = sorted(front, key=lambda r: r[x])
        xs, ys = [r[x] for r in ordered], [r[y] for r in ordered]
        right = max([r[x] for r in feasible] + xs)
        if right > xs[-1]:  # the last level holds beyond the last point of the front
            xs, ys = xs + [right], ys + [ys[-1]]
        axes.plot(xs, ys, color="C3", drawstyle="steps-post", linewidth=1.8, gid="pareto-step",
                  label="Pareto front: the least cost, which holds until the next point")  # fmt: skip
        axes.plot([r[x] for r in ordered], [r[y] for r in ordered], "o", color="C3", label="_nolegend_")
    infeasible = [r for r in records if r.get(y) is None]
    if infeasible:
        axes.scatter([r[x] for r in infeasible], [0] * len(infeasible), marker="x", color="grey", label="no plan")
    x_label, y_label = axis_label(x), axis_label(y)
    axes.set_xlabel(x_label)
    axes.set_ylabel(y_label)
    axes.set_title(f"{y_label} against {x_label}", fontsize=10)
    _si_axis(axes.yaxis)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    return figure
