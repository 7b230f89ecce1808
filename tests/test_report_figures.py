"""The report as a reviewer reads it (issue 20): curves over concurrency with the chosen point inside the frame,
the throughput-per-GPU vs tokens-per-user chart with its Pareto front, k/M cost ticks, zero rows visible, legends
off the data, human headers and the same formatted numbers in Markdown and HTML."""

from __future__ import annotations

import glob
import re

import matplotlib
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from planner import api  # noqa: E402
from planner.landscape import LandscapePoint, main_assignment, pareto_front  # noqa: E402
from planner.perf import PerfQuery  # noqa: E402
from planner.report import plots  # noqa: E402
from planner.report.document import build_report, curve_plot, to_html, to_markdown  # noqa: E402
from planner.report.formatting import format_cell, format_frame, human_header  # noqa: E402

SCENARIOS = sorted(glob.glob("scenarios/*.yaml"))


@pytest.fixture(scope="module")
def planned():
    return {path: api.plan_in_context(path) for path in SCENARIOS}


def _inside(axes, x: float, y: float) -> bool:
    """Strictly inside the axes' limits: not on the frame, not clipped."""
    (x0, x1), (y0, y1) = axes.get_xlim(), axes.get_ylim()
    return x0 < x < x1 and y0 < y < y1


def _point_of(line) -> tuple[float, float]:
    xs, ys = line.get_data()
    return float(xs[0]), float(ys[0])


def _legend_clear_of_axes(figure, axes) -> bool:
    figure.canvas.draw()
    legend = axes.get_legend()
    if legend is None:
        return True
    box, frame = legend.get_window_extent(), axes.get_window_extent()
    return box.y1 <= frame.y0 + 1  # wholly under the plotting area


# ---- curve plots -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", SCENARIOS)
def test_every_curve_plot_has_a_curve_or_says_why_and_its_points_inside_the_frame(planned, path):
    p = planned[path]
    for workload in p.plan.workloads:
        landscapes = {land.workload: land for land in api.workload_landscapes(p)}
        figure, caption = curve_plot(p, workload.name, landscapes.get(workload.name))
        axes = figure.axes[0]
        labels = [line.get_label() for line in axes.get_lines()]
        curve = [line for line in axes.get_lines() if line.get_label().startswith("modeled")]
        notes = [t.get_text() for t in axes.texts if t.get_text().startswith(("no modeled curve", "the plan serves"))]
        assert curve or notes, f"{path} {workload.name}: neither a modeled curve nor a reason ({labels})"
        if curve:
            assert len(curve[0].get_xdata()) >= 5, "a curve over concurrency, not a single marker"
        for line in axes.get_lines():
            label = line.get_label()
            if label.startswith(("measured", "chosen operating point")) and line.get_linestyle() in ("None", ""):
                x, y = _point_of(line)
                assert _inside(axes, x, y), f"{path} {workload.name}: {label} at ({x}, {y}) on the frame"
        assert axes.get_ylim()[0] == 0 and axes.get_xlim()[0] == 0
        limit = [line for line in axes.get_lines() if line.get_label().startswith("limit")]
        if limit:
            assert axes.get_ylim()[1] > limit[0].get_ydata()[0], "the limit line is inside the plot"
        assert "c?" not in " ".join(t.get_text() for t in axes.texts)
        # the legend and the cN marks agree (issue 34): no "concurrency not stated" beside measured points marked cN
        measured_marks = [t for t in axes.texts if re.fullmatch(r"c\d+", t.get_text()) and t.get_color() == "tab:green"]
        for label in labels:
            if "concurrency not stated" in label:
                assert label == "measured rows (concurrency not stated)" and not measured_marks, label
        assert _legend_clear_of_axes(figure, axes)
        plt.close(figure)


def test_the_chosen_point_of_a_curve_is_the_plans_operating_point(planned):
    p = planned["scenarios/chat-and-summarize.yaml"]
    for workload in p.plan.workloads:
        main = main_assignment(p.plan, workload.name)
        figure, _ = curve_plot(p, workload.name, None)
        chosen = [line for line in figure.axes[0].get_lines() if line.get_label().startswith("chosen operating point")]
        assert chosen and f"c{main.concurrency} " in chosen[0].get_label()
        # the y axis is the binding latency (planner.report.document.binding_metric): the point's own value of it
        metric = {"TTFT": "ttft_ms", "TPOT": "tpot_ms", "ITL": "itl_ms", "E2E": "e2e_ms"}[
            figure.axes[0].get_ylabel().split(":")[0].split(" ")[0]]
        if getattr(main, metric) is not None:
            assert _point_of(chosen[0])[1] == pytest.approx(getattr(main, metric), abs=1e-3)  # plans round to 3 decimals
        plt.close(figure)


