"""What the planner hands its users: BOM (CSV, XLSX, Markdown), the report (Markdown, HTML, PNG plots)."""

from __future__ import annotations

import pandas as pd
import pytest

from planner.api import bom, plan_in_context
from planner.report import document, plots
from planner.report.bom import build_bom, write_csv, write_xlsx

from helpers import SCENARIOS


@pytest.fixture(scope="module")
def hybrid():
    return plan_in_context(SCENARIOS / "daily-hybrid.yaml")


@pytest.mark.parametrize("name", ["contact-center.yaml", "daily-hybrid.yaml", "chat-and-summarize.yaml"])
def test_bom_totals_equal_the_objective(name):
    planned = plan_in_context(SCENARIOS / name)
    result = build_bom(planned.plan, planned.scenario, planned.catalog)
    assert sum(line.annual_cost_usd for line in result.lines) == pytest.approx(planned.plan.objective_usd_per_year, abs=0.05)
    assert result.totals.annual_tco_usd == pytest.approx(planned.plan.objective_usd_per_year)
    assert result.totals.capex_amortized_usd_per_year + result.totals.annual_opex_usd == pytest.approx(result.totals.annual_tco_usd)
    bought = [line for line in result.lines if line.site == "on-prem" and line.how in ("bought", "spare")]
    assert sum(line.extended_price_usd for line in bought) == pytest.approx(result.totals.capex_usd)


def test_contact_center_bom_numbers():
    result = bom(SCENARIOS / "contact-center.yaml")
    (line,) = [line for line in result.lines if line.item == "dgx-h100"]  # then racks, networks, support, licences
    assert (line.item, line.count, line.gpus, line.unit_price_usd) == ("dgx-h100", 13, 104, 270_000)
    assert line.extended_price_usd == 13 * 270_000
    assert line.power_kw == pytest.approx(13 * 10.2) and line.rack_units == 13 * 8
    names = {a.name for a in result.assumptions}
    assert {"amortization_years", "usd_per_kwh", "pue", "price dgx-h100 (capex)"} <= names


def test_csv_and_xlsx_hold_the_same_numbers(tmp_path, hybrid):
    result = build_bom(hybrid.plan, hybrid.scenario, hybrid.catalog)
    write_csv(result, tmp_path / "bom.csv")
    write_xlsx(result, tmp_path / "bom.xlsx")
    from_csv = pd.read_csv(tmp_path / "bom.csv")
    sheets = pd.read_excel(tmp_path / "bom.xlsx", sheet_name=None)
    assert set(sheets) == {"BOM", "Totals", "Assumptions"}
    from_xlsx = sheets["BOM"]
    assert list(from_csv.columns) == list(from_xlsx.columns)
    lines = from_csv["item"] != "TOTAL"  # the XLSX TOTAL row is formulas (tests/test_bom_xlsx.py evaluates them)
    for column in ("count", "gpus", "unit_price_usd", "extended_price_usd", "annual_cost_usd", "power_kw", "rack_units"):
        assert from_csv[lines][column].fillna(-1).tolist() == pytest.approx(from_xlsx[lines][column].fillna(-1).tolist())
    total = from_csv[from_csv["item"] == "TOTAL"].iloc[0]
    assert total["annual_cost_usd"] == pytest.approx(hybrid.plan.objective_usd_per_year)
    totals = dict(zip(sheets["Totals"]["total"], sheets["Totals"]["value"]))
    assert totals["annual_tco_usd"] == pytest.approx(hybrid.plan.objective_usd_per_year)


def test_xlsx_is_byte_identical_across_runs(tmp_path, hybrid):
    import time

    result = build_bom(hybrid.plan, hybrid.scenario, hybrid.catalog)
    write_xlsx(result, tmp_path / "a.xlsx")
    time.sleep(1.1)  # the zip entries and the workbook properties carry the wall clock unless the writer fixes them
    write_xlsx(result, tmp_path / "b.xlsx")
    assert (tmp_path / "a.xlsx").read_bytes() == (tmp_path / "b.xlsx").read_bytes()


def test_bom_cli_formats(cli, tmp_path):
    code, out, err = cli("bom", SCENARIOS / "contact-center.yaml")
    assert code == 0 and out.splitlines()[0].startswith("item,description")
    code, out, _ = cli("bom", SCENARIOS / "contact-center.yaml", "--format", "md")
    assert code == 0 and "| dgx-h100 |" in out and "Annual TCO" in out
    code, _, err = cli("bom", SCENARIOS / "contact-center.yaml", "--format", "xlsx")
    assert code == 2 and "--out" in err
    code, _, _ = cli("bom", SCENARIOS / "contact-center.yaml", "--format", "xlsx", "--out", tmp_path / "b.xlsx")
    assert code == 0 and (tmp_path / "b.xlsx").stat().st_size > 0


def test_markdown_report_has_every_workload_and_bom_line(tmp_path, hybrid):
    report = document.build_report(hybrid)
    files = document.write_report(report, tmp_path)
    markdown = (tmp_path / "report.md").read_text()
    for workload in hybrid.scenario.workloads:
        assert workload.name in markdown
    for line in build_bom(hybrid.plan, hybrid.scenario, hybrid.catalog).lines:
        assert f"| {line.item} | {line.how} | {line.period} |" in markdown
    assert "Cost per million output tokens" in markdown and "Daily active users" in markdown
    html = (tmp_path / "report.html").read_text()
    assert html.count("data:image/png;base64,") == len(report.figures())  # self-contained
    for path in files:
        assert path.exists() and path.stat().st_size > 0


def test_every_plot_has_labelled_axes(hybrid):
    report = document.build_report(hybrid)
    names = [name for name, _, _ in report.figures()]
    assert {"demand-capacity.png", "cost-breakdown.png", "lengths.png"} <= set(names)
    assert any(name.startswith("curve-") for name in names)
    for name, figure, caption in report.figures():
        for axes in figure.axes:
            assert axes.get_xlabel() and axes.get_ylabel(), name
        assert caption


def test_demand_capacity_plot_stacks_capacity_above_demand(hybrid):
    figure = plots.demand_capacity_figure(hybrid.plan, hybrid.scenario)
    (axes,) = figure.axes
    heights = [patch.get_height() for patch in axes.patches]
    demand_line = axes.get_lines()[0].get_ydata()
    periods = len(hybrid.plan.periods)
    stacked = [sum(heights[i::periods]) for i in range(periods)]
    assert all(s >= d - 1e-6 for s, d in zip(stacked, demand_line))


def test_report_cli(cli, tmp_path):
    code, out, err = cli("report", SCENARIOS / "contact-center.yaml", "--out", tmp_path / "r")
    assert code == 0, err
    assert (tmp_path / "r" / "report.md").exists() and (tmp_path / "r" / "report.html").exists()
    assert list((tmp_path / "r").glob("*.png"))
