"""Issue 34, cloud realism (planner/cloud.py): commitments, spot with its interruption derating and share, a
start-up lead time billed ahead and turned into headroom. Checked against closed forms and a brute force over
node counts that knows nothing of the program."""

from __future__ import annotations

import itertools
import math

import pytest
import yaml
from helpers import SCENARIOS

from planner.api import plan_in_context
from planner.candidates import enumerate_candidates
from planner.catalog import load_catalog
from planner.cloud import rental_bill, rental_day, spot_availability
from planner.errors import PlannerInputError
from planner.report.bom import build_bom
from planner.scenario import load_scenario

HYBRID = SCENARIOS / "daily-hybrid.yaml"


def _cloud(tmp_path, name="cloud.yaml", **cloud):
    document = yaml.safe_load(HYBRID.read_text())
    document["deployment"] = "cloud"
    document["sites"]["cloud"].update(cloud)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


class _Period:
    def __init__(self, name, hours_per_year):
        self.name, self.hours_per_year = name, hours_per_year


DAY = [_Period("business", 3650), _Period("evening", 2190), _Period("night", 2920)]  # 10 h, 6 h, 8 h: a day


@pytest.mark.parametrize("periods, minimum, lead, counts, starts, topped", [
    (DAY, 0, 0.5, {"business": 3, "evening": 1}, 3, 0),       # 3 rentals a day (one runs into the evening)
    (DAY, 0, 0.5, {"business": 2, "evening": 2, "night": 2}, 0, 0),  # rented all day: never started again
    (DAY, 12, 0, {"business": 2, "evening": 2}, 2, 0),        # 16 h rentals: past the 12 h minimum
    (DAY, 12, 0, {"business": 2}, 2, 2 * 2),                  # 10 h rentals billed 12 h
    (DAY, 12, 0, {"evening": 1, "night": 1}, 1, 0),           # evening (6 h) runs into the night (8 h): 14 h
    (DAY, 12, 0, {"evening": 1}, 1, 6),                       # 6 h billed 12 h
    (DAY, 12, 7, {"evening": 1}, 1, 0),                       # 6 h + 7 h ahead exceed the minimum
    (DAY, 23, 0, {"business": 1, "evening": 1}, 1, 7),        # 16 h of a 23 h minimum
    ([_Period("all", 8760)], 12, 0.25, {"all": 5}, 0, 0),     # one period all year: rented once
    ([_Period("day", 3650)], 12, 0.25, {"day": 5}, 5, 5 * 1.75),  # the rest of the day is no period: started daily
    ([_Period(f"h{h:02d}", 365) for h in range(24)], 12, 0, {f"h{h:02d}": 5 for h in range(24)}, 0, 0),  # issue 49
])  # fmt: skip
def test_a_rental_is_billed_its_lead_time_per_start_and_at_least_its_minimum(periods, minimum, lead, counts, starts, topped):
    """Rentals span consecutive periods (the listed order, a day when the periods fill the year): each start pays
    its lead time, a rental shorter than the minimum pays the rest of it (closed forms worked by hand)."""
    day = rental_day(periods, minimum, lead)
    assert rental_bill(day, counts) == (starts, pytest.approx(topped))


def test_counts_that_end_a_rental_within_its_minimum_are_refused():
    day = rental_day([_Period(f"h{h}", 365) for h in range(24)], 3, 0)  # hourly periods, 3 h minimum
    with pytest.raises(ValueError, match="billed at least their minimum"):
        rental_bill(day, {"h1": 2, "h2": 1})  # one of two rentals started at h1 stops after an hour


@pytest.mark.parametrize("rate, tau_h", [(0.0, 1.0), (0.05, 10 / 60), (1.0, 1.0), (2.0, 0.25)])
def test_spot_availability_is_the_renewal_process_share_of_up_time(rate, tau_h):
    """Up 1/lambda on average, down tau: A = (1/lambda) / (1/lambda + tau) (A = 1 without interruptions)."""
    expected = 1.0 if rate == 0 else (1 / rate) / (1 / rate + tau_h)
    assert spot_availability(rate, tau_h) == pytest.approx(expected)


