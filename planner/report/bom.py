"""Bill of materials: one line per item to buy or rent, totals, and the assumptions behind the prices.

`build_bom(plan, scenario, catalog)` makes the typed BOM; `write_csv`, `write_xlsx` and `to_markdown` write it.
The totals equal the plan's objective (tests recompute them).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import io
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from planner.catalog import Catalog
from planner.plan import PER_PERIOD_ROLES, Plan
from planner.report.files import write_bytes_atomic, write_text_atomic
from planner.report.formatting import format_frame
from planner.report.price_origins import catalog_price_origin, offer_price_origin
from planner.spreadsheet import csv_safe_frame, text_cells
from planner.scenario import HOURS_PER_YEAR, Scenario

_EPOCH = _dt.datetime(2000, 1, 1)  # fixed workbook timestamps: same plan, same bytes


@dataclass(frozen=True)
class BomLine:
    item: str
    description: str
    site: str
    how: str  # bought | reserved | on-demand | spare
    period: str
    gpu: str
    count: float  # nodes, racks, switches, links; kW-years, GPU-years, node-years for yearly items
    gpus: int
    runs: str
    # the widest expected throughput error (80% of its class's held-out errors) of what these nodes serve; None
    # where every engine on them answers from measured rows (or for idle spares)
    expected_error_throughput: float | None
    unit_price_usd: float
    unit: str  # "per node" (capex) or "per node-hour"
    hours_per_year: float | None
    extended_price_usd: float  # capex for bought/spare lines, the year's rent for cloud lines
    annual_cost_usd: float
    power_kw: float
    rack_units: int
    price_source: str
    # how firm the price is and where it comes from (planner.report.price_origins): a server's or instance's
    # catalog kind and place ('estimate (shipped catalog: ...)', 'yours (my-lab/systems.yaml)'), the user's own
    # ('yours (scenario FILE: field)'); a site item's: 'catalog default (cited / estimate / placeholder)' or
    # 'yours (scenario FILE)'
    price_origin: str


@dataclass(frozen=True)
class BomTotals:
    """The BOM's totals. Two capex figures, each by one name wherever it appears (plan, compare, report):
    `servers_capex_usd` (bought and spare servers: the plan's `totals.capex_usd`) and `capex_incl_site_usd` (those
    and the site bought with them: racks, PDUs, networks, storage, installation)."""

    servers_capex_usd: float
    capex_incl_site_usd: float
    capex_incl_site_amortized_usd_per_year: float  # the annuity of capex incl. site
    annual_opex_usd: float
    annual_tco_usd: float
    power_kw: float
    rack_units: int
    gpus: int

    @property
    def capex_usd(self) -> float:
        """Capex incl. site, by its name before the two figures were named apart."""
        return self.capex_incl_site_usd

    @property
    def capex_amortized_usd_per_year(self) -> float:
        return self.capex_incl_site_amortized_usd_per_year


@dataclass(frozen=True)
class Assumption:
    name: str
    value: float | str  # a number where it is one (written as a number to XLSX, JSON), else text
    unit: str
    source: str


@dataclass(frozen=True)
class Bom:
    scenario: str
    status: str
    lines: tuple[BomLine, ...]
    totals: BomTotals
    assumptions: tuple[Assumption, ...]

    def frame(self) -> pd.DataFrame:
        """The lines and a TOTAL row, as written to CSV / XLSX / Markdown."""
        rows = [asdict(line) for line in self.lines]
        rows.append({
            "item": "TOTAL", "description": "", "site": "", "how": "", "period": "", "gpu": "", "count": None,
            "gpus": self.totals.gpus, "runs": "", "expected_error_throughput": None, "unit_price_usd": None, "unit": "", "hours_per_year": None,
            "extended_price_usd": round(sum(line.extended_price_usd for line in self.lines), 2),
            "annual_cost_usd": self.totals.annual_tco_usd, "power_kw": self.totals.power_kw,
            "rack_units": self.totals.rack_units, "price_source": "", "price_origin": "",
        })  # fmt: skip
        frame = pd.DataFrame(rows, columns=list(BomLine.__dataclass_fields__))
        for column in ("gpus", "rack_units"):
            frame[column] = frame[column].astype("Int64")
        # nodes, racks and switches are whole; kW-years and GPU-years of the yearly lines need not be
        frame["count"] = pd.Series([None if v is None or pd.isna(v) else int(v) if float(v).is_integer() else float(v)
                                    for v in frame["count"]], index=frame.index, dtype=object)  # fmt: skip
        return frame

    def placeholders(self) -> list[str]:
        """Lines priced from a catalog placeholder (no public figure): the quotes a buyer must get."""
        return [line.item for line in self.lines if "placeholder" in line.price_origin]


def _runs(line) -> str:
    return f"idle spare ({line.cost_note or 'N+k'})" if line.role == "spare" else (line.runs or (
        f"{line.model} {f'TP{line.tp}' if line.tp else 'TP not stated'} {line.precision or 'precision not stated'} "
        f"batch {line.max_batch or 'not stated'} "
        f"{line.engine_isl}/{line.engine_osl}"
    ))  # fmt: skip


def purchase_lines(plan: Plan) -> list[tuple]:
    """What to buy or rent: the plan's node groups of one system, how and period added up (a BOM line per item),
    each with what its nodes run ("2 nodes: ... | 1 node: ..." when groups differ)."""
    merged: dict[tuple, list] = {}
    for line in plan.lines:
        merged.setdefault((line.site, line.system, line.role, line.period), []).append(line)
    out = []
    for group in merged.values():
        first = group[0]
        runs = _runs(first) if len(group) == 1 else " | ".join(
            f"{line.nodes} node{'s' if line.nodes > 1 else ''}: {_runs(line)}" for line in group
        )
        out.append((first, sum(line.nodes for line in group), sum(line.gpus for line in group),
                    round(sum(line.capex_usd for line in group), 2), round(sum(line.annual_cost_usd for line in group), 2),
                    round(sum(line.power_kw for line in group), 6), runs))  # fmt: skip
    return out


_ROLES = {"capex": "bought", "reserved": "reserved", "on-demand": "on-demand", "spot": "spot"}


def _expected_error(plan: Plan, line) -> float | None:
    """The widest expected throughput error of the engines routed to nodes of this line's system, site and role."""
    errors = [a.expected_error["throughput"] for w in plan.workloads for a in w.assignments
              if a.expected_error and (a.site, a.system, _ROLES.get(a.pricing)) == (line.site, line.system, line.role)]
    return max(errors) if errors else None


