"""User catalogs layered over the shipped one: additions, field overrides, replaced rows, provenance."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner.api import plan_file
from planner.catalog import load_catalog
from planner.errors import PlannerInputError
from helpers import BENCH_HEADER, SCENARIOS

# the shipped seed C1 point: NeMo 43B on a DGX H100 at 4667/667 tokens (public.csv)
C1_POINT = "nemo-43b-gpt,H100-SXM-80GB,8,,,4667,667,,online"


def user_catalog(tmp_path: Path, name: str = "my-lab", rows: list[str] = (), files: dict | None = None) -> Path:
    directory = tmp_path / name
    (directory / "benchmarks").mkdir(parents=True)
    (directory / "catalog.yaml").write_text(f"name: {name}\n")
    if rows:
        (directory / "benchmarks" / "ours.csv").write_text("\n".join([BENCH_HEADER, *rows]) + "\n")
    for file_name, document in (files or {}).items():
        (directory / file_name).write_text(yaml.safe_dump(document, sort_keys=False))
    return directory


def c1_row(rps: float, ttft_ms: float = 2500.0, source: str = "our DGX H100 run 2026-11") -> str:
    return f"{source},{C1_POINT},{ttft_ms},,20.0,,{rps},,node,"


def test_no_user_catalog_is_the_shipped_one(catalog):
    assert catalog.layers == ("shipped",)
    assert all(row.origin == "shipped" for row in catalog.benchmarks)


def test_user_row_at_a_shipped_point_replaces_it_and_says_whose_it_is(tmp_path, catalog):
    layered = load_catalog(user_catalog(tmp_path, rows=[c1_row(3.1)]))
    assert layered.layers == ("shipped", "my-lab")
    at_point = [r for r in layered.benchmarks if r.model == "nemo-43b-gpt" and r.isl == 4667]
    assert len(at_point) == 1 and at_point[0].request_throughput_rps == 3.1
    assert at_point[0].origin == "my-lab" and at_point[0].citation.startswith("[my-lab] our DGX H100 run")
    # every other shipped row is still there
    assert len(layered.benchmarks) == len(catalog.benchmarks)


def test_user_rows_at_new_points_add_to_the_shipped_rows(tmp_path, catalog):
    row = "our run,llama-3.1-8b,H100-SXM-80GB,1,1,fp8,777,77,4,online,50,,8,,10.0,,instance,"
    layered = load_catalog(user_catalog(tmp_path, rows=[row]))
    assert len(layered.benchmarks) == len(catalog.benchmarks) + 1


def test_plan_with_user_rows_uses_them_and_says_so(tmp_path):
    # 31 rps at the user's 3.1 rps per node: 10 nodes instead of the seed's 13
    directory = user_catalog(tmp_path, rows=[c1_row(3.1)])
    result = plan_file(SCENARIOS / "contact-center.yaml", [directory])
    assignment = result.workloads[0].assignments[0]
    assert assignment.rps_per_node == 3.1 and assignment.provenance == "measured"
    assert assignment.source.startswith("[my-lab] our DGX H100 run")
    assert sum(line.nodes for line in result.lines) == 10


def test_scenario_catalog_key_is_relative_to_the_scenario(tmp_path):
    directory = user_catalog(tmp_path, rows=[c1_row(3.1)])
    scenario = yaml.safe_load((SCENARIOS / "contact-center.yaml").read_text())
    scenario["catalog"] = directory.name
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    result = plan_file(path)
    assert sum(line.nodes for line in result.lines) == 10


def test_scenario_catalog_key_naming_a_missing_directory_is_an_input_error(tmp_path, cli):
    scenario = yaml.safe_load((SCENARIOS / "contact-center.yaml").read_text())
    scenario["catalog"] = "nowhere"
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    code, out, err = cli("plan", path)
    assert code == 2
    assert "scenario.yaml: catalog: catalog directory 'nowhere' not found" in err and "Traceback" not in err


def test_later_catalogs_override_earlier_ones(tmp_path):
    first = user_catalog(tmp_path, "first", rows=[c1_row(3.1)])
    second = user_catalog(tmp_path, "second", rows=[c1_row(2.0)])
    result = plan_file(SCENARIOS / "contact-center.yaml", [first, second])
    assert result.workloads[0].assignments[0].source.startswith("[second]")
    assert sum(line.nodes for line in result.lines) == 16  # ceil(31 / 2.0)


def test_cli_catalog_option_is_repeatable(tmp_path, cli_json):
    first = user_catalog(tmp_path, "first", rows=[c1_row(3.1)])
    second = user_catalog(tmp_path, "second", rows=[c1_row(2.0)])
    document = cli_json("plan", SCENARIOS / "contact-center.yaml", "--catalog", first, "--catalog", second)
    assert document["workloads"][0]["assignments"][0]["source"].startswith("[second]")


def test_entry_override_changes_only_the_fields_given_and_keeps_both_sources(tmp_path, catalog):
    override = {"systems": [{"id": "dgx-h100", "price_usd": 250000, "source": "our quote Q4 2026"}]}
    layered = load_catalog(user_catalog(tmp_path, files={"systems.yaml": override}))
    system, shipped = layered.systems["dgx-h100"], catalog.systems["dgx-h100"]
    assert system.price_usd == 250000 and system.power_kw == shipped.power_kw
    assert system.source.startswith("our quote Q4 2026") and shipped.source in system.source
    assert set(layered.systems) == set(catalog.systems)


def test_override_without_a_source_is_refused(tmp_path):
    override = {"systems": [{"id": "dgx-h100", "price_usd": 250000}]}
    directory = user_catalog(tmp_path, files={"systems.yaml": override})
    with pytest.raises(PlannerInputError) as error:
        load_catalog(directory)
    assert error.value.file.endswith("systems.yaml") and error.value.field == "systems[0:dgx-h100].source"


def test_invalid_override_names_the_user_file(tmp_path):
    override = {"systems": [{"id": "dgx-h100", "power_kw": -1, "source": "typo"}]}
    directory = user_catalog(tmp_path, files={"systems.yaml": override})
    with pytest.raises(PlannerInputError) as error:
        load_catalog(directory)
    assert error.value.file == str(directory / "systems.yaml") and error.value.field == "systems[dgx-h100].power_kw"


def test_new_entries_and_partial_defaults_are_added(tmp_path, catalog):
    system = {"id": "our-h100-box", "kind": "on-prem", "name": "Our H100 box", "gpu": "H100-SXM-80GB",
              "gpus_per_node": 8, "price_usd": 200000, "power_kw": 10.2, "rack_units": 8, "source": "our quote"}  # fmt: skip
    defaults = {"defaults": {"usd_per_kwh": {"value": 0.12, "source": "our utility contract"}}}
    layered = load_catalog(user_catalog(tmp_path, files={"systems.yaml": {"systems": [system]}, "defaults.yaml": defaults}))
    assert "our-h100-box" in layered.systems and "dgx-h100" in layered.systems
    assert layered.defaults.usd_per_kwh.value == 0.12
    assert layered.defaults.pue == catalog.defaults.pue


def test_base_none_makes_a_standalone_catalog(tmp_path):
    directory = user_catalog(tmp_path, files={"gpus.yaml": {"gpus": []}})
    (directory / "catalog.yaml").write_text("name: bare\nbase: none\n")
    with pytest.raises(PlannerInputError) as error:
        load_catalog(directory)  # a standalone catalog needs every file of its own
    assert error.value.file.endswith("systems.yaml") and "file not found" in str(error.value)


def test_standalone_catalog_has_no_shipped_rows(tmp_path):
    from helpers import make_catalog

    directory = make_catalog(tmp_path, [], [c1_row(3.1)])
    layered = load_catalog(directory)
    assert layered.layers == ("test catalog",) and len(layered.benchmarks) == 1 and not layered.systems


def test_a_row_with_more_fields_than_the_header_is_refused(tmp_path):
    directory = user_catalog(tmp_path, rows=[c1_row(3.1, source="our run, unquoted comma")])
    with pytest.raises(PlannerInputError) as error:
        load_catalog(directory)
    assert error.value.field == "line 2" and "quote a field" in str(error.value)


def test_a_table_dropped_into_the_shipped_catalog_is_cited_as_local(tmp_path):
    import shutil

    from planner.catalog import default_catalog_dir

    copy = tmp_path / "catalogs"
    shutil.copytree(default_catalog_dir(), copy)
    (copy / "benchmarks" / "ours.csv").write_text(BENCH_HEADER + "\n" + c1_row(3.1) + "\n")
    (copy / "catalog.yaml").write_text((copy / "catalog.yaml").read_text() + "base: none\n")
    layered = load_catalog(copy)
    ours = [r for r in layered.benchmarks if r.table == "ours.csv"]
    assert ours and all(r.origin == "local" and r.citation.startswith("[local]") for r in ours)
    assert all(r.origin == "shipped" for r in layered.benchmarks if r.table == "public.csv")