def test_spot_options_serve_their_availability_times_the_nodes_rate(tmp_path):
    """Every spot option's requests/s is A x the same configuration's on demand."""
    path = _cloud(tmp_path, systems=["aws-p5.48xlarge"], reserved_usd_per_hour={},
                  spot={"interruptions_per_hour": 0.5, "replacement_minutes": 30})
    catalog = load_catalog()
    scenario = load_scenario(path, catalog)
    cset = enumerate_candidates(scenario, catalog)
    availability = 1 / (1 + 0.5 * 0.5)
    by_key = {(o.workload, o.bucket, o.candidate): o for o in cset.options}
    pairs = 0
    for (workload, bucket, key), option in by_key.items():
        if "/spot/" in key:
            twin = by_key[(workload, bucket, key.replace("/spot/", "/on-demand/"))]
            assert option.rps_per_node == pytest.approx(availability * twin.rps_per_node)
            pairs += 1
    assert pairs > 0


def _brute_force(d_rps: float, rate_od: float, rate_spot: float, usd_od: float, usd_spot: float, share: float) -> float:
    """Cheapest hourly price of whole nodes: on-demand n, spot m with rate_od n + rate_spot m >= d and the spot
    part at most share x d (so the on-demand nodes carry at least (1 - share) d)."""
    best = math.inf
    top = math.ceil(d_rps / min(rate_od, rate_spot)) + 1
    for n, m in itertools.product(range(top + 1), repeat=2):
        spot_carried = min(rate_spot * m, share * d_rps)
        if rate_od * n + spot_carried >= d_rps - 1e-9:
            best = min(best, usd_od * n + usd_spot * m)
    return best


@pytest.mark.parametrize("share", [1.0, 0.5, 0.2, 0.0])
def test_spot_plan_matches_a_brute_force_over_node_counts(tmp_path, share):
    """One workload, one period, an on-demand and a spot H100 node: the program's hourly node cost equals the
    cheapest pair of whole counts, with spot derated by A and capped at its share of demand."""
    document = yaml.safe_load(HYBRID.read_text())
    document.update(deployment="cloud", periods=[{"name": "all", "hours_per_year": 8760}])
    document["workloads"] = [w for w in document["workloads"] if w["name"] == "summarize"]
    document["sites"]["cloud"] = {"systems": ["lambda-gpu-8x-h100-sxm5", "aws-p5.48xlarge"],
                                  "spot": {"interruptions_per_hour": 0.2, "replacement_minutes": 60,
                                           "systems": ["aws-p5.48xlarge"], "usd_per_hour": {"aws-p5.48xlarge": 12.0},
                                           "max_share": share},
                                  "software_usd_per_gpu_per_year": 0}  # fmt: skip
    path = tmp_path / "spot.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    planned = plan_in_context(path)
    scenario, plan = planned.scenario, planned.plan
    cset = enumerate_candidates(scenario, load_catalog())
    rate = {pricing: max(o.rps_per_node for o in cset.options if f"/{pricing}/" in o.candidate) for pricing in ("on-demand", "spot")}
    assert rate["spot"] == pytest.approx(rate["on-demand"] * spot_availability(0.2, 1.0))
    # the cheapest node of each pricing (both systems are 8 x H100 at the same rate: asserted)
    od_rates = {o.candidate.split("/")[2] for o in cset.options if "/on-demand/" in o.candidate}
    assert len(od_rates) == 2
    for system in od_rates:
        assert max(o.rps_per_node for o in cset.options if f"/on-demand/{system}/" in o.candidate) == pytest.approx(rate["on-demand"])
    usd = {pricing: min(o.usd_per_hour for o in scenario.offers if o.pricing == pricing) for pricing in ("on-demand", "spot")}
    demand = scenario.periods[0].demand_rps["summarize"]
    expected = _brute_force(demand, rate["on-demand"], rate["spot"], usd["on-demand"], usd["spot"], share)
    assert plan.objective_usd_per_year == pytest.approx(expected * 8760, rel=1e-9)
    spot_rps = sum(r.rps for r in plan.routing if r.role == "spot")
    assert spot_rps <= share * demand + 1e-6
    if share == 0.0:
        assert all(line.role != "spot" for line in plan.lines)


