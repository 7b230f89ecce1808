"""Shared fixtures: the shipped catalog and the CLI in-process. Plain helpers (folders, test-only catalogs, scenario
files, random fleets) are in helpers.py, imported as `from helpers import ...`."""

from __future__ import annotations

import json
import os
import tempfile

import pytest
from helpers import (  # F401: the names older test code imported from here, which now live in helpers.py
    BENCH_HEADER,  # noqa: F401
    ROOT,  # noqa: F401
    SCENARIOS,  # noqa: F401
    SERVERS_ONLY_DEFAULTS,  # noqa: F401
    invoke,
    make_catalog,  # noqa: F401
    node_row,  # noqa: F401
    on_prem_system,  # noqa: F401
    planned_document,  # noqa: F401
    write_scenario,  # noqa: F401
)
from hypothesis import settings

from planner.catalog import load_catalog

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

    def call(*args: str):
        result = invoke(*args)
        return result.exit_code, result.stdout, result.stderr

    return call


@pytest.fixture()
def cli_json(cli):
    def invoke(*args: str) -> dict:
        code, out, err = cli(*args, "--json")
        assert code == 0, err
        return json.loads(out)

    return invoke
