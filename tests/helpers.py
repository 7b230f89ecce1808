"""Plain helpers shared by the test files (fixtures are in conftest.py): the repository's folders, test-only
catalogs (systems and benchmark rows), scenario files, the CLI in-process, and the random fleets and coverage check
of the optimizer's property tests. Imported as `from helpers import ...` (pytest puts tests/ on sys.path)."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import strategies as st
from typer.testing import CliRunner

from planner.catalog import default_catalog_dir, load_catalog
from planner.cli import app

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
INGEST_FIXTURES = ROOT / "tests" / "fixtures" / "ingest"  # benchmark tools' result files, as the tools write them
# real benchmark outputs and traces as users have them (../shared/real/): their owners' data, read where they are
REAL_DIR = Path(os.environ.get("PLANNER_REAL_DIR", ROOT.parent / "shared" / "real"))


# ---------------------------------------------------------------- the CLI in-process
def invoke(*args):
    """`planner ARGS...` in-process (typer's CliRunner); returns the click Result (exit_code, stdout, stderr)."""
    return CliRunner().invoke(app, [str(a) for a in args])


def planned_document(scenario: Path) -> dict:
    """`planner plan SCENARIO --json` as a dict (a saved plan file's content), run in-process."""
    result = CliRunner().invoke(app, ["plan", str(scenario), "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


# ---------------------------------------------------------------- scenario files
def write_scenario(tmp_path: Path, document: dict, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


# ---------------------------------------------------------------- test-only catalogs
BENCH_HEADER = (
    "source,model,gpu,gpus,tp,precision,isl,osl,concurrency,run_kind,ttft_ms,ttft_ms_bound,itl_ms,itl_ms_bound,"
    "request_throughput_rps,output_tokens_per_s,per,notes"
)


# what a bought node costs beyond its line, and the site's racks and networks (catalogs/defaults.yaml), and a rented
# node's default lead time: 0 in the catalogs of hand-computed cases, whose costs are the servers' (price / years +
# energy) and the rented hours (a case about start-up states its own sites.cloud.start_up_minutes)
SERVERS_ONLY_DEFAULTS = (
    "cloud_start_up_minutes", "maintenance_fraction_per_year", "cost_of_capital_per_year", "software_usd_per_gpu_per_year",
    "facility_usd_per_kw_per_month", "installation_fraction_of_capex", "rack_usd", "pdu_usd", "fabric_switch_usd",
    "fabric_link_usd", "frontend_switch_usd", "frontend_link_usd", "storage_usd_per_tb",
)  # fmt: skip


def make_catalog(tmp_path: Path, systems: list[dict], bench_rows: list[str]) -> Path:
    """A catalog with the shipped GPUs, models and defaults, plus test-only systems and benchmark rows."""
    directory = tmp_path / "catalog"
    (directory / "benchmarks").mkdir(parents=True)
    shipped = default_catalog_dir()
    for name in ("gpus.yaml", "models.yaml"):
        shutil.copy(shipped / name, directory / name)
    defaults = yaml.safe_load((shipped / "defaults.yaml").read_text())
    for name in SERVERS_ONLY_DEFAULTS:  # hand-computed cases price the servers alone (issue 34's site costs at 0)
        defaults["defaults"][name] = {"value": 0, "source": "test fixture: the servers alone"}
    (directory / "defaults.yaml").write_text(yaml.safe_dump(defaults, sort_keys=False))
    (directory / "catalog.yaml").write_text("name: test catalog\nbase: none\n")  # standalone, not layered
    (directory / "systems.yaml").write_text(yaml.safe_dump({"systems": systems}, sort_keys=False))
    (directory / "benchmarks" / "test.csv").write_text("\n".join([BENCH_HEADER, *bench_rows]) + "\n")
    return directory


def on_prem_system(system_id: str, gpu: str, price_usd: float, power_kw: float = 10.0, rack_units: int = 8) -> dict:
    return {
        "id": system_id, "kind": "on-prem", "name": system_id, "gpu": gpu, "gpus_per_node": 8,
        "price_usd": price_usd, "power_kw": power_kw, "rack_units": rack_units, "source": "test fixture",
    }  # fmt: skip


def cloud_system(system_id: str, gpu: str, usd_per_hour: float) -> dict:
    return {"id": system_id, "kind": "cloud", "name": system_id, "provider": "test", "region": "any", "gpu": gpu,
            "gpus_per_node": 8, "usd_per_hour": usd_per_hour, "source": "test fixture"}  # fmt: skip


def node_row(model: str, gpu: str, isl: int, osl: int, rps: float, ttft_ms: float = 100.0, itl_ms: float = 10.0) -> str:
    """A test-only benchmark row measured per 8-GPU node."""
    return f"test fixture,{model},{gpu},8,,,{isl},{osl},,online,{ttft_ms},,{itl_ms},,{rps},,node,"


def instance_row(model: str, gpu: str, tp: int, rps: float) -> str:
    """A test-only row measured per engine instance of `tp` GPUs (bf16)."""
    return f"test fixture,{model},{gpu},{tp},{tp},bf16,1000,100,16,online,100,,10,,{rps},,instance,"


# ---------------------------------------------------------------- random fleets for the optimizer's properties
FLEET_MODELS = ("llama-3-8b", "llama-2-70b")
FLEET_GPUS = ("H100-SXM-80GB", "H200-SXM-141GB", "B200-SXM-180GB")


@st.composite
def fleets(draw):
    """2-3 systems with random prices and power, random per-node rates, 1-2 workloads with random demand."""
    n_systems = draw(st.integers(2, 3))
    systems, rows = [], []
    for index in range(n_systems):
        gpu = FLEET_GPUS[index]
        price = draw(st.integers(50, 500)) * 1000.0
        power = draw(st.integers(2, 15))
        systems.append(on_prem_system(f"sys-{index}", gpu, price, power_kw=power, rack_units=draw(st.integers(2, 10))))
        for model in FLEET_MODELS:
            if draw(st.booleans()) or index == 0:  # system 0 serves everything, so a plan exists
                rows.append(node_row(model, gpu, 1000, 100, draw(st.integers(1, 400)) / 10))
    workloads = [
        {"name": f"w{i}", "model": FLEET_MODELS[i], "isl_tokens": 1000, "osl_tokens": 100,
         "peak_rps": draw(st.integers(0, 3000)) / 10, "slo": {"ttft_ms": 500}}
        for i in range(draw(st.integers(1, 2)))
    ]  # fmt: skip
    scenario = {
        "name": "random", "workloads": workloads,
        "sites": {"on_prem": {"systems": [s["id"] for s in systems], "amortization_years": draw(st.integers(1, 6)),
                              "usd_per_kwh": draw(st.integers(0, 30)) / 100}},
        "limits": {"headroom_fraction": draw(st.integers(0, 30)) / 100},
        "perf": {"sources": ["measured"]},  # the optimizer is under test here: table rows keep examples fast
    }  # fmt: skip
    return systems, rows, scenario


def solve(systems, rows, scenario):
    """The plan of a random fleet (`fleets()`), with its catalog and loaded scenario."""
    from planner.optimize import plan
    from planner.scenario import load_scenario

    with tempfile.TemporaryDirectory() as tmp:
        directory = make_catalog(Path(tmp), systems, rows)
        catalog = load_catalog(directory)
        loaded = load_scenario(write_scenario(Path(tmp), scenario), catalog)
        return plan(loaded, catalog), catalog, loaded


def check_plan_covers_demand(result, scenario, catalog) -> None:
    """Independently of the solver's rows: in every period, routes add up to each workload's demand, the routes
    sent to each configuration fit in its running instances, and the instances' GPUs fit in the nodes of the
    plan lines that are up in that period."""
    from planner.plan import configuration_key

    headroom = 1 + scenario.limits.headroom_fraction
    for period in scenario.periods:
        routes = [r for r in result.routing if r.period == period.name]
        for workload in scenario.workloads:
            sent = sum(r.rps for r in routes if r.workload == workload.name)
            assert sent == pytest.approx(period.demand_rps[workload.name] * headroom, rel=1e-6, abs=1e-6)
        running = [i for i in result.instances if i.period == period.name]
        for allocation in running:
            load = sum(r.rps / r.rps_per_instance for r in routes if configuration_key(r) == configuration_key(allocation))
            assert load <= allocation.instances + 1e-6
        assert {configuration_key(r) for r in routes} <= {configuration_key(i) for i in running}
        for hardware in {(i.site, i.role, i.system) for i in running}:
            used = sum(i.gpus for i in running if (i.site, i.role, i.system) == hardware)
            up = sum(
                line.gpus for line in result.lines
                if (line.site, line.role, line.system) == hardware and line.period in ("all", period.name)
            )  # fmt: skip
            assert used <= up


# ---------------------------------------------------------------- the integer program's own objective
def program_objective(path, catalog=None):
    """The integer program's own objective and the plan made from it."""
    import pulp

    from planner import optimize
    from planner.api import plan_in_context

    seen = {}
    original = optimize._read_plan

    def keep(scenario, cset, catalog_, model, solver, outcome):
        if "objective" not in seen:  # the plan's own solve (a course-sized plan solves again for random arrivals)
            seen["objective"] = pulp.value(model.problem.objective)
            seen["infrastructure"] = {k: v.varValue for k, v in model.infrastructure.items()}
        return original(scenario, cset, catalog_, model, solver, outcome)

    optimize._read_plan = keep
    try:
        planned = plan_in_context(path)
    finally:
        optimize._read_plan = original
    return seen, planned


# ---------------------------------------------------------------- the BOM's XLSX formulas, evaluated over the sheet's own cells


def xlsx_cells(sheet, reference: str) -> list:
    reference = reference.replace("$", "")
    if ":" not in reference:
        return [sheet[reference].value]
    return [cell.value for row in sheet[reference] for cell in row]


def evaluate_xlsx_formula(sheet, formula: str) -> float:
    """A formula the BOM writer uses, evaluated independently of it: SUM(range), SUMPRODUCT of factors (range="x", range<>"x", EXACT(range, cell), range) and MAX, with +."""
    assert formula.startswith("=")
    ref = r"\$?[A-Z]+\$?\d+(?::\$?[A-Z]+\$?\d+)?"

    def factor(text: str) -> list:
        text = text.strip()
        if match := re.fullmatch(rf'\(({ref})(=|<>)"([^"]*)"\)', text):
            cells, equal = xlsx_cells(sheet, match.group(1)), match.group(2) == "="
            return [float((c == match.group(3)) == equal) for c in cells]
        if match := re.fullmatch(rf"EXACT\(({ref}),({ref})\)", text):
            wanted = xlsx_cells(sheet, match.group(2))[0]
            return [float(c == wanted) for c in xlsx_cells(sheet, match.group(1))]
        assert re.fullmatch(ref, text), f"unknown factor {text}"
        return [v or 0 for v in xlsx_cells(sheet, text)]

    def sumproduct(match: re.Match) -> str:
        factors = [factor(f) for f in re.split(r"\*(?![^()]*\))", match.group(1))]
        return repr(sum(__import__("math").prod(values) for values in zip(*factors)))

    expression = re.sub(r"SUMPRODUCT\(((?:[^()]|\([^()]*\))*)\)", sumproduct, formula[1:])
    expression = re.sub(rf"SUM\(({ref})\)", lambda m: repr(sum(v or 0 for v in xlsx_cells(sheet, m.group(1)))), expression)
    expression = expression.replace("MAX(", "max(0, ")  # every value is >= 0; MAX of one
    assert re.fullmatch(r"[\d.e+\-,()max ]+", expression), f"unevaluated part in {formula}: {expression}"
    return float(eval(expression))  # only numbers, +, max and parentheses are left


def xlsx_total_row(sheet) -> int:
    return next(row for row in range(2, sheet.max_row + 1) if sheet.cell(row=row, column=1).value == "TOTAL")
