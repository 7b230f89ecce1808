"""What an on-prem fleet costs beyond its servers, and capital as an annuity (issue 34; planner/infrastructure.py).

Checked against things independent of the code under test: the annuity against the present value of its payments,
the integer program's switch rows against brute force over every way of building the network, the program's own
objective against the plan's lines, and the BOM's TOTAL against `plan --json`."""

from __future__ import annotations

import itertools
import json
import math

import pytest
import yaml
from helpers import SCENARIOS, program_objective

from planner import api
from planner.api import break_even, plan_in_context
from planner.catalog import load_catalog
from planner.infrastructure import annuity_factor, switches_for
from planner.report.bom import build_bom
from planner.scenario import load_scenario, load_scenario_deployments

HYBRID = SCENARIOS / "daily-hybrid.yaml"


@pytest.mark.parametrize("rate, years", [(0.0, 5), (0.07, 5), (0.12, 3), (0.03, 10), (0.5, 1)])
def test_the_annuity_repays_the_capital_at_the_rate(rate, years):
    """The present value at r of n payments of a(r, n) is 1 USD; r = 0 is the straight line."""
    payment = annuity_factor(rate, years)
    present_value = sum(payment / (1 + rate) ** k for k in range(1, years + 1))
    assert present_value == pytest.approx(1.0, rel=1e-12)
    if rate == 0:
        assert payment == 1 / years


@pytest.mark.parametrize("switch_ports", [8, 36, 64])
def test_the_switch_rows_give_the_fewest_switches_by_brute_force(switch_ports):
    """For every port count, the cheapest (one, leaves, spines) the program's rows allow (ports <= P one + (P/2) L,
    L <= B (1 - one), 2 S >= L) has as many switches as the closed form, found here by enumeration."""
    half = switch_ports // 2
    for ports in range(0, 6 * switch_ports):
        best = None
        bound = math.ceil(ports / half) + 1
        for one, leaves in itertools.product((0, 1), range(0, bound + 1)):
            if ports > switch_ports * one + half * leaves or (one and leaves):
                continue
            spines = math.ceil(leaves / 2)
            count = one + leaves + spines
            best = count if best is None else min(best, count)
        assert switches_for(ports, switch_ports)[0] == best, ports


@pytest.mark.parametrize("name", ["contact-center.yaml", "daily-hybrid.yaml", "llama3-8b-assistant.yaml"])
def test_the_program_minimizes_what_the_plan_reports(name):
    """The objective the solver minimized equals the plan's: its server lines plus its infrastructure lines, whose
    racks and switches are the program's whole-unit variables."""
    seen, planned = program_objective(SCENARIOS / name)
    plan = planned.plan
    assert seen["objective"] == pytest.approx(plan.objective_usd_per_year, abs=0.05)
    assert plan.objective_usd_per_year == pytest.approx(
        sum(line.annual_cost_usd for line in plan.lines) + sum(item.annual_cost_usd for item in plan.infrastructure), abs=0.05)
    racks = next(item for item in plan.infrastructure if item.item == "racks")
    assert racks.count == seen["infrastructure"]["racks"]
    fabric = next(item for item in plan.infrastructure if item.item.startswith("compute fabric switches"))
    counted = sum(seen["infrastructure"][f"fabric_{part}"] for part in ("one_switch", "leaves", "spines"))
    assert fabric.count == counted


def test_the_seed_case_keeps_its_13_nodes_and_prices_a_two_tier_fabric():
    """13 DGX H100 (seed 001) have 104 fabric ports: more than one 64-port switch, so 4 leaves and 2 spines;
    132.6 kW in 41 kW racks: 4 racks."""
    plan = plan_in_context(SCENARIOS / "contact-center.yaml").plan
    assert plan.totals.nodes_by_system == {"dgx-h100": 13}
    items = {item.item.split(" (")[0]: item for item in plan.infrastructure}
    assert items["compute fabric switches"].count == 6 and "4 leaves + 2 spines" in next(
        i.item for i in plan.infrastructure if i.item.startswith("compute fabric switches"))
    assert items["racks"].count == 4 and items["PDUs"].count == 8
    assert items["software licences"].count == 104 and items["software licences"].unit_usd == 4500
    assert items["support contract"].origin == "catalog default (placeholder)"
    assert items["facility"].origin == "catalog default (cited)" and items["facility"].count == pytest.approx(132.6)


