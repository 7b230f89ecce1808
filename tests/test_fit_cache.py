"""Calibration fits kept on disk (planner/perf/fit_cache.py): the same answer as a fresh fit, a new key for any
change of the catalog, a damaged file fitted again, nothing kept when the cache is off."""

from __future__ import annotations

import dataclasses

from planner.catalog import load_catalog
from planner.perf.calibration import efficiency_for, fit_architecture
from planner.perf.fit_cache import CACHE_ENV


def _files(folder):
    return sorted(folder.glob("fit-*.json"))


def test_a_kept_fit_is_the_fresh_fit_and_a_changed_catalog_gets_its_own(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    fresh = fit_architecture(load_catalog(), "hopper").efficiency
    first = efficiency_for(load_catalog(), "hopper")  # fitted, and kept
    assert first == fresh and len(_files(tmp_path)) == 1
    again = efficiency_for(load_catalog(), "hopper")  # a new process would read it: a new catalog object here
    assert again == fresh and len(_files(tmp_path)) == 1
    catalog = load_catalog()
    gpus = dict(catalog.gpus)
    gpus["H100-SXM-80GB"] = gpus["H100-SXM-80GB"].model_copy(update={"mem_bw_tb_per_s": 3.0})
    changed = catalog.model_copy(update={"gpus": gpus})
    assert efficiency_for(changed, "hopper") == fit_architecture(changed, "hopper").efficiency
    assert len(_files(tmp_path)) == 2


def test_a_damaged_file_is_fitted_again_and_the_cache_can_be_off(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    fresh = efficiency_for(load_catalog(), "blackwell")
    (kept,) = _files(tmp_path)
    kept.write_text("{not json")
    assert efficiency_for(load_catalog(), "blackwell") == fresh
    kept.write_text('{"bandwidth": 0.5}')  # readable JSON, not a fit
    assert efficiency_for(load_catalog(), "blackwell") == fresh
    assert dataclasses.asdict(fresh)["bandwidth"] != 0.5
    off = tmp_path / "off"
    monkeypatch.setenv(CACHE_ENV, "off")
    assert efficiency_for(load_catalog(), "ampere") is not None
    assert not off.exists() and len(_files(tmp_path)) == 1