def _site_origin(origin: str, scenario: Scenario) -> str:
    """A site item's origin (planner.infrastructure: 'scenario', 'catalog default (kind)[, partly scenario]'), the
    user's figures said as the servers' are: 'yours (scenario FILE)'."""
    yours = f"yours (scenario {scenario.file})"
    return yours if origin == "scenario" else origin.replace("partly scenario", f"partly {yours}")


def _commitment(offer, nodes: int) -> str:
    """What a committed line signs for: nodes x USD/h x 8760/12 h a month x its term in months."""
    if offer.pricing != "reserved" or not offer.term_months:
        return ""
    total = nodes * offer.usd_per_hour * HOURS_PER_YEAR / 12.0 * offer.term_months
    return f"; commits {total:,.0f} USD over the {offer.term_months:g}-month term"


def build_bom(plan: Plan, scenario: Scenario, catalog: Catalog) -> Bom:
    offers = {(o.system, o.pricing): o for o in scenario.offers}
    lines = []
    for first, nodes, gpus, capex_usd, annual_cost_usd, power_kw, runs in purchase_lines(plan):
        line = dataclasses.replace(first, nodes=nodes, gpus=gpus, capex_usd=capex_usd, annual_cost_usd=annual_cost_usd,
                                   power_kw=power_kw)  # fmt: skip
        system = catalog.systems[line.system]
        if line.site == "on-prem":
            unit_price = line.capex_usd / line.nodes
            offer = offers.get((line.system, "capex"))  # spare nodes: the bought ones' price
            lines.append(BomLine(
                item=line.system, description=system.name, site=line.site, how=line.role, period=line.period,
                gpu=line.gpu, count=line.nodes, gpus=line.gpus, runs=runs, expected_error_throughput=_expected_error(plan, line),
                unit_price_usd=round(unit_price, 2),
                unit="per node", hours_per_year=None, extended_price_usd=round(line.capex_usd, 2),
                annual_cost_usd=line.annual_cost_usd, power_kw=line.power_kw,
                rack_units=(system.rack_units or 0) * line.nodes,
                price_source=f"{offer.price_note if offer else 'catalog'}: {system.source}",
                price_origin=(offer_price_origin(offer, catalog, scenario.file) if offer
                              else catalog_price_origin(catalog, line.system)),
            ))  # fmt: skip
        else:
            offer = offers[(line.system, line.role)]  # the cloud's roles are its pricings
            period_hours = 8760.0 if line.role == "reserved" else next(p.hours_per_year for p in scenario.periods if p.name == line.period)
            lines.append(BomLine(
                item=line.system, description=system.name, site=line.site, how=line.role, period=line.period,
                gpu=line.gpu, count=line.nodes, gpus=line.gpus, runs=runs, expected_error_throughput=_expected_error(plan, line),
                unit_price_usd=offer.usd_per_hour,
                unit="per node-hour", hours_per_year=period_hours, extended_price_usd=line.annual_cost_usd,
                annual_cost_usd=line.annual_cost_usd, power_kw=0.0, rack_units=0,
                price_source=f"{offer.price_note}{_commitment(offer, line.nodes)}: {system.source}",
                price_origin=offer_price_origin(offer, catalog, scenario.file),
            ))  # fmt: skip
    for item in plan.infrastructure:
        yearly = item.capex_usd == 0
        lines.append(BomLine(
            item=item.item, description="", site=item.site, how="per year" if yearly else "bought", period="all", gpu="",
            count=item.count, gpus=0, runs="", expected_error_throughput=None, unit_price_usd=item.unit_usd,
            unit=f"per {item.unit}", hours_per_year=None,
            extended_price_usd=item.annual_cost_usd if yearly else item.capex_usd, annual_cost_usd=item.annual_cost_usd,
            power_kw=0.0, rack_units=0, price_source=item.source, price_origin=_site_origin(item.origin, scenario),
        ))  # fmt: skip
    breakdown = plan.totals.cost_breakdown
    infrastructure_capital = sum(item.annual_cost_usd for item in plan.infrastructure if item.capex_usd > 0)
    totals = BomTotals(
        servers_capex_usd=plan.totals.servers_capex_usd,
        capex_incl_site_usd=plan.totals.capex_incl_site_usd,
        capex_incl_site_amortized_usd_per_year=round(breakdown.capex_amortized_usd + infrastructure_capital, 2),
        annual_opex_usd=round(plan.objective_usd_per_year - breakdown.capex_amortized_usd - infrastructure_capital, 2),
        annual_tco_usd=plan.objective_usd_per_year,
        power_kw=plan.totals.power_kw,
        rack_units=plan.totals.rack_units,
        gpus=plan.totals.gpus,
    )
    return Bom(plan.scenario, plan.status, tuple(lines), totals, _assumptions(scenario, catalog))


