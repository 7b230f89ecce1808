"""Robust plans (capacity derate, demand forecasts), where a plan breaks, sensitivity grids, loader fuzzing."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.api import plan_file, sensitivity
from planner.candidates import enumerate_candidates
from planner.catalog import load_catalog
from planner.errors import PlannerInputError
from planner.optimize import solve_candidates
from planner.robustness import demand_multiplier_limit, derate, plan_robust
from planner.scenario import load_scenario
from helpers import SCENARIOS, write_scenario

C1 = SCENARIOS / "contact-center.yaml"


@pytest.fixture(scope="module")
def c1(catalog):
    scenario = load_scenario(C1, catalog)
    return scenario, enumerate_candidates(scenario, catalog)


def test_nominal_plan_fails_a_20_percent_derate_and_the_robust_plan_holds(c1, catalog):
    scenario, cset = c1
    nominal = solve_candidates(scenario, cset, catalog)
    # 13 nodes x 2.4 rps = 31.2 for 31 rps: at 80% throughput the fleet serves 31.2 x 0.8 = 25 rps
    assert demand_multiplier_limit(nominal, scenario, derate(cset, 0.2), catalog) == pytest.approx(13 * 2.4 * 0.8 / 31)
    assert demand_multiplier_limit(nominal, scenario, derate(cset, 0.2), catalog) < 1
    robust = plan_robust(dataclasses.replace(scenario, perf_margin=0.2), catalog)
    assert sum(line.nodes for line in robust.lines) == math.ceil(31 / (2.4 * 0.8))  # 17
    assert demand_multiplier_limit(robust, scenario, derate(cset, 0.2), catalog) >= 1
    r = robust.robustness
    assert r.nominal_objective_usd_per_year == nominal.objective_usd_per_year
    assert r.cost_of_robustness_usd_per_year == pytest.approx(robust.objective_usd_per_year - nominal.objective_usd_per_year)
    assert r.cost_of_robustness_usd_per_year > 0


def test_demand_forecasts_are_all_served(tmp_path, catalog):
    document = yaml.safe_load(C1.read_text())
    document["robustness"] = {"demand_forecasts": [
        {"name": "base", "scale": {"call-summaries": 1.0}}, {"name": "growth", "scale": {"call-summaries": 1.3}},
    ]}  # fmt: skip
    path = write_scenario(tmp_path, document)
    robust = plan_file(path)
    assert sum(line.nodes for line in robust.lines) == math.ceil(31 * 1.3 / 2.4)
    scenario = load_scenario(path, catalog)
    assert demand_multiplier_limit(robust, scenario, enumerate_candidates(scenario, catalog), catalog) >= 1.3
    assert robust.robustness.forecasts == ("base", "growth")
    assert robust.robustness.demand_scales == {"call-summaries": 1.3}


def test_forecast_naming_an_unknown_workload_is_an_input_error(tmp_path, cli):
    document = yaml.safe_load(C1.read_text())
    document["robustness"] = {"demand_forecasts": [{"name": "x", "scale": {"calls": 2.0}}]}
    code, out, err = cli("validate", write_scenario(tmp_path, document))
    assert code == 2 and "robustness.demand_forecasts[0:x].scale.calls" in err and "Workloads: call-summaries" in err


def test_cli_perf_margin_reports_the_cost_of_robustness(cli_json, cli):
    document = cli_json("plan", C1, "--perf-margin", "0.2")
    assert document["robustness"]["perf_margin"] == 0.2
    assert document["robustness"]["cost_of_robustness_usd_per_year"] > 0
    assert document["robustness"]["nominal_demand_multiplier_limit"] == pytest.approx(13 * 2.4 / 31)
    code, out, err = cli("plan", C1, "--perf-margin", "1.5")
    assert code == 2 and "--perf-margin" in err


def test_nominal_plan_has_no_robustness_block(cli_json):
    assert cli_json("plan", C1)["robustness"] is None


def test_sensitivity_holds_exactly_where_demand_over_throughput_is_within_the_limit(catalog):
    result = sensitivity(C1, throughput_scales=(1.0, 0.8), demand_scales=(1.0, 1.25), latency_scales=(1.0,))
    assert result.demand_multiplier_limit == pytest.approx(13 * 2.4 / 31)
    for point in result.points:
        assert point.nominal_holds == (point.demand_scale / point.throughput_scale <= result.demand_multiplier_limit + 1e-9)
        expected_nodes = math.ceil(31 * point.demand_scale / (2.4 * point.throughput_scale) - 1e-9)
        assert point.plan_nodes == expected_nodes, point
    # the plan made for the nominal point is the nominal plan
    nominal_point = next(p for p in result.points if p.throughput_scale == 1.0 and p.demand_scale == 1.0)
    assert nominal_point.plan_objective_usd_per_year == result.nominal_objective_usd_per_year


def test_sensitivity_says_its_multiplier_keeps_the_scenarios_headroom(tmp_path, cli):
    document = yaml.safe_load(C1.read_text())
    document.setdefault("limits", {})["headroom_fraction"] = 0.1
    path = write_scenario(tmp_path, document)
    result = sensitivity(path, throughput_scales=(1.0,), demand_scales=(1.0,), latency_scales=(1.0,))
    assert result.headroom_fraction == 0.1 and "10% headroom still kept free" in result.headroom_note
    assert f"{result.demand_multiplier_limit * 1.1:.3g} x the demand" in result.headroom_note
    code, out, err = cli("sensitivity", path, "--throughput", "1", "--demand", "1", "--latency", "1")
    assert code == 0, err
    assert "headroom still kept free" in " ".join(out.split())
    plain = sensitivity(C1, throughput_scales=(1.0,), demand_scales=(1.0,), latency_scales=(1.0,))
    assert plain.headroom_note == ""


def test_sensitivity_tightened_latency_limit_breaks_the_plan(catalog):
    # the measured point has TTFT 2606 ms: a limit of 3000 x 0.8 = 2400 ms is below it
    result = sensitivity(C1, throughput_scales=(1.0,), demand_scales=(1.0,), latency_scales=(1.0, 0.8))
    tight = next(p for p in result.points if p.latency_scale == 0.8)
    assert not tight.nominal_holds and "ttft_ms 2606" in tight.nominal_reason
    assert tight.plan_status == "infeasible"


def test_sensitivity_cli_writes_csv_and_json(tmp_path, cli):
    out = tmp_path / "grid.csv"
    code, stdout, err = cli("sensitivity", C1, "--throughput", "1,0.8", "--demand", "1", "--out", out, "--json")
    assert code == 0, err
    document = json.loads(stdout)
    assert len(document["points"]) == 2
    import pandas as pd

    frame = pd.read_csv(out)
    assert list(frame["nominal_holds"]) == [True, False]
    code, stdout, err = cli("sensitivity", C1, "--throughput", "1,abc")
    assert code == 2 and "comma-separated numbers" in err


def test_sensitivity_rejects_out_of_range_scales():
    with pytest.raises(PlannerInputError):
        sensitivity(C1, throughput_scales=(0.0,))


# ---- loader fuzzing: random and mutated scenario YAML never gives a traceback ----

_BASE = yaml.safe_load(C1.read_text())
_leaf = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**6), st.floats(allow_nan=True, allow_infinity=True),
                  st.text(max_size=12), st.lists(st.integers(-3, 3), max_size=3))  # fmt: skip


def _paths(node, prefix=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield prefix + (key,)
            yield from _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield prefix + (index,)
            yield from _paths(value, prefix + (index,))


_PATHS = list(_paths(_BASE))


def _mutated(path, value, drop):
    document = json.loads(json.dumps(_BASE))
    node = document
    for key in path[:-1]:
        node = node[key]
    if drop and isinstance(node, dict):
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value
    return document


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(_PATHS), value=_leaf, drop=st.booleans())
def test_mutated_scenarios_load_or_fail_with_an_input_error(tmp_path_factory, path, value, drop):
    catalog = load_catalog()
    file = tmp_path_factory.mktemp("fuzz") / "scenario.yaml"
    file.write_text(yaml.safe_dump(_mutated(path, value, drop)))
    try:
        load_scenario(file, catalog)
    except PlannerInputError as error:
        assert error.file == str(file) and str(error).strip()


@settings(max_examples=40, deadline=None)
@given(text=st.text(max_size=200))
def test_random_text_never_gives_a_traceback(tmp_path_factory, text):
    from typer.testing import CliRunner

    from planner.cli import app

    file = tmp_path_factory.mktemp("fuzz") / "scenario.yaml"
    file.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(app, ["validate", str(file)])
    assert result.exit_code in (0, 2), result.output
    assert "Traceback" not in result.output


# ---- determinism: the same inputs give the same bytes ----


@pytest.mark.parametrize("scenario", ["daily-hybrid.yaml", "chat-and-summarize.yaml"])
def test_plan_json_is_the_same_bytes_but_for_the_solve_time(cli, scenario):
    runs = []
    for _ in range(2):
        code, out, err = cli("plan", SCENARIOS / scenario, "--json")
        assert code == 0, err
        document = json.loads(out)
        assert isinstance(document.pop("solve_seconds"), float)  # the one wall-clock field (design.md asks for it)
        runs.append(json.dumps(document, sort_keys=False))
    assert runs[0] == runs[1]


def test_csv_outputs_are_the_same_bytes(tmp_path, cli):
    outputs = []
    for run in range(2):
        bom, grid = tmp_path / f"bom{run}.csv", tmp_path / f"grid{run}.csv"
        assert cli("bom", SCENARIOS / "daily-hybrid.yaml", "--format", "csv", "--out", bom)[0] == 0
        assert cli("sensitivity", C1, "--throughput", "1,0.8", "--demand", "1,1.5", "--out", grid)[0] == 0
        outputs.append((bom.read_bytes(), grid.read_bytes()))
    assert outputs[0] == outputs[1]


@pytest.mark.parametrize("share", [True, False])
def test_idle_gpus_of_the_plan_count_before_it_breaks(tmp_path, share):
    """One node of 8 GPUs running a single TP1 engine (10 requests/s per instance) for 8 requests/s: with nodes
    shared, 7 GPUs idle could run 7 more engines at the same cost, so the plan holds to 8 x 10 / 8 = 10 x the
    demand (it said 1.25: only the running engine counted); not shared, the node's unit is all 8 engines already."""
    from helpers import make_catalog, on_prem_system

    row = "test fixture,llama-3-8b,H100-SXM-80GB,1,1,bf16,1000,100,16,online,100,,10,,10,,instance,"
    catalog = load_catalog(make_catalog(tmp_path, [on_prem_system("rack", "H100-SXM-80GB", 100_000.0)], [row]))
    document = {
        "name": "idle", "perf": {"sources": ["measured"]},
        "workloads": [{"name": "chat", "model": "llama-3-8b", "isl_tokens": 1000, "osl_tokens": 100, "peak_rps": 8,
                       "slo": {"ttft_ms": 500}}],
        "sites": {"on_prem": {"systems": ["rack"]}},
        "fleet": {"share_nodes_across_models": share},
    }  # fmt: skip
    scenario = load_scenario(write_scenario(tmp_path, document), catalog)
    cset = enumerate_candidates(scenario, catalog)
    nominal = solve_candidates(scenario, cset, catalog)
    assert sum(line.nodes for line in nominal.lines) == 1
    assert sum(i.instances for i in nominal.instances) == (1 if share else 8)
    assert demand_multiplier_limit(nominal, scenario, cset, catalog) == pytest.approx(8 * 10 / 8)
    # throughput x 0.2 and demand x 2: 2 / 0.2 = 10 <= 10 holds; at demand x 2.5 it breaks
    from planner.robustness import sensitivity as grid

    result = grid(scenario, catalog, throughput_scales=(0.2,), demand_scales=(2.0, 2.5))
    assert [p.nominal_holds for p in result.points] == [True, False]
