"""Hardening v3 (issue 33), the inputs accepted silently wrong: booleans read as numbers, names that are blank or
look like another entry's, speculative decoding a model cannot run, a precision no offered GPU runs, and decode
pools placed behind a network slower than the prefill side priced. Each is refused with one line naming the file
and field (exit 2), or said where the plan is made."""

from __future__ import annotations

import dataclasses
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
    from planner.candidates import _Builder

    scenario = load_scenario(SCENARIOS / "disaggregated-serving.yaml", catalog)
    builder = _Builder(dataclasses.replace(scenario, disaggregated="always"), catalog)
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