ON_PREM_UNITS = {
    "amortization_years": "years",
    "usd_per_kwh": "USD/kWh",
    "pue": "ratio (facility / IT power)",
    "utilization_power_factor": "fraction of rated power drawn",
    "maintenance_fraction_per_year": "fraction of capex per year (support contract)",
    "cost_of_capital_per_year": "fraction per year (annuity rate; 0: straight line)",
    "software_usd_per_gpu_per_year": "USD per GPU per year",
    "facility_usd_per_kw_per_month": "USD per kW of IT load per month",
    "installation_fraction_of_capex": "fraction of capex, once",
}
INFRASTRUCTURE_UNITS = {
    "rack_units_per_rack": "RU per rack", "kw_per_rack": "kW per rack", "rack_usd": "USD per rack",
    "pdus_per_rack": "PDUs per rack", "pdu_usd": "USD per PDU", "fabric_port_gbit_per_s": "Gb/s per port",
    "fabric_switch_ports": "ports per switch", "fabric_switch_usd": "USD per switch", "fabric_link_usd": "USD per link",
    "frontend_ports_per_node": "ports per node", "frontend_switch_ports": "ports per switch",
    "frontend_switch_usd": "USD per switch", "frontend_link_usd": "USD per link",
    "storage_tb_per_node": "TB per node", "storage_usd_per_tb": "USD per TB",
}  # fmt: skip