def test_a_pipelined_plans_curve_is_its_own_engines_not_tp_alones(tmp_path):
    # DeepSeek-R1 fp8 fits no DGX H100: the plan runs TP8 over pipeline stages, and its curve and chosen point are
    # that engine's (issue 49: the report marked TP8 alone at its own best concurrency as chosen)
    path = tmp_path / "r1.yaml"
    path.write_text(
        "name: r1-pp\nmetrics_version: 2\ndeployment: on-prem\nworkloads:\n  - name: reasoning\n"
        "    model: deepseek-r1\n    isl_tokens: 1000\n    osl_tokens: 1000\n    peak_rps: 2\n"
        "    slo: {tpot_ms: 60, ttft_ms: 5000}\n    engines: [vllm]\nsites:\n  on_prem:\n    systems: [dgx-h100]\n"
    )  # fmt: skip
    p = api.plan_in_context(path)
    main = main_assignment(p.plan, "reasoning")
    assert "PP" in main.layout
    figure, caption = curve_plot(p, "reasoning", None)
    assert main.layout in caption
    chosen = [line for line in figure.axes[0].get_lines() if line.get_label().startswith("chosen operating point")]
    assert len(chosen) == 1
    metric = {"TTFT": "ttft_ms", "TPOT": "tpot_ms", "ITL": "itl_ms", "E2E": "e2e_ms"}[
        figure.axes[0].get_ylabel().split(":")[0].split(" ")[0]]
    assert _point_of(chosen[0])[1] == pytest.approx(getattr(main, metric), rel=1e-3)
    route = next(r for r in p.plan.routing if r.workload == "reasoning")
    gpus = p.catalog.systems[main.system].gpus_per_node
    # on the x axis, the tokens/s per GPU of the plan's instance at its planned rate (an instance spans the stages)
    stages = int(main.layout.split("PP")[1])
    assert _point_of(chosen[0])[0] == pytest.approx(route.rps_per_instance * main.bucket_osl / (gpus * stages), rel=1e-3)
    plt.close(figure)


def test_a_row_without_engine_gets_the_roofline_stand_in_and_a_bar_for_a_bound(planned):
    """The seed case C2's assistant, sized by the course's method: its row states only rps/node and 'TTFT < 500 ms',
    no TP (daily-hybrid's assistant, sized for random arrivals, runs the roofline's engine instead)."""
    p = planned["scenarios/llama3-8b-assistant.yaml"]
    landscape = {land.workload: land for land in api.workload_landscapes(p)}["assistant"]
    figure, _ = curve_plot(p, "assistant", landscape)
    axes = figure.axes[0]
    curve = [line for line in axes.get_lines() if line.get_label().startswith("modeled TP")]
    assert curve and "the measured row states no engine" in curve[0].get_label()
    bar = [line for line in axes.get_lines() if line.get_label().startswith("chosen operating point")]
    assert bar and "TTFT < 500 ms" in bar[0].get_label()
    assert list(bar[0].get_ydata()) == [0.0, 500.0]
    assert 0 < bar[0].get_xdata()[0] < axes.get_xlim()[1]
    plt.close(figure)


def test_a_model_without_architecture_says_so_on_the_plot(planned):
    p = planned["scenarios/contact-center.yaml"]
    figure, _ = curve_plot(p, p.plan.workloads[0].name, None)
    texts = " ".join(t.get_text() for t in figure.axes[0].texts)
    assert "architecture of nemo-43b-gpt is not published" in texts
    plt.close(figure)
    (landscape,) = api.workload_landscapes(p)
    assert len(landscape.points) == 1 and "architecture of nemo-43b-gpt is not published" in landscape.missing_note
    figure = plots.landscape_figure(landscape)
    axes = figure.axes[0]
    assert landscape.missing_note in [t.get_text() for t in axes.texts]
    figure.canvas.draw()
    frame = axes.get_window_extent()
    for text in axes.texts:  # engine names stay inside the plot
        box = text.get_window_extent()
        assert frame.x0 - 1 <= box.x0 and box.x1 <= frame.x1 + 1, text.get_text()
    plt.close(figure)


# ---- throughput per GPU vs tokens per user ----------------------------------------------------------------------

points_strategy = st.lists(
    st.tuples(st.floats(0.1, 1e5), st.floats(0.1, 1e3), st.integers(1, 512)), min_size=1, max_size=60,
)