def test_servers_alone_reproduce_the_straight_line_cost(tmp_path):
    """infrastructure off, no support and no cost of capital: the cost of before issue 34, by the seed's formula
    (price / 5 y + 10.2 kW x 1.58 x 0.0806 USD/kWh x 8760 h per node)."""
    document = yaml.safe_load((SCENARIOS / "contact-center.yaml").read_text())
    document["sites"]["on_prem"].update(infrastructure={"include": False}, maintenance_fraction_per_year=0,
                                        cost_of_capital_per_year=0)  # fmt: skip
    path = tmp_path / "servers.yaml"
    path.write_text(yaml.safe_dump(document))
    plan = plan_in_context(path).plan
    assert plan.infrastructure == ()
    per_node = 270_000 / 5 + 10.2 * 1.58 * 0.0806 * 8760
    assert plan.objective_usd_per_year == pytest.approx(13 * per_node, abs=0.05)


def test_the_on_prem_bom_lists_network_racks_support_and_licences_with_sources(cli):
    """Issue 34's acceptance: daily-hybrid on-prem; the BOM's TOTAL equals `plan --json`'s objective, which
    includes these lines."""
    code, out, err = cli("plan", HYBRID, "--deployment", "on-prem", "--json")
    assert code == 0, err
    document = json.loads(out)
    catalog = load_catalog()
    scenario = load_scenario_deployments(HYBRID, catalog)["on-prem"]
    from planner.plan import plan_from_document

    bom = build_bom(plan_from_document(document), scenario, catalog)
    items = {line.item.split(" (")[0]: line for line in bom.lines}
    for item in ("compute fabric switches", "compute fabric links", "front-end network switches", "racks", "PDUs",
                 "support contract", "software licences", "facility"):  # fmt: skip
        assert item in items, sorted(items)
        assert items[item].price_source and items[item].price_origin.startswith(("catalog default", "scenario"))
    assert bom.totals.annual_tco_usd == pytest.approx(document["objective_usd_per_year"], abs=0.01)
    assert sum(line.annual_cost_usd for line in bom.lines) == pytest.approx(document["objective_usd_per_year"], abs=0.05)
    assert document["totals"]["infrastructure_capex_usd"] > 0
    assert "compute fabric switches" in " ".join(bom.placeholders())


def test_cloud_nodes_pay_their_licences_per_hour_rented():
    catalog = load_catalog()
    cloud = load_scenario_deployments(HYBRID, catalog)["cloud"]
    from planner.optimize import plan as solve_plan

    plan = solve_plan(cloud, catalog)
    hours = {p.name: p.hours_per_year for p in cloud.periods}
    gpu_hours = sum(line.gpus * (hours[line.period] if line.role == "on-demand" else 8760) for line in plan.lines)
    (licences,) = [line for line in plan.infrastructure if line.item == "software licences"]
    assert licences.site == "cloud" and licences.annual_cost_usd == pytest.approx(gpu_hours * 4500 / 8760, abs=0.05)
    # beside them, the rentals' start-up: the catalog's default lead time (the scenario states none), said so
    (start_up,) = [line for line in plan.infrastructure if line.kind == "on-demand"]
    assert "start-up" in start_up.item and start_up.origin == "catalog default (estimate)"
    assert plan.objective_usd_per_year == pytest.approx(sum(line.annual_cost_usd for line in plan.lines)
                                                        + sum(line.annual_cost_usd for line in plan.infrastructure), abs=0.05)  # fmt: skip