def _assumptions(scenario: Scenario, catalog: Catalog) -> tuple[Assumption, ...]:
    defaults = catalog.defaults
    here = f"scenario {scenario.file}"
    items = []
    costs = scenario.on_prem_costs
    if costs is not None:
        for name, unit in ON_PREM_UNITS.items():
            figure = costs.figures.get(name)
            value = getattr(costs, name)
            source = (here if figure is None or figure.kind == "user" else f"{figure.source} [{figure.origin}]")
            items.append(Assumption(name, value, unit, source))
        items.append(Assumption("space_usd_per_rack_unit_per_year", costs.space_usd_per_rack_unit_per_year,
                                "USD per rack unit per year", here))  # fmt: skip
        site = costs.infrastructure.figures if costs.infrastructure is not None else {}
        for name, figure in site.items():
            items.append(Assumption(name, figure.value, INFRASTRUCTURE_UNITS.get(name, ""),
                                    here if figure.kind == "user" else f"{figure.source} [{figure.origin}]"))  # fmt: skip
    if scenario.cloud_software is not None:
        figure = scenario.cloud_software
        items.append(Assumption("cloud software_usd_per_gpu_per_year", figure.value, "USD per GPU per year (prorated per hour)",
                                here if figure.kind == "user" else f"{figure.source} [{figure.origin}]"))  # fmt: skip
    items.append(Assumption("headroom_fraction", scenario.limits.headroom_fraction, "fraction of capacity kept free", here))
    if scenario.elastic:  # the cloud's market: how a rental is billed and what it serves
        items.append(Assumption("cloud minimum_billing_hours", scenario.cloud_minimum_billing_hours, "hours per rental", here))
        items.append(Assumption("cloud start_up_minutes", round(scenario.cloud_start_up_hours * 60, 6),
                                "minutes a rented node starts ahead of its period (billed)",
                                here if scenario.cloud_start_up_source == "scenario" else scenario.cloud_start_up_source))  # fmt: skip
        items.append(Assumption("cloud demand_growth_per_hour", scenario.cloud_demand_growth_per_hour,
                                f"share of demand per hour; nodes rented per period hold +{scenario.demand_headroom:.2%} of what they carry while nodes start", here))  # fmt: skip
        for offer in scenario.offers:
            if offer.pricing == "spot":
                items.append(Assumption(f"spot availability {offer.system}", round(offer.capacity_factor, 6),
                                        "share of its hours a spot node serves", here))  # fmt: skip
        if scenario.spot_max_share < 1.0:
            items.append(Assumption("spot max_share", scenario.spot_max_share, "of each workload's demand per period", here))
    items.append(Assumption("words_per_token", scenario.words_per_token, "words/token", defaults.words_per_token.source))
    items.append(Assumption("perf_sources", ", ".join(scenario.perf_sources), "", "scenario perf.sources (data first)"))
    for period in scenario.periods:
        items.append(Assumption(f"hours_per_year {period.name}", period.hours_per_year, "hours/year", here))
    for offer in scenario.offers:
        system = catalog.systems[offer.system]
        price, unit = (offer.price_usd, "USD per node") if offer.price_usd is not None else (offer.usd_per_hour, "USD per node-hour")
        items.append(Assumption(f"price {offer.system} ({offer.pricing})", price, unit, f"{offer.price_note}: {system.source}"))
    return tuple(items)


def write_csv(bom: Bom, path: Path) -> None:
    write_text_atomic(path, csv_text(bom))


def csv_text(bom: Bom) -> str:
    """The BOM as CSV; text a spreadsheet would run as a formula is made inert (planner.spreadsheet)."""
    return csv_safe_frame(bom.frame()).to_csv(index=False, lineterminator="\n")


