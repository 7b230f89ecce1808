"""Engine version as a dimension (planner/perf/engines.py, serving.py): every class and answer names the release it
is for, an older release line answers only through its fitted time factor, a release no calibration covers is
refused naming those that are; a class whose held-out band is too wide says 'unknown' and --confidence leaves it out."""

from __future__ import annotations

import importlib.util
import json

import pytest
import yaml
from helpers import ROOT, invoke

from planner import api
from planner.catalog import load_catalog
from planner.perf import PerfQuery, estimate, modeled_points
from planner.perf.engines import (
    UNKNOWN_BAND,
    VersionNotCalibrated,
    engine_class,
    engine_classes,
    version_factors,
)
from planner.perf.serving import release_line
from planner.perf.types import PerfMiss

CATALOG = load_catalog()


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "calibration" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    import sys

    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_release_lines_group_versions_as_engines_release_them():
    assert release_line("vllm", "0.19.0") == release_line("vllm", "0.19") == "0.19"
    assert release_line("sglang", "0.5.8.post1") == "0.5" and release_line("trtllm", "1.2.0rc6.post3") == "1.2"
    assert release_line("atom", "2026.04.16") == "2026"  # ATOM has no releases: its main branch by year
    assert release_line("vllm", "nightly-dev") is None and release_line("vllm", None) is None


def test_versions_are_read_from_the_rows_own_words():
    rows = _module("reference_rows")
    cases = {
        ("vllm", "rocm/vllm:rocm6.4.1_vllm_0.9.1_20250715 (page: ...)"): "0.9.1",
        ("vllm", "0.6.4.dev4+gc9fc1608, ROCm 6.2"): "0.6.4",
        ("vllm", "vllm/vllm-openai:v0.9.2, CUDA 12.8"): "0.9.2",
        ("vllm", "AMD MLPerf v6.0 harness on vLLM (vllm-11b6af52), aiter-6af8b687"): None,  # no release stated
        ("sglang", "SGLang v0.4.10.post1, ROCm 6.3.0"): "0.4.10.post1",
        ("sglang", "SGLang offline engine (version as online: 0.4.3.post2)"): "0.4.3.post2",
        ("atom", 'ATOM main at commit a022e6c05 ("...", 2026-04-16)'): "2026.04.16",
        ("vllm", "not stated (vLLM main ~2026-01)"): None,
    }
    for (engine, text), version in cases.items():
        assert rows.engine_version(engine, text) == version, text


def test_every_class_names_its_release_and_every_older_line_its_fitted_factor():
    minimum = _module("engine_classes").MIN_VERSION_ROWS
    for key, cls in engine_classes().items():
        assert cls.engine_version and cls.release_line, key
        assert cls.known == (cls.expected_error.throughput <= UNKNOWN_BAND), key
    for key, factors in version_factors().items():
        current = engine_classes()[key].release_line
        for factor in factors:
            assert factor.release_line != current and factor.rows >= minimum and 0.05 < factor.time_factor < 20, factor
            assert "fitted with the class" in factor.source


def _hopper_dense_lines():
    """vLLM on Hopper dense models: the current line and an older one with its factor (shipped)."""
    cls = engine_class("vllm", "hopper", "dense")
    older = next(f for f in version_factors()[("vllm", "hopper", "dense")] if release_line("vllm", f.newest_version))
    return cls, older


def test_an_older_release_answers_through_its_fitted_factor_and_names_itself():
    cls, older = _hopper_dense_lines()
    query = PerfQuery("llama-3.1-70b", "H100-SXM-80GB", 2000, 200, tp=4, precision="fp8", concurrency=64, engine="vllm")
    newest = estimate(query, CATALOG, sources=("modeled",))
    pinned_newest = estimate(query.__class__(**{**query.__dict__, "engine_version": cls.release_line}), CATALOG, sources=("modeled",))
    old = estimate(query.__class__(**{**query.__dict__, "engine_version": older.release_line}), CATALOG, sources=("modeled",))
    assert newest.engine_version == cls.engine_version == pinned_newest.engine_version
    assert newest.request_throughput_rps == pytest.approx(pinned_newest.request_throughput_rps)
    assert old.engine_version == older.newest_version
    slower = older.time_factor > 1
    assert (old.request_throughput_rps < newest.request_throughput_rps) == slower
    assert f"release line {older.release_line}: time x" in engine_class("vllm", "hopper", "dense", older.release_line).source


def test_a_release_no_calibration_covers_is_refused_naming_those_that_are():
    with pytest.raises(VersionNotCalibrated, match="calibrated release lines there"):
        engine_class("vllm", "hopper", "dense", "0.1")
    miss = modeled_points(PerfQuery("llama-3.1-70b", "H100-SXM-80GB", 2000, 200, engine="vllm", engine_version="0.1"),
                          CATALOG, 4, "fp8")  # fmt: skip
    assert isinstance(miss, str) and "vLLM 0.1 is not calibrated" in miss and engine_class("vllm", "hopper", "dense").release_line in miss
    result = invoke("perf", "--model", "llama-3.1-70b", "--gpu", "H100", "--tp", "4", "--precision", "fp8",
                    "--isl", "2000", "--osl", "200", "--engine", "vllm@0.1", "--json")  # fmt: skip
    document = json.loads(result.stdout)
    assert document["provenance"] == "none" and "not calibrated" in document["reason"]


def test_plans_name_the_engine_release_and_a_pinned_line_prices_its_own(tmp_path):
    spec = yaml.safe_load((ROOT / "scenarios" / "moe-engines.yaml").read_text())
    spec["workloads"][0]["engines"] = ["vllm"]
    spec["sites"]["on_prem"]["systems"] = ["dgx-h100"]
    path = tmp_path / "vllm.yaml"
    path.write_text(yaml.safe_dump(spec))
    plan = api.plan_file(path)
    version = engine_class("vllm", "hopper", "moe").engine_version
    assert {line.engine_version for line in plan.lines} == {version}
    assert all(r.engine_version == version for r in plan.routing)
    spec["workloads"][0]["engines"] = ["vllm@0.1"]
    path.write_text(yaml.safe_dump(spec))
    result = invoke("plan", str(path))
    assert result.exit_code == 1 and "not calibrated" in result.output
    spec["workloads"][0]["engines"] = ["vllm@@"]
    path.write_text(yaml.safe_dump(spec))
    bad = invoke("validate", str(path))
    assert bad.exit_code == 2 and "engines" in bad.output and "Traceback" not in bad.output


def test_an_unknown_band_is_said_and_confidence_leaves_such_engines_out():
    unknown = [cls for cls in engine_classes().values() if not cls.known]
    assert unknown, "a shipped class with a band too wide to answer"
    cls = unknown[0]
    model = "deepseek-r1" if cls.kind == "moe" else "llama-3.1-70b"
    gpu = next(g.id for g in CATALOG.gpus.values() if g.architecture == cls.architecture)
    result = invoke("perf", "--model", model, "--gpu", gpu, "--tp", "8", "--precision", "fp8", "--isl", "1000",
                    "--osl", "1000", "--engine", cls.engine)  # fmt: skip
    if "no answer" not in result.output:
        assert "expected error: unknown" in result.output
    answer = estimate(PerfQuery(model, gpu, 1000, 1000, tp=8, precision="fp8", engine=cls.engine), CATALOG, sources=("modeled",))
    assert isinstance(answer, PerfMiss) or answer.error_known is False
