"""The BOM says how firm each price is and where it comes from (issue 49 point 3): a catalog price its kind (list
price, estimate, placeholder) and place (the shipped catalog with its source, or the user's catalog file), a price
the user gave 'yours' and its file; and the two capex figures keep one name each, equal across plan --json, the
BOM and compare."""

from __future__ import annotations

import json

import pytest
import yaml

from planner.api import bom, compare, plan_file
from planner.catalog import load_catalog
from planner.report.bom import to_markdown
from planner.report.json_out import compare_document, plan_document
from planner.report.price_origins import catalog_price_origin
from helpers import SCENARIOS, write_scenario


def _scenario(on_prem: list[str] | None = None, cloud: list[str] | None = None, **extra) -> dict:
    sites = {}
    if on_prem:
        sites["on_prem"] = {"systems": on_prem}
    if cloud:
        sites["cloud"] = {"systems": cloud}
    return {
        "name": "origins", "metrics_version": 2, "deployment": "on-prem" if on_prem else "cloud",
        "workloads": [{"name": "chat", "model": "llama-3.1-8b", "isl_tokens": 1000, "osl_tokens": 200, "peak_rps": 4,
                       "mode": "streaming", "slo": {"ttft_ms": 2000, "itl_ms": 100}, "precisions": ["fp8"]}],
        "sites": sites, "perf": {"source": "model"}, **extra,
    }  # fmt: skip


def _origin(path, system: str) -> str:
    (line,) = [line for line in bom(path).lines if line.item == system]
    return line.price_origin


def _user_catalog(tmp_path, entry: dict):
    directory = tmp_path / "my-lab"
    directory.mkdir()
    (directory / "catalog.yaml").write_text("name: my-lab\n")
    (directory / "systems.yaml").write_text(yaml.safe_dump({"systems": [entry]}, sort_keys=False))
    return directory


def test_a_shipped_estimate_says_estimate_and_its_source(tmp_path):
    origin = _origin(write_scenario(tmp_path, _scenario(["dgx-b200"])), "dgx-b200")
    assert origin == "estimate (shipped catalog: press reports 2024 (estimate))"


def test_a_shipped_list_price_says_list_price_and_its_source(tmp_path):
    origin = _origin(write_scenario(tmp_path, _scenario(cloud=["lambda-gpu-8x-b200-sxm6"])), "lambda-gpu-8x-b200-sxm6")
    assert origin == ("list price (shipped catalog: Lambda on-demand price list via SkyPilot catalog (vms.csv), any "
                      "region, read 2026-11)")  # fmt: skip


def test_a_price_in_the_scenario_says_yours_and_the_field(tmp_path):
    path = write_scenario(tmp_path, _scenario(["dgx-h200"]))
    document = yaml.safe_load(path.read_text())
    document["sites"]["on_prem"]["price_usd"] = {"dgx-h200": 400000}
    path = write_scenario(tmp_path, document)
    assert _origin(path, "dgx-h200") == f"yours (scenario {path}: sites.on_prem.price_usd.dgx-h200)"


def test_a_placeholder_in_the_users_catalog_says_yours_its_file_and_placeholder(tmp_path):
    directory = _user_catalog(tmp_path, {"id": "dgx-h200", "price_usd": 400000, "price_source_kind": "placeholder",
                                         "source": "our order of magnitude, no quote yet"})  # fmt: skip
    path = write_scenario(tmp_path, _scenario(["dgx-h200"], catalog=str(directory)))
    result = bom(path)
    (line,) = [line for line in result.lines if line.item == "dgx-h200"]
    assert line.price_origin == f"yours ({directory / 'systems.yaml'}), placeholder: get a quote"
    assert "dgx-h200" in result.placeholders()  # listed with the quotes to get
    assert "dgx-h200" in to_markdown(result).split("Priced from catalog placeholders")[1].splitlines()[0]


