"""Input that parses but means something else than the user thought (issue 47): refused naming the field, or said in
the plan's warnings; never a silent answer."""

from __future__ import annotations

import json

import pytest
import yaml
from helpers import SCENARIOS


def _contact_center(tmp_path, name: str = "cc.yaml", **changes):
    document = yaml.safe_load((SCENARIOS / "contact-center.yaml").read_text())
    for key, value in changes.items():
        document[key] = value
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path, document


def test_periods_typed_per_day_are_said_in_the_plan(cli, tmp_path):
    periods = [{"name": "day", "hours_per_year": 10}, {"name": "evening", "hours_per_year": 6},
               {"name": "night", "hours_per_year": 8, "demand_factor": {"call-summaries": 0.1}}]  # fmt: skip
    path, _ = _contact_center(tmp_path, periods=periods)
    code, out, _ = cli("plan", path, "--json")
    assert code == 0
    warnings = [w for w in json.loads(out)["warnings"] if "periods cover" in w]
    assert warnings and "24 of the year's 8,760 hours" in warnings[0] and "hours per day" in warnings[0]
    whole, _ = _contact_center(tmp_path, "whole.yaml")
    code, out, _ = cli("plan", whole, "--json")
    assert code == 0 and not [w for w in json.loads(out)["warnings"] if "periods cover" in w]


def test_a_forecast_past_the_demand_bound_is_refused_by_name(cli, tmp_path):
    path, document = _contact_center(tmp_path)
    document["workloads"][0]["peak_rps"] = 1e6
    document["robustness"] = {"demand_forecasts": [{"name": "boom", "scale": {"call-summaries": 1000}}]}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    code, _, err = cli("plan", path)
    assert code == 2 and "robustness.demand_forecasts[0:boom].scale.call-summaries" in err and "1e+09 rps" in err


@pytest.mark.parametrize(("field", "value"), [("kw_per_rack", 0.1), ("rack_units_per_rack", 1)])
def test_a_rack_smaller_than_a_node_is_refused(cli, tmp_path, field, value):
    path, document = _contact_center(tmp_path)
    document["sites"]["on_prem"]["infrastructure"] = {field: value}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    code, _, err = cli("plan", path)
    assert code == 2 and f"sites.on_prem.infrastructure.{field}" in err and "holds no dgx-h100 node" in err


@pytest.mark.parametrize(("where", "value"), [("infrastructure", 0), ("fleet", "yes")])
def test_a_switch_is_true_or_false_not_a_number_or_a_word(cli, tmp_path, where, value):
    path, document = _contact_center(tmp_path)
    if where == "infrastructure":
        document["sites"]["on_prem"]["infrastructure"] = {"include": value}
        field = "sites.on_prem.infrastructure.include"
    else:
        document["fleet"] = {"share_nodes_across_models": value}
        field = "fleet.share_nodes_across_models"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    code, _, err = cli("plan", path)
    assert code == 2 and field in err and "valid boolean" in err


def test_an_output_name_too_long_for_the_file_system_is_refused_before_any_work(cli, tmp_path):
    out = tmp_path / ("b" * 300 + ".csv")
    code, _, err = cli("bom", SCENARIOS / "contact-center.yaml", "--format", "csv", "--out", out)
    assert code == 2 and "--out" in err and "at most 255 bytes per name" in err and "Traceback" not in err


@pytest.mark.parametrize(("scenario", "system"), [("cloud-spot-and-commitments.yaml", "lambda-gpu-8x-h100-sxm5"),
                                                  ("daily-hybrid.yaml", "dgx-h100")])
def test_systems_override_leaves_no_reference_to_what_it_removed(cli, scenario, system):
    """--systems drops the removed systems' prices, reserved prices, commitments and spot entries with them."""
    code, out, err = cli("plan", SCENARIOS / scenario, "--systems", system, "--json")
    assert code == 0, err
    assert {line["system"] for line in json.loads(out)["lines"]} == {system}


