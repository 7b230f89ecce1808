"""The discrete-event simulator: hand-computed cases, Little's law, determinism, the notebook's lessons."""

from __future__ import annotations

import numpy as np
import pytest

from planner.simulate import (
    BatchingEngine,
    FixedSteps,
    Requests,
    SlotEngine,
    deterministic_arrivals,
    poisson_arrivals,
    run,
    statistics,
)


def requests_at(times, isl=100, osl=5) -> Requests:
    times = np.asarray(times, dtype=float)
    return Requests(times, np.full(len(times), isl, dtype=np.int64), np.full(len(times), osl, dtype=np.int64))


def test_single_request_in_flight_by_hand():
    # prefill 10 + 0.1 x 100 = 20 ms -> first token at 20 ms; 4 more decode steps of 5 ms -> finish at 40 ms
    steps = FixedSteps(10.0, 0.1, 5.0)
    reqs = run([BatchingEngine(steps, max_batch=8, kv_tokens=None)], requests_at([0.0]))
    assert reqs.first_token_s[0] == pytest.approx(0.020)
    assert reqs.finish_s[0] == pytest.approx(0.040)


def test_in_flight_admits_at_the_next_iteration_by_hand():
    # r0 at 0: prefill 0-20 ms. r1 at 5 ms waits for that iteration; next iteration (20 ms) = prefill r1 (20) +
    # decode r0 (5) -> ends 45 ms: r1's first token at 45 ms; r0 has 3 tokens left: 45-50, 50-55, 55-60 with r1
    steps = FixedSteps(10.0, 0.1, 5.0)
    reqs = run([BatchingEngine(steps, max_batch=8, kv_tokens=None)], requests_at([0.0, 0.005]))
    assert reqs.first_token_s.tolist() == pytest.approx([0.020, 0.045])
    assert reqs.finish_s[0] == pytest.approx(0.060)
    assert reqs.finish_s[1] == pytest.approx(0.065)  # 3 decode steps after 45 ms, r0 gone after 60


def test_static_batching_waits_for_the_batch_by_hand():
    # static: r1 (at 5 ms) waits until r0's batch is finished at 40 ms; then its own 20 + 4 x 5 = 40 ms
    steps = FixedSteps(10.0, 0.1, 5.0)
    reqs = run([BatchingEngine(steps, max_batch=8, kv_tokens=None, in_flight=False)], requests_at([0.0, 0.005]))
    assert reqs.first_token_s.tolist() == pytest.approx([0.020, 0.060])
    assert reqs.finish_s.tolist() == pytest.approx([0.040, 0.080])


def test_slot_engine_is_an_m_d_c_queue_by_hand():
    # 1 slot (0.2 rps x 5 s E2E = 1): service 5 s; arrivals at 0, 1, 2 start at 0, 5, 10
    engine = SlotEngine(ttft_ms=1000, itl_ms=1000, request_throughput_rps=0.2, osl=5)
    assert engine.slots == 1
    reqs = run([engine], requests_at([0.0, 1.0, 2.0]))
    assert reqs.first_token_s.tolist() == pytest.approx([1.0, 6.0, 11.0])
    assert reqs.finish_s.tolist() == pytest.approx([5.0, 10.0, 15.0])


def test_slot_engine_keeps_the_measured_throughput():
    # the seeds' contact-center point: 2.4 rps per DGX H100 at TTFT 2606 ms, ITL 21.4 ms, 667 output tokens
    engine = SlotEngine(2606, 21.4, 2.4, 667)
    assert engine.slots == 41  # ceil(2.4 x 16.858 s)
    assert engine.slots / ((2606 + 666 * engine.itl_ms) / 1e3) == pytest.approx(2.4)
    assert engine.itl_ms == pytest.approx(21.4, rel=0.02)


def test_same_seed_same_result():
    def once(seed):
        rng = np.random.default_rng(seed)
        arrivals = poisson_arrivals(20, 60, rng)
        reqs = requests_at(arrivals, isl=500, osl=50)
        run([BatchingEngine(FixedSteps(5, 0.01, 8, 0.05), 64, None)], reqs)
        return reqs.finish_s

    assert np.array_equal(once(7), once(7))
    assert not np.array_equal(once(7), once(8))


@pytest.mark.parametrize("in_flight", [True, False])
def test_little_law_on_long_runs(in_flight):
    rng = np.random.default_rng(1)
    reqs = requests_at(poisson_arrivals(15, 2000, rng), isl=300, osl=40)
    engines = [BatchingEngine(FixedSteps(5, 0.02, 10, 0.1), 64, None, in_flight=in_flight)]
    run(engines, reqs)
    stats = statistics(reqs, engines, 2000)
    end = float(np.nanmax(reqs.finish_s))
    arrival_rate = len(reqs) / end
    # mean number in system = arrival rate x mean time in system
    assert stats.mean_in_system == pytest.approx(arrival_rate * stats.e2e_ms.mean / 1e3, rel=0.02)
    assert stats.completed == len(reqs)


def test_in_flight_beats_static_batching_like_the_notebook():
    rng = np.random.default_rng(3)
    arrivals = poisson_arrivals(12, 600, rng)
    results = {}
    for in_flight in (True, False):
        reqs = Requests(arrivals, np.full(len(arrivals), 200, dtype=np.int64), np.random.default_rng(4).integers(10, 120, len(arrivals)))
        engines = [BatchingEngine(FixedSteps(5, 0.02, 10, 0.1), 32, None, in_flight=in_flight)]
        run(engines, reqs)
        results[in_flight] = statistics(reqs, engines, 600)
    assert results[True].ttft_ms.mean < results[False].ttft_ms.mean
    assert results[True].e2e_ms.mean < results[False].e2e_ms.mean
    assert results[True].mean_queue_length < results[False].mean_queue_length


