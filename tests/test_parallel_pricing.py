"""Engine curves priced in parallel processes (planner.candidates.prefetch_curves) give the enumeration exactly what
pricing them in this process gives: the same candidates, options, pruning reasons and plan, byte for byte."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from planner import candidates
from planner.candidates import enumerate_candidates
from planner.catalog import load_catalog
from planner.optimize import solve_candidates
from planner.report import json_out
from planner.scenario import load_scenario
from helpers import write_scenario

SCENARIO = {
    "name": "parallel", "metrics_version": 2, "perf": {"source": "model"},
    "workloads": [{"name": "chat", "model": "mistral-7b", "isl_tokens": 1500, "osl_tokens": 300, "peak_rps": 40,
                   "slo": {"ttft_ms": 1500, "itl_ms": 60}},
                  {"name": "summarize", "model": "qwen3-8b", "isl_tokens": 6000, "osl_tokens": 400, "peak_rps": 5,
                   "slo": {"ttft_ms": 4000, "itl_ms": 80}}],
    "sites": {"on_prem": {"systems": ["dgx-h100", "dgx-b200"]},
              "cloud": {"systems": ["aws-p5en.48xlarge", "lambda-gpu-8x-a100"]}},
    "deployment": "hybrid",
}  # fmt: skip


def enumerate_with(workers: int, path, monkeypatch, progress=None, bound_pruning: bool = True):
    monkeypatch.setenv("PLANNER_WORKERS", str(workers))
    monkeypatch.setenv("PLANNER_CACHE_DIR", "off")  # every curve priced: none kept from another run on disk
    catalog = load_catalog()  # a fresh catalog: no calibration fit or curve kept from the other run
    scenario = load_scenario(path, catalog)
    return enumerate_candidates(scenario, catalog, progress, bound_pruning), scenario, catalog


@pytest.mark.parametrize("bound_pruning", [False, True], ids=["every-curve", "curves-left-by-the-bound"])
def test_parallel_pricing_changes_nothing(tmp_path, monkeypatch, bound_pruning):
    path = write_scenario(tmp_path, SCENARIO)
    stages = []
    parallel, scenario, catalog = enumerate_with(2, path, monkeypatch, lambda *args: stages.append(args), bound_pruning)
    if not bound_pruning:  # with the bound, this scenario's leading curves are too few to fork for
        assert any(len(s) == 3 and "engine curves on 2 processes" in s[2] for s in stages), stages  # it did fork
    serial, _, serial_catalog = enumerate_with(1, path, monkeypatch, bound_pruning=bound_pruning)
    assert parallel.candidates == serial.candidates and parallel.options == serial.options
    assert parallel.pruned == serial.pruned and parallel.stats == serial.stats
    documents = [json_out.dumps(json_out.plan_document(solve_candidates(scenario, cset, cat)))
                 for cset, cat in ((parallel, catalog), (serial, serial_catalog))]  # fmt: skip
    strip = [{k: v for k, v in json.loads(d).items() if k != "solve_seconds"} for d in documents]
    assert strip[0] == strip[1]


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_a_bad_worker_count_is_refused_by_name(value, monkeypatch):
    monkeypatch.setenv("PLANNER_WORKERS", value)
    with pytest.raises(Exception, match="PLANNER_WORKERS"):
        candidates.worker_count()


def test_a_broken_worker_pool_falls_back_to_pricing_here(tmp_path, monkeypatch):
    """A worker killed (out of memory) breaks the pool: the curves not priced yet are priced in this process and the
    enumeration gives what one process gives."""
    import concurrent.futures
    from concurrent.futures.process import BrokenProcessPool

    class Broken:
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def map(self, *args, **kwargs):
            raise BrokenProcessPool("a worker died")

    path = write_scenario(tmp_path, SCENARIO)
    serial, _, _ = enumerate_with(1, path, monkeypatch)
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", Broken)
    broken, _, _ = enumerate_with(2, path, monkeypatch)
    assert broken.candidates == serial.candidates and broken.options == serial.options


def test_curves_priced_on_workers_are_kept_on_disk(tmp_path, monkeypatch):
    """Each forked worker keeps the curves it prices in the curve cache (the parent does not write them again): a
    second run in one process finds every one of them there and prices nothing."""
    import planner.candidates.builder as builder_module

    path = write_scenario(tmp_path, SCENARIO)
    stages = []
    monkeypatch.setenv("PLANNER_WORKERS", "2")
    monkeypatch.setenv("PLANNER_CACHE_DIR", str(tmp_path / "cache"))
    catalog = load_catalog()
    first = enumerate_candidates(load_scenario(path, catalog), catalog, lambda *args: stages.append(args), False)
    assert any(len(s) == 3 and "engine curves on 2 processes" in s[2] for s in stages), stages  # it did fork

    def priced_again(*args, **kwargs):
        raise AssertionError("a curve priced on a worker was not kept")

    monkeypatch.setattr(builder_module, "price_curve", priced_again)
    monkeypatch.setenv("PLANNER_WORKERS", "1")
    catalog = load_catalog()
    again = enumerate_candidates(load_scenario(path, catalog), catalog, bound_pruning=False)
    assert again.candidates == first.candidates and again.options == first.options


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="the optional ray extra is not installed")
def test_pricing_on_ray_changes_nothing(tmp_path, monkeypatch):
    """`--executor ray`: every curve a Ray task (a local Ray here), the same candidates and plan as one process."""
    from planner.workers import use_executor

    path = write_scenario(tmp_path, SCENARIO)
    stages = []
    with use_executor("ray"):
        on_ray, scenario, catalog = enumerate_with(2, path, monkeypatch, lambda *args: stages.append(args))
    assert any(len(s) == 3 and "engine curves on Ray" in s[2] for s in stages), stages
    serial, _, serial_catalog = enumerate_with(1, path, monkeypatch)
    assert on_ray.candidates == serial.candidates and on_ray.options == serial.options and on_ray.pruned == serial.pruned


def test_ray_asked_for_without_the_extra_says_how_to_install_it(tmp_path, monkeypatch, cli):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails as where the extra is not installed
    monkeypatch.setenv("PLANNER_CACHE_DIR", "off")
    path = write_scenario(tmp_path, SCENARIO)
    code, out, err = cli("plan", str(path), "--executor", "ray")
    assert code == 2 and "pip install '.[ray]'" in err and "Traceback" not in out + err


@pytest.mark.parametrize("value", ["threads", "RAY"])
def test_an_unknown_executor_is_refused_by_name(value, monkeypatch, cli, tmp_path):
    from planner.workers import executor

    monkeypatch.setenv("PLANNER_EXECUTOR", value)
    with pytest.raises(Exception, match="PLANNER_EXECUTOR"):
        executor()
    monkeypatch.delenv("PLANNER_EXECUTOR")
    code, _, err = cli("plan", str(write_scenario(tmp_path, SCENARIO)), "--executor", value)
    assert code == 2 and "allowed: process, ray" in err


def plan_with(workers: int, path, monkeypatch) -> dict:
    from planner.optimize import plan

    monkeypatch.setenv("PLANNER_WORKERS", str(workers))
    monkeypatch.setenv("PLANNER_CACHE_DIR", "off")
    catalog = load_catalog()
    document = json.loads(json_out.dumps(json_out.plan_document(plan(load_scenario(path, catalog), catalog))))
    document.pop("solve_seconds")
    return document


# both engines on three NVIDIA systems, one of them with fp4: enough curves for the comparison's leading pass
FP4_SCENARIO = dict(SCENARIO, workloads=[dict(w, engines=["vllm", "sglang"]) for w in SCENARIO["workloads"]],
                    sites={"on_prem": {"systems": ["dgx-b200", "dgx-h200", "dgx-h100"]}}, deployment="on-prem")  # fmt: skip


def test_the_fp4_comparisons_curves_priced_during_the_solve_change_nothing(tmp_path, monkeypatch):
    """A plan starts pricing its fp4 comparison's leading curves on the workers while its own solve runs
    (planner.candidates.price_leading_ahead): the plan, its comparison's note included, is one process's."""
    from planner.candidates import parallel

    path = write_scenario(tmp_path, FP4_SCENARIO)
    kept = []
    finish = parallel.PricingAhead.finish
    monkeypatch.setattr(parallel.PricingAhead, "finish", lambda self: kept.append(finish(self)) or kept[-1])
    ahead = plan_with(2, path, monkeypatch)
    assert kept and kept[0] > 0, "nothing was priced ahead"
    assert ahead == plan_with(1, path, monkeypatch)


def test_a_failed_solve_drops_the_curves_priced_ahead(tmp_path, monkeypatch):
    """The plan's solve raising (here: no plan within the limits) cancels what was being priced ahead, and the
    error is the plan's."""
    from planner import optimize
    from planner.candidates import parallel
    from planner.errors import InfeasiblePlanError

    path = write_scenario(tmp_path, FP4_SCENARIO)
    cancelled = []
    cancel = parallel.PricingAhead.cancel
    monkeypatch.setattr(parallel.PricingAhead, "cancel", lambda self: cancelled.append(cancel(self)))

    def infeasible(*args, **kwargs):
        raise InfeasiblePlanError(["no plan (a test)"])

    monkeypatch.setattr(optimize, "solve_candidates", infeasible)
    with pytest.raises(InfeasiblePlanError, match="a test"):
        plan_with(2, path, monkeypatch)
    assert cancelled