def test_a_users_price_over_a_shipped_estimate_does_not_keep_its_kind(tmp_path):
    directory = _user_catalog(tmp_path, {"id": "dgx-b200", "price_usd": 480000, "source": "our quote, 2026-10"})
    catalog = load_catalog(directory)
    assert catalog.systems["dgx-b200"].price_source_kind is None  # the shipped 'estimate' was the replaced price's
    assert catalog_price_origin(catalog, "dgx-b200") == f"yours ({directory / 'systems.yaml'})"
    assert catalog_price_origin(catalog, "dgx-h100").startswith("estimate (shipped catalog: ")  # untouched


def test_no_server_line_reads_cited_where_its_price_is_not(tmp_path):
    """The issue's case: the decision scenario's DGX B200 (a press estimate) read 'catalog default (cited)'."""
    result = bom(SCENARIOS / "chat-and-code-decision.yaml")
    servers = [line for line in result.lines if line.gpu]
    assert servers and all("cited" not in line.price_origin for line in servers)
    assert all(line.price_origin.startswith(("list price", "estimate", "yours")) for line in servers)


@pytest.fixture(scope="module")
def decision():
    path = SCENARIOS / "chat-and-code-decision.yaml"
    return path, plan_file(path), compare(path)


def test_the_two_capex_figures_are_named_and_equal_across_plan_bom_and_compare(decision, cli):
    path, plan, sides = decision
    totals = plan_document(plan)["totals"]
    assert totals["servers_capex_usd"] == totals["capex_usd"]  # the old key keeps its meaning
    assert totals["capex_incl_site_usd"] == pytest.approx(totals["capex_usd"] + totals["infrastructure_capex_usd"])
    assert totals["capex_incl_site_usd"] > totals["servers_capex_usd"] > 0
    made = bom(path)
    bom_totals = made.totals
    assert bom_totals.servers_capex_usd == pytest.approx(totals["servers_capex_usd"])
    assert bom_totals.capex_incl_site_usd == pytest.approx(totals["capex_incl_site_usd"])
    (side,) = [s for s in compare_document(sides)["deployments"] if s["deployment"] == plan.deployment]
    assert side["servers_capex_usd"] == pytest.approx(totals["servers_capex_usd"])
    assert side["capex_incl_site_usd"] == pytest.approx(totals["capex_incl_site_usd"])
    # and the texts use the two names, never a bare "capex" figure
    code, out, _ = cli("plan", path)
    assert code == 0
    assert f"servers capex {totals['servers_capex_usd']:,.0f} USD, capex incl. site {totals['capex_incl_site_usd']:,.0f} USD" in out
    markdown = to_markdown(made)
    assert f"Servers capex: {totals['servers_capex_usd']:,.2f} USD; capex incl. site" in markdown
    assert f"{totals['capex_incl_site_usd']:,.2f} USD" in markdown


def test_a_saved_plan_with_the_capex_names_reads_back(decision, tmp_path):
    from planner.plan import plan_from_document

    _, plan, _ = decision
    document = json.loads(json.dumps(plan_document(plan)))
    assert plan_from_document(document).totals == plan.totals


def test_a_commitment_discount_says_yours_and_the_on_demand_price_it_comes_off():
    from planner.cloud import SystemOffer
    from planner.report.price_origins import offer_price_origin

    offer = SystemOffer(system="aws-p5.48xlarge", site="cloud", pricing="reserved", price_usd=None, usd_per_hour=44.032,
                        power_kw=None, rack_units=None, term_months=12,
                        price_note="commitments[0]: 12-month term, 20% off on demand 55.04 USD/h; source: quote A")  # fmt: skip
    origin = offer_price_origin(offer, load_catalog(), "s.yaml")
    assert origin == ("yours (scenario s.yaml: sites.cloud.commitments[0] discount) off the on-demand price: list price "
                      "(shipped catalog: AWS on-demand price list via SkyPilot catalog (vms.csv), us-east-1, read 2026-11)")  # fmt: skip
