"""One step cost for the performance model and the simulator, anchored on measured rows or not (issue 48, item 3).

An engine with measured rows (Llama 3.1 8B and Llama 3.3 70B at fp8 on H100) is sized on the roofline anchored on
them. A plan's open-loop point now runs the engine's step as the rows scale it (planner/perf/modeled_engine.py), and
the simulator is handed the same factors at the point's rate: it once ran the unanchored step (a RAG plan predicted
TPOT 69.4 ms and simulated 81.0 ms), and a derivation printed a factor other than the one applied."""

from __future__ import annotations

import re

import pytest
from helpers import write_scenario

from planner.perf import PerfQuery, engine_shape, estimate, step_efficiency
from planner.perf.engine_curve import whole_curve as _curve
from planner.perf.serving import kv_admission
from planner.perf.tables import instance_memory
from planner.perf.types import Layout
from planner.simulate.against_model import simulate_engine

GPU = "H100-SXM-80GB"
ANCHORED = [("llama-3.1-8b", 1, 4000, 300), ("llama-3.3-70b", 2, 5000, 500)]  # rows: TRT-LLM docs, NVIDIA NIM


def _usable_rate(catalog, model: str, tp: int, isl: int, osl: int) -> float:
    """The highest modeled rate of the engine's open-loop curve at P50."""
    curve = _curve(PerfQuery(model, GPU, isl, osl, tp, "fp8", arrivals="poisson"), catalog, tp, "fp8", 50.0)
    return max(p.request_throughput_rps for p in curve if p.provenance != "measured")


@pytest.mark.parametrize(("model", "tp", "isl", "osl"), ANCHORED)
@pytest.mark.parametrize("load", [0.5, 0.8])
def test_an_anchored_engine_simulates_as_the_model_prices_it(catalog, model, tp, isl, osl, load):
    rate = load * _usable_rate(catalog, model, tp, isl, osl)
    query = PerfQuery(model, GPU, isl, osl, tp, "fp8", rate_rps=rate)
    point = estimate(query, catalog, percentile=50.0)
    eff, what = step_efficiency(query, catalog, tp, "fp8")
    assert eff.step_scale != 1.0 and what.startswith("anchored on")  # the rows move this engine
    memory = instance_memory(catalog, model, GPU, tp, "fp8", isl, osl)
    shape = engine_shape(catalog, catalog.models[model], catalog.gpus[GPU], Layout(tp), "fp8")
    simulated, _ = simulate_engine(shape, eff, isl, osl, memory.running_limit(isl, osl, "trtllm"),
                                   memory.kv_token_capacity, rate, 50.0, requests_wanted=8000,
                                   kv_admission=kv_admission("trtllm"))  # fmt: skip
    for metric in ("ttft_ms", "tpot_ms", "itl_ms"):
        ratio = simulated[metric] / getattr(point, metric)
        assert 0.85 <= ratio <= 1.05, (metric, ratio)


def test_the_derivation_prints_the_factor_the_simulator_runs(catalog):
    model, tp, isl, osl = ANCHORED[0]
    rate = 0.8 * _usable_rate(catalog, model, tp, isl, osl)
    query = PerfQuery(model, GPU, isl, osl, tp, "fp8", rate_rps=rate)
    point = estimate(query, catalog, percentile=50.0)
    printed = next(d for d in point.derivations if "the engine's step x" in d)
    step = float(re.search(r"step x([0-9.]+)", printed).group(1))
    overhead = float(re.search(r"and ([0-9.]+) ms per request", printed).group(1))
    eff, _ = step_efficiency(query, catalog, tp, "fp8")
    assert step == pytest.approx(eff.step_scale, abs=5e-4)
    assert overhead == pytest.approx(eff.ttft_overhead_ms, rel=5e-3)


def test_a_closed_loop_point_prints_the_factor_applied_to_it(catalog):
    """A benchmark's view (closed loop) takes the rows' factors on its means: the printed TPOT factor is the ratio of
    the anchored TPOT to the roofline's own at the same concurrency."""
    model, tp, isl, osl = ANCHORED[1]
    anchored = estimate(PerfQuery(model, GPU, 4000, 250, tp, "fp8", concurrency=30), catalog)
    plain = estimate(PerfQuery(model, GPU, 4000, 250, tp, "fp8", concurrency=30), catalog, sources=("modeled",))
    printed = next(d for d in anchored.derivations if "TPOT and ITL x" in d)
    factor = float(re.search(r"TPOT and ITL x([0-9.]+)", printed).group(1))
    assert "anchored on" not in plain.source
    assert anchored.tpot_ms / plain.tpot_ms == pytest.approx(factor, abs=5e-4)


def _rag(tmp_path, perf: dict | None = None):
    document = {
        "name": "rag", "metrics_version": 2, "deployment": "on-prem",
        "workloads": [{"name": "rag", "model": "llama-3.1-8b", "isl_tokens": 4000, "osl_tokens": 300, "peak_rps": 60,
                       "mode": "streaming", "precisions": ["fp8"],
                       "slo": {"ttft_ms": 3000, "tpot_ms": 30, "percentile": 50}}],
        "sites": {"on_prem": {"systems": ["dgx-h100"], "amortization_years": 4}},
    }  # fmt: skip
    if perf:
        document["perf"] = perf
    return write_scenario(tmp_path, document)


