"""What an open-loop solve reuses (planner/perf/open_loop.py): the decode steps it asked for before, and one engine's
step costs across the pieces its curve is priced in. Reused, they answer exactly what a fresh evaluation of the one
step cost (planner/perf/step.py) answers, and nothing outside the same engine objects. And a generation with no
timed iteration has no kernel fit, said without pandas (planner/perf/kernel_fit.py)."""

from __future__ import annotations

import copy
import subprocess
import sys

import numpy as np
import pytest

from planner.perf import open_loop
from planner.perf.kernel_fit import _kernel_frame
from planner.perf.modeled_engine import modeled_engine
from planner.perf.roofline import supports_roofline
from planner.perf.step import step_ms
from planner.perf.types import Layout, PerfQuery

ENGINES = [  # (query, layout, precision): dense and MoE, TP and expert-parallel (the busiest rank's law)
    (PerfQuery("llama-3.1-8b", "H100-SXM-80GB", 1500, 300, arrivals="poisson", engine="vllm"), Layout(1), "fp8"),
    (PerfQuery("qwen3-30b-a3b", "H100-SXM-80GB", 2000, 400, arrivals="poisson", engine="vllm"), Layout(1, 2, 2), "bf16"),
    (PerfQuery("llama-4-scout", "MI355X-288GB", 16000, 500, arrivals="poisson", engine="vllm"), Layout(1, 2, 2), "fp8"),
]  # fmt: skip


def _engine(catalog, entry):
    query, layout, precision = entry
    engine = modeled_engine(query, catalog, layout.tp, precision, None, False, layout)
    assert not isinstance(engine, str), engine
    return query, engine


@pytest.mark.parametrize("entry", ENGINES, ids=lambda e: f"{e[0].model}-{e[1].label}")
def test_a_solve_s_decode_steps_are_the_step_cost_answered_again_read_only(catalog, entry):
    query, engine = _engine(catalog, entry)
    costs = open_loop.roofline_costs(engine.shape, engine.eff, query.isl, query.osl, 8192)
    context = query.isl + query.osl / 2
    batches = [np.array([1.0, 7.5, 40.0]), np.geomspace(1.0, 300.0, 17), np.array([3.25])]
    for _ in range(2):  # the second round answers from the memo
        for batch in batches:
            found = costs.decode(batch.copy())
            assert np.array_equal(found, step_ms(engine.shape, engine.eff, batch, context))
            with pytest.raises(ValueError):
                found[0] = 0.0  # the memo's array is never changed by a caller
    assert costs.decode(batches[0]) is costs.decode(batches[0].copy())
    # more arrays than the memo holds: the oldest is evaluated again, the same figures
    for k in range(open_loop.DECODE_MEMO + 2):
        costs.decode(np.array([2.0 + k]))
    assert np.array_equal(costs.decode(batches[1]), step_ms(engine.shape, engine.eff, batches[1], context))
    assert costs.decode(4.0) == step_ms(engine.shape, engine.eff, 4.0, context)  # a scalar: evaluated, not kept


@pytest.mark.parametrize("entry", ENGINES, ids=lambda e: f"{e[0].model}-{e[1].label}")
def test_a_solve_answers_the_same_whatever_its_engine_s_steps_were_asked_before(catalog, entry):
    query, engine = _engine(catalog, entry)
    rates = [r / 1e3 for r in (0.2, 0.5, 1.0)]
    fresh = open_loop.solve_open_loop(open_loop.roofline_costs(engine.shape, engine.eff, query.isl, query.osl, 8192),
                                      query.osl, rates, engine.capacity, 95.0, 8192)  # fmt: skip
    used = open_loop.roofline_costs(engine.shape, engine.eff, query.isl, query.osl, 8192)
    open_loop.solve_open_loop(used, query.osl, [0.3 / 1e3, 0.8 / 1e3], engine.capacity, 95.0, 8192)  # its memo filled
    again = open_loop.solve_open_loop(used, query.osl, rates, engine.capacity, 95.0, 8192)
    assert again == fresh


def test_step_costs_are_kept_for_the_same_engine_objects_only(catalog):
    query, engine = _engine(catalog, ENGINES[1])
    first = open_loop._costs_of(engine.shape, engine.eff, query.isl, query.osl, 8192)
    assert open_loop._costs_of(engine.shape, engine.eff, query.isl, query.osl, 8192) is first
    equal_shape, equal_eff = copy.deepcopy(engine.shape), copy.deepcopy(engine.eff)
    assert equal_shape == engine.shape and equal_eff == engine.eff
    other = open_loop._costs_of(equal_shape, equal_eff, query.isl, query.osl, 8192)
    assert other is not first and other.key == first.key and other.delta_ms == first.delta_ms
    assert open_loop._costs_of(engine.shape, engine.eff, query.isl, query.osl + 1, 8192) is not first


def test_a_generation_without_timed_iterations_has_no_kernel_frame(catalog):
    import pandas as pd

    frame = pd.concat([table.frame for table in catalog.steps], ignore_index=True)
    for architecture in sorted({gpu.architecture for gpu in catalog.gpus.values()}):
        rows = frame[(frame["gpu"].map(lambda g: catalog.gpus[g].architecture) == architecture)
                     & frame["model"].map(lambda m: supports_roofline(catalog.models[m]))]  # fmt: skip
        found = _kernel_frame(catalog, architecture)
        assert (found is None) == rows.empty, architecture
        if found is not None:
            assert len(found) == len(rows)


def test_the_kernel_fit_of_a_generation_without_timed_iterations_imports_no_pandas():
    code = ("import sys; from planner.catalog import load_catalog; from planner.perf.kernel_fit import fit_kernels; "
            "catalog = load_catalog(); assert fit_kernels(catalog, 'cdna3') is None; print('pandas' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False", done.stderr