def test_compare_states_usd_per_gpu_hour_and_the_break_even(cli):
    code, out, err = cli("compare", HYBRID, "--json")
    assert code == 0, err
    document = json.loads(out)
    sides = {side["deployment"]: side for side in document["deployments"]}
    even = document["break_even"]
    assert even["utilization"] == pytest.approx(sides["on-prem"]["usd_per_gpu_hour"] / sides["cloud"]["usd_per_gpu_hour"], rel=1e-3)
    on_prem_cheaper = sides["on-prem"]["objective_usd_per_year"] < sides["cloud"]["objective_usd_per_year"]
    assert even["cheaper"] == ("on-prem" if on_prem_cheaper else "cloud")
    # the break-even and the cloud plan's own use agree with which side costs less (equal GPUs on both sides)
    if sides["on-prem"]["gpus"] == sides["cloud"]["peak_gpus"]:
        assert (even["cloud_utilization"] > even["utilization"]) == on_prem_cheaper
    code, out, err = cli("compare", HYBRID)
    assert code == 0 and "Break-even: on-prem" in out and "USD per GPU-hour" in out


def test_a_user_figure_is_said_to_be_the_users(tmp_path):
    document = yaml.safe_load(HYBRID.read_text())
    document["deployment"] = "on-prem"
    document["sites"]["on_prem"]["infrastructure"] = {"fabric_switch_usd": 20000}
    document["sites"]["on_prem"]["software_usd_per_gpu_per_year"] = 0
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(document))
    catalog = load_catalog()
    scenario = load_scenario(path, catalog)
    plan = api.plan_in_context(path).plan
    fabric = next(item for item in plan.infrastructure if item.item.startswith("compute fabric switches"))
    assert fabric.unit_usd == 20000 and fabric.origin == "catalog default (cited), partly scenario"
    assert not [item for item in plan.infrastructure if item.item == "software licences" and item.site == "on-prem"]
    assert scenario.on_prem_costs.figures["software_usd_per_gpu_per_year"].kind == "user"
    assert break_even(()) is None


@pytest.mark.parametrize("minimum_h", [12, 730])
def test_a_minimum_billing_period_costs_more_than_per_second_billing(tmp_path, minimum_h):
    """Issue 34: daily-hybrid in the cloud, its periods a day (10, 6 and 8 h, in that order). A 12 h minimum bills a
    rental (a node rented through consecutive periods) for at least 12 h: each line is its periods' hours, and the
    minimum's top-up is a line of its own (issue 49); a monthly one (730 h) leaves no rental shorter than the year."""
    document = yaml.safe_load(HYBRID.read_text())
    document["deployment"] = "cloud"
    costs = {}
    for minimum in (0, minimum_h):
        document["sites"]["cloud"]["minimum_billing_hours"] = minimum
        path = tmp_path / f"cloud-{minimum}.yaml"
        path.write_text(yaml.safe_dump(document))
        planned = plan_in_context(path)
        costs[minimum] = planned.plan.objective_usd_per_year
        for line in planned.plan.lines:
            if line.role == "on-demand":  # billed for its periods' hours; a short rental's minimum: its own line
                hours = next(p.hours_per_year for p in planned.scenario.periods if p.name == line.period)
                rate = next(o.usd_per_hour for o in planned.scenario.offers if o.system == line.system and o.pricing == "on-demand")
                assert line.annual_cost_usd == pytest.approx(rate * line.nodes * hours, abs=0.05)
        for item in planned.plan.infrastructure:
            if "minimum billing" in item.item:
                assert item.site == "cloud" and item.annual_cost_usd == pytest.approx(item.count * item.unit_usd, abs=0.05)
        if minimum >= 24:
            assert {line.role for line in planned.plan.lines} == {"reserved"}
            assert all("billed at least 730 h" in o.price_note for o in planned.scenario.offers if o.site == "cloud"
                       and o.system == "lambda-gpu-8x-h100-sxm5")
    assert costs[minimum_h] >= costs[0] - 0.05
    if minimum_h >= 24:
        assert costs[minimum_h] > costs[0] * 1.2
