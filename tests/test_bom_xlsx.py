"""The XLSX bill of materials as a reviewer opens it (issue 20): TOTAL as formulas over the lines that compute the
plan's totals, a frozen header and filters, assumptions as numbers with their units, names that stay text.

The formulas are evaluated twice, independently of the writer: by a small evaluator (tests/helpers.py's evaluate_xlsx_formula: SUM, SUMIF, SUMIFS,
MAX over the sheet's own cells), and by LibreOffice where it is installed (`soffice --convert-to csv`)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import openpyxl
import pandas as pd
import pytest
from helpers import evaluate_xlsx_formula, xlsx_total_row

from planner import api
from planner.catalog import load_catalog
from planner.optimize import plan as solve_plan
from planner.report.bom import build_bom, to_markdown, write_xlsx
from planner.scenario import load_scenario_deployments

HYBRID = "scenarios/daily-hybrid.yaml"


@pytest.fixture(scope="module")
def boms():
    """daily-hybrid as planned (bought nodes), its cloud deployment (on-demand lines in several periods) and its
    on-prem one (the servers with the site's network, racks, PDUs, support, facility and licence lines)."""
    catalog = load_catalog()
    deployments = load_scenario_deployments(HYBRID, catalog)
    cloud, on_prem = deployments["cloud"], deployments["on-prem"]
    return {"hybrid": api.bom(HYBRID), "cloud": build_bom(solve_plan(cloud, catalog), cloud, catalog),
            "on-prem": build_bom(solve_plan(on_prem, catalog), on_prem, catalog)}


@pytest.mark.parametrize("which", ["hybrid", "cloud", "on-prem"])
def test_total_row_is_formulas_over_the_lines_that_give_the_plans_totals(boms, which, tmp_path):
    bom = boms[which]
    path = tmp_path / "bom.xlsx"
    write_xlsx(bom, path)
    sheet = openpyxl.load_workbook(path)["BOM"]
    header = [cell.value for cell in sheet[1]]
    total = xlsx_total_row(sheet)
    assert total == len(bom.lines) + 2, "the TOTAL row follows the lines"
    expected = {
        "gpus": bom.totals.gpus, "extended_price_usd": sum(line.extended_price_usd for line in bom.lines),
        "annual_cost_usd": bom.totals.annual_tco_usd, "power_kw": bom.totals.power_kw, "rack_units": bom.totals.rack_units,
    }  # fmt: skip
    for column, value in expected.items():
        cell = sheet.cell(row=total, column=header.index(column) + 1)
        assert isinstance(cell.value, str) and cell.value.startswith("="), f"{column}: a static number"
        for reference in re.findall(r"\$?([A-Z]+)\$?(\d+)", cell.value):
            assert 2 <= int(reference[1]) <= total - 1, f"{column}: {cell.value} reaches outside the lines"
        assert evaluate_xlsx_formula(sheet, cell.value) == pytest.approx(value, rel=1e-9, abs=1e-6), column
    if which == "cloud":
        periods = {line.period for line in bom.lines if line.how == "on-demand"}
        assert len(periods) > 1, "the cloud plan rents per period: the GPU total is a peak, not a sum"
        gpus = sheet.cell(row=total, column=header.index("gpus") + 1).value
        assert "MAX(" in gpus and bom.totals.gpus < sum(line.gpus for line in bom.lines)


@pytest.mark.parametrize("which", ["hybrid", "cloud"])
def test_frozen_header_and_filters(boms, which, tmp_path):
    path = tmp_path / "bom.xlsx"
    write_xlsx(boms[which], path)
    workbook = openpyxl.load_workbook(path)
    sheet, notes = workbook["BOM"], workbook["Assumptions"]
    assert sheet.freeze_panes == "A2" and notes.freeze_panes == "A2"
    assert sheet.auto_filter.ref == f"A1:S{xlsx_total_row(sheet) - 1}"  # header and lines; TOTAL stays under them
    assert notes.auto_filter.ref == f"A1:D{notes.max_row}"
    assert workbook.calculation.fullCalcOnLoad


def test_assumptions_are_numbers_with_units(boms, tmp_path):
    path = tmp_path / "bom.xlsx"
    write_xlsx(boms["hybrid"], path)
    notes = openpyxl.load_workbook(path)["Assumptions"]
    assert [cell.value for cell in notes[1]] == ["assumption", "value", "unit", "source"]
    rows = {row[0]: row for row in notes.iter_rows(min_row=2, values_only=True)}
    for name in ("amortization_years", "usd_per_kwh", "pue", "words_per_token", "hours_per_year business-hours",
                 "price dgx-h100 (capex)", "price aws-p5.48xlarge (on-demand)"):  # fmt: skip
        _, value, unit, source = rows[name]
        assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{name}: {value!r} is text"
        assert unit and source
    assert rows["usd_per_kwh"][1] == pytest.approx(0.0806) and rows["usd_per_kwh"][2] == "USD/kWh"
    assert rows["price dgx-h100 (capex)"][1:3] == (270000, "USD per node")
    assert rows["price aws-p5.48xlarge (on-demand)"][1:3] == (55.04, "USD per node-hour")
    assert isinstance(rows["perf_sources"][1], str)  # text where the value is text
    markdown = to_markdown(boms["hybrid"])
    assert "| usd_per_kwh | 0.0806 | USD/kWh |" in markdown and "| price dgx-h100 (capex) | 270,000 | USD per node |" in markdown


def test_scenario_names_stay_text_next_to_the_formulas(tmp_path):
    evil = '=HYPERLINK("http://evil.example/","click")'
    text = Path(HYBRID).read_text().replace("name: business-hours", f"name: '{evil}'")
    scenario = tmp_path / "evil.yaml"
    scenario.write_text(text)
    catalog = load_catalog()
    cloud = load_scenario_deployments(scenario, catalog)["cloud"]  # on-demand lines: the period name in a cell
    bom = build_bom(solve_plan(cloud, catalog), cloud, catalog)
    assert any(line.period == evil for line in bom.lines)
    path = tmp_path / "bom.xlsx"
    write_xlsx(bom, path)
    workbook = openpyxl.load_workbook(path)
    texts = [cell for sheet in workbook for row in sheet.iter_rows() for cell in row if cell.value == evil]
    assert texts and all(cell.data_type == "s" for cell in texts)
    sheet = workbook["BOM"]
    formulas = [c for c in sheet[xlsx_total_row(sheet)] if c.data_type == "f"]
    assert formulas and all("evil" not in c.value for c in formulas)
    header = [cell.value for cell in sheet[1]]
    gpus = sheet.cell(row=xlsx_total_row(sheet), column=header.index("gpus") + 1).value
    assert evaluate_xlsx_formula(sheet, gpus) == bom.totals.gpus  # the name is compared exactly, not read as a pattern


def test_same_bom_same_bytes(boms, tmp_path):
    write_xlsx(boms["cloud"], tmp_path / "a.xlsx")
    write_xlsx(boms["cloud"], tmp_path / "b.xlsx")
    assert (tmp_path / "a.xlsx").read_bytes() == (tmp_path / "b.xlsx").read_bytes()


@pytest.mark.parametrize("which", ["hybrid", "cloud", "on-prem"])
def test_a_spreadsheet_program_computes_the_same_totals(boms, which, tmp_path):
    """LibreOffice opens the workbook, computes the formulas and writes the BOM sheet as CSV."""
    office = shutil.which("soffice") or shutil.which("libreoffice")
    if office is None:
        pytest.skip("LibreOffice (soffice) is not installed")
    bom = boms[which]
    write_xlsx(bom, tmp_path / "bom.xlsx")
    subprocess.run([office, "--headless", f"-env:UserInstallation=file://{tmp_path}/profile", "--convert-to", "csv",
                    "--outdir", str(tmp_path / "out"), str(tmp_path / "bom.xlsx")],
                   check=True, capture_output=True, timeout=180)  # fmt: skip
    frame = pd.read_csv(tmp_path / "out" / "bom.csv")
    total = frame[frame["item"] == "TOTAL"].iloc[0]
    assert float(total["annual_cost_usd"]) == pytest.approx(bom.totals.annual_tco_usd, rel=1e-9)
    assert float(total["gpus"]) == bom.totals.gpus
    assert float(total["power_kw"]) == pytest.approx(bom.totals.power_kw, rel=1e-6)
    assert float(total["rack_units"]) == bom.totals.rack_units
