"""Plots (matplotlib, headless): they read result objects and write PNG files."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from planner.api import CurveAnswer  # noqa: E402
from planner.perf import PerfResult  # noqa: E402

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
    if chosen is not None and getattr(chosen, y_field) is not None:
        axes.plot([x_of(chosen, nodes)], [getattr(chosen, y_field)], "v", markersize=12, color="black",
                  label=f"chosen: c{chosen.concurrency or '?'} ({chosen.provenance})")  # fmt: skip
    q = answer.query
    axes.set_title(f"{q.model} on {q.gpu}, TP{q.tp or '?'} {q.precision or ''}, ISL {q.isl} / OSL {q.osl}", fontsize=9)
    axes.set_xlabel(x_label)
    axes.set_ylabel(y_label)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    return figure


def save_figure(figure: Figure, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # fixed metadata: the same inputs give the same bytes
    figure.savefig(path, format="png", metadata={"Software": None})
    plt.close(figure)