def test_the_cheapest_commitment_is_offered_and_the_bom_says_what_it_signs_for(tmp_path):
    path = _cloud(tmp_path, systems=["aws-p5.48xlarge"], reserved_usd_per_hour={"aws-p5.48xlarge": 38.53},
                  commitments=[{"term_months": 12, "discount_fraction": 0.2, "source": "quote A"},
                               {"term_months": 36, "usd_per_hour": {"p5.48xlarge": 30.0}, "source": "quote B"}])
    catalog = load_catalog()
    planned = plan_in_context(path)
    reserved = [o for o in planned.scenario.offers if o.pricing == "reserved"]
    assert len(reserved) == 1 and reserved[0].usd_per_hour == 30.0 and reserved[0].term_months == 36
    assert "quote B" in reserved[0].price_note and "38.53" in reserved[0].price_note and "44.032" in reserved[0].price_note
    lines = [line for line in planned.plan.lines if line.role == "reserved"]
    assert lines, "a constant night-and-day load is cheaper committed"
    for line in lines:
        assert line.annual_cost_usd == pytest.approx(30.0 * 8760 * line.nodes, abs=0.01)
    bom = build_bom(planned.plan, planned.scenario, catalog)
    committed = [b for b in bom.lines if b.how == "reserved"]
    nodes = sum(b.count for b in committed)
    assert all(f"commits {nodes * 30.0 * 730 * 36:,.0f} USD over the 36-month term" in b.price_source for b in committed)
    assert all(b.price_origin == f"yours (scenario {path}: sites.cloud.commitments[1])" for b in committed)


def test_a_start_up_lead_time_is_billed_and_sized_for(tmp_path):
    """15 minutes of lead time: each rental started is billed 15 minutes more (a rental spans the consecutive
    periods it runs through); with demand growing 20% an hour the rented nodes hold 5% more capacity than they
    carry while new nodes start; the demand routed stays the demand."""
    base = plan_in_context(_cloud(tmp_path, "a.yaml", reserved_usd_per_hour={})).plan
    planned = plan_in_context(_cloud(tmp_path, "b.yaml", reserved_usd_per_hour={}, start_up_minutes=15,
                                     demand_growth_per_hour=0.2))
    plan, scenario = planned.plan, planned.scenario
    assert scenario.demand_headroom == pytest.approx(0.05)
    counts: dict[str, dict[str, int]] = {}
    for line in plan.lines:
        assert line.role == "on-demand"
        hours = next(p.hours_per_year for p in scenario.periods if p.name == line.period)
        usd = next(o.usd_per_hour for o in scenario.offers if o.system == line.system and o.pricing == "on-demand")
        assert line.annual_cost_usd == pytest.approx(usd * line.nodes * hours, abs=0.05)
        counts.setdefault(line.system, {}).setdefault(line.period, 0)
        counts[line.system][line.period] += line.nodes
    order = [p.name for p in scenario.periods]  # a day: business hours, evening, night
    for system, per_period in counts.items():
        usd = next(o.usd_per_hour for o in scenario.offers if o.system == system and o.pricing == "on-demand")
        starts = sum(max(0, per_period.get(t, 0) - per_period.get(order[i - 1], 0)) for i, t in enumerate(order))
        (item,) = [i for i in plan.infrastructure if i.item.startswith(f"{system} on-demand start-up")]
        assert item.count == pytest.approx(365 * 0.25 * starts) and item.annual_cost_usd == pytest.approx(
            usd * 365 * 0.25 * starts, abs=0.05)
    for period in scenario.periods:
        for workload in scenario.workloads:
            routed = sum(r.rps for r in plan.routing if r.period == period.name and r.workload == workload.name)
            assert routed == pytest.approx(period.demand_rps[workload.name], rel=1e-6)
    assert plan.objective_usd_per_year > base.objective_usd_per_year


