"""Calibration fits kept on disk (planner/perf/fit_cache.py): the same answer as a fresh fit, a new key for any
change of the catalog, a damaged or implausible file fitted again, nothing kept when the cache is off. Both stages
are kept: a generation's kernel factors (planner/perf/kernel_fit.py) and its calibrated efficiency. The shipped
fits (planner/perf/ship_fits.py) are this code's fits of the shipped catalog, read as a kept fit is."""

from __future__ import annotations

import dataclasses
import json

import pytest

from planner.catalog import load_catalog
from planner.perf import fit_cache, ship_fits
from planner.perf.calibration import efficiency_for, fit_architecture
from planner.perf.fit_cache import CACHE_ENV, write_entry
from planner.perf.kernel_fit import FITS, fit_kernels


@pytest.fixture(autouse=True)
def _fitted_here(request, monkeypatch):
    """The disk cache's tests fit (the shipped fits would answer them); the shipped fits' own tests read them."""
    if "shipped" not in request.node.name:
        monkeypatch.setattr(fit_cache, "USE_SHIPPED", False)


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


def _same(a, b) -> bool:
    """JSON values equal, numbers to 1e-6 relative. A fit's factors are rounded and come out equal on every machine,
    but its error statistics are taken from the unrounded factors, which follow the machine's floating point: on
    2026-12-04's machine every factor of the 11 shipped fits was equal and the errors moved by up to 3.0e-7 relative
    (a median error of 0.04020424 against 0.04020423), where 1e-9 had held on the machine that shipped them. A fit
    gone stale moves far more than that, or its key."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a - b) <= 1e-6 * max(abs(a), abs(b), 1.0)
    return a == b


def test_the_shipped_fits_are_this_codes_fits_of_the_shipped_catalog():
    fresh = {key: json.loads(fit_cache._payload_text(fit)) for key, fit in ship_fits.fresh_fits(load_catalog()).items()}
    shipped = fit_cache.shipped_fits()
    assert fresh and set(shipped) == set(fresh), "planner/perf/shipped_fits.json is stale: python -m planner.perf.ship_fits"
    assert all(_same(fresh[key], shipped[key]) for key in fresh), "shipped fits differ: python -m planner.perf.ship_fits"


def test_with_the_shipped_fits_a_first_run_fits_nothing(tmp_path, monkeypatch):
    from planner.perf import calibration, kernel_fit

    monkeypatch.setenv(CACHE_ENV, "off")
    hopper, blackwell = (fit_architecture(load_catalog(), a).efficiency for a in ("hopper", "blackwell"))
    fail = lambda *a, **k: (_ for _ in ()).throw(AssertionError("fitted"))  # noqa: E731
    monkeypatch.setattr(calibration, "fit_architecture", fail)
    monkeypatch.setattr(kernel_fit, "_fit_kernels", fail)
    assert efficiency_for(load_catalog(), "hopper") == hopper
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))  # with the cache on, what the shipped file gave is kept
    assert efficiency_for(load_catalog(), "blackwell") == blackwell
    assert len(_files(tmp_path)) == 1


@pytest.mark.parametrize("damage", ["edited", "nan", "missing", "garbage"])
def test_a_damaged_shipped_fit_is_fitted_again(tmp_path, monkeypatch, damage):
    monkeypatch.setenv(CACHE_ENV, "off")
    document = json.loads(fit_cache.SHIPPED_FITS.read_text())
    (entry,) = [e for e in document["fits"] if e["key"].endswith("('efficiency', 'hopper', ())")]
    if damage == "edited":  # a figure changed by hand: its seal no longer matches
        entry["payload"]["bandwidth"] = 0.99
    elif damage == "nan":  # sealed anew: the validation refuses it
        entry["payload"]["bandwidth"] = float("nan")
        entry["sha256"] = fit_cache._sealed(entry["key"], fit_cache._payload_text(entry["payload"]))
    path = tmp_path / "shipped_fits.json"
    if damage == "garbage":
        path.write_bytes(b"\x00[[[ not json")
    elif damage != "missing":
        path.write_text(json.dumps(document))
    monkeypatch.setattr(fit_cache, "SHIPPED_FITS", path)
    fit_cache.shipped_fits.cache_clear()
    try:
        fitted = []
        real = fit_architecture
        monkeypatch.setattr("planner.perf.calibration.fit_architecture", lambda *a, **k: fitted.append(a) or real(*a, **k))
        assert efficiency_for(load_catalog(), "hopper") == real(load_catalog(), "hopper").efficiency
        assert len(fitted) == 1  # fitted again: the damaged entry was not read
    finally:
        fit_cache.shipped_fits.cache_clear()
