"""Serving engines (planner/perf/engines.py): classes calibrated on measured serving rows, layouts, expected errors,
and plans that choose the engine."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml
from helpers import SCENARIOS, invoke

from planner import api
from planner.catalog import load_catalog
from planner.perf import PerfQuery, PerfResult, estimate
from planner.perf.calibration import efficiency_for
from planner.perf.engines import (
    ENGINES,
    MEMORY_FACTORS,
    engine_class,
    engine_classes,
    engine_efficiency,
)
from planner.perf.serving import engine_problem
from planner.perf.types import Layout


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def test_every_shipped_class_names_its_rows_and_keeps_factors_within_the_hardware(catalog):
    classes = engine_classes()
    assert {c.engine for c in classes.values()} == set(ENGINES)
    assert {c.kind for c in classes.values()} == {"dense", "moe"}
    for (engine, architecture, kind), cls in classes.items():
        assert ("aiconfigurator-core " in cls.source and "silicon_sample.csv" in cls.source) or (
            "of the planner's shared reference" in cls.source), cls  # fmt: skip
        assert cls.engine_version and cls.release_line, cls
        assert cls.rows > 0 and cls.models > 0
        assert all(0 < v < 10 for v in cls.expected_error.as_dict().values()), cls  # finite, stated
        model = "llama-3.1-70b" if kind == "dense" else "deepseek-r1"
        gpu = next(g.id for g in catalog.gpus.values() if g.architecture == architecture)
        assert engine_class(engine, architecture, kind).basis == "measured"
        eff = engine_efficiency(catalog, model, gpu, engine)
        assert all(getattr(eff, name) <= 1.0 for name in MEMORY_FACTORS), (engine, architecture, kind)


def test_reference_engine_on_dense_models_is_the_calibration_itself(catalog):
    """TensorRT-LLM on dense models is what the generation's calibration was fitted to: plans of dense models on the
    default engine do not move (the scale-out network's fit, shared by every engine, only prices engines spanning
    link domains)."""
    from planner.perf.roofline import SCALE_OUT_FACTORS

    for gpu in ("H100-SXM-80GB", "B200-SXM-180GB"):
        calibrated = efficiency_for(catalog, catalog.gpus[gpu].architecture)
        engine = engine_efficiency(catalog, "llama-3.1-70b", gpu, "trtllm")
        assert engine == dataclasses.replace(calibrated, **{f: getattr(engine, f) for f in SCALE_OUT_FACTORS})


def test_a_generation_without_rows_borrows_and_says_so():
    """MI355X (CDNA 4) has no serving rows: it runs at CDNA 3's classes, extrapolated, and says so."""
    borrowed = engine_class("vllm", "cdna4", "moe")
    assert borrowed.basis == "extrapolated" and "borrowed from cdna3" in borrowed.source
    unknown = engine_class("sglang", "ampere", "dense")
    assert unknown.basis in ("extrapolated", "prior")


def test_engines_differ_and_rows_answer_only_the_reference_engine(catalog):
    """A benchmark row measured the reference engine: it answers (or anchors) trtllm queries, never a vLLM one."""
    query = PerfQuery("llama-3.3-70b", "H100-SXM-80GB", 5000, 500, tp=2, precision="fp8", concurrency=1)
    reference = estimate(query, catalog)
    vllm = estimate(dataclasses.replace(query, engine="vllm"), catalog)
    assert isinstance(reference, PerfResult) and isinstance(vllm, PerfResult)
    assert reference.provenance == "measured" and reference.engine == "trtllm"
    assert vllm.provenance != "measured" and vllm.engine == "vllm" and "vLLM" in vllm.source
    assert vllm.expected_error is not None and reference.expected_error is None


def test_moe_engine_class_slows_the_reference_roofline_where_the_rows_say_so(catalog):
    """On Hopper MoE the measured rows are slower than the dense-calibrated roofline: every engine's class says
    so (the model without it was 20-80% optimistic on SGLang and vLLM)."""
    query = PerfQuery("deepseek-r1", "H200-SXM-141GB", 1024, 1024, tp=8, precision="fp8", concurrency=32)
    plain = estimate(query, catalog, sources=("modeled",))
    for engine in ("sglang", "vllm"):
        answer = estimate(dataclasses.replace(query, engine=engine), catalog, sources=("modeled",))
        assert answer.request_throughput_rps < plain.request_throughput_rps