def _landscape_points(raw) -> list[LandscapePoint]:
    return [LandscapePoint(f"e{i % 4}", "g", 1, "fp8", c, x, y, True, "modeled") for i, (x, y, c) in enumerate(raw)]


@settings(max_examples=200, deadline=None)
@given(points_strategy)
def test_pareto_front_is_exactly_the_undominated_points(raw):
    points = _landscape_points(raw)
    front = pareto_front(points)

    def dominates(a, b):
        return a.tokens_per_gpu >= b.tokens_per_gpu and a.tokens_per_user >= b.tokens_per_user and (
            a.tokens_per_gpu > b.tokens_per_gpu or a.tokens_per_user > b.tokens_per_user)

    for f in front:
        assert not any(dominates(p, f) for p in points), "a front point is beaten on both axes"
    for p in points:
        if p not in front:
            assert any(f.tokens_per_gpu >= p.tokens_per_gpu and f.tokens_per_user >= p.tokens_per_user for f in front)
    users = [f.tokens_per_user for f in front]
    gpus = [f.tokens_per_gpu for f in front]
    assert users == sorted(users, reverse=True) and gpus == sorted(gpus)


@pytest.mark.parametrize("path", SCENARIOS)
def test_plans_point_never_lies_beyond_the_front(planned, path):
    """The plan picks among the engines the landscape draws: its point is on or under the Pareto front."""
    for landscape in api.workload_landscapes(planned[path]):
        assert landscape.points, f"{path} {landscape.workload}: no engine point"
        c = landscape.chosen
        if c is None:
            assert landscape.chosen_note
            continue
        slack = 1 - 1e-4  # plans round latencies to 3 decimals of a ms
        assert any(f.tokens_per_gpu >= c.tokens_per_gpu * slack and f.tokens_per_user >= c.tokens_per_user * slack
                   for f in landscape.front), f"{path} {landscape.workload}: chosen {c} beyond the front"
        for p in landscape.points:  # 1000/TPOT is tokens per user: the axes are the same physics
            assert p.tokens_per_user > 0 and p.tokens_per_gpu > 0


def test_landscape_figure_draws_front_limit_and_chosen(planned):
    landscape = api.workload_landscapes(planned["scenarios/chat-and-summarize.yaml"])[0]
    figure = plots.landscape_figure(landscape)
    axes = figure.axes[0]
    labels = [line.get_label() for line in axes.get_lines()]
    assert any(label.startswith("Pareto front") for label in labels)
    star = [line for line in axes.get_lines() if line.get_label().startswith("chosen")]
    assert star and _inside(axes, *_point_of(star[0]))
    assert axes.get_xlabel() == "output tokens/s per GPU" and "1000 / TPOT" in axes.get_ylabel()
    assert _legend_clear_of_axes(figure, axes)
    plt.close(figure)


def test_curve_command_tokens_per_user_writes_the_landscape(tmp_path):
    from typer.testing import CliRunner

    from planner.cli import app

    png = tmp_path / "front.png"
    result = CliRunner().invoke(app, [
        "curve", "--model", "llama-3.3-70b", "--gpu", "H100", "--tp", "4", "--precision", "fp8", "--isl", "1000",
        "--osl", "300", "--itl-ms", "30", "--x", "tokens-per-gpu", "--y", "tokens-per-user", "--png", str(png), "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    import json

    document = json.loads(result.stdout)
    landscape = document["landscape"]
    assert landscape["pareto_front"] and len(landscape["points"]) > len(landscape["pareto_front"])
    assert {p["tp"] for p in landscape["points"]} >= {1, 2, 4, 8}
    assert landscape["chosen"]["engine"] == "H100-SXM-80GB TP4 fp8"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_answer_landscape_only_when_asked():
    query = PerfQuery("llama-3-8b", "H100-SXM-80GB", 1000, 200, 1, "fp8", None, 500.0, None, None)
    assert api.curve(query).landscape is None
    assert api.curve(query, with_landscape=True).landscape.front


# ---- other plots -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "text"), [(0, "0"), (950, "950"), (800_000, "800k"), (1_250_000, "1.25M"),
                                             (3.78e9, "3.78B"), (12_345, "12.3k")])  # fmt: skip
def test_si_ticks(value, text):
    assert plots.si_number(value) == text


