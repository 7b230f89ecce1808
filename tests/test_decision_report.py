"""The report a decision can be made on (issue 34): the decision first, on-prem vs cloud vs hybrid side by side,
every engine's latencies at the SLO's percentile next to the limits, the simulator's verdict, the assumptions with
their sources, sensitivity; and plots that do not mislead (a stepped Pareto front with axes for people, demand
never summed across workloads, a colour per GPU, the binding latency on the curve).

One report of scenarios/chat-and-code-decision.yaml (two sites, two GPUs, two workloads) is built for the module
with a short simulation (--verify --seeds 1 --duration 60); the CLI paths run on the small llama3-8b-assistant."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import matplotlib
import pytest

matplotlib.use("Agg")

from planner import api  # noqa: E402
from planner.landscape import main_assignment  # noqa: E402
from planner.metrics import LABELS  # noqa: E402
from planner.plan import InstanceAllocation, PeriodLoad, Route  # noqa: E402
from planner.report import plots  # noqa: E402
from planner.report.document import build_report, precision_section, write_report  # noqa: E402
from planner.simulate import SimulationOptions  # noqa: E402

DECISION = "scenarios/chat-and-code-decision.yaml"
SMALL = "scenarios/llama3-8b-assistant.yaml"


@pytest.fixture(scope="module")
def decision(tmp_path_factory):
    """(planned, inputs, report, folder): the report as `planner report DECISION --verify --seeds 1 --duration 60`
    makes it (the same API calls), written to a folder; its figures stay open for the tests."""
    planned, inputs = api.decision_report(DECISION, verify_options=SimulationOptions(duration_s=60.0, seeds=1))
    report = build_report(planned, inputs)
    folder = tmp_path_factory.mktemp("decision") / "report"
    figures = {name: figure for name, figure, _ in report.figures()}
    write_report(report, folder)
    return SimpleNamespace(planned=planned, inputs=inputs, report=report, folder=folder, figures=figures,
                           markdown=(folder / "report.md").read_text(), html=(folder / "report.html").read_text())  # fmt: skip


def _section(report, title: str):
    return next(s for s in report.sections if s.title == title)


# ---- content ---------------------------------------------------------------------------------------------------


def test_the_decision_comes_first_with_cost_and_what_drives_it(decision):
    plan = decision.planned.plan
    first = decision.report.sections[0]
    assert first.title == "Decision summary"
    text = " ".join(first.paragraphs)
    assert text.startswith("**Decision: ")
    for system, nodes in plan.totals.nodes_by_system.items():
        assert f"{nodes} x" in text and f"`{system}`" in text
    assert f"{plan.objective_usd_per_year:,.0f} USD/year" in text
    per_gpu_hour = plan.objective_usd_per_year / api.gpu_hours_per_year(plan, decision.planned.scenario)
    assert f"{per_gpu_hour:,.2f} USD per GPU-hour" in text
    for workload in plan.workloads:  # each workload's peak and its tightest latency at P95
        assert f"**{workload.name}**: {workload.demand_rps:,.4g} requests/s" in text
    assert "tightest latency is ITL at P95" in text
    assert "The busiest workload is **" in text
    assert "No budget binds" in text or "Binding limits" in text  # from plan.binding_limits, nothing invented
    assert re.search(r"Simulation: (holds|inconclusive|a limit is conclusively MISSED)", text)
    assert decision.markdown.index("## Decision summary") < decision.markdown.index("## Requirements as read")


def test_on_prem_cloud_and_hybrid_side_by_side(decision):
    plan = decision.planned.plan
    (table,) = _section(decision.report, "On-prem, cloud and hybrid").tables
    assert list(table["Deployment"]) == ["on-prem", "cloud", "hybrid"]
    for result, (_, row) in zip(decision.inputs.comparison, table.iterrows()):
        if result.plan is None:
            assert row["Status"] != "optimal" and row["Note"], "a side not planned says why"
            continue
        cost = result.plan.objective_usd_per_year
        assert row["Annual cost (USD/year)"] == f"{cost:,.0f}"
        assert row["USD per GPU-hour"] == f"{cost / api.gpu_hours_per_year(result.plan, decision.planned.scenario):,.2f}"
        assert row["GPUs"] == f"{result.plan.totals.gpus:,}" and row["Nodes"] == f"{result.plan.totals.nodes:,}"
    mine = table[table["Deployment"] == plan.deployment].iloc[0]
    assert mine["Annual cost (USD/year)"] == f"{plan.objective_usd_per_year:,.0f}" and "this report's plan" in mine["Note"]
    assert "| Deployment | Status | Annual cost (USD/year) | USD per GPU-hour |" in decision.markdown


def test_the_reports_plan_is_the_plan_planner_plan_makes(decision):
    """The report's plan is `planner plan`'s plan (with its notes), and the comparison's row of its deployment."""
    alone = api.plan_in_context(DECISION).plan
    plan = decision.planned.plan
    assert plan.objective_usd_per_year == pytest.approx(alone.objective_usd_per_year, rel=1e-9)
    assert plan.totals.nodes_by_system == alone.totals.nodes_by_system


