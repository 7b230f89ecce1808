"""A plan file (`--plan FILE`, a saved `planner plan --json`) is checked like a scenario before anything runs on it
(issue 33, cause 7): every field of its lines, instances, routes and assignments of its declared type, finite and in
range; every system one the scenario allows, every route of one of its workloads and periods. Each edit below once
ended in MemoryError, StopIteration, TypeError or ValueError, or in exit 0 with an empty table."""

from __future__ import annotations

import copy
import json

import pytest
from helpers import SCENARIOS, planned_document

SCENARIO = SCENARIOS / "chat-and-summarize.yaml"


@pytest.fixture(scope="module")
def saved_plan():
    return planned_document(SCENARIO)


CASES = {
    "a route at 1e9 requests/s": ("routing", "rps", 1e9, "routing[0].rps: must be between 0 and 10,000,000"),
    "a route rate as text": ("routing", "rps", "fast", "routing[0].rps: must be a number"),
    "a route rate NaN": ("routing", "rps", float("nan"), "routing[0].rps: must be a finite number"),
    "a negative route rate": ("routing", "rps", -5, "routing[0].rps: must be between 0 and"),
    "1e8 engine instances": ("instances", "instances", 10**8, "instances[0].instances: must be between 0 and 100,000"),
    "a batch cap of 0 on a route": ("routing", "max_batch", 0, "routing[0].max_batch: must be between 1 and"),
    "a batch cap of 0 on instances": ("instances", "max_batch", 0, "instances[0].max_batch: must be between 1 and"),
    "TP true": ("routing", "tp", True, "routing[0].tp: must be a number, not true/false"),
    "a system the scenario does not offer": ("routing", "system", "p5-48xlarge", "routing[0].system: 'p5-48xlarge'"),
    "an offered system no instances of the plan run": ("routing", "system", "dgx-h100",
                                                       "routing[0]: must run on instances of the plan"),
    "lengths none of the workload's assignments has": ("routing", "bucket_isl", 7, "routing[0]: its configuration"),
    "a workload the scenario does not have": ("routing", "workload", "poetry", "routing[0]: must be a period and a workload"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_edited_plan_file_is_refused_by_field(cli, tmp_path, saved_plan, case):
    group, field, value, message = CASES[case]
    document = copy.deepcopy(saved_plan)
    document[group][0][field] = value
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(document))
    code, out, err = cli("simulate", SCENARIO, "--plan", path, "--duration", "30")
    assert code == 2, (out, err)
    assert message.replace(": must", "") in err.replace(": must", ""), err
    assert "Traceback" not in err and len(err) < 400


def test_the_saved_plans_of_every_shipped_scenario_pass_the_check(cli_json):
    from planner.plan import plan_field_problems, plan_from_document

    for path in sorted(SCENARIOS.glob("*.yaml")):
        document = cli_json("plan", path)
        if document.get("status") in ("optimal", "feasible"):
            assert plan_field_problems(plan_from_document(document)) == [], path.name