@pytest.mark.parametrize(("name", "value"), [("pdus_per_rack", 1.5), ("fabric_switch_ports", 2.5), ("frontend_ports_per_node", 0.5)])
def test_a_catalog_count_must_be_whole_as_in_a_scenario(cli, tmp_path, name, value):
    from planner.catalog import default_catalog_dir

    document = yaml.safe_load((default_catalog_dir() / "defaults.yaml").read_text())
    document["defaults"][name]["value"] = value
    (tmp_path / "defaults.yaml").write_text(yaml.safe_dump(document))
    (tmp_path / "catalog.yaml").write_text("name: counts\n")
    code, _, err = cli("plan", SCENARIOS / "contact-center.yaml", "--catalog", tmp_path)
    assert code == 2 and f"defaults.{name}" in err and "whole number" in err


@pytest.mark.parametrize(("args", "option", "says"), [
    (("--tp", "3"), "--tp", "do not split evenly over 3 GPUs"),
    (("--layout", "TP3"), "--layout", "do not split evenly over 3 GPUs"),
    (("--layout", "TP8PP1000000"), "--layout", "PP 1000000; allowed: 1 to 64"),
    (("--layout", "TP64"), "--layout", "spans more GPUs than the largest"),
])  # fmt: skip
def test_perf_refuses_a_layout_no_engine_runs_naming_the_option_given(cli, args, option, says):
    code, _, err = cli("perf", "--model", "llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--isl", "1000", "--osl", "200", *args)
    assert code == 2 and err.startswith(f"error: {option}:") and says in err


def test_spot_interruptions_without_a_replacement_time_are_refused(cli, tmp_path):
    """A = 1 / (1 + lambda tau) is 1 at tau = 0: ten interruptions an hour would cost nothing."""
    document = yaml.safe_load((SCENARIOS / "cloud-spot-and-commitments.yaml").read_text())
    del document["sites"]["cloud"]["spot"]["replacement_minutes"]
    document["sites"]["cloud"]["spot"]["interruptions_per_hour"] = 10
    document["sites"]["cloud"]["start_up_minutes"] = 0  # nodes said to start at once (the catalog's default is 10)
    path = tmp_path / "spot.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    code, _, err = cli("plan", path)
    assert code == 2 and "sites.cloud.spot.replacement_minutes" in err


def test_a_rented_nodes_lead_time_defaults_to_the_catalogs_estimate_and_the_plan_says_what_it_assumed(cli, tmp_path):
    document = yaml.safe_load((SCENARIOS / "daily-hybrid.yaml").read_text())
    assert "start_up_minutes" not in document["sites"]["cloud"]
    code, stdout, err = cli("plan", SCENARIOS / "daily-hybrid.yaml", "--json")
    assert code == 0, err
    plan = json.loads(stdout)
    (assumed,) = [w for w in plan["warnings"] if "assumed available" in w]
    assert "assumed available whenever the plan asks" in assumed and "10 min before its period" in assumed
    assert "the catalog's default, an estimate" in assumed and "billed per second" in assumed
    document["sites"]["cloud"]["start_up_minutes"] = 0
    path = tmp_path / "instant.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    code, stdout, err = cli("plan", path, "--json")
    assert code == 0, err
    instant = json.loads(stdout)
    assert instant["objective_usd_per_year"] < plan["objective_usd_per_year"]  # the default's start-up is billed
    assert not any("the catalog's default" in w for w in instant["warnings"])


def test_a_prefix_as_long_as_the_prompt_is_refused(cli, tmp_path):
    document = yaml.safe_load((SCENARIOS / "agent-prefix-cache.yaml").read_text())
    workload = document["workloads"][0]
    workload["prefix_cache"]["prefix_tokens"] = 6000
    workload.pop("buckets", None)
    workload["isl_tokens"], workload["osl_tokens"] = 2000, 200
    path = tmp_path / "prefix.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    code, _, err = cli("plan", path)
    assert code == 2 and f"workloads[0:{workload['name']}].prefix_cache.prefix_tokens" in err and "2,000 tokens" in err


@pytest.mark.parametrize("option", ["--ttft-ms", "--tpot-ms", "--itl-ms", "--e2e-ms"])
def test_a_latency_limit_of_zero_is_refused(cli, option):
    code, _, err = cli("perf", "--model", "llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--isl", "1000", "--osl", "200", option, "0")
    assert code == 2 and "must be above 0 ms" in err
