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

from planner.api import CurveAnswer  # noqa: E402
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

    xs, ys, kept = series(list(answer.modeled_points))
    if xs:
        own = ("modeled over the rate of requests arriving at random (roofline; c: batch at P99)" if answer.query.open_loop
               else "modeled over concurrency (roofline)")  # fmt: skip
        axes.plot(xs, ys, "-o", markersize=3, color="tab:blue", label=modeled_label or own)
        plotted_y += ys
        plotted_x += xs
        for x, y, p in zip(xs, ys, kept):
            if p.concurrency in MARKED_CONCURRENCIES:
                axes.annotate(f"c{p.concurrency}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7,
                              color="tab:blue")  # fmt: skip
    if note:
        import textwrap

        axes.text(0.02, 0.97, "\n".join(textwrap.wrap(note, 105)), transform=axes.transAxes, fontsize=7.5, va="top",
                  color="dimgray")  # fmt: skip
    xs, ys, kept = series(list(answer.data_points))
    if xs:
        stated = all(p.concurrency for p in kept)
        axes.plot(xs, ys, "s", markersize=7, color="tab:green",
                  label="measured" + ("" if stated else " (concurrency not stated)"))  # fmt: skip
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
        where = f"c{chosen.concurrency}" if chosen.concurrency else "concurrency not stated"
        if value is not None:
            # a ring around the point, so the measured square under it stays visible
            axes.plot([x], [value], "o", markersize=15, markerfacecolor="none", markeredgewidth=2, color="black",
                      label=f"chosen operating point: {where} ({chosen.provenance})", zorder=5)  # fmt: skip
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
    axes.set_ylabel(y_label)
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


def landscape_figure(landscape, highlight_engine: str | None = None) -> Figure:
    """Throughput per GPU against interactivity (tokens/s per user = 1000/TPOT, a request's mean pace) for every engine the workload could
    run on, the Pareto front over them, the TPOT limit and the plan's point (planner.landscape); the curve of
    `highlight_engine` drawn as a line (`planner curve --y tokens-per-user`)."""
    figure, axes = plt.subplots(figsize=(7.5, 5.2), dpi=110)
    meets = [p for p in landscape.points if p.meets_limits]
    misses = [p for p in landscape.points if not p.meets_limits]
    measured = [p for p in landscape.points if not is_modeled(p.provenance)]
    if misses:
        axes.scatter([p.tokens_per_gpu for p in misses], [p.tokens_per_user for p in misses], s=10, color="lightgray",
                     label=f"engine points missing a latency limit ({len(misses)})")  # fmt: skip
    if meets:
        axes.scatter([p.tokens_per_gpu for p in meets], [p.tokens_per_user for p in meets], s=12, color="tab:blue",
                     alpha=0.6, label=f"engine points within the limits ({len(meets)})")  # fmt: skip
    if measured:
        axes.scatter([p.tokens_per_gpu for p in measured], [p.tokens_per_user for p in measured], s=40, marker="s",
                     facecolors="none", edgecolors="tab:green", label=f"of which measured ({len(measured)})")  # fmt: skip
    highlighted = sorted((p for p in landscape.points if p.engine == highlight_engine), key=lambda p: p.concurrency or 0)
    if highlighted:
        axes.plot([p.tokens_per_gpu for p in highlighted], [p.tokens_per_user for p in highlighted], "-o", markersize=3,
                  color="tab:purple", label=f"{highlight_engine} over its load")  # fmt: skip
    front = landscape.front
    if front:
        axes.plot([p.tokens_per_gpu for p in front], [p.tokens_per_user for p in front], "-", color="tab:orange",
                  linewidth=2, label="Pareto front (no point beats it on both axes)")  # fmt: skip
        engines = []
        right = max(p.tokens_per_gpu for p in landscape.points)
        for point in front:  # name each engine where it enters the front
            if point.engine not in engines:
                engines.append(point.engine)
                offset = (6, 5) if len(engines) % 2 else (6, -11)  # alternate sides: neighbours do not overprint
                leftwards = point.tokens_per_gpu > 0.7 * right  # near the right edge: the name goes to the left
                axes.annotate(point.engine.split(" ", 1)[-1], (point.tokens_per_gpu, point.tokens_per_user),
                              textcoords="offset points", xytext=(-offset[0], offset[1]) if leftwards else offset,
                              ha="right" if leftwards else "left", fontsize=7, color="tab:orange")  # fmt: skip
    if landscape.tpot_limit_ms:
        axes.axhline(1000.0 / landscape.tpot_limit_ms, color="tab:red", linestyle="--",
                     label=f"TPOT limit {landscape.tpot_limit_ms:g} ms = {1000.0 / landscape.tpot_limit_ms:.4g} tokens/s per user")  # fmt: skip
    if landscape.chosen is not None:
        c = landscape.chosen
        axes.plot([c.tokens_per_gpu], [c.tokens_per_user], "*", markersize=16, color="black", zorder=5,
                  label=landscape.chosen_note)  # fmt: skip
    else:  # said in the legend, under the axes, not over the points
        axes.plot([], [], " ", label=f"plan's point not shown: {landscape.chosen_note}")
    if not landscape.points:
        axes.text(0.5, 0.5, "no engine point states an ITL for this workload", transform=axes.transAxes,
                  ha="center", fontsize=9, color="dimgray")  # fmt: skip
    if landscape.missing_note:
        axes.text(0.02, 0.97, landscape.missing_note, transform=axes.transAxes, fontsize=7.5, va="top", color="dimgray")
    axes.set_xlabel("output tokens/s per GPU")
    axes.set_ylabel("tokens/s per user (1000 / TPOT ms)")
    prefix = f"{landscape.workload}: " if landscape.workload else ""
    axes.set_title(f"{prefix}{landscape.model}, ISL {landscape.isl} / OSL {landscape.osl}: every engine", fontsize=9)
    _si_axis(axes.xaxis)
    values_x = [p.tokens_per_gpu for p in landscape.points] + ([landscape.chosen.tokens_per_gpu] if landscape.chosen else [])
    values_y = [p.tokens_per_user for p in landscape.points] + ([landscape.chosen.tokens_per_user] if landscape.chosen else [])
    if landscape.tpot_limit_ms:
        values_y.append(1000.0 / landscape.tpot_limit_ms)
    axes.set_xlim(0, max(values_x + [1e-9]) * 1.12)
    axes.set_ylim(0, max(values_y + [1e-9]) * 1.12)
    axes.grid(True, alpha=0.3)
    _legend_outside(figure, axes)
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