@pytest.mark.parametrize(
    ("text", "layout"),
    [("TP4", Layout(4)), ("DEP8", Layout(1, 8, 8)), ("TP2EP4", Layout(2, 2, 4)), ("TP4PP2", Layout(4, pp=2)),
     ("tp8 ep8", Layout(8, 1, 8))],
)  # fmt: skip
def test_layouts_parse(text, layout):
    assert Layout.parse(text) == layout


@pytest.mark.parametrize("text", ["X4", "TP2EP3", "TP0", "TP2TP4", ""])
def test_bad_layouts_say_what_is_allowed(text):
    with pytest.raises(ValueError, match="TP"):
        Layout.parse(text)


def test_perf_speaks_layouts_and_engines():
    result = invoke("perf", "--model", "deepseek-r1", "--gpu", "H200", "--isl", "1024", "--osl", "1024",
                    "--concurrency", "32", "--layout", "DEP8", "--precision", "fp8", "--engine", "sglang",
                    "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    assert answer["engine"] == "sglang" and answer["layout"] == "DP8 EP8" and answer["gpus_per_instance"] == 8
    assert set(answer["expected_error"]) == {"throughput", "ttft", "tpot", "itl"}
    bad = invoke("perf", "--model", "deepseek-r1", "--gpu", "H200", "--isl", "1024", "--osl", "1024",
                 "--layout", "TP2EP3")  # fmt: skip
    assert bad.exit_code == 2 and "EP 3 must be 1" in bad.output and "Traceback" not in bad.output
    both = invoke("perf", "--model", "deepseek-r1", "--gpu", "H200", "--layout", "TP8", "--tp", "8")
    assert both.exit_code == 2 and "not both" in both.output


def _scenario(tmp_path, engines):
    spec = yaml.safe_load((SCENARIOS / "moe-engines.yaml").read_text())
    spec["workloads"][0]["engines"] = engines
    spec["sites"]["on_prem"]["systems"] = ["dgx-h100"]
    path = tmp_path / f"moe-{'-'.join(engines)}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_the_plan_chooses_the_engine_and_pinning_one_never_costs_less(tmp_path):
    """gpt-oss-120b (MXFP4 experts) on DGX H100 with all three engines allowed: every line names its engine, and
    a plan pinned to any one engine costs at least as much (the integer program chose among them)."""
    on_hopper = [e for e in ENGINES if engine_problem(e, "hopper") is None]  # ATOM runs on AMD only
    assert on_hopper == ["trtllm", "vllm", "sglang"]
    free = api.plan_file(_scenario(tmp_path, list(ENGINES)))
    assert all(line.engine in on_hopper for line in free.lines) and all(r.engine in on_hopper for r in free.routing)
    assert any("ATOM runs on AMD GPUs only" in reason for _, _, reason in free.candidates.pruned)
    for engine in on_hopper:
        pinned = api.plan_file(_scenario(tmp_path, [engine]))
        assert {line.engine for line in pinned.lines} == {engine}
        assert pinned.totals.annual_cost_usd >= free.totals.annual_cost_usd - 1e-6, engine


def test_an_unknown_engine_is_refused(tmp_path):
    spec = yaml.safe_load((SCENARIOS / "moe-engines.yaml").read_text())
    spec["workloads"][0]["engines"] = ["tgi"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = invoke("validate", str(path))
    assert result.exit_code == 2 and "engines" in result.output and "trtllm" in result.output


def test_confidence_sizes_each_modeled_line_at_the_edge_of_its_band(tmp_path):
    """--confidence 0.8 derates each modeled option by its own class's 80% band: never cheaper than the nominal
    plan, and the summary says so; a share outside (0, 1) is refused. Every route of the robust plan runs at its
    configuration's nominal rate / (1 + band)."""
    path = _scenario(tmp_path, ["sglang"])
    nominal = api.plan_file(path)
    robust = api.plan_file(path, confidence=0.8)
    # never cheaper, to the cent the totals are rounded to (equal fleets may route, and so draw power, differently)
    assert robust.totals.annual_cost_usd >= nominal.totals.annual_cost_usd - 0.01
    assert robust.robustness is not None and robust.robustness.confidence == 0.8
    assert robust.robustness.nominal_objective_usd_per_year == pytest.approx(nominal.objective_usd_per_year)
    band = engine_class("sglang", "hopper", "moe").throughput_error_at(0.8)
    context = api.plan_in_context(path)
    from planner.candidates import enumerate_candidates

    cset = enumerate_candidates(context.scenario, context.catalog)
    rate = {(o.workload, cset.candidate(o.candidate).layout_label, cset.candidate(o.candidate).precision,
             cset.candidate(o.candidate).max_batch): o.rps_per_node for o in cset.options}  # fmt: skip
    for route in robust.routing:
        nominal_rate = rate[(route.workload, route.layout or f"TP{route.tp}", route.precision, route.max_batch)]
        assert route.rps_per_node == pytest.approx(nominal_rate / (1 + band), rel=1e-6)
    bad = invoke("plan", str(path), "--confidence", "1.5")
    assert bad.exit_code == 2 and "--confidence" in bad.output and "Traceback" not in bad.output


def test_class_bands_interpolate_between_coverages():
    cls = engine_class("sglang", "hopper", "moe")
    assert cls.throughput_error_at(0.8) == pytest.approx(cls.expected_error.throughput)
    values = [cls.throughput_error_at(c) for c in (0.1, 0.5, 0.7, 0.8, 0.9, 0.99)]
    assert values == sorted(values) and values[0] > 0


# --- engines spanning link domains (scale-out network) ------------------------------------------------------------


def test_experts_across_boards_cross_the_scale_out_network_and_say_so(catalog):
    """DeepSeek-R1 DEP16 on H200 (two 8-GPU boards): the all-to-all's off-board share crosses the scale-out network
    (the shipped fit: a share of the NIC's 50 GB/s and a latency per phase), so every step is slower than if one
    NVLink domain held the 16 GPUs; the answer says extrapolated, why, and carries the wider band."""
    from planner.perf.engines import scale_out

    network = scale_out()
    assert network is not None and network.rows >= 100 and "silicon_sample.csv" in network.source
    assert 0.02 <= network.efficiency <= 1.0 and network.latency_us >= 0
    query = PerfQuery("deepseek-r1", "H200-SXM-141GB", 1024, 1024, concurrency=256, precision="fp8",
                      layout=Layout(1, 16, 16), engine="sglang")  # fmt: skip
    across = estimate(query, catalog)
    one_domain = catalog.model_copy(update={"gpus": {**catalog.gpus, "H200-SXM-141GB": catalog.gpus[
        "H200-SXM-141GB"].model_copy(update={"domain_gpus": 72})}})  # an NVL72-like domain of the same GPUs
    within = estimate(query, one_domain)
    assert isinstance(across, PerfResult) and isinstance(within, PerfResult)
    assert across.tpot_ms > 1.05 * within.tpot_ms and across.output_tokens_per_s < within.output_tokens_per_s
    assert across.provenance == "extrapolated" and any("span link domains of 8" in d for d in across.derivations)
    assert across.expected_error["throughput"] >= network.expected_error.throughput
    # within one board nothing crosses: DEP8 is the same with or without the network's fit
    eight = dataclasses.replace(query, layout=Layout(1, 8, 8), concurrency=128)
    assert estimate(eight, catalog).tpot_ms == pytest.approx(estimate(eight, one_domain).tpot_ms, rel=1e-12)


def test_bom_lines_carry_the_expected_error_of_what_their_nodes_serve():
    """The BOM line of the nodes serving gpt-oss-120b on engine classes carries the widest band of the engines
    routed to them; the contact center's nodes answer from NIM's measured rows: no band."""
    planned = api.plan_in_context(SCENARIOS / "moe-engines.yaml")
    bands = [a.expected_error["throughput"] for w in planned.plan.workloads for a in w.assignments if a.expected_error]
    [line] = [line for line in api.bom(SCENARIOS / "moe-engines.yaml").lines if line.gpus]  # the servers' line
    assert bands and line.expected_error_throughput == max(bands)
    assert all(line.expected_error_throughput is None for line in api.bom(SCENARIOS / "contact-center.yaml").lines)
