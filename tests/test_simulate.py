"""The notebook's simpler engines (v1 BatchingEngine, SlotEngine) by hand; the vLLM-like engine, queues against
closed forms, balancers and plan verdicts are in tests/test_simulator_against_closed_forms.py."""

from __future__ import annotations

import numpy as np
import pytest

from planner.simulate import BatchingEngine, FixedSteps, Requests, SlotEngine, deterministic_arrivals, poisson_arrivals, run


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


def test_in_flight_beats_static_batching_like_the_notebook():
    from planner.simulate import run_statistics

    rng = np.random.default_rng(3)
    arrivals = poisson_arrivals(12, 600, rng)
    results = {}
    for in_flight in (True, False):
        reqs = Requests(arrivals, np.full(len(arrivals), 200), np.random.default_rng(4).integers(10, 120, len(arrivals)))
        run([BatchingEngine(FixedSteps(5, 0.02, 10, 0.1), 32, None, in_flight=in_flight)], reqs)
        results[in_flight] = run_statistics(reqs, [], (60, 600))
    assert results[True].ttft_ms.mean < results[False].ttft_ms.mean / 2
    assert results[True].e2e_ms.mean < results[False].e2e_ms.mean
    assert results[True].mean_queue_length < results[False].mean_queue_length


def test_kv_capacity_limits_the_batch():
    # KV room for 2 requests of 100 + 5 tokens: the third waits for one to finish
    steps = FixedSteps(10.0, 0.1, 5.0)
    reqs = run([BatchingEngine(steps, max_batch=8, kv_tokens=210)], requests_at([0.0, 0.0, 0.0]))
    assert np.isclose(reqs.first_token_s[0], reqs.first_token_s[1])
    assert reqs.first_token_s[2] >= reqs.finish_s[0] - 1e-9


def test_deterministic_arrivals_spacing():
    assert deterministic_arrivals(4, 1.0).tolist() == [0.0, 0.25, 0.5, 0.75]
