"""A saved plan file is a fleet: every figure derived from it is recomputed from the scenario and catalog, and a
file that disagrees with itself or with them is refused naming the field (issue 47, cause 1:
planner/optimize/recheck.py). Each edit below was once accepted: `bom` printed 1 node with 104 GPUs, a TOTAL of 1.0
over rows adding to 2.3M, a line of -5 USD; `simulate` ran 13 instances on 1 node and said "holds"."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from helpers import SCENARIOS, planned_document
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

SCENARIO = SCENARIOS / "contact-center.yaml"


@pytest.fixture(scope="module")
def saved_plan():
    return planned_document(SCENARIO)


def _set(document: dict, path: str, value) -> None:
    *parents, last = path.split(".")
    target = document
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    target[int(last) if last.isdigit() else last] = value


EDITS = {
    "13 nodes edited to 1": ({"lines.0.nodes": 1}, "lines[0].gpus"),
    "nodes and GPUs edited together": ({"lines.0.nodes": 1, "lines.0.gpus": 8}, "lines[0].annual_cost_usd"),
    "the total and the objective set to 1": ({"totals.annual_cost_usd": 1, "objective_usd_per_year": 1},
                                             "totals.annual_cost_usd"),
    "the objective alone": ({"objective_usd_per_year": 1.0}, "objective_usd_per_year"),
    "a line of -5 USD": ({"lines.0.annual_cost_usd": -5.0}, "lines[0].annual_cost_usd"),
    "capex 0": ({"lines.0.capex_usd": 0.0}, "lines[0].capex_usd"),
    "an infrastructure count of -3": ({"infrastructure.0.count": -3}, "infrastructure[0].count"),
    "no routes": ({"routing": []}, "routing"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(EDITS))
def test_an_edited_figure_is_recomputed_and_the_file_refused(cli, tmp_path, saved_plan, case):
    edits, field = EDITS[case]
    document = copy.deepcopy(saved_plan)
    for path, value in edits.items():
        _set(document, path, value)
    plan_path = tmp_path / "edited.json"
    plan_path.write_text(json.dumps(document))
    for command in (("bom", SCENARIO, "--plan", plan_path, "--format", "csv", "--out", tmp_path / "bom.csv"),
                    ("simulate", SCENARIO, "--plan", plan_path, "--duration", "30")):  # fmt: skip
        code, out, err = cli(*command)
        assert code == 2 and f"--plan: {field}" in err, (case, command[0], err)
        assert "Traceback" not in err and not (tmp_path / "bom.csv").exists()


def test_lines_repeated_are_refused(cli, tmp_path, saved_plan):
    document = copy.deepcopy(saved_plan)
    document["lines"] = document["lines"] * 3
    plan_path = tmp_path / "repeated.json"
    plan_path.write_text(json.dumps(document))
    code, _, err = cli("bom", SCENARIO, "--plan", plan_path)
    assert code == 2 and "lines[1]" in err and "repeats lines[0]" in err


def test_a_price_changed_after_the_plan_asks_to_plan_again(cli, tmp_path, saved_plan):
    document = yaml.safe_load(SCENARIO.read_text())
    document["sites"]["on_prem"]["price_usd"] = {"dgx-h100": 300_000}
    scenario = tmp_path / "cheaper.yaml"
    scenario.write_text(yaml.safe_dump(document, sort_keys=False))
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(saved_plan))
    code, _, err = cli("bom", scenario, "--plan", plan_path)
    assert code == 2 and "lines[0].annual_cost_usd" in err and "plan again" in err


def test_every_shipped_scenarios_plan_passes_the_recomputation(cli, cli_json, tmp_path):
    for path in sorted(SCENARIOS.glob("*.yaml")):
        document = cli_json("plan", path)
        plan_path = tmp_path / f"{path.stem}.json"
        plan_path.write_text(json.dumps(document))
        code, _, err = cli("bom", path, "--plan", plan_path, "--format", "csv", "--out", tmp_path / f"{path.stem}.csv")
        assert code == 0, (path.name, err)


NUMBERS = [("lines", i, f) for i in range(1) for f in ("nodes", "gpus", "annual_cost_usd", "capex_usd", "power_kw")] + [
    ("infrastructure", i, f) for i in range(3) for f in ("count", "unit_usd", "capex_usd", "annual_cost_usd")] + [
    ("totals", None, f) for f in ("annual_cost_usd", "capex_usd", "gpus")] + [(None, None, "objective_usd_per_year")]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.sampled_from(NUMBERS), st.sampled_from(["kept", 0, 1, -3, 0.5, 2.0, 1e6, -1e-3])), max_size=3))
@example(edits=[])
@example(edits=[(NUMBERS[0], "kept"), (NUMBERS[-1], "kept")])
def test_every_accepted_plan_file_has_the_bom_of_its_fleet_at_the_scenarios_prices(saved_plan, edits):
    """Fuzz: random numeric edits (a value set, or scaled) of a saved plan. An accepted file's BOM TOTAL is the sum
    of its lines and equals the BOM of the fleet as planned (the scenario's prices): no edit reaches the figures."""
    from planner import api
    from planner.errors import PlannerInputError

    reference = api.bom(SCENARIO, plan_document=saved_plan).frame()
    document = copy.deepcopy(saved_plan)
    for (group, index, field), value in edits:
        target = document if group is None else document[group] if index is None else document[group][index]
        if value != "kept":  # "kept": the value as saved (the file must then be accepted, with the same BOM)
            target[field] = value
    try:
        frame = api.bom(SCENARIO, plan_document=document).frame()
    except PlannerInputError:
        return  # refused, naming a field (the cases above check the names)
    lines, total = frame.iloc[:-1], frame.iloc[-1]
    assert total["annual_cost_usd"] == pytest.approx(lines["annual_cost_usd"].sum(), abs=0.05)
    assert total["annual_cost_usd"] == pytest.approx(reference.iloc[-1]["annual_cost_usd"], abs=0.05)
    assert list(frame["count"]) == list(reference["count"])


PERFORMANCE_EDITS = {
    "requests/s per node raised": ("rps_per_node", 2.88, "at most the performance model's"),
    "a faster TTFT": ("ttft_ms", 100.0, "the performance model's figure"),
    "a batch it did not run": ("concurrency", 10, "the performance model's figure"),
    "another provenance": ("provenance", "modeled", "the performance model's figure"),
    "a point rate the row does not give": ("point_rps_per_instance", 2.41, "the performance model's figure"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(PERFORMANCE_EDITS))
def test_an_edited_performance_figure_is_recomputed_and_the_file_refused(cli, tmp_path, saved_plan, case):
    """The figures the simulator fits its engines to and the reports print are the performance model's for the
    assignment's configuration, recomputed when the file is read: an optimistic edit is refused by every reader."""
    field, value, why = PERFORMANCE_EDITS[case]
    document = copy.deepcopy(saved_plan)
    document["workloads"][0]["assignments"][0][field] = value
    plan_path = tmp_path / "edited.json"
    plan_path.write_text(json.dumps(document))
    for command in (("bom", SCENARIO, "--plan", plan_path), ("simulate", SCENARIO, "--plan", plan_path, "--duration", "30")):
        code, _, err = cli(*command)
        assert code == 2 and f"--plan: workloads[0].assignments[0].{field}" in err and why in err, (case, err)
        assert "Traceback" not in err


def test_a_derated_rate_per_node_is_accepted_as_a_margin(cli, tmp_path, saved_plan):
    """A plan may count less per node than the model gives (a perf_margin or a robust band derates it), never more."""
    document = copy.deepcopy(saved_plan)
    document["workloads"][0]["assignments"][0]["rps_per_node"] = 2.0
    plan_path = tmp_path / "derated.json"
    plan_path.write_text(json.dumps(document))
    code, _, err = cli("bom", SCENARIO, "--plan", plan_path)
    assert code == 0, err


def test_a_configuration_the_model_does_not_serve_is_refused(cli, tmp_path, saved_plan):
    document = copy.deepcopy(saved_plan)
    for assignment in document["workloads"][0]["assignments"]:
        assignment["engine_isl"] = 100_000
    for route in document["routing"]:
        route["engine_isl"] = 100_000
    for allocation in document["instances"]:
        allocation["engine_isl"] = 100_000
    for line in document["lines"]:
        line["engine_isl"] = 100_000
    plan_path = tmp_path / "other-engine.json"
    plan_path.write_text(json.dumps(document))
    code, _, err = cli("bom", SCENARIO, "--plan", plan_path)
    assert code == 2 and "workloads[0].assignments[0]" in err and "none the scenario's performance model" in err, err


def test_a_plan_made_with_another_perf_source_is_recomputed_with_it(cli, cli_json, tmp_path):
    """`plan --perf-source model` keeps its layers in the file (`perf_sources`); read back, the figures are the
    roofline's, as planned, and an edit of them is still refused."""
    scenario = SCENARIOS / "llama3-8b-assistant.yaml"
    document = cli_json("plan", scenario, "--perf-source", "model")
    assert document["perf_sources"] == ["modeled"]
    plan_path = tmp_path / "modeled.json"
    plan_path.write_text(json.dumps(document))
    code, _, err = cli("bom", scenario, "--plan", plan_path)
    assert code == 0, err
    document["workloads"][0]["assignments"][0]["ttft_ms"] *= 0.5
    plan_path.write_text(json.dumps(document))
    code, _, err = cli("bom", scenario, "--plan", plan_path)
    assert code == 2 and "assignments[0].ttft_ms" in err, err


@pytest.mark.parametrize("options", [("--precisions", "fp4"), ("--engines", "vllm")])
def test_a_plan_made_with_run_options_is_recomputed_as_it_was_made(cli, cli_json, tmp_path, options):
    """A plan made with --precisions or --engines keeps them in its `overrides`; read back without them (simulate
    takes no such option), its figures are recomputed for the configurations it was allowed, and still checked."""
    scenario = SCENARIOS / ("chat-and-code-decision.yaml" if options[0] == "--precisions" else "llama3-8b-assistant.yaml")
    document = cli_json("plan", scenario, *options)
    assert document["overrides"]
    plan_path = tmp_path / "with-options.json"
    plan_path.write_text(json.dumps(document))
    code, _, err = cli("simulate", scenario, "--plan", plan_path, "--duration", "30")
    assert code == 0, err
    document["workloads"][0]["assignments"][0]["rps_per_node"] *= 1.5
    plan_path.write_text(json.dumps(document))
    code, _, err = cli("bom", scenario, "--plan", plan_path)
    assert code == 2 and "assignments[0].rps_per_node" in err, err


@pytest.mark.parametrize("overrides", ["fp4", {"precisions": "fp4"}, {"precisions": ["fp3"]}, {"engines": [7]}])
def test_recorded_options_that_are_not_options_are_refused(cli, tmp_path, saved_plan, overrides):
    document = copy.deepcopy(saved_plan)
    document["overrides"] = overrides
    plan_path = tmp_path / "odd-options.json"
    plan_path.write_text(json.dumps(document))
    code, _, err = cli("bom", SCENARIO, "--plan", plan_path)
    assert code == 2 and "--plan: overrides" in err and "Traceback" not in err, err
