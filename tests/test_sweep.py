"""Sweeps: grid and Monte Carlo points, local process pool vs in-process (same records), Ray when installed,
tables, the Pareto front and its plot."""

from __future__ import annotations

import importlib.util
import json

import pytest
import yaml

from planner.api import sweep
from planner.errors import PlannerInputError
from planner.sweep import load_sweep, pareto_front, set_field
from helpers import SCENARIOS

C1 = SCENARIOS / "contact-center.yaml"


def write_sweep(tmp_path, document: dict):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"scenario": str(C1), **document}, sort_keys=False))
    return path


GRID = {"grid": {"workloads.call-summaries.peak_rps": [10, 31, 50], "workloads.call-summaries.slo.ttft_ms": [2000, 3000]},
        "pareto": {"x": "workloads.call-summaries.slo.ttft_ms"}}  # fmt: skip


def test_grid_points_are_planned_in_order_with_infeasible_points_recorded(tmp_path):
    result = sweep(write_sweep(tmp_path, GRID))
    records = result.records
    assert [r["point"] for r in records] == list(range(6))
    by_values = {(r["workloads.call-summaries.peak_rps"], r["workloads.call-summaries.slo.ttft_ms"]): r for r in records}
    # the measured point: 2.4 rps per DGX H100 at TTFT 2606 ms
    assert by_values[(31, 3000)]["nodes"] == 13 and by_values[(50, 3000)]["nodes"] == 21
    assert by_values[(10, 2000)]["status"] == "infeasible" and "2606" in by_values[(10, 2000)]["error"]
    assert [r["point"] for r in result.front] == [by_values[(10, 3000)]["point"]]


def test_two_workers_give_the_same_records_as_one(tmp_path):
    path = write_sweep(tmp_path, GRID)
    assert sweep(path, workers=2).records == sweep(path, workers=1).records


def test_monte_carlo_samples_are_seeded_and_within_bounds(tmp_path):
    document = {"monte_carlo": {"samples": 6, "seed": 3, "fields": {
        "workloads.call-summaries.peak_rps": {"uniform": [20, 40]},
        "sites.on_prem.price_usd.dgx-h100": {"choice": [250000, 270000]},
    }}}  # fmt: skip
    first = load_sweep(write_sweep(tmp_path, document)).points
    assert first == load_sweep(write_sweep(tmp_path, document)).points
    assert all(20 <= p["workloads.call-summaries.peak_rps"] <= 40 for p in first)
    result = sweep(write_sweep(tmp_path, document))
    for record in result.records:
        nodes = -(-record["workloads.call-summaries.peak_rps"] // 2.4)
        assert record["nodes"] == nodes


def test_unknown_path_fails_before_anything_runs(tmp_path):
    with pytest.raises(PlannerInputError) as error:
        load_sweep(write_sweep(tmp_path, {"grid": {"workloads.calls.peak_rps": [1]}}))
    assert "no list item named 'calls'" in str(error.value) and "call-summaries" in str(error.value)


def test_sweep_needs_something_to_vary(tmp_path, cli):
    code, out, err = cli("sweep", write_sweep(tmp_path, {}))
    assert code == 2 and "give a grid" in err


def test_set_field_by_name_and_index():
    document = {"workloads": [{"name": "a", "slo": {}}, {"name": "b"}]}
    set_field(document, "workloads.a.slo.ttft_ms", 100)
    set_field(document, "workloads.1.peak_rps", 5)
    assert document["workloads"][0]["slo"]["ttft_ms"] == 100 and document["workloads"][1]["peak_rps"] == 5


def test_pareto_front_keeps_only_undominated_points():
    records = [
        {"point": 0, "x": 10, "objective_usd_per_year": 500.0, "status": "optimal"},
        {"point": 1, "x": 20, "objective_usd_per_year": 300.0, "status": "optimal"},
        {"point": 2, "x": 20, "objective_usd_per_year": 400.0, "status": "optimal"},  # dominated by 1
        {"point": 3, "x": 30, "objective_usd_per_year": 350.0, "status": "optimal"},  # dominated by 1
        {"point": 4, "x": 40, "objective_usd_per_year": 100.0, "status": "optimal"},
        {"point": 5, "x": 5, "objective_usd_per_year": None, "status": "infeasible"},
    ]
    assert [r["point"] for r in pareto_front(records, "x", "objective_usd_per_year")] == [0, 1, 4]


def test_cli_writes_the_table_and_a_labelled_pareto_plot(tmp_path, cli):
    out, plot = tmp_path / "points.csv", tmp_path / "pareto.png"
    code, stdout, err = cli("sweep", write_sweep(tmp_path, GRID), "--out", out, "--plot", plot, "--json")
    assert code == 0, err
    import pandas as pd

    frame = pd.read_csv(out)
    assert len(frame) == 6 and list(frame.columns[:3]) == ["point", "workloads.call-summaries.peak_rps",
                                                           "workloads.call-summaries.slo.ttft_ms"]  # fmt: skip
    assert plot.stat().st_size > 0
    assert len(json.loads(stdout)["points"]) == 6
    from planner.report.plots import pareto_figure

    records = json.loads(stdout)["points"]
    axes = pareto_figure(records, "workloads.call-summaries.slo.ttft_ms", "objective_usd_per_year", []).axes[0]
    assert axes.get_xlabel() == "call-summaries: TTFT limit (ms)" and axes.get_ylabel() == "Annual cost (USD/year)"


def test_parquet_output_or_a_clear_message(tmp_path, cli):
    out = tmp_path / "points.parquet"
    code, stdout, err = cli("sweep", write_sweep(tmp_path, GRID), "--out", out)
    if importlib.util.find_spec("pyarrow") is None:
        assert code == 2 and "pip install '.[parquet]' in the planner checkout" in err
    else:
        import pandas as pd

        assert code == 0 and len(pd.read_parquet(out)) == 6


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="the optional ray extra is not installed")
def test_ray_executor_gives_the_same_records(tmp_path):
    path = write_sweep(tmp_path, GRID)
    assert sweep(path, executor="ray").records == sweep(path, workers=1).records


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="the optional ray extra is not installed")
def test_ray_executor_keeps_workers_tasks_in_flight(tmp_path, monkeypatch):
    import ray

    started, in_flight = [], []
    init, wait = ray.init, ray.wait
    monkeypatch.setattr(ray, "init", lambda **kw: started.append(kw) or init(**kw))
    monkeypatch.setattr(ray, "wait", lambda refs, **kw: in_flight.append(len(refs)) or wait(refs, **kw))
    path = write_sweep(tmp_path, GRID)
    assert sweep(path, executor="ray", workers=2).records == sweep(path, workers=1).records
    assert started and started[0]["num_cpus"] == 2  # a local Ray started here gets that many CPUs
    assert in_flight and max(in_flight) == 2  # and never more than 2 points are out at once


