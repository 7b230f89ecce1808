"""Shared fixtures: the shipped catalog, a CLI runner, and a small catalog for hand-computed optimizer cases."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import settings
from typer.testing import CliRunner

from planner.catalog import default_catalog_dir, load_catalog
from planner.cli import app

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
# calibration fits and priced curves kept on disk (planner/perf/fit_cache.py, curve_cache.py): a folder of this test
# run's own, never the user's
os.environ.setdefault("PLANNER_CACHE_DIR", tempfile.mkdtemp(prefix="planner-test-cache-"))

# Property tests draw the same examples on every run by default ("ci": a change that breaks a property fails the
# suite that ran it, never a later unrelated one); HYPOTHESIS_PROFILE=explore draws fresh ones (a nightly job), and a
# failing draw it finds is kept as an @example or a named test.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def catalog():
    return load_catalog()


@pytest.fixture()
def cli():
    """Invoke `planner ...` in-process; returns (exit_code, stdout, stderr)."""
    runner = CliRunner()

    def invoke(*args: str):
        result = runner.invoke(app, [str(a) for a in args])
        return result.exit_code, result.stdout, result.stderr

    return invoke


@pytest.fixture()
def cli_json(cli):
    def invoke(*args: str) -> dict:
        code, out, err = cli(*args, "--json")
        assert code == 0, err
        return json.loads(out)

    return invoke


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


def node_row(model: str, gpu: str, isl: int, osl: int, rps: float, ttft_ms: float = 100.0, itl_ms: float = 10.0) -> str:
    """A test-only benchmark row measured per 8-GPU node."""
    return f"test fixture,{model},{gpu},8,,,{isl},{osl},,online,{ttft_ms},,{itl_ms},,{rps},,node,"


def write_scenario(tmp_path: Path, document: dict, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def planned_document(scenario: Path) -> dict:
    """`planner plan SCENARIO --json` as a dict (a saved plan file's content), run in-process."""
    result = CliRunner().invoke(app, ["plan", str(scenario), "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)