def test_every_engine_latency_at_p95_next_to_its_limit(decision):
    plan, scenario = decision.planned.plan, decision.planned.scenario
    section = _section(decision.report, "Latency against the limits, per engine")
    table = section.tables[0]
    columns = list(table.columns)
    for metric in ("TTFT", "ITL"):  # the limited ones: value at P95, then the limit beside it
        assert columns.index(f"{metric} limit (ms)") == columns.index(f"{metric} at P95 (ms)") + 1
    serving = [(w, a) for w in plan.workloads for a in w.assignments if a.rps > 0]
    assert len(table) == len(serving), "one row per (workload, engine configuration with requests)"
    slo = {w.name: w.slo for w in scenario.workloads}
    for (w, a), (_, row) in zip(serving, table.iterrows()):
        assert row["Workload"] == w.name and a.system == row["System"]
        assert row["ITL at P95 (ms)"] == f"{a.itl_ms:,.1f}" and row["ITL limit (ms)"] == f"{slo[w.name].itl_ms:,g}"
        assert row["TTFT at P95 (ms)"] == f"{a.ttft_ms:,.1f}" and row["TTFT limit (ms)"] == f"{slo[w.name].ttft_ms:,g}"
        assert row["Within the limits"] == "met"
    assert len({row["Workload"] for _, row in table.iterrows()}) == len(plan.workloads)
    assert "ITL at P95 (ms) | ITL limit (ms)" in decision.markdown
    loads = section.tables[1]  # demand vs capacity per workload and period, with the engines behind it
    assert len(loads) == len(plan.workloads) * len(plan.periods)
    assert all(row["Served by (requests/s of capacity)"] for _, row in loads.iterrows())


def test_the_simulation_verdict_per_workload_and_period(decision):
    section = _section(decision.report, "Simulation verdict")
    (table,) = section.tables
    plan = decision.planned.plan
    assert {(r["Workload"], r["Period"]) for _, r in table.iterrows()} == {
        (w.name, p) for w in plan.workloads for p in plan.periods}
    assert set(table["Verdict"]) <= {"holds", "misses", "inconclusive"}
    assert set(table["Limit"]) == {"TTFT at P95", "ITL at P95"}
    assert all(row["Simulated (ms)"] and row["Limit (ms)"] for _, row in table.iterrows())
    text = " ".join(section.paragraphs)
    assert "Verdict: **" in text and "--verify: 60 s simulated per workload and period, 1 seed" in text


def test_assumptions_with_their_sources_and_the_optional_sections(decision):
    (table,) = _section(decision.report, "Assumptions and their sources").tables
    names = list(table["name"])
    for expected in ("amortization_years", "usd_per_kwh", "pue", "utilization_power_factor", "headroom_fraction",
                     "hours_per_year working-hours", "price dgx-b200 (capex)", "price dgx-h200 (capex)"):  # fmt: skip
        assert expected in names, expected
    assert all(table["source"]), "every assumption names its source"
    sensitivity = _section(decision.report, "Sensitivity to demand and throughput")
    assert "--sensitivity" in sensitivity.paragraphs[0] and not sensitivity.tables
    # the scenario leaves precisions to the default (quality-keeping formats): the plan states what fp4 would save
    (precision,) = [s for s in decision.report.sections if s.title == "Precision decision"]
    assert decision.planned.plan.precision_note and decision.planned.plan.precision_note[1:] in " ".join(precision.paragraphs)


