"""Plots (matplotlib, headless): they read result objects and write PNG files."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from planner.api import CurveAnswer  # noqa: E402
from planner.perf import PerfResult  # noqa: E402
from planner.plan import configuration_key  # noqa: E402

X_AXES = {
    "tokens-per-gpu": ("output tokens/s per GPU", lambda p, n: (p.output_tokens_per_s or 0) / p.gpus_per_instance),
    "rps-per-node": ("requests/s per node", lambda p, n: p.rps_per_node(n) or 0),
}
Y_AXES = {"ttft": ("TTFT (ms)", "ttft_ms"), "itl": ("ITL (ms)", "itl_ms"), "e2e": ("E2E latency (ms)", "e2e_ms")}


def curve_figure(answer: CurveAnswer, x_axis: str = "tokens-per-gpu", y_axis: str = "ttft") -> Figure:
    """Latency vs throughput over concurrency, like the seeds' plots: the limit as a line, the chosen point marked."""
    x_label, x_of = X_AXES[x_axis]
    y_label, y_field = Y_AXES[y_axis]
    nodes = answer.gpus_per_node
    figure, axes = plt.subplots(figsize=(7, 4.5), dpi=110)

    def series(points: list[PerfResult]):
        kept = [p for p in points if getattr(p, y_field) is not None]
        return [x_of(p, nodes) for p in kept], [getattr(p, y_field) for p in kept], kept

    xs, ys, kept = series(list(answer.modeled_points))
    if xs:
        axes.plot(xs, ys, "-o", markersize=3, color="tab:blue", label="modeled (roofline)")
        for x, y, p in zip(xs, ys, kept):
            if p.concurrency in (1, 8, 64, 256, 1024):
                axes.annotate(f"c{p.concurrency}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    xs, ys, kept = series(list(answer.data_points))
    if xs:
        axes.plot(xs, ys, "s", markersize=6, color="tab:green", label="measured")
        for x, y, p in zip(xs, ys, kept):
            axes.annotate(f"c{p.concurrency or '?'}", (x, y), textcoords="offset points", xytext=(4, -10), fontsize=7)
    limit = {"ttft": answer.query.ttft_ms, "itl": answer.query.itl_ms, "e2e": answer.query.e2e_ms}[y_axis]
    if limit is not None:
        axes.axhline(limit, color="tab:red", linestyle="--", label=f"limit {limit:g} ms")
    chosen = answer.chosen
    if chosen is not None:
        value = getattr(chosen, y_field)
        bound = {"ttft_ms": chosen.ttft_ms_bound, "itl_ms": chosen.itl_ms_bound}.get(y_field)
        if value is not None:
            axes.plot([x_of(chosen, nodes)], [value], "v", markersize=12, color="black",
                      label=f"chosen: c{chosen.concurrency or '?'} ({chosen.provenance})")  # fmt: skip
        elif bound is not None:
            axes.plot([x_of(chosen, nodes)], [bound], "v", markersize=12, color="gray",
                      label=f"chosen ({chosen.provenance}): below {bound:g} ms, value not recorded")  # fmt: skip
    q = answer.query
    engine = f"TP{q.tp} {q.precision or ''}" if q.tp else "TP/precision not stated"
    axes.set_title(f"{q.model} on {q.gpu}, {engine}, ISL {q.isl} / OSL {q.osl}", fontsize=9)
    axes.set_xlabel(x_label)
    axes.set_ylabel(y_label)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
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
    figure, axes = plt.subplots(figsize=(8, 4.5), dpi=110)
    bottom = [0.0] * len(periods)
    for label in sorted(stacks):
        axes.bar(periods, stacks[label], bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, stacks[label])]
    axes.plot(periods, demand, "ko-", linewidth=1.5, label="peak demand (all workloads)")
    axes.set_xlabel("period (hours per year: " + ", ".join(f"{hours[p]:g}" for p in periods) + ")")
    axes.set_ylabel("requests/s")
    axes.set_title(f"Demand vs capacity per period: {plan.scenario}", fontsize=9)
    axes.legend(fontsize=8)
    axes.grid(True, axis="y", alpha=0.3)
    if len(periods) > 6:
        axes.tick_params(axis="x", labelrotation=60)
    figure.tight_layout()
    return figure


def cost_breakdown_figure(plan) -> Figure:
    """Annual cost by kind: capex amortized, energy, maintenance, space, reserved and on-demand cloud."""
    items = [(name.removesuffix("_usd").replace("_", " "), value) for name, value in vars(plan.totals.cost_breakdown).items()]
    figure, axes = plt.subplots(figsize=(7, 4), dpi=110)
    axes.barh([n for n, _ in items], [v for _, v in items], color="tab:blue")
    for y, (_, value) in enumerate(items):
        if value:
            axes.annotate(f"{value:,.0f}", (value, y), textcoords="offset points", xytext=(4, -3), fontsize=8)
    axes.set_xlabel("USD per year")
    axes.set_ylabel("cost kind")
    axes.set_title(f"Annual cost {plan.objective_usd_per_year:,.0f} USD: {plan.scenario}", fontsize=9)
    axes.invert_yaxis()
    figure.tight_layout()
    return figure


def lengths_figure(plan, scenario) -> Figure:
    """The workloads' ISL x OSL buckets (area ~ share of requests) with the engine variants of the plan drawn
    over them as the rectangles of lengths they accept."""
    from matplotlib.patches import Rectangle

    figure, axes = plt.subplots(figsize=(7, 4.5), dpi=110)
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
    axes.legend(fontsize=8)
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
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    return figure