@pytest.mark.parametrize("cloud, field, words", [
    ({"spot": {"interruptions_per_hour": 0.1, "systems": ["lambda-gpu-8x-h100-sxm5"]}},
     "sites.cloud.spot.systems: lambda-gpu-8x-h100-sxm5", "no spot price"),
    ({"spot": {"interruptions_per_hour": 0.1, "usd_per_hour": {"aws-p5en.48xlarge": 20}}},
     "sites.cloud.spot.usd_per_hour.aws-p5en.48xlarge", "not listed in sites.cloud.systems"),
    ({"commitments": [{"term_months": 12}]}, "sites.cloud.commitments", "either usd_per_hour"),
    ({"commitments": [{"term_months": 12, "discount_fraction": 0.3, "usd_per_hour": {"aws-p5.48xlarge": 30}}]},
     "sites.cloud.commitments", "not both"),
    ({"commitments": [{"term_months": 0.5, "discount_fraction": 0.3}]}, "sites.cloud.commitments", "term_months"),
    ({"spot": {"replacement_minutes": 5}}, "sites.cloud.spot", "interruptions_per_hour"),
])  # fmt: skip
def test_a_bad_market_block_names_its_field(tmp_path, cloud, field, words):
    path = _cloud(tmp_path, **cloud)
    with pytest.raises(PlannerInputError) as raised:
        load_scenario(path, load_catalog())
    message = str(raised.value)
    assert field in message and words in message, message


def test_the_cli_refuses_a_spot_block_without_interruptions_with_exit_2(tmp_path, cli):
    path = _cloud(tmp_path, spot={"replacement_minutes": 5})
    code, out, err = cli("plan", str(path))
    assert code == 2 and out == ""
    assert "interruptions_per_hour" in err and "Traceback" not in err


def test_a_spot_bom_totals_its_gpus_as_a_peak_in_the_spreadsheet(tmp_path):
    """Spot lines are per period like on-demand ones: the XLSX GPU total is the fixed lines plus the busiest
    period's rented ones; LibreOffice (where installed) computes the plan's totals."""
    import shutil
    import subprocess

    import openpyxl
    import pandas as pd
    from helpers import evaluate_xlsx_formula, xlsx_total_row

    from planner.report.bom import write_xlsx

    path = _cloud(tmp_path, spot={"interruptions_per_hour": 0.05, "replacement_minutes": 10},
                  commitments=[{"term_months": 36, "discount_fraction": 0.45}], start_up_minutes=15)
    planned = plan_in_context(path)
    bom = build_bom(planned.plan, planned.scenario, load_catalog())
    assert {"spot", "reserved"} <= {line.how for line in bom.lines}
    assert bom.totals.gpus == planned.plan.totals.gpus
    write_xlsx(bom, tmp_path / "bom.xlsx")
    sheet = openpyxl.load_workbook(tmp_path / "bom.xlsx")["BOM"]
    header = [cell.value for cell in sheet[1]]
    total = xlsx_total_row(sheet)
    gpus = sheet.cell(row=total, column=header.index("gpus") + 1).value
    assert '="spot"' in gpus and evaluate_xlsx_formula(sheet, gpus) == bom.totals.gpus
    office = shutil.which("soffice") or shutil.which("libreoffice")
    if office is None:
        pytest.skip("LibreOffice (soffice) is not installed")
    subprocess.run([office, "--headless", f"-env:UserInstallation=file://{tmp_path}/profile", "--convert-to", "csv",
                    "--outdir", str(tmp_path / "out"), str(tmp_path / "bom.xlsx")],
                   check=True, capture_output=True, timeout=180)  # fmt: skip
    frame = pd.read_csv(tmp_path / "out" / "bom.csv")
    row = frame[frame["item"] == "TOTAL"].iloc[0]
    assert float(row["gpus"]) == bom.totals.gpus
    assert float(row["annual_cost_usd"]) == pytest.approx(planned.plan.objective_usd_per_year, rel=1e-9)