def test_the_precision_section_renders_what_the_plan_states():
    plan = SimpleNamespace(precision_note="fp4 on B200 instead of fp8 halves the nodes", precision_saving_usd_per_year=123456.0)
    section = precision_section(SimpleNamespace(plan=plan))
    assert section.title == "Precision decision"
    text = " ".join(section.paragraphs)
    assert "Fp4 on B200 instead of fp8 halves the nodes." in text and "123,456 USD/year" in text
    assert precision_section(SimpleNamespace(plan=SimpleNamespace())) is None


# ---- plots -----------------------------------------------------------------------------------------------------


def test_demand_vs_capacity_never_sums_workloads(decision):
    plan = decision.planned.plan
    figure = decision.figures["demand-capacity.png"]
    (axes,) = figure.axes
    bars: dict[tuple[str, int], float] = {}
    for patch in axes.patches:
        kind, workload, _ = patch.get_gid().split("|")
        assert kind == "capacity"
        period = round(patch.get_x() + patch.get_width() / 2)  # bars sit around their period's index
        bars[(workload, period)] = bars.get((workload, period), 0.0) + patch.get_height()
    for w in plan.workloads:
        for t, load in enumerate(w.periods):
            assert bars[(w.name, t)] == pytest.approx(load.capacity_rps, rel=1e-6), (w.name, load.period)
    totals = [sum(w.periods[t].capacity_rps for w in plan.workloads) for t in range(len(plan.periods))]
    assert not any(v == pytest.approx(totals[t]) for (_, t), v in bars.items()), "a bar adds two workloads up"
    marks = {line.get_gid(): list(line.get_ydata()) for line in axes.get_lines() if line.get_gid()}
    for w in plan.workloads:
        assert marks[f"demand|{w.name}"] == [p.demand_rps for p in w.periods]
    assert all(len(set(bar_gid.split("|")[1] for bar_gid in [p.get_gid()])) == 1 for p in axes.patches)


def _route(workload, system, stage, rps, rps_per_instance, period="all", role="bought"):
    return Route(period, workload, 1000, 200, "on-prem", role, system, "m", 8, "fp8", 64, 1000, 200, rps,
                 rps_per_instance * 1, rps_per_instance, stage, "TP8")  # fmt: skip


def _allocation(system, stage, instances, period="all", role="bought"):
    return InstanceAllocation(period, "on-prem", role, system, "H100-SXM-80GB", "m", 8, "fp8", 64, 1000, 200, 8,
                              instances, instances * 8, 0.0, stage, "TP8")  # fmt: skip


def _workload(name, demand, capacity):
    return SimpleNamespace(name=name, periods=(PeriodLoad("all", demand, capacity),))


def test_disaggregated_pools_count_once_and_shared_engines_split_by_load():
    # a disaggregated workload: prefill pool on sys-a takes 10 rps, decode pool on sys-b 6: a request needs both
    plan = SimpleNamespace(
        periods=("all",),
        routing=(_route("chat", "sys-a", "prefill", 6.0, 5.0), _route("chat", "sys-b", "decode", 6.0, 3.0)),
        instances=(_allocation("sys-a", "prefill", 2), _allocation("sys-b", "decode", 2)),
        workloads=(_workload("chat", 6.0, 6.0),),
    )  # fmt: skip
    parts = plots.capacity_by_workload(plan)[("chat", "all")]
    assert parts == {"sys-b (bought)": pytest.approx(6.0)}, "the lesser pool, once: not 10 + 6"
    # two workloads on one engine configuration: its 3 instances split by the instance time each takes
    shared = SimpleNamespace(
        periods=("all",),
        routing=(_route("a", "sys-a", "aggregated", 4.0, 4.0), _route("b", "sys-a", "aggregated", 2.0, 2.0)),
        instances=(_allocation("sys-a", "aggregated", 3),),
        workloads=(_workload("a", 4.0, 6.0), _workload("b", 2.0, 3.0)),
    )  # fmt: skip
    split = plots.capacity_by_workload(shared)
    assert split[("a", "all")] == {"sys-a (bought)": pytest.approx(6.0)}
    assert split[("b", "all")] == {"sys-a (bought)": pytest.approx(3.0)}