def test_cost_breakdown_labels_every_kind_zero_included_in_k_units(planned):
    plan = planned["scenarios/daily-hybrid.yaml"].plan
    figure = plots.cost_breakdown_figure(plan)
    axes = figure.axes[0]
    figure.canvas.draw()
    kinds = len(vars(plan.totals.cost_breakdown))
    labels = [t.get_text() for t in axes.texts]
    assert len(labels) == kinds and "0 USD" in labels
    ticks = [t.get_text() for t in axes.get_xticklabels() if t.get_text()]
    assert all(re.fullmatch(r"[\d.]+[kMB]?", t) for t in ticks) and any(t.endswith("k") for t in ticks)
    plt.close(figure)


@pytest.mark.parametrize("path", SCENARIOS)
def test_demand_and_lengths_legends_sit_under_the_axes(planned, path):
    p = planned[path]
    for figure in (plots.demand_capacity_figure(p.plan, p.scenario), plots.lengths_figure(p.plan, p.scenario)):
        assert _legend_clear_of_axes(figure, figure.axes[0])
        plt.close(figure)


@pytest.mark.parametrize("path", SCENARIOS)
def test_demand_vs_capacity_has_a_bar_per_workload_never_a_sum(planned, path):
    """Issue 34: requests/s of workloads of different sizes are never added up. Each bar is one workload's in one
    period (its gid says which), its height the plan's capacity of that workload (a disaggregated workload's pools
    counted once, as the plan counts them), and each demand mark one workload's demand."""
    plan = planned[path].plan
    figure = plots.demand_capacity_figure(plan, planned[path].scenario)
    (axes,) = figure.axes
    heights: dict[tuple[str, int], float] = {}
    for patch in axes.patches:
        kind, workload, _ = patch.get_gid().split("|")
        assert kind == "capacity" and workload in {w.name for w in plan.workloads}
        period = round(patch.get_x() + patch.get_width() / 2)
        heights[(workload, period)] = heights.get((workload, period), 0.0) + patch.get_height()
    for w in plan.workloads:
        for t, load in enumerate(w.periods):
            assert heights.get((w.name, t), 0.0) == pytest.approx(load.capacity_rps, rel=1e-6, abs=1e-9), (w.name, t)
    marks = {line.get_gid(): list(line.get_ydata()) for line in axes.get_lines() if line.get_gid()}
    assert marks == {f"demand|{w.name}": [p.demand_rps for p in w.periods] for w in plan.workloads}
    plt.close(figure)


# ---- tables: Markdown and HTML from the same formatted frames ----------------------------------------------------


def test_headers_for_people():
    assert human_header("unit_price_usd") == "Unit price (USD)"
    assert human_header("power_kw") == "Power (kW)"
    assert human_header("gpus") == "GPUs" and human_header("how") == "How paid"
    assert human_header("extended_price_usd") == "Extended price (USD)"
    assert human_header("my-workload") == "my-workload"  # a scenario's name stays as written


def test_cells_for_people():
    import pandas as pd

    assert format_cell(270000.0, "unit_price_usd") == "270,000.00"
    assert format_cell(142.8, "power_kw") == "142.8"
    assert format_cell(pd.NA) == "" and format_cell(None) == "" and format_cell(float("nan")) == ""
    assert format_cell(1234) == "1,234"
    assert format_cell(0.0806, "value") == "0.0806" and format_cell(5.0, "value") == "5"
    assert format_cell(1_234_567.5, "value") == "1,234,567.50"  # not 1.23457e+06


@pytest.mark.parametrize("path", SCENARIOS)
def test_markdown_and_html_show_the_same_formatted_tables(planned, path):
    report = build_report(planned[path])
    images = {name: b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + (10).to_bytes(4, "big") * 2 + b"\x00" * 20
              for name, _, _ in report.figures()}  # fmt: skip
    for _, figure, _ in report.figures():
        plt.close(figure)
    page, markdown = to_html(report, images), to_markdown(report)
    assert "<NA>" not in page and "&lt;NA&gt;" not in page and "nan" not in re.sub(r"<[^>]+>", " ", page).split()
    assert "n/s" not in page and "n/s" not in markdown
    headers = re.findall(r'<th scope="col">([^<]*)</th>', page)
    assert headers and not [h for h in headers if "_" in h], "snake_case header in the HTML"
    assert '<meta name="generator" content="planner">' in page  # rendered from the template
    for section in report.sections:
        for table in section.tables:
            shown = format_frame(table)
            for value in shown.values.ravel():
                if value and re.fullmatch(r"-?[\d,]+\.\d+", value):
                    assert value in markdown and value in page, f"{value} differs between Markdown and HTML"
    bom_rows = [row for row in re.findall(r"<tr class=\"total\">(.*?)</tr>", page)]
    assert bom_rows, "the TOTAL row is marked"