def demand_capacity_figure(plan, scenario) -> Figure:
    """Per period: capacity stacked by site/system (at the mix of requests routed to it) and total demand."""
    periods = list(plan.periods)
    hours = {p.name: p.hours_per_year for p in scenario.periods}
    stacks: dict[str, list[float]] = {}
    for t, period in enumerate(periods):
        for allocation in plan.instances:
            if allocation.period != period:
                continue
            identity = configuration_key(allocation)
            routes = [r for r in plan.routing if r.period == period and configuration_key(r) == identity]
            instance_load = sum(r.rps / r.rps_per_instance for r in routes if r.rps_per_instance)
            rate = sum(r.rps for r in routes) / instance_load if instance_load else 0.0
            label = f"{allocation.system} ({allocation.role})"
            stacks.setdefault(label, [0.0] * len(periods))[t] += allocation.instances * rate
    demand = [sum(w.periods[t].demand_rps for w in plan.workloads) for t in range(len(periods))]
    figure, axes = plt.subplots(figsize=(8, 5), dpi=110)
    bottom = [0.0] * len(periods)
    for label in sorted(stacks):
        axes.bar(periods, stacks[label], bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, stacks[label])]
    axes.plot(periods, demand, "ko-", linewidth=1.5, label="peak demand (all workloads)")
    axes.set_xlabel("period (hours per year: " + ", ".join(f"{hours[p]:g}" for p in periods) + ")")
    axes.set_ylabel("requests/s")
    axes.set_title(f"Demand vs capacity per period: {plan.scenario}", fontsize=9)
    axes.set_ylim(0, max(bottom + demand + [1e-9]) * 1.1)
    _si_axis(axes.yaxis)
    axes.grid(True, axis="y", alpha=0.3)
    if len(periods) > 6:
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


def pareto_figure(records: list[dict], x: str, y: str, front: list[dict]) -> Figure:
    """Every sweep point (cost vs the varied field), the Pareto front drawn over them."""
    figure = Figure(figsize=(7, 4.5))
    axes = figure.add_subplot()
    feasible = [r for r in records if r.get(y) is not None]
    axes.scatter([r[x] for r in feasible], [r[y] for r in feasible], s=14, alpha=0.5, label="sweep points")
    if front:
        axes.plot([r[x] for r in front], [r[y] for r in front], "o-", color="C3", label="Pareto front")
    infeasible = [r for r in records if r.get(y) is None]
    if infeasible:
        axes.scatter([r[x] for r in infeasible], [0] * len(infeasible), marker="x", color="grey", label="no plan")
    axes.set_xlabel(x)
    axes.set_ylabel(y.replace("_", " "))
    axes.set_title(f"{y.replace('_', ' ')} vs {x}")
    _si_axis(axes.yaxis)
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    return figure