def test_the_simulator_runs_the_engine_the_plan_sized(tmp_path):
    from planner.api import plan_in_context
    from planner.plan import route_matches
    from planner.simulate.setups import engine_setup

    planned = plan_in_context(_rag(tmp_path))
    plan, catalog = planned.plan, planned.catalog
    route = next(r for r in plan.routing if r.workload == "rag")
    assignment = next(a for w in plan.workloads if w.name == "rag" for a in w.assignments if route_matches(a, route))
    assert "anchored on" in assignment.source
    setup = engine_setup(route, assignment, 8, 1.0, catalog, planned.scenario.token_budget)
    query = PerfQuery("llama-3.1-8b", GPU, route.bucket_isl, route.bucket_osl, route.tp, route.precision,
                      token_budget=planned.scenario.token_budget, rate_rps=route.rps_per_instance)  # fmt: skip
    eff, _ = step_efficiency(query, catalog, route.tp, route.precision, (route.engine_isl, route.engine_osl))
    assert setup.steps.efficiency == eff and eff.step_scale != 1.0
    assert setup.request_overhead_ms == eff.ttft_overhead_ms
    assert "anchored on" in setup.description


def test_plan_with_the_model_alone_does_not_anchor(tmp_path, cli_json):
    """`plan --perf-source model` prices the roofline alone, as `perf --perf-source model` answers."""
    document = cli_json("plan", _rag(tmp_path), "--perf-source", "model")
    sources = [a["source"] for w in document["workloads"] for a in w["assignments"]]
    assert sources and not any("anchored on" in s for s in sources)
    anchored = cli_json("plan", _rag(tmp_path))
    assert any("anchored on" in a["source"] for w in anchored["workloads"] for a in w["assignments"])


# engines over the step's cases: dense and MoE, TP over a board and beyond its link domain of 8 GPUs,
# expert-parallel all-to-alls, every compute precision, anchored (a step scale) and not; PP and speculation take
# the general step
DECODE_ENGINES = [
    ("llama-3.1-8b", "H100-SXM-80GB", Layout(1), "fp8"),
    ("llama-3.1-70b", "H200-SXM-141GB", Layout(4), "bf16"),
    ("llama-3.1-70b", "B200-SXM-180GB", Layout(2), "fp4"),
    ("llama-3.1-70b", "MI300X-192GB", Layout(8), "fp8"),
    ("llama-3.1-70b", "H100-SXM-80GB", Layout(16), "fp8"),  # a ring beyond the board of 8
    ("mixtral-8x7b", "H100-SXM-80GB", Layout(2), "bf16"),
    ("qwen3-235b-a22b", "H200-SXM-141GB", Layout(1, 4, 4), "fp8"),
    ("qwen3-235b-a22b", "MI355X-288GB", Layout(8), "fp4"),
    ("deepseek-v3", "H100-SXM-80GB", Layout(1, 16, 16), "fp8"),  # an all-to-all beyond it
    ("gpt-oss-120b", "B200-SXM-180GB", Layout(1, 2, 2), "fp4"),
    ("llama-3.1-70b", "H100-SXM-80GB", Layout(4, 1, 1, 2), "fp8"),
]  # fmt: skip


@pytest.mark.parametrize("engine", DECODE_ENGINES, ids=lambda e: f"{e[0]}-{e[1]}-{e[2].label}-{e[3]}")
@pytest.mark.parametrize(("step_scale", "overhead_ms"), [(1.0, None), (1.37, 0.731)])
def test_the_open_loops_decode_step_is_the_steps_own_to_the_bit(catalog, engine, step_scale, overhead_ms):
    """planner/perf/step.decode_steps (the open loop's D(b), its batch-free terms computed once) against step_ms,
    element for element, over batches from none to a million and contexts short and long."""
    import dataclasses

    import numpy as np

    from planner.perf.engines import calibrated
    from planner.perf.step import decode_steps, step_ms

    model, gpu, layout, precision = engine
    shape = engine_shape(catalog, catalog.models[model], catalog.gpus[gpu], layout, precision)
    eff = calibrated(catalog, model, gpu, "vllm", None)[0]
    eff = dataclasses.replace(eff, step_scale=step_scale, step_overhead_ms=overhead_ms or eff.step_overhead_ms)
    batches = np.concatenate([[0.0, 0.5, 1.0, 1.75, 2.0], np.geomspace(1.0, 1e6, 97), np.arange(3.0, 300.0, 7.0)])
    for context in (150.0, 8250.0):
        steps = decode_steps(shape, eff, context)
        for batch in (batches, batches.reshape(-1, 1)[:40], batches[7:8]):
            assert np.array_equal(steps(batch), step_ms(shape, eff, batch, context))