SUMMED_COLUMNS = ("gpus", "extended_price_usd", "annual_cost_usd", "power_kw", "rack_units")  # count: nodes of
# different systems and periods, not one number (as in the CSV)
XLSX_FORMATS = {"unit_price_usd": "#,##0.00", "extended_price_usd": "#,##0.00", "annual_cost_usd": "#,##0.00",
                "power_kw": "#,##0.0", "hours_per_year": "#,##0", "count": "#,##0", "gpus": "#,##0", "rack_units": "#,##0",
                "expected_error_throughput": "0%"}  # fmt: skip


def write_xlsx(bom: Bom, path: Path) -> None:
    """Three sheets: BOM (number formats; the TOTAL row as SUM formulas over the lines; frozen header, filters),
    Totals, and Assumptions (numbers as numbers, units in their own column); fixed timestamps for reproducible
    bytes."""
    from openpyxl import Workbook
    from openpyxl.styles import Font
    from openpyxl.utils import get_column_letter

    frame = bom.frame()
    workbook = Workbook()
    sheet = workbook.active
    sheet.title = "BOM"
    sheet.append(list(frame.columns))
    for record in frame.iloc[:-1].itertuples(index=False):  # the lines; the TOTAL row is written below
        sheet.append([None if (v is pd.NA or (isinstance(v, float) and pd.isna(v))) else v for v in record])
    notes = workbook.create_sheet("Assumptions")
    notes.append(["assumption", "value", "unit", "source"])
    for item in bom.assumptions:
        notes.append([item.name, item.value, item.unit, item.source])
    text_cells(workbook)  # names from the scenario stay text, never formulas (before the TOTAL formulas go in)
    last_line, columns = sheet.max_row, list(frame.columns)
    total_row = last_line + 1
    sheet.cell(row=total_row, column=1, value="TOTAL")
    for column in SUMMED_COLUMNS:
        # the lines' own cells only: a total the reader can audit and that follows an edited count
        sheet[f"{get_column_letter(columns.index(column) + 1)}{total_row}"] = _total_formula(column, columns, bom, last_line)
    for index, column in enumerate(columns, start=1):
        letter = get_column_letter(index)
        sheet.column_dimensions[letter].width = max(10, min(60, len(column) + 4))
        if column in XLSX_FORMATS:
            for row in range(2, total_row + 1):
                sheet[f"{letter}{row}"].number_format = XLSX_FORMATS[column]
    for cell in sheet[1]:
        cell.font = Font(bold=True)
    for cell in sheet[total_row]:
        cell.font = Font(bold=True)
    sheet.freeze_panes = "A2"
    sheet.auto_filter.ref = f"A1:{get_column_letter(len(columns))}{last_line}"  # the lines, not the TOTAL row
    summary = workbook.create_sheet("Totals", 1)
    summary.append(["total", "value"])
    for name, value in asdict(bom.totals).items():
        summary.append([name, value])
        summary.cell(row=summary.max_row, column=2).number_format = "#,##0.00"
    summary.freeze_panes = "A2"
    for cell in notes[1]:
        cell.font = Font(bold=True)
    for row in range(2, notes.max_row + 1):
        if isinstance(notes.cell(row=row, column=2).value, (int, float)):
            notes.cell(row=row, column=2).number_format = "#,##0.####"
    notes.freeze_panes = "A2"
    notes.auto_filter.ref = f"A1:D{notes.max_row}"
    notes.column_dimensions["A"].width = 40
    notes.column_dimensions["B"].width = 16
    notes.column_dimensions["C"].width = 30
    notes.column_dimensions["D"].width = 100
    workbook.calculation.fullCalcOnLoad = True  # formulas carry no cached value: the spreadsheet computes them
    workbook.properties.created = _EPOCH
    workbook.properties.modified = _EPOCH
    workbook.properties.creator = "planner"
    from openpyxl.writer.excel import ExcelWriter

    buffer = io.BytesIO()
    # ExcelWriter directly: openpyxl's save() would stamp `modified` with the wall clock
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as archive:
        ExcelWriter(workbook, archive).write_data()
    write_bytes_atomic(path, _zip_with_fixed_times(buffer.getvalue()))


