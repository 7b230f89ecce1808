"""Priced engine curves kept between runs (planner/perf/curve_cache.py): a plan is the same bytes with no cache, a
cold one and a warm one; a warm run prices nothing again; a damaged or hostile cache file is a miss, never an error
or a figure; the key moves with what a curve depends on; the folder stays within its bound."""

from __future__ import annotations

import json
import os

import pytest

from planner import api
from planner.catalog import load_catalog
from planner.perf import PerfQuery, curve_cache, layers
from planner.perf.reach import PricedCurve
from planner.perf.types import Layout
from planner.report import json_out
from helpers import BENCH_HEADER, write_scenario

SCENARIO = {
    "name": "kept-curves", "metrics_version": 2, "perf": {"source": "model"},
    "workloads": [{"name": "chat", "model": "mistral-7b", "isl_tokens": 1500, "osl_tokens": 300, "peak_rps": 40,
                   "engines": ["vllm"], "slo": {"ttft_ms": 1500, "itl_ms": 60}},
                  {"name": "agent", "model": "qwen3-30b-a3b", "isl_tokens": 4000, "osl_tokens": 400, "peak_rps": 6,
                   "engines": ["sglang"], "slo": {"percentile": 95, "ttft_ms": 3000, "tpot_ms": 50}}],
    "sites": {"on_prem": {"systems": ["dgx-h100", "dgx-b200"]}},
}  # fmt: skip


def _plan_json(path, cache, monkeypatch) -> str:
    monkeypatch.setenv("PLANNER_CACHE_DIR", str(cache))
    document = json.loads(json_out.dumps(json_out.plan_document(api.plan_file(path))))
    document.pop("solve_seconds", None)
    return json.dumps(document, sort_keys=True)


def _counting_pricing(monkeypatch) -> list:
    """Count the curves the performance model prices in this process (one process: PLANNER_WORKERS=1)."""
    priced, real = [], layers.priced_points
    monkeypatch.setenv("PLANNER_WORKERS", "1")
    monkeypatch.setattr("planner.candidates.curves.priced_points", lambda *a, **k: priced.append(a) or real(*a, **k))
    return priced


def test_a_plan_is_the_same_bytes_with_no_cold_and_warm_cache_and_a_warm_run_prices_nothing(tmp_path, monkeypatch):
    path = write_scenario(tmp_path, SCENARIO)
    priced = _counting_pricing(monkeypatch)
    without = _plan_json(path, "off", monkeypatch)
    cold = _plan_json(path, tmp_path / "cache", monkeypatch)
    cold_priced = len(priced)
    assert list((tmp_path / "cache").glob("curve-*.json")), "the cold run keeps its curves"
    warm = _plan_json(path, tmp_path / "cache", monkeypatch)
    assert without == cold == warm
    assert cold_priced > 0 and len(priced) == cold_priced  # the warm run priced no curve again


def test_a_what_if_reprices_only_what_it_changed(tmp_path, monkeypatch):
    path = write_scenario(tmp_path, SCENARIO)
    priced = _counting_pricing(monkeypatch)
    _plan_json(path, tmp_path / "cache", monkeypatch)
    first = len(priced)
    chat, agent = SCENARIO["workloads"]
    changed = dict(SCENARIO, workloads=[dict(chat, isl_tokens=1800), agent])  # one workload's prompts grow
    (tmp_path / "more").mkdir()
    _plan_json(write_scenario(tmp_path / "more", changed), tmp_path / "cache", monkeypatch)
    again = [a[0] for a in priced[first:]]
    assert again and all((q.model, q.isl) == ("mistral-7b", 1800) for q in again)  # only what changed was priced


LAB_SYSTEM = {"id": "lab-h100", "kind": "on-prem", "name": "our H100 server", "gpu": "H100-SXM-80GB", "gpus_per_node": 8,
              "price_usd": 300000, "price_source_kind": "estimate", "power_kw": 10.2, "source": "our quote"}  # fmt: skip


def test_a_price_or_node_what_if_prices_nothing_again(tmp_path, monkeypatch):
    """A user's node and its price: changing the price, or adding a node of a GPU already priced, keeps every fit
    and curve (the fingerprint leaves out what the performance model never reads); the plan's cost still moves."""
    import yaml

    lab = tmp_path / "lab"
    lab.mkdir()
    scenario = dict(SCENARIO, catalog="lab", sites={"on_prem": {"systems": ["lab-h100"]}})
    path = write_scenario(tmp_path, scenario)
    priced = _counting_pricing(monkeypatch)

    def plan_with(*systems, scenario_path=path) -> dict:
        (lab / "systems.yaml").write_text(yaml.safe_dump({"systems": list(systems)}))
        return json.loads(_plan_json(scenario_path, tmp_path / "cache", monkeypatch))

    first = plan_with(LAB_SYSTEM)
    cold = len(priced)
    quote = dict(LAB_SYSTEM, price_usd=200000, power_kw=9.0, source="a better quote")
    cheaper = plan_with(quote)
    both = write_scenario(tmp_path, dict(scenario, sites={"on_prem": {"systems": ["lab-h100", "lab-h100-b"]}}), "both.yaml")
    other = dict(quote, id="lab-h100-b", name="another H100 server", price_usd=250000)
    two = plan_with(quote, other, scenario_path=both)  # a second node of the same GPU, offered beside it
    assert cold > 0 and len(priced) == cold  # no what-if priced a curve again
    assert cheaper["objective_usd_per_year"] < first["objective_usd_per_year"]
    assert two["objective_usd_per_year"] == cheaper["objective_usd_per_year"]  # the dearer twin is not bought