def test_engines_chart_has_a_colour_per_gpu_and_a_marker_per_precision(decision):
    figure = decision.figures["engines-chat.png"]
    (axes,) = figure.axes
    colours: dict[str, set] = {}
    markers: dict[str, set] = {}
    for collection in axes.collections:
        gid = collection.get_gid() or ""
        if not gid.startswith("engines|"):
            continue
        _, gpu, precision, kind = gid.split("|")
        rgba = collection.get_facecolor() if kind == "within" else collection.get_edgecolor()
        colours.setdefault(gpu, set()).add(tuple(round(v, 3) for v in rgba[0][:3]))
        markers.setdefault(precision, set()).add(id(collection.get_paths()[0]))
    assert {"B200-SXM-180GB", "H200-SXM-141GB"} <= set(colours), colours.keys()
    assert all(len(c) == 1 for c in colours.values()), "one colour per GPU"
    assert colours["B200-SXM-180GB"] != colours["H200-SXM-141GB"]
    labels = [line.get_label() for line in axes.get_lines()]
    assert any(label.startswith("B200-SXM-180GB (") for label in labels)
    assert any(label.startswith("H200-SXM-141GB (") for label in labels)
    assert any(label in ("fp8", "fp4", "bf16") for label in labels), "a marker per precision in the legend"


def test_curve_shows_the_binding_latency(decision):
    plan, scenario = decision.planned.plan, decision.planned.scenario
    for workload in plan.workloads:
        main = main_assignment(plan, workload.name)
        slo = next(w.slo for w in scenario.workloads if w.name == workload.name)
        ratios = {m: getattr(main, m) / v for m, v in (("ttft_ms", slo.ttft_ms), ("itl_ms", slo.itl_ms)) if v}
        binding = max(ratios, key=ratios.get)
        name = f"curve-{workload.name}.png"
        axes = decision.figures[name].axes[0]
        assert axes.get_ylabel().startswith(LABELS[binding]) and "at P95 (ms)" in axes.get_ylabel()
        limit = [line for line in axes.get_lines() if line.get_label().startswith("limit")]
        assert limit and limit[0].get_ydata()[0] == pytest.approx(getattr(slo, binding))
        chosen = [line for line in axes.get_lines() if line.get_label().startswith("chosen operating point")]
        assert chosen and chosen[0].get_ydata()[0] == pytest.approx(getattr(main, binding), rel=0.02)
        labels = " ".join(line.get_label() for line in axes.get_lines())
        marks = [t.get_text() for t in axes.texts if re.fullmatch(r"c\d+", t.get_text())]
        assert marks and "concurrency not stated" not in labels, "cN marks and the legend agree"
    assert "ITL at P95 shown: the binding limit" in decision.markdown


def test_pareto_front_is_a_step_with_axes_for_people():
    records = [
        {"point": 0, "x_ms": 10, "objective_usd_per_year": 900.0, "status": "optimal"},
        {"point": 1, "x_ms": 20, "objective_usd_per_year": 600.0, "status": "optimal"},
        {"point": 2, "x_ms": 25, "objective_usd_per_year": 650.0, "status": "optimal"},
        {"point": 3, "x_ms": 40, "objective_usd_per_year": 300.0, "status": "optimal"},
        {"point": 4, "x_ms": 60, "objective_usd_per_year": 300.0, "status": "optimal"},
    ]
    from planner.sweep import pareto_front

    field = "workloads.code.slo.itl_ms"
    records = [{**r, field: r.pop("x_ms")} for r in records]
    front = pareto_front(records, field, "objective_usd_per_year")
    figure = plots.pareto_figure(records, field, "objective_usd_per_year", front)
    axes = figure.axes[0]
    (step,) = [line for line in axes.get_lines() if line.get_gid() == "pareto-step"]
    assert step.get_drawstyle() == "steps-post"
    from matplotlib.cbook import STEP_LOOKUP_MAP

    xs, ys = STEP_LOOKUP_MAP["steps-post"](step.get_xdata(), step.get_ydata())
    # the cost holds at a front point's level until the next point: (10, 900) -> (20, 900) -> (20, 600) ...
    assert list(zip(xs, ys))[:4] == [(10, 900.0), (20, 900.0), (20, 600.0), (40, 600.0)]
    assert (xs[-1], ys[-1]) == (60, 300.0), "the last level holds to the last sweep point"
    assert axes.get_xlabel() == "code: ITL limit (ms)" and axes.get_ylabel() == "Annual cost (USD/year)"


