"""One run's overrides of a scenario (`--deployment`, `--systems`, `--precisions`, `--engines`): the same plan as
the edited YAML, echoed in the output, bad values refused with the option named."""

from __future__ import annotations

import json

import pytest
import yaml
from helpers import SCENARIOS, invoke

from planner import api
from planner.catalog import load_catalog
from planner.scenario import ScenarioOverrides


def test_overrides_plan_as_the_edited_file(tmp_path):
    spec = yaml.safe_load((SCENARIOS / "moe-engines.yaml").read_text())
    spec["sites"]["on_prem"]["systems"] = ["dgx-h100"]
    spec["workloads"][0]["engines"] = ["vllm", "sglang"]
    spec["workloads"][0]["precisions"] = ["w4a16"]
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(spec))
    overrides = ScenarioOverrides(systems=("dgx-h100",), precisions=("w4a16",), engines=("vllm", "sglang"))
    by_option = api.plan_file(SCENARIOS / "moe-engines.yaml", overrides=overrides)
    by_file = api.plan_file(edited)
    assert by_option.objective_usd_per_year == pytest.approx(by_file.objective_usd_per_year)
    assert {line.system for line in by_option.lines} == {"dgx-h100"}
    assert {a.engine for w in by_option.workloads for a in w.assignments} <= {"vllm", "sglang"}


def test_overrides_are_echoed_in_json_and_text():
    args = ["plan", str(SCENARIOS / "daily-hybrid.yaml"), "--deployment", "cloud", "--progress", "none"]
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["overrides"] == {"deployment": "cloud"} and document["deployment"] == "cloud"
    text = invoke(*args)
    assert text.exit_code == 0 and "Overrides for this run: deployment cloud" in text.stdout


def test_systems_move_the_deployment_to_the_sites_they_name():
    """Cloud systems alone on an on-prem scenario: it plans in the cloud (the deployment the systems allow)."""
    result = api.plan_file(SCENARIOS / "contact-center.yaml", overrides=ScenarioOverrides(systems=("aws-p5.48xlarge",)))
    assert result.deployment == "cloud" and {line.system for line in result.lines} == {"aws-p5.48xlarge"}


@pytest.mark.parametrize(("args", "message"), [
    (["--systems", "nope"], "--systems: unknown system 'nope'"),
    (["--precisions", "fp9"], "--precisions: one or more of bf16"),
    (["--engines", "tgi"], "--engines: one or more of trtllm, vllm, sglang"),
    (["--deployment", "on-prem", "--systems", "aws-p5.48xlarge"], "--systems: deployment on-prem needs on-prem systems"),
])  # fmt: skip
def test_bad_overrides_name_the_option_and_exit_2(args, message):
    result = invoke("plan", str(SCENARIOS / "contact-center.yaml"), *args, "--progress", "none")
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_a_deployment_beyond_the_files_sites_plans_on_the_catalogs_systems_of_its_gpus_and_says_so():
    """--deployment cloud on an on-prem scenario: the catalog's priced instances of the same GPUs, as compare does."""
    result = api.plan_file(SCENARIOS / "contact-center.yaml", overrides=ScenarioOverrides(deployment="cloud"))
    catalog = load_catalog()
    assert result.deployment == "cloud"
    assert {catalog.systems[line.system].gpu for line in result.lines} == {"H100-SXM-80GB"}
    assert any(w.startswith("the scenario has no cloud site: planned on the catalog's cloud instances") for w in result.warnings)