def test_ttft_explodes_once_the_arrival_rate_passes_capacity():
    # one slot engine of capacity 2.4 rps: at 0.8x capacity the median TTFT is its service value; at 1.2x the
    # queue grows for the whole run and TTFT with it
    stats = {}
    for load in (0.8, 1.2):
        rng = np.random.default_rng(5)
        reqs = requests_at(poisson_arrivals(2.4 * load, 3000, rng), osl=667)
        engines = [SlotEngine(2606, 21.4, 2.4, 667)]
        run(engines, reqs)
        stats[load] = statistics(reqs, engines, 3000)
    assert stats[0.8].ttft_ms.p50 == pytest.approx(2606, rel=0.05)
    assert stats[1.2].ttft_ms.p50 > 50 * 2606
    # the queue keeps growing over time past capacity
    timeline = [q for _, q in stats[1.2].queue_timeline]
    assert len(timeline) == 20 and timeline[-2] > timeline[1] > 0
    assert stats[1.2].ttft_ms.p99 > stats[1.2].ttft_ms.p50


def test_least_outstanding_balancer_beats_round_robin_on_uneven_requests():
    rng = np.random.default_rng(9)
    arrivals = poisson_arrivals(40, 600, rng)
    osl = np.random.default_rng(10).choice([5, 400], size=len(arrivals), p=[0.8, 0.2])
    stats = {}
    for balancer in ("round-robin", "least-outstanding"):
        reqs = Requests(arrivals, np.full(len(arrivals), 100, dtype=np.int64), osl.astype(np.int64))
        engines = [BatchingEngine(FixedSteps(5, 0.02, 10, 0.2), 16, None) for _ in range(4)]
        run(engines, reqs, balancer)
        stats[balancer] = statistics(reqs, engines, 600)
    assert stats["least-outstanding"].e2e_ms.p99 <= stats["round-robin"].e2e_ms.p99


def test_kv_capacity_limits_the_batch():
    # KV room for 2 requests of 100 + 5 tokens: the third waits for one to finish
    steps = FixedSteps(10.0, 0.1, 5.0)
    reqs = run([BatchingEngine(steps, max_batch=8, kv_tokens=210)], requests_at([0.0, 0.0, 0.0]))
    assert np.isclose(reqs.first_token_s[0], reqs.first_token_s[1])
    assert reqs.first_token_s[2] >= reqs.finish_s[0] - 1e-9


def test_deterministic_arrivals_spacing():
    assert deterministic_arrivals(4, 1.0).tolist() == [0.0, 0.25, 0.5, 0.75]


def test_plan_verify_flags_the_seeds_13_dgx_h100(cli):
    # 31 rps on 13 x 2.4 rps = 99.4% utilization: under Poisson arrivals the median TTFT passes 3 s
    import json

    from conftest import SCENARIOS

    code, out, err = cli("plan", SCENARIOS / "contact-center.yaml", "--verify", "--json")
    assert code == 0, err
    verification = json.loads(out)["verification"]
    (check,) = verification["workloads"]
    assert check["ok"] is False and verification["all_ok"] is False
    (ttft,) = check["checks"]
    assert ttft["metric"] == "TTFT" and ttft["simulated_ms"] > 3000
    code, out, _ = cli("plan", SCENARIOS / "contact-center.yaml", "--verify")
    assert code == 0 and "MISSES SLO" in out


def test_fourteen_nodes_hold_the_limit():
    import dataclasses

    from conftest import SCENARIOS
    from planner.api import plan_in_context
    from planner.simulate import simulate_plan

    planned = plan_in_context(SCENARIOS / "contact-center.yaml")
    (line,) = planned.plan.lines
    (running,) = planned.plan.instances
    assert line.nodes == running.instances == 13  # TP8: one instance per DGX H100
    plan = dataclasses.replace(
        planned.plan, lines=(dataclasses.replace(line, nodes=14),), instances=(dataclasses.replace(running, instances=14),)
    )
    (check,) = simulate_plan(plan, planned.scenario, planned.catalog, duration_s=1200, seed=1)
    assert check.ok and check.stats.ttft_ms.p50 == pytest.approx(2606, rel=0.01)


def test_simulate_cli_with_a_saved_plan(cli, tmp_path):
    import json

    from conftest import SCENARIOS

    code, out, _ = cli("plan", SCENARIOS / "chat-and-summarize.yaml", "--json")
    (tmp_path / "plan.json").write_text(out)
    code, out, err = cli("simulate", SCENARIOS / "chat-and-summarize.yaml", "--plan", tmp_path / "plan.json",
                         "--duration", "120", "--json")  # fmt: skip
    assert code == 0, err
    document = json.loads(out)
    assert {w["workload"] for w in document["workloads"]} == {"chat", "summarize"}
    for workload in document["workloads"]:
        assert workload["stats"]["completed"] > 0
        assert workload["stats"]["throughput_rps"] == pytest.approx(workload["rate_rps"], rel=0.15)
    code, _, err = cli("simulate", SCENARIOS / "chat-and-summarize.yaml", "--plan", tmp_path / "nope.json")
    assert code == 2 and "not found" in err