@pytest.mark.parametrize(("field", "label"), [
    ("workloads.chat.slo.ttft_ms", "chat: TTFT limit (ms)"), ("workloads.summarize.slo.tpot_ms", "summarize: TPOT limit (ms)"),
    ("workloads.chat.peak_rps", "chat: peak demand (requests/s)"), ("objective_usd_per_year", "Annual cost (USD/year)"),
    ("limits.power_kw", "power (kW)"), ("sites.on_prem.price_usd.dgx-h100", "dgx-h100: price (USD)"),
    ("something.wait_ms", "wait (ms)"), ("x.budget_usd_per_year", "budget (USD/year)"), ("x.load_rps", "load (requests/s)"),
])  # fmt: skip
def test_axis_labels_for_people(field, label):
    assert plots.axis_label(field) == label


# ---- the CLI ---------------------------------------------------------------------------------------------------


def test_report_cli_verify_and_a_plan_files_verification(cli, tmp_path):
    code, _, err = cli("report", SMALL, "--out", tmp_path / "r0", "--duration", "60")
    assert code == 2 and "--verify" in err and not (tmp_path / "r0").exists()
    code, out, err = cli("report", SMALL, "--out", tmp_path / "r1", "--progress", "none")
    assert code == 0, err
    markdown = (tmp_path / "r1" / "report.md").read_text()
    assert "Not simulated: run with --verify" in markdown and "simulation: not simulated" in out
    assert "The scenario has one site (on-prem)" in markdown  # no table to set side by side
    # a plan saved with its verification: the report shows that one, not simulated again
    code, out, err = cli("plan", SMALL, "--verify", "--duration", "60", "--json", "--progress", "none")
    assert code in (0, 5, 6), err
    saved = tmp_path / "plan.json"
    saved.write_text(out)
    verdict = json.loads(out)["verification"]["verdict"]
    code, out, err = cli("report", SMALL, "--plan", saved, "--out", tmp_path / "r2", "--progress", "none")
    assert code == 0, err
    markdown = (tmp_path / "r2" / "report.md").read_text()
    assert "the plan file's (`planner plan --verify --json`)" in markdown and f"simulation: {verdict}" in out
    assert "| assistant | all | " in markdown  # the verdict table's rows
    code, out, err = cli("report", SMALL, "--plan", saved, "--out", tmp_path / "r3", "--verify", "--duration", "30",
                         "--progress", "none")  # fmt: skip
    assert code == 0, err
    assert "simulated for this report (--verify: 30 s" in (tmp_path / "r3" / "report.md").read_text()


def test_sensitivity_is_opt_in_and_tabled(tmp_path):
    planned, inputs = api.decision_report(SMALL, with_sensitivity=True)
    section = _section(build_report(planned, inputs), "Sensitivity to demand and throughput")
    (table,) = section.tables
    assert list(table.columns) == ["Throughput scale", "demand x 0.8", "demand x 1", "demand x 1.2", "demand x 1.5"]
    assert list(table["Throughput scale"]) == ["x 1", "x 0.8"]
    assert table.iloc[0]["demand x 1"].startswith("holds / ")
    assert table.iloc[1]["demand x 1.5"].startswith("BREAKS / "), "a fleet sized for x1 does not serve x1.5 at 0.8"
    for _, figure, _ in build_report(planned, inputs).figures():
        plots.plt.close(figure)