def test_the_fingerprint_moves_with_what_the_model_reads_and_only_that():
    from planner.perf.fit_cache import catalog_fingerprint

    catalog = load_catalog()
    base = catalog_fingerprint(catalog)

    def changed(**update) -> str:
        return catalog_fingerprint(catalog.model_copy(update=update))  # a fresh `derived`: fingerprinted anew

    systems = {name: s.model_copy(update={"price_usd": 1.0, "power_kw": 1.0}) if s.price_usd else s
               for name, s in catalog.systems.items()}  # fmt: skip
    defaults = catalog.defaults
    cost = defaults.usd_per_kwh.model_copy(update={"value": 0.5})
    reserve = defaults.memory_reserve_fraction.model_copy(update={"value": 0.2})
    gpus = dict(catalog.gpus)
    gpus["H100-SXM-80GB"] = gpus["H100-SXM-80GB"].model_copy(update={"mem_bw_tb_per_s": 3.0})
    moved = tuple(row.model_copy(update={"path": "/elsewhere/" + row.table}) for row in catalog.benchmarks)
    assert changed(systems=systems) == changed(directory="/elsewhere", benchmarks=moved) == base
    assert changed(layers=(*catalog.layers, "lab")) == base
    assert changed(defaults=defaults.model_copy(update={"usd_per_kwh": cost})) == base
    assert changed(defaults=defaults.model_copy(update={"memory_reserve_fraction": reserve})) != base
    assert changed(gpus=gpus) != base
    assert changed(benchmarks=catalog.benchmarks[1:]) != base


def test_the_performance_model_reads_nothing_the_fingerprint_leaves_out():
    """The guard on the fingerprint: no module of planner/perf reads a node, the catalog's folder or a row's file,
    its price layers, a layer's name but the bottom one's or a default outside PERF_DEFAULTS (were one to, its fits and curves would
    outlive a change of it)."""
    import re
    from pathlib import Path

    from planner.perf import fit_cache

    catalog = load_catalog()
    left_out = fit_cache.unpriced_content(catalog)
    names = "|".join(sorted(left_out["defaults"]))
    pattern = re.compile(rf"\.(systems|price_layers)\b|catalog\.(directory|layers(?!\[0\]))\b|defaults\.({names})\b")
    folder = Path(fit_cache.__file__).parent
    modules = [path for path in sorted(folder.glob("*.py")) if path.name not in ("fit_cache.py", "curve_cache.py")]
    readers = [f"{path.name}: {match.group(0)}" for path in modules for match in pattern.finditer(path.read_text())]
    assert readers == []
    # a file's path: the step tables' (the fingerprint takes their names) and aiconfigurator's own database, no row's
    paths = {f"{path.name}: {match.group(0)}" for path in modules for match in re.finditer(r"\w+\.path\b", path.read_text())}
    assert paths <= {"kernel_fit.py: t.path", "aic.py: self.path", "aic.py: _CACHE.path", "aic.py: os.path"}, paths
    assert re.compile(r"defaults\.memory_reserve_fraction\b").search((folder / "tables.py").read_text())  # the pattern bites


HOSTILE = {"garbage": b"\x00\xff not json", "nested": b"[" * 100_000 + b"]" * 100_000}


@pytest.mark.parametrize("damage", ["garbage", "nested", "fifo", "dev-zero", "directory", "strings", "nan",
                                    "nan-band", "zeros", "edited", "another-key", "complete-as-text"])  # fmt: skip
