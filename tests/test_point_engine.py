"""A model without an architecture sized for requests arriving at random (planner/perf/point_engine.py): the wait
for a seat against exact and simulated M/D/c queues, the point engine's open loop against the simulator running
the same steps, and the seed's NeMo 43B contact center planned by it and holding in its own simulation."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from helpers import SCENARIOS
from planner import api
from planner.perf.point_engine import OPEN_LOOP_PROVENANCE, PointSteps, deterministic_seat_wait, point_states
from planner.simulate import SimulationOptions, simulate_plan
from planner.simulate.balance import run
from planner.simulate.engines import ServingEngine
from planner.simulate.stats import request_latencies
from planner.simulate.traffic import Requests, poisson_arrivals


def _md_c_waits(load: float, seats: int, arrivals: int, seed: int) -> np.ndarray:
    """Waits (in seat times) of an M/D/c queue, first come first served, by the Kiefer-Wolfowitz recursion: the
    times each seat frees, sorted; an arrival takes the earliest."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / load, arrivals)  # a seat time of 1: `load` arrivals per seat time
    free = np.zeros(seats)
    waits = np.empty(arrivals)
    clock = 0.0
    for i, gap in enumerate(gaps):
        clock += gap
        earliest = free.argmin()
        start = max(clock, free[earliest])
        waits[i] = start - clock
        free[earliest] = start + 1.0
    return waits[arrivals // 10 :]


@pytest.mark.parametrize("rho", [0.3, 0.6, 0.9])
def test_the_seat_wait_of_one_seat_is_the_md1_closed_form(rho):
    """M/D/1: P(wait) = rho, E[W] = rho D / (2 (1 - rho)) (Pollaczek-Khinchine)."""
    seat_ms = 1000.0
    waits, ends, _ = deterministic_seat_wait(np.array([rho]), 1, np.array([seat_ms]))
    assert waits[0] == pytest.approx(rho, rel=1e-6)
    assert waits[0] / ends[0] == pytest.approx(rho * seat_ms / (2 * (1 - rho)), rel=2e-3)


@pytest.mark.parametrize("seats, rho", [(4, 0.8), (16, 0.9), (35, 0.95)])
def test_the_seat_wait_matches_a_simulated_md_c_queue(seats, rho):
    """P(wait) and the mean wait of the exact law against 200,000 simulated arrivals (3 seeds), and never more
    likely to wait than M/M/c's Erlang C at the same load (deterministic service waits less)."""
    from math import factorial

    load = rho * seats
    waits, ends, _ = deterministic_seat_wait(np.array([load]), seats, np.array([1.0]))
    simulated = np.concatenate([_md_c_waits(load, seats, 70_000, seed) for seed in range(3)])
    assert waits[0] == pytest.approx((simulated > 1e-12).mean(), abs=0.03)
    assert waits[0] / ends[0] == pytest.approx(simulated.mean(), rel=0.12)
    terms = sum(load**k / factorial(k) for k in range(seats))
    erlang_c = load**seats / factorial(seats) / (1 - rho) / (terms + load**seats / factorial(seats) / (1 - rho))
    assert waits[0] <= erlang_c + 1e-9


def test_a_load_at_or_beyond_the_seats_waits_without_end():
    waits, ends, batches = deterministic_seat_wait(np.array([4.0, 5.0, np.inf]), 4, np.full(3, 100.0))
    assert list(waits) == [1.0, 1.0, 1.0] and list(ends) == [0.0, 0.0, 0.0] and list(batches) == [4.0] * 3


@pytest.mark.parametrize("share", [0.7, 0.9, 0.95])
def test_the_point_engines_open_loop_agrees_with_the_simulator_running_its_steps(share):
    """One engine of a point's steps under Poisson arrivals, 3 seeds of 20,000 requests: TTFT P50/P95/P99 within
    25% (or 30 ms) of the open loop, TPOT within 3%, where the seat wait dominates the tail."""
    steps = PointSteps(decode_step_ms=20.0, prefill_per_token_ms=0.02)
    isl, osl, batch = 1000, 200, 16
    rate = share * float(steps.saturated_rps(batch, isl, osl))
    ttft, tpot = [], []
    for seed in range(3):
        rng = np.random.default_rng(seed)
        duration = 20_000 / rate
        arrivals = poisson_arrivals(rate, duration, rng)
        requests = Requests(arrivals, np.full(len(arrivals), isl), np.full(len(arrivals), osl),
                            np.zeros(len(arrivals), dtype=int))  # fmt: skip
        run([ServingEngine(steps, batch, None, 8192, 0.0, seed=seed)], requests, "round-robin", seed)
        latencies = request_latencies(requests, (requests.arrival_s >= 0.1 * duration) & ~np.isnan(requests.finish_s))
        ttft.append(np.percentile(latencies["TTFT"], [50, 95, 99]))
        tpot.append(latencies["TPOT"].mean())
    simulated = np.mean(ttft, axis=0)
    for percentile, value in zip((50, 95, 99), simulated):
        modeled = point_states(steps, batch, isl, osl, [rate], percentile)[0].ttft_ms
        assert modeled == pytest.approx(value, rel=0.25, abs=30.0), (percentile, modeled, value)
    assert point_states(steps, batch, isl, osl, [rate], None)[0].tpot_ms == pytest.approx(np.mean(tpot), rel=0.03)


def test_the_contact_center_under_random_arrivals_is_sized_by_its_rows_engine_and_holds(tmp_path):
    """NeMo 43B has no published architecture: its closed-loop row (2.4 rps per DGX H100) sizes 13 nodes by the
    course's method (the golden answer, unchanged), and its engine fitted to the row, in the open loop, sizes the
    nodes random arrivals need, said in the plan; that plan holds in its own simulation under a random split."""
    course = api.plan_in_context(SCENARIOS / "contact-center.yaml").plan
    assert course.sizing == "closed-loop" and sum(line.nodes for line in course.lines) == 13
    assert "under random arrivals (call-summaries at 31 requests/s): 14 dgx-h100" in course.sizing_note
    assert "still by the course's method" not in course.sizing_note
    document = yaml.safe_load((SCENARIOS / "contact-center.yaml").read_text())
    document["perf"].pop("sizing")
    path = tmp_path / "contact-center.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    planned = api.plan_in_context(path)
    (workload,) = planned.plan.workloads
    (assignment,) = workload.assignments
    assert assignment.provenance == OPEN_LOOP_PROVENANCE and assignment.point_rps_per_instance == pytest.approx(2.4, rel=0.01)
    assert assignment.rps_per_node < 2.4 and assignment.ttft_ms <= 3000
    assert sum(line.nodes for line in planned.plan.lines) == 14
    (check,) = simulate_plan(planned.plan, planned.scenario, planned.catalog, SimulationOptions(seeds=2, balancer="random"))
    assert check.verdict == "holds", check


def test_perf_answers_an_open_loop_query_of_a_model_without_architecture_with_its_rows_engine():
    """`planner perf --rate` on NeMo 43B: the row's engine at that rate (what a plan sizes it with), not the row's
    closed-loop figures; a rate beyond the row's engine is no answer, and says why."""
    from planner.perf.types import PerfQuery

    query = PerfQuery(model="nemo-43b-gpt", gpu="H100-SXM-80GB", isl=4667, osl=667, arrivals="poisson", rate_rps=2.2)
    answer = api.perf_point(query)
    assert answer.result.provenance == OPEN_LOOP_PROVENANCE and answer.result.request_throughput_rps == pytest.approx(2.2)
    assert answer.result.arrivals == "poisson" and answer.result.point_rps_per_instance == pytest.approx(2.4)
    assert answer.result.ttft_ms < 2606.0  # below the row's loaded TTFT at 92% of its rate
    slower = api.perf_point(PerfQuery(model="nemo-43b-gpt", gpu="H100-SXM-80GB", isl=4667, osl=667, arrivals="poisson",
                                      rate_rps=2.35))  # fmt: skip
    assert slower.result.ttft_ms > answer.result.ttft_ms
    beyond = api.perf_point(PerfQuery(model="nemo-43b-gpt", gpu="H100-SXM-80GB", isl=4667, osl=667, arrivals="poisson",
                                      rate_rps=3.0))  # fmt: skip
    assert beyond.result is None and "does not settle at 3 requests/s" in beyond.miss_reason


def test_plan_verify_simulates_the_split_the_plan_sizes_for_unless_told(cli_json):
    """`plan --verify` spreads each pool's requests at random (each instance's arrivals Poisson at its share, as the
    plan sizes it); `--balancer round-robin` is taken as asked; each check says which it ran."""
    default = cli_json("plan", str(SCENARIOS / "chat-and-code-p95.yaml"), "--verify")
    assert {w["balancer"] for w in default["verification"]["workloads"]} == {"random"}
    asked = cli_json("plan", str(SCENARIOS / "chat-and-code-p95.yaml"), "--verify", "--balancer", "round-robin")
    assert {w["balancer"] for w in asked["verification"]["workloads"]} == {"round-robin"}


def test_check_judges_a_row_engine_by_a_band_it_says_is_a_choice():
    """`planner check` on a pool of a row's engine sized for random arrivals: its latencies are the fitted engine's,
    not the row's, so the band is said to be the planner's tolerance, with no measured error behind it."""
    from planner.bench.check import _band
    from planner.bench.loads import MEASURED_BAND
    from planner.perf.types import PerfQuery

    answer = api.perf_point(PerfQuery(model="nemo-43b-gpt", gpu="H100-SXM-80GB", isl=4667, osl=667, arrivals="poisson",
                                      rate_rps=2.2)).result  # fmt: skip
    band, why = _band(answer, "ttft_ms", within_rows=True)
    assert band == MEASURED_BAND and OPEN_LOOP_PROVENANCE in why and "has not been measured" in why