def _total_formula(column: str, columns: list[str], bom: Bom, last_line: int) -> str | int:
    """The TOTAL cell of a column as a formula over the line rows 2..last_line. Money, power and rack units add
    up; GPUs are the fleet's peak, as in the plan: the bought, reserved and spare lines plus the busiest period's
    on-demand lines, `SUMPRODUCT((how<>"on-demand")*gpus) + MAX(SUMPRODUCT((how="on-demand")*EXACT(period,
    <a line's period cell>)*gpus), ...)`. Period names are referenced by cell, never written into a formula, and
    compared exactly (SUMIFS would read a name such as '=x' or 'a*' as a pattern)."""
    from openpyxl.utils import get_column_letter

    if last_line < 2:
        return 0

    def span(name: str) -> str:
        letter = get_column_letter(columns.index(name) + 1)
        return f"${letter}$2:${letter}${last_line}"

    values = span(column)
    if column != "gpus" or not any(line.how in PER_PERIOD_ROLES for line in bom.lines):
        return f"=SUM({values})"
    how, period = span("how"), span("period")
    period_letter = get_column_letter(columns.index("period") + 1)
    first_row: dict[str, int] = {}
    for row, line in enumerate(bom.lines, start=2):
        if line.how in PER_PERIOD_ROLES:
            first_row.setdefault(line.period, row)
    roles = sorted({line.how for line in bom.lines if line.how in PER_PERIOD_ROLES})  # on-demand, and spot if any
    peaks = ",".join("+".join(f'SUMPRODUCT(({how}="{role}")*EXACT({period},{period_letter}{row})*{values})' for role in roles)
                     for row in first_row.values())  # fmt: skip
    fixed = "".join(f'({how}<>"{role}")*' for role in roles)
    return f"=SUMPRODUCT({fixed}{values})+MAX({peaks})"


def _zip_with_fixed_times(archive: bytes) -> bytes:
    """Rewrite a zip with every entry dated 1980-01-01: openpyxl stamps entries with the wall clock."""
    source = zipfile.ZipFile(io.BytesIO(archive))
    target_buffer = io.BytesIO()
    with zipfile.ZipFile(target_buffer, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            entry = zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0))
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = info.external_attr
            target.writestr(entry, source.read(info.filename))
    return target_buffer.getvalue()


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub Markdown table (pandas' to_markdown needs tabulate; this needs nothing)."""

    def cell(value) -> str:
        if value is None or value is pd.NA or (isinstance(value, float) and pd.isna(value)):
            return ""
        if isinstance(value, float):
            return f"{value:,.2f}"
        return str(value).replace("|", "\\|")

    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in record) + " |" for record in frame.itertuples(index=False)]
    return "\n".join([header, rule, *rows])


def to_markdown(bom: Bom) -> str:
    columns = ["item", "how", "period", "gpu", "count", "gpus", "runs", "expected_error_throughput", "unit_price_usd", "unit",
               "extended_price_usd", "annual_cost_usd", "power_kw", "rack_units", "price_origin"]  # fmt: skip
    totals = bom.totals
    parts = [
        f"# Bill of materials: {bom.scenario} ({bom.status})",
        "",
        markdown_table(format_frame(bom.frame()[columns])),
        "",
        f"- Servers capex: {totals.servers_capex_usd:,.2f} USD; capex incl. site (with racks, PDUs, networks, storage, "
        f"installation): {totals.capex_incl_site_usd:,.2f} USD ({totals.capex_incl_site_amortized_usd_per_year:,.2f} "
        "USD/year amortized)",
        f"- Annual opex (energy, support, facility, software, space, cloud): {totals.annual_opex_usd:,.2f} USD",
        f"- Annual TCO: {totals.annual_tco_usd:,.2f} USD",
        f"- Power {totals.power_kw:,.1f} kW, {totals.rack_units} rack units, {totals.gpus} GPUs",
        *([f"- Priced from catalog placeholders (no public figure; get quotes): {', '.join(bom.placeholders())}"]
          if bom.placeholders() else []),
        "",
        "## Assumptions",
        "",
        markdown_table(format_frame(pd.DataFrame([asdict(a) for a in bom.assumptions]).astype({"value": object}))),
        "",
    ]
    return "\n".join(parts)
