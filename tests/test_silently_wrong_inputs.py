"""Input that parses but means something else than the user thought: refused with one line naming the file and
field (exit 2), or said where the plan is made (its warnings); never a silent answer.

Issue 33: booleans read as numbers, names that are blank or look like another entry's, speculative decoding a model
cannot run, a precision no offered GPU runs, and decode pools placed behind a network slower than the prefill side
priced. Issue 47 (the last section): periods typed per day, forecasts past the demand bound, racks smaller than a
node, switches written as numbers or words, output names too long, counts that are not whole, layouts no engine
runs, spot interruptions without a replacement time, a rented node's lead time, prefixes as long as the prompt, and
latency limits of zero."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from helpers import SCENARIOS

from planner.catalog import load_catalog, normalize_name
from planner.errors import InfeasiblePlanError, PlannerInputError
from planner.scenario import load_scenario

ZWSP = "\u200b"


def user_catalog(tmp_path: Path, files: dict[str, dict]) -> Path:
    """A user catalog layered over the shipped one, with these YAML files."""
    directory = tmp_path / "my-catalog"
    directory.mkdir()
    (directory / "catalog.yaml").write_text("name: my-catalog\n")
    for name, document in files.items():
        (directory / name).write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    return directory


def scenario_copy(tmp_path: Path, name: str, change) -> Path:
    """A copy of a shipped scenario with `change(document)` applied."""
    document = yaml.safe_load((SCENARIOS / name).read_text())
    change(document)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    return path


def refused(cli, *args) -> str:
    """The one error line of a refused command (exit 2, no traceback)."""
    code, out, err = cli(*args)
    assert code == 2, (code, out[:2000], err[:2000])
    assert len(err) < 2000, err[:2000]
    line = err.splitlines()[-1]  # a line naming the overrides of the run may come first
    assert "Traceback" not in err and line.startswith("error: ") and err.count("\n") <= 2, err
    return line


# ---------------------------------------------------------------- 1. booleans are not numbers
@pytest.mark.parametrize(("file_name", "entry", "field"), [
    ("systems.yaml", {"id": "dgx-h100", "network_gbit_per_s": True}, "systems[dgx-h100].network_gbit_per_s"),
    ("systems.yaml", {"id": "dgx-h100", "gpus_per_node": True}, "systems[dgx-h100].gpus_per_node"),
    ("gpus.yaml", {"id": "H100-SXM-80GB", "tflops_by_precision": {"bf16": 989, "fp8": True}},
     "gpus[H100-SXM-80GB].tflops_by_precision"),
    ("models.yaml", {"id": "llama-3-8b", "moe": {"experts": 8, "experts_per_token": True, "active_params_b": 2}},
     "models[llama-3-8b].moe.experts_per_token"),
    ("models.yaml", {"id": "llama-3-8b", "vocab": False}, "models[llama-3-8b].vocab"),
])  # fmt: skip
def test_a_boolean_in_a_catalog_number_is_refused(cli, tmp_path, file_name, entry, field):
    directory = user_catalog(tmp_path, {file_name: {file_name[:-5]: [{**entry, "source": "test"}]}})
    with pytest.raises(PlannerInputError) as error:
        load_catalog(directory)
    assert error.value.field == field and "not true or false" in error.value.problem.message
    assert error.value.file == str(directory / file_name)
    err = refused(cli, "plan", SCENARIOS / "llama3-8b-assistant.yaml", "--catalog", directory)
    assert field in err and file_name in err


def test_a_boolean_catalog_default_is_refused(tmp_path):
    directory = user_catalog(tmp_path, {"defaults.yaml": {"defaults": {"pue": {"value": True, "source": "test"}}}})
    with pytest.raises(PlannerInputError, match="not true or false") as error:
        load_catalog(directory)
    assert error.value.field == "defaults.pue.value"


@pytest.mark.parametrize(("change", "field"), [
    (lambda d: d["workloads"][0].update(peak_rps=True), "workloads[0:summarize].peak_rps"),
    (lambda d: d["workloads"][0]["slo"].update(ttft_ms=True), "workloads[0:summarize].slo.ttft_ms"),
    (lambda d: d.update(engine={"tp_ladder": [8, True]}), "engine.tp_ladder"),
    (lambda d: d.update(engine={"max_batch_ladder": [True]}), "engine.max_batch_ladder"),
    (lambda d: d.update(metrics_version=True), "metrics_version"),
    (lambda d: d["limits"].update(max_gpus={"H100-SXM-80GB": True}), "limits.max_gpus"),
    (lambda d: d["sites"]["cloud"].update(usd_per_hour={"aws-p5.48xlarge": True}), "sites.cloud.usd_per_hour"),
    (lambda d: d.update(solver={"time_limit_s": True}), "solver.time_limit_s"),
])  # fmt: skip
def test_a_boolean_in_a_scenario_number_is_refused(cli, tmp_path, change, field):
    path = scenario_copy(tmp_path, "disaggregated-serving.yaml", change)
    with pytest.raises(PlannerInputError, match="not true or false") as error:
        load_scenario(path, load_catalog())
    assert error.value.field.startswith(field)
    assert field in refused(cli, "validate", path)


def test_booleans_stay_allowed_where_the_schema_asks_for_one(tmp_path, catalog):
    path = scenario_copy(tmp_path, "disaggregated-serving.yaml",
                         lambda d: d.update(engine={"expert_parallel": False}, fleet={"disaggregated": "auto",
                                                                                      "reconfigure_between_periods": True}))
    scenario = load_scenario(path, catalog)
    assert scenario.expert_parallel is False and scenario.reconfigure_between_periods is True


# ---------------------------------------------------------------- 2. names: normalized once, never blank or huge
def test_names_are_normalized_before_matching(catalog):
    assert normalize_name(f" llama-3.1-8b{ZWSP}\u2060\ufeff ") == "llama-3.1-8b"
    assert normalize_name("ＤＧＸ\u3000H100") == "DGX H100"  # full-width letters and space (NFKC)
    assert catalog.resolve("model", f"llama-3.1-8b{ZWSP}") == "llama-3.1-8b"
    assert catalog.resolve("model", "ｌｌａｍａ-3.1-8b") == "llama-3.1-8b"
    assert catalog.resolve("gpu", "\u200dH100\u200c:8") == "H100-SXM-80GB"


@pytest.mark.parametrize("alias", ["   ", ZWSP, f" {ZWSP}\u2060 ", "\t"])
def test_a_blank_alias_is_refused(cli, tmp_path, alias):
    directory = user_catalog(tmp_path, {"systems.yaml": {"systems": [{"id": "dgx-h100", "aliases": [alias], "source": "t"}]}})
    with pytest.raises(PlannerInputError, match="a name with visible characters") as error:
        load_catalog(directory)
    assert error.value.field == "systems[dgx-h100].aliases[0]"
    refused(cli, "plan", SCENARIOS / "llama3-8b-assistant.yaml", "--catalog", directory)


def test_a_blank_or_huge_id_is_refused(tmp_path):
    for bad, problem in (("  ", "visible characters"), ("x" * 5000, "at most 200 characters")):
        directory = tmp_path / str(len(bad))
        directory.mkdir()
        document = {"models": [{"id": bad, "params_b": 1, "source": "t"}]}
        (directory / "models.yaml").write_text(yaml.safe_dump(document))
        with pytest.raises(PlannerInputError, match=problem) as error:
            load_catalog(directory)
        assert error.value.field == "models[0].id" and len(str(error.value)) < 500


def test_a_look_alike_alias_of_another_model_is_refused(cli, tmp_path):
    """Before: the alias 'llama-3.1-8b' + U+200B was a name of its own, and a scenario naming it got my-model."""
    entry = {"id": "my-model", "params_b": 8, "aliases": [f"llama-3.1-8b{ZWSP}"], "source": "t"}
    directory = user_catalog(tmp_path, {"models.yaml": {"models": [entry]}})
    with pytest.raises(PlannerInputError, match="already names model 'llama-3.1-8b'") as error:
        load_catalog(directory)
    assert error.value.field == "models[my-model].aliases"
    refused(cli, "plan", SCENARIOS / "llama3-8b-assistant.yaml", "--catalog", directory)


def test_an_id_written_with_an_invisible_character_is_the_same_entry(tmp_path):
    entry = {"id": f"dgx-h100{ZWSP}", "price_usd": 123456, "source": "our quote"}
    layered = load_catalog(user_catalog(tmp_path, {"systems.yaml": {"systems": [entry]}}))
    assert f"dgx-h100{ZWSP}" not in layered.systems and layered.systems["dgx-h100"].price_usd == 123456


@pytest.mark.parametrize(("change", "field", "problem"), [
    (lambda d: d["workloads"][0].update(model="   "), "workloads[0:assistant].model", "visible characters"),
    (lambda d: d["workloads"][0].update(model=ZWSP), "workloads[0:assistant].model", "visible characters"),
    (lambda d: d["workloads"][0].update(model="m" * 2_000_000), "workloads[0:assistant].model", "at most 200"),
    (lambda d: d["sites"]["on_prem"].update(systems=[f" {ZWSP} "]), "sites.on_prem.systems[0]", "visible characters"),
])  # fmt: skip
def test_a_blank_or_huge_name_in_a_scenario_is_refused(cli, tmp_path, change, field, problem):
    path = scenario_copy(tmp_path, "llama3-8b-assistant.yaml", change)
    err = refused(cli, "validate", path)
    assert field in err and problem in err


def test_a_scenario_name_with_invisible_characters_resolves_to_what_it_shows(tmp_path, catalog):
    def change(document):
        document["workloads"][0]["model"] = f"llama-3-8b{ZWSP}"
        document["sites"]["on_prem"]["systems"] = ["\ufeffdgx-h100 "]

    scenario = load_scenario(scenario_copy(tmp_path, "llama3-8b-assistant.yaml", change), catalog)
    assert scenario.workloads[0].model == "llama-3-8b" and scenario.offers[0].system == "dgx-h100"


def test_a_huge_name_on_the_command_line_is_refused_briefly(cli):
    err = refused(cli, "plan", SCENARIOS / "llama3-8b-assistant.yaml", "--systems", "d" * 1_000_000)
    assert "--systems" in err and "at most 200 characters" in err


# ---------------------------------------------------------------- 3. speculative decoding a model can run
def speculative(tmp_path, speculation: dict, model: str | None = None) -> Path:
    def change(document):
        document["engine"] = {"speculative": speculation}
        if model is not None:
            for workload in document["workloads"]:
                workload["model"] = model

    return scenario_copy(tmp_path, "disaggregated-serving.yaml", change)


def test_mtp_on_a_model_without_an_mtp_head_is_refused(cli, tmp_path, catalog):
    path = speculative(tmp_path, {"method": "mtp", "acceptance_rate": 0.7})
    with pytest.raises(PlannerInputError) as error:
        load_scenario(path, catalog)
    assert error.value.field == "engine.speculative.method"
    message = error.value.problem.message
    assert "llama-3.3-70b" in message and "mtp_layers" in message and "deepseek-v3" in message
    refused(cli, "validate", path)


def test_mtp_on_a_model_with_an_mtp_head_is_accepted(tmp_path, catalog):
    assert catalog.models["deepseek-v3"].mtp_layers == 1 and catalog.models["deepseek-r1"].mtp_layers == 1
    scenario = load_scenario(speculative(tmp_path, {"method": "mtp", "acceptance_rate": 0.7}, "deepseek-r1"), catalog)
    assert scenario.speculation.method == "mtp"


def test_a_draft_model_of_another_vocabulary_is_refused(cli, tmp_path, catalog):
    path = speculative(tmp_path, {"method": "draft", "draft_model": "qwen3-4b", "acceptance_rate": 0.7})
    with pytest.raises(PlannerInputError) as error:
        load_scenario(path, catalog)
    message = error.value.problem.message
    assert error.value.field == "engine.speculative.draft_model"
    assert "qwen3-4b" in message and "151,936" in message and "llama-3.3-70b" in message and "128,256" in message
    assert "llama-3.1-8b" in message  # what would do
    refused(cli, "validate", path)


def test_a_draft_model_of_the_same_vocabulary_is_accepted_by_alias(tmp_path, catalog):
    path = speculative(tmp_path, {"method": "draft", "draft_model": f"meta-llama/Llama-3.1-8B-Instruct{ZWSP}",
                                  "acceptance_rate": 0.7})  # fmt: skip
    assert load_scenario(path, catalog).speculation.draft_model.id == "llama-3.1-8b"


def test_a_draft_model_whose_vocabulary_is_not_stated_is_refused(tmp_path):
    shipped = load_catalog().models["llama-3.1-8b"].model_dump(exclude={"aliases", "vocab"}, exclude_none=True)
    directory = user_catalog(tmp_path, {"models.yaml": {"models": [{**shipped, "id": "my-draft"}]}})
    path = speculative(tmp_path, {"method": "draft", "draft_model": "my-draft", "acceptance_rate": 0.7})
    with pytest.raises(PlannerInputError, match="does not state the vocabulary of my-draft") as error:
        load_scenario(path, load_catalog(directory))
    assert error.value.field == "engine.speculative.draft_model"


# ---------------------------------------------------------------- 4. a precision no offered GPU runs says why
def test_a_precision_no_offered_gpu_runs_names_it_and_what_each_runs(cli, tmp_path, catalog):
    from planner.optimize import plan as make_plan

    def change(document):
        document["workloads"][0]["precisions"] = ["fp4"]
        document["sites"]["on_prem"]["systems"] = ["dgx-h100", "dgx-a100"]
        document["sites"]["on_prem"]["price_usd"] = {"dgx-a100": 200_000}

    scenario = load_scenario(scenario_copy(tmp_path, "llama3-8b-assistant.yaml", change), catalog)
    with pytest.raises(InfeasiblePlanError) as error:
        make_plan(scenario, catalog)
    message = str(error.value)
    assert "no system allowed" not in message
    assert "fp4" in message and "dgx-h100" in message and "H100-SXM-80GB" in message and "dgx-a100" in message
    assert "runs bf16, fp16, fp8" in message  # the H100's
    assert "runs bf16, fp16, w4a16" in message  # the A100's (no fp8 tensor cores)


# ---------------------------------------------------------------- 5. a decode pool behind a slow network
@pytest.fixture(scope="module")
def slow_decode_network_plan(tmp_path_factory):
    """The demo's summarizer, disaggregated, with its B200 instances (where the demo decodes) on a 1 Mb/s network and
    cheap enough to decode everything there: before, the plan decoded there, its TTFT 'met' at the prefill side's
    3.2 Tb/s."""
    from planner.optimize import plan as make_plan

    tmp_path = tmp_path_factory.mktemp("slow-network")
    entry = {"id": "aws-p6-b200.48xlarge", "network_gbit_per_s": 0.001, "usd_per_hour": 5.0,
             "source": "test: a slow decode network"}  # fmt: skip
    catalog = load_catalog(user_catalog(tmp_path, {"systems.yaml": {"systems": [entry]}}))

    def change(document):
        document["workloads"] = document["workloads"][:1]  # the summarizer: disaggregated in the demo
        document["fleet"]["disaggregated"] = "always"

    scenario = load_scenario(scenario_copy(tmp_path, "disaggregated-serving.yaml", change), catalog)
    return scenario, catalog, make_plan(scenario, catalog)


def test_no_decode_pool_is_placed_behind_a_slower_network_than_priced(slow_decode_network_plan):
    _, catalog, planned = slow_decode_network_plan
    slow = "aws-p6-b200.48xlarge"
    routes = [r for r in planned.routing if r.rps > 0]
    assert {r.stage for r in routes} == {"prefill", "decode"}
    assert not [r for r in routes if r.system == slow], [(r.system, r.stage) for r in routes]
    # every pairing the plan may make moves caches no slower than its prefill side priced them
    rate = {r.system: catalog.systems[r.system].network_bytes_per_s(1) for r in routes}
    assert min(rate[r.system] for r in routes if r.stage == "decode") >= max(rate[r.system] for r in routes if r.stage == "prefill")
    # and the plan's candidates say why that system got none
    reasons = [reason for _, system, reason in planned.candidates.pruned if system == slow]
    assert any("disaggregated decode" in reason and "0.000125 Gb/s per GPU" in reason for reason in reasons)
    # and so do the plan's notes, once for the system
    (note,) = [w for w in planned.warnings if w.startswith(f"{slow} hosts no disaggregated decode pool")]
    assert "0.000125 Gb/s per GPU" in note


def test_the_slow_network_plan_meets_ttft_in_simulation_too(slow_decode_network_plan):
    """The simulator moves each cache at the slower side: its TTFT must not miss where the plan says 'met'."""
    from planner.simulate import SimulationOptions, simulate_plan

    scenario, catalog, planned = slow_decode_network_plan
    (check,) = simulate_plan(planned, scenario, catalog, SimulationOptions(duration_s=120))
    ttft = next(c for c in check.checks if c.metric == "TTFT")
    assert ttft.verdict != "misses" and check.verdict in ("holds", "inconclusive"), [str(c) for c in check.checks]


def test_equal_networks_keep_every_decode_candidate(catalog):
    """The shipped demo's systems have the same network per GPU: the rule removes nothing there."""
    from planner.candidates import CandidateBuilder

    scenario = load_scenario(SCENARIOS / "disaggregated-serving.yaml", catalog)
    builder = CandidateBuilder(dataclasses.replace(scenario, disaggregated="always"), catalog)
    assert all(builder.decode_network_problem(offer) is None for offer in scenario.offers)


# ---------------------------------------------------------------- names of workloads and periods
def test_workload_and_period_names_are_in_normal_form(tmp_path, catalog, cli):
    """Workload, period and forecast names go through the catalog's normal form (NFKC, invisible characters out):
    a zero-width space in a name no longer makes a second workload that a demand factor silently misses."""

    def invisible(document):
        document["workloads"][0]["name"] = "assis\u200btant"  # a demand factor names it 'assistant'
        document["periods"][1]["name"] = "\uff45vening "  # full-width e, trailing space

    scenario = load_scenario(scenario_copy(tmp_path, "daily-hybrid.yaml", invisible), catalog)
    assert [w.name for w in scenario.workloads] == ["assistant", "summarize"]
    assert [p.name for p in scenario.periods] == ["business-hours", "evening", "night"]
    assert scenario.periods[1].demand_rps["assistant"] > 0

    def look_alike(document):
        document["workloads"][1]["name"] = "assistant\u2060"  # a word joiner: the same name as the first

    err = refused(cli, "validate", scenario_copy(tmp_path, "daily-hybrid.yaml", look_alike))
    assert "workloads[1].name" in err and "duplicate workload name 'assistant'" in err


# ---------------------------------------------------------------- input that means something else (issue 47)
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
