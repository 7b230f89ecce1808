"""Calibration fits kept on disk (planner/perf/fit_cache.py): the same answer as a fresh fit, a new key for any
change of the catalog, a damaged or implausible file fitted again, nothing kept when the cache is off. Both stages
are kept: a generation's kernel factors (planner/perf/kernel_fit.py) and its calibrated efficiency."""

from __future__ import annotations

import dataclasses
import json

from planner.catalog import load_catalog
from planner.perf.calibration import efficiency_for, fit_architecture
from planner.perf.fit_cache import CACHE_ENV, write_entry
from planner.perf.kernel_fit import FITS, fit_kernels


def _files(folder, stage: str = "efficiency"):
    """The kept fits of one stage ('efficiency' or 'kernel fit'), told apart by the key each file carries."""
    return sorted(p for p in folder.glob("fit-*.json") if f"('{stage}'," in json.loads(p.read_text())["key"])


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


def test_a_kept_kernel_fit_is_the_fresh_fit_and_an_implausible_one_is_fitted_again(tmp_path, monkeypatch):
    from planner.perf import kernel_fit

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    FITS.clear()  # the process's own memo of fits: the first fit below is made
    fresh = fit_kernels(load_catalog(), "hopper")
    (kept,) = _files(tmp_path, "kernel fit")
    fitting = kernel_fit._fit_kernels
    monkeypatch.setattr(kernel_fit, "_fit_kernels", lambda *a: (_ for _ in ()).throw(AssertionError("fitted again")))
    assert fit_kernels(load_catalog(), "hopper") == fresh  # read back from the file, not fitted
    monkeypatch.setattr(kernel_fit, "_fit_kernels", fitting)
    document = json.loads(kept.read_text())
    for edit in ({"architecture": "blackwell"}, {"factors": {**document["payload"]["factors"], "bandwidth": -1.0}},
                 {"factors": {"bandwidth": 0.5}}, {"max_tp": {"nvlink": 0}}):
        write_entry(kept, document["key"], {**document["payload"], **edit})  # sealed as the planner seals
        assert fit_kernels(load_catalog(), "hopper") == fresh, edit  # refused: fitted again (from the memo)