def test_a_damaged_or_hostile_cache_file_is_a_miss(tmp_path, monkeypatch, damage):
    monkeypatch.setenv("PLANNER_CACHE_DIR", str(tmp_path / "cache"))
    catalog = load_catalog()
    store = curve_cache.curve_cache(catalog, with_aic=False)
    query = PerfQuery("mistral-7b", "H100-SXM-80GB", 1500, 300, arrivals="poisson", engine="vllm")
    key = (query, Layout(1), "fp8", 95.0, None, 0.0)
    points = PricedCurve(layers.modeled_points(query, catalog, 1, "fp8", 95.0, layout=Layout(1)))
    store.put(key, points)
    assert store.get(key) == points
    path = store._path(key)
    document = json.loads(path.read_text())
    if damage in ("garbage", "nested"):
        path.write_bytes(HOSTILE[damage])
    elif damage == "fifo":
        path.unlink()
        os.mkfifo(path)
    elif damage == "dev-zero":
        path.unlink()
        path.symlink_to("/dev/zero")
    elif damage == "directory":
        path.unlink()
        path.mkdir()
    elif damage == "edited":  # a figure changed by hand: the seal no longer matches
        document["payload"]["points"][0]["request_throughput_rps"] *= 10
        path.write_text(json.dumps(document))
    elif damage == "another-key":  # a curve of another engine copied over this one's name
        document["key"] = repr((query, Layout(2), "fp8", 95.0, None, 0.0))
        path.write_text(json.dumps(document))
    else:  # sealed anew, so only the validation can refuse it
        payload = document["payload"]
        if damage == "complete-as-text":  # 'complete' read as a word would let a cut curve stand for a whole one
            payload["complete"] = "yes"
        for point in payload["points"] if damage != "complete-as-text" else ():
            if damage == "strings":
                point["request_throughput_rps"] = "fast"
            elif damage == "nan":
                point["ttft_ms"] = float("nan")
            elif damage == "nan-band":  # the expected-error bands are a plain dict: checked on their own
                point["expected_error"] = {**point["expected_error"], "ttft": float("nan")}
            else:
                point["gpus_per_instance"] = 0
        from planner.perf.fit_cache import write_entry

        write_entry(path, repr(key), payload)
    assert store.get(key) is None
    if damage in ("garbage", "nested", "edited", "another-key", "strings", "nan", "nan-band", "zeros", "complete-as-text"):
        store.put(key, points)  # a miss is priced again and written over
        assert store.get(key) == points


def test_the_key_moves_with_what_a_curve_depends_on(tmp_path, monkeypatch):
    monkeypatch.setenv("PLANNER_CACHE_DIR", str(tmp_path))
    catalog = load_catalog()
    plain, with_aic = curve_cache.curve_cache(catalog, False), curve_cache.curve_cache(catalog, True)
    assert plain.base != with_aic.base
    overlay = tmp_path / "lab"  # one measured row of the user's: curves anchored on rows may move
    (overlay / "benchmarks").mkdir(parents=True)
    row = "our run,llama-3.1-8b,H100-SXM-80GB,1,1,bf16,1024,128,4,online,50,,8,,10.0,,instance,"
    (overlay / "benchmarks" / "ours.csv").write_text(BENCH_HEADER + "\n" + row + "\n")
    other = curve_cache.curve_cache(load_catalog([overlay]), False)
    assert other.base != plain.base  # a catalog change is a new key
    query = PerfQuery("mistral-7b", "H100-SXM-80GB", 1500, 300, arrivals="poisson", engine="vllm")
    assert plain._path((query, Layout(1), "fp8", 95.0, None, 0.0)) != plain._path((query, Layout(2), "fp8", 95.0, None, 0.0))
    monkeypatch.setenv("PLANNER_CACHE_DIR", "off")
    assert curve_cache.curve_cache(catalog, False) is None


def test_the_folder_keeps_within_its_bound_dropping_the_oldest(tmp_path):
    store = curve_cache.CurveCache(tmp_path, "base")
    for index in range(10):
        store.put(("curve", index), PricedCurve("no answer " + "x" * 1000))
        os.utime(store._path(("curve", index)), (1_000_000 + index, 1_000_000 + index))
    (tmp_path / "fit-keep.json").write_text("{}")  # not a curve: never removed
    size = store._path(("curve", 0)).stat().st_size
    removed = store.trim(max_bytes=5 * size)
    kept = sorted(tmp_path.glob("curve-*.json"))
    assert removed == 6 and len(kept) == 4 and (tmp_path / "fit-keep.json").exists()
    assert store.get(("curve", 9)) is not None and store.get(("curve", 0)) is None


@pytest.mark.parametrize("damage", ["fifo", "dev-zero", "nested", "strings", "zeros", "nan"])
def test_a_damaged_or_hostile_fit_file_is_fitted_again(tmp_path, monkeypatch, damage):
    """Issue 47's cases: a FIFO named like a fit hung `plan`, a link to /dev/zero ran out of memory, nested JSON hit
    the recursion limit, strings, zeros and NaN reached the model. Each is now a miss: fitted again, same factors."""
    from planner.perf import fit_cache
    from planner.perf.calibration import efficiency_for

    monkeypatch.setenv("PLANNER_CACHE_DIR", str(tmp_path))
    fitted = efficiency_for(load_catalog(), "ada")
    (path,) = [p for p in tmp_path.glob("fit-*.json") if "('efficiency'," in json.loads(p.read_text())["key"]]
    document = json.loads(path.read_text())
    path.unlink()
    if damage == "fifo":
        os.mkfifo(path)
    elif damage == "dev-zero":
        path.symlink_to("/dev/zero")
    elif damage == "nested":
        path.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    else:  # hand-edited figures (the seal then fails); sealed anew, the validation still refuses strings and NaN
        value = {"strings": "fast", "zeros": 0.0, "nan": float("nan")}[damage]
        payload = {name: (value if isinstance(figure, float) else figure) for name, figure in document["payload"].items()}
        path.write_text(json.dumps(dict(document, payload=payload)))
        assert fit_cache.read_entry(path, document["key"], "a fit") is None
        if damage != "zeros":
            fit_cache.write_entry(path, document["key"], payload)
    assert efficiency_for(load_catalog(), "ada") == fitted