def test_ray_missing_is_a_clear_input_error(tmp_path, cli):
    if importlib.util.find_spec("ray") is not None:
        pytest.skip("ray is installed: the executor test above covers it")
    code, stdout, err = cli("sweep", write_sweep(tmp_path, GRID), "--executor", "ray")
    assert code == 2 and "pip install '.[ray]' in the planner checkout" in err


def test_shipped_sweep_example_loads():
    loaded = load_sweep(SCENARIOS / "sweeps" / "summarize-tpot.yaml")
    assert len(loaded.points) == 6 * 4 and loaded.pareto.x == "workloads.summarize.slo.tpot_ms"


@pytest.mark.parametrize("monte_carlo, where", [
    ({"samples": True, "fields": {"workloads.call-summaries.peak_rps": {"uniform": [10, 30]}}}, "samples"),
    ({"samples": 2, "fields": {"workloads.call-summaries.peak_rps": {"uniform": [False, 30]}}}, "uniform"),
])  # fmt: skip
def test_a_boolean_is_not_a_number_in_a_sweep_either(tmp_path, monte_carlo, where):
    """The rule of catalogs and scenarios (issue 33) lives in StrictModel, so sweep files have it too."""
    with pytest.raises(PlannerInputError) as error:
        load_sweep(write_sweep(tmp_path, {"monte_carlo": monte_carlo}))
    assert where in str(error.value) and "not true or false" in str(error.value)
    monte_carlo["samples"], monte_carlo["fields"]["workloads.call-summaries.peak_rps"]["uniform"] = 2, [10, 30]
    assert len(load_sweep(write_sweep(tmp_path, {"monte_carlo": monte_carlo})).points) == 2


def test_a_sweep_point_pays_no_savings_re_solve(tmp_path, monkeypatch):
    """chat-and-code-decision plans without `precisions:` on B200 (fp4 tensor cores): a plan prices fp4 with one
    more solve; a sweep point records its cost alone, and the same cost as that plan."""
    import planner.optimize as optimize
    from planner.api import plan_in_context

    scenario = SCENARIOS / "chat-and-code-decision.yaml"
    calls = []
    original = optimize._precision_saving
    monkeypatch.setattr(optimize, "_precision_saving", lambda *a, **k: calls.append(1) or original(*a, **k))
    planned = plan_in_context(scenario)
    assert calls == [1], "the plan prices fp4 once"
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"scenario": str(scenario), "grid": {"solver.time_limit_s": [60]}}))
    records = sweep(path, workers=1).records
    assert calls == [1], "the sweep point did not re-solve"
    assert records[0]["objective_usd_per_year"] == planned.plan.objective_usd_per_year
