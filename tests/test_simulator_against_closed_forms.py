"""The vLLM-like engine by hand; queues against closed forms (M/D/1 exact, M/D/c, Erlang C); Little's law against
the engines' own counts; balancers; verdicts on plans; traces; --repair."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from helpers import REAL_DIR, SCENARIOS
from scipy import stats as scipy_stats

from planner.simulate import (
    FixedSteps,
    Requests,
    ServingEngine,
    gamma_arrivals,
    poisson_arrivals,
    run,
    run_statistics,
    saturated_rps,
)

REAL_TRACES = REAL_DIR / "traces"


def requests_at(times, isl=100, osl=5) -> Requests:
    times = np.asarray(times, dtype=float)
    return Requests(times, np.full(len(times), isl), np.full(len(times), osl))


# ------------------------------------------------------------------------------------------- by hand
def test_one_request_by_hand():
    # prefill alone: 10 + 0.1 x 100 = 20 ms -> first token at 20 ms; 4 decode steps of 5 ms -> 40 ms
    reqs = run([ServingEngine(FixedSteps(10.0, 0.1, 5.0), max_batch=8)], requests_at([0.0]))
    assert reqs.first_token_s[0] == pytest.approx(0.020)
    assert reqs.finish_s[0] == pytest.approx(0.040)
    assert reqs.admitted_s[0] == 0.0


def test_chunked_prefill_by_hand():
    # budget 50 tokens: the 100-token prompt takes two iterations of 10 + 0.1 x 50 = 15 ms -> first token at 30 ms
    reqs = run([ServingEngine(FixedSteps(10.0, 0.1, 5.0), max_batch=8, token_budget=50)], requests_at([0.0]))
    assert reqs.first_token_s[0] == pytest.approx(0.030)
    assert reqs.finish_s[0] == pytest.approx(0.050)


def test_a_prompt_joins_a_decode_iteration_by_hand():
    # r0 alone 0-20 ms; r1 (5 ms) is prefilled in the next iteration with r0's decode: 5 + 0.1 x 100 = 15 ms -> 35 ms
    engine = ServingEngine(FixedSteps(10.0, 0.1, 5.0), max_batch=8)
    reqs = run([engine], requests_at([0.0, 0.005]))
    assert reqs.first_token_s.tolist() == pytest.approx([0.020, 0.035])
    # r0: tokens at 20, 35, 40, 45, 50 ms; r1: 35, 40, 45, 50, 55
    assert reqs.finish_s.tolist() == pytest.approx([0.050, 0.055])
    end, gap_ms, tokens = engine.gaps
    assert gap_ms[0] == pytest.approx(15.0) and tokens[0] == 1  # r0 waited 15 ms for its second token


def test_preemption_frees_the_cache_and_recomputes():
    # 60 KV tokens; two 20-token prompts generating 20 each: both fit at first, the cache fills while decoding, the
    # later one is preempted, recomputed (prompt + what it generated) once the first is done, and both finish
    engine = ServingEngine(FixedSteps(1.0, 0.01, 1.0), max_batch=8, kv_tokens=60)
    reqs = run([engine], requests_at([0.0, 0.0], isl=20, osl=20))
    assert engine.preemptions >= 1
    assert not np.isnan(reqs.finish_s).any()
    assert reqs.finish_s[1] > reqs.finish_s[0]
    _, gap_ms, _ = engine.gaps
    assert gap_ms.max() > 5.0  # the preempted request's gap spans its wait and recompute


def test_a_prompt_larger_than_the_cache_is_refused():
    engine = ServingEngine(FixedSteps(1.0, 0.01, 1.0), max_batch=8, kv_tokens=50)
    reqs = run([engine], requests_at([0.0, 0.1], isl=100, osl=5))
    assert reqs.rejected.tolist() == [True, True] and np.isnan(reqs.finish_s).all()
    stats = run_statistics(reqs, [], (0.0, 1.0))
    assert stats.rejected == 2 and stats.completed == 0


def test_chunked_prefill_bounds_the_token_gaps_of_decoders():
    # 20 decoders running when a 32k-token prompt arrives: prefilled whole it stalls them for its whole prefill;
    # chunked (budget 2048) each gap carries at most a chunk
    gaps = {}
    for budget in (2048, 1_000_000):
        engine = ServingEngine(FixedSteps(5.0, 0.02, 10.0, 0.1), max_batch=64, token_budget=budget)
        times = [0.0] * 20 + [0.5]
        reqs = Requests(np.array(times), np.array([200] * 20 + [32_000]), np.array([400] * 20 + [10]))
        run([engine], reqs)
        gaps[budget] = engine.gaps[1].max()
    assert gaps[1_000_000] > 600  # 32,000 x 0.02 ms in one iteration
    assert gaps[2048] < 60


# ------------------------------------------------------------------------------------------- closed forms
def _queue_waits(servers: int, rho: float, osl_sampler, seeds=(1, 2, 3), duration_s=3000.0) -> float:
    """Mean wait for a seat of a ServingEngine with `servers` seats, 1 ms per iteration, no prefill cost: service =
    OSL ms exactly (the prompt's iteration is its first token)."""
    waits = []
    mean_service_s = 0.1
    rate = rho * servers / mean_service_s
    for seed in seeds:
        rng = np.random.default_rng(seed)
        arrivals = poisson_arrivals(rate, duration_s, rng)
        reqs = Requests(arrivals, np.ones(len(arrivals)), osl_sampler(rng, len(arrivals)))
        run([ServingEngine(FixedSteps(1.0, 0.0, 1.0), max_batch=servers)], reqs)
        keep = arrivals > duration_s * 0.1
        waits.append(float(np.mean(reqs.admitted_s[keep] - arrivals[keep])))
    return float(np.mean(waits))


def erlang_c_wait_s(servers: int, rho: float, mean_service_s: float) -> float:
    a = rho * servers
    top = a**servers / math.factorial(servers) / (1 - rho)
    p_wait = top / (sum(a**k / math.factorial(k) for k in range(servers)) + top)
    return p_wait * mean_service_s / (servers * (1 - rho))


def test_m_d_1_wait_is_pollaczek_khinchine():
    # M/D/1: Wq = rho D / (2 (1 - rho)), exact
    for rho in (0.5, 0.8):
        simulated = _queue_waits(1, rho, lambda rng, n: np.full(n, 100), duration_s=12_000)
        assert simulated == pytest.approx(rho * 0.1 / (2 * (1 - rho)), rel=0.05)


def test_m_d_c_wait_matches_cosmetatos():
    # M/D/c: Wq = Wq(M/M/c) / 2 x [1 + (1 - rho)(c - 1)(sqrt(4 + 5c) - 2) / (16 rho c)] (Cosmetatos 1976, ~1% accurate)
    for servers, rho in ((4, 0.8), (8, 0.85)):
        correction = 1 + (1 - rho) * (servers - 1) * (math.sqrt(4 + 5 * servers) - 2) / (16 * rho * servers)
        expected = erlang_c_wait_s(servers, rho, 0.1) / 2 * correction
        assert _queue_waits(servers, rho, lambda rng, n: np.full(n, 100)) == pytest.approx(expected, rel=0.05)


def test_m_m_c_wait_is_erlang_c():
    # geometric OSL of mean 100 tokens at 1 ms per token: exponential service of mean 100 ms (CV^2 = 0.99)
    for servers, rho in ((2, 0.8), (8, 0.85)):
        simulated = _queue_waits(servers, rho, lambda rng, n: rng.geometric(0.01, n), seeds=(1, 2, 3, 4))
        assert simulated == pytest.approx(erlang_c_wait_s(servers, rho, 0.1), rel=0.05)


def test_little_law_against_the_engine_count_at_arrivals():
    # L from the requests' own intervals (time average) = lambda W, and = what Poisson arrivals see in the engine
    # (PASTA): the engine's bookkeeping and the timestamps agree
    rng = np.random.default_rng(11)
    arrivals = poisson_arrivals(30, 2000, rng)
    reqs = Requests(arrivals, rng.integers(100, 800, len(arrivals)), rng.integers(20, 200, len(arrivals)))
    engine = ServingEngine(FixedSteps(3.0, 0.01, 8.0, 0.05), max_batch=48, kv_tokens=20_000)
    run([engine], reqs)
    window = (200.0, 2000.0)
    stats = run_statistics(reqs, [engine.gaps], window)
    arriving = (arrivals >= window[0]) & (arrivals < window[1])
    little = arriving.sum() / (window[1] - window[0]) * stats.e2e_ms.mean / 1e3
    assert stats.mean_in_system == pytest.approx(little, rel=0.03)
    waits = (reqs.admitted_s - arrivals)[arriving]
    rate = arriving.sum() / (window[1] - window[0])
    assert stats.mean_queue_length == pytest.approx(rate * waits.mean(), rel=0.05)  # Little's law for the queue
    seen = np.array(engine.samples)[arriving]  # submit order = arrival order on one engine
    assert stats.mean_in_system == pytest.approx(seen.mean(), rel=0.05)
    assert stats.throughput_rps == pytest.approx(arriving.sum() / (window[1] - window[0]), rel=0.03)


def test_throughput_counts_completions_not_arrivals():
    from planner.simulate.steps import FixedSteps as Steps

    steps = Steps(1.0, 0.0, 10.0)
    capacity = saturated_rps(steps, 8, 1, 100)  # 8 seats x 100 tokens x 10 ms: 8 rps
    rng = np.random.default_rng(2)
    arrivals = poisson_arrivals(16, 600, rng)
    reqs = Requests(arrivals, np.ones(len(arrivals)), np.full(len(arrivals), 100))
    run([ServingEngine(steps, max_batch=8)], reqs)
    stats = run_statistics(reqs, [], (60.0, 600.0))
    assert stats.throughput_rps == pytest.approx(capacity, rel=0.03)
    assert stats.throughput_rps < 0.6 * len(arrivals) / 600  # half the offered rate is not served


def test_saturated_rps_matches_a_saturated_roofline_engine():
    # the closed form that calibrates measured points, against the engine kept full (arrivals at 3x)
    from planner.api import plan_in_context
    from planner.simulate import engine_setup

    planned = plan_in_context(SCENARIOS / "llama3-8b-assistant.yaml")
    route = planned.plan.routing[0]
    (assignment,) = planned.plan.workloads[0].assignments
    setup = engine_setup(route, assignment, 1, 1.0, planned.catalog)
    target = route.rps_per_node / setup.count
    rng = np.random.default_rng(4)
    arrivals = poisson_arrivals(3 * target, 900, rng)
    reqs = Requests(arrivals, np.full(len(arrivals), route.bucket_isl), np.full(len(arrivals), route.bucket_osl))
    run([ServingEngine(setup.steps, setup.max_batch, setup.kv_tokens)], reqs)
    assert run_statistics(reqs, [], (300.0, 900.0)).throughput_rps == pytest.approx(target, rel=0.05)


def test_slo_attainment_is_the_share_within_every_limit():
    from types import SimpleNamespace

    rng = np.random.default_rng(12)
    arrivals = poisson_arrivals(20, 900, rng)
    reqs = Requests(arrivals, rng.integers(100, 2000, len(arrivals)), rng.integers(10, 300, len(arrivals)))
    run([ServingEngine(FixedSteps(3.0, 0.01, 8.0, 0.05), max_batch=32)], reqs)
    inside = (arrivals >= 90) & (arrivals < 900)
    ttft = (reqs.first_token_s - arrivals)[inside] * 1e3
    e2e = (reqs.finish_s - arrivals)[inside] * 1e3
    slo = SimpleNamespace(ttft_ms=float(np.percentile(ttft, 70)), itl_ms=None, e2e_ms=float(np.percentile(e2e, 60)))
    stats = run_statistics(reqs, [], (90.0, 900.0), slo=slo)
    expected = float(np.mean((ttft <= slo.ttft_ms) & (e2e <= slo.e2e_ms)))
    assert 0.05 < expected < 0.95  # both outcomes occur: the check can tell
    assert stats.slo_attainment == pytest.approx(expected)


def test_lognormal_lengths_keep_the_mean_and_spread_within_the_cap():
    from planner.simulate import lognormal_lengths

    values = lognormal_lengths(1000, 0.5, 200_000, 1_000_000, np.random.default_rng(3))
    assert values.mean() == pytest.approx(1000, rel=0.01)
    assert values.std() / values.mean() == pytest.approx(0.5, rel=0.03)
    capped = lognormal_lengths(1000, 0.5, 10_000, 1200, np.random.default_rng(3))
    assert capped.max() == 1200 and capped.min() >= 1
    assert (lognormal_lengths(1000, 0.0, 5, 4096, np.random.default_rng(3)) == 1000).all()


def test_gamma_arrivals_have_the_requested_rate_and_burstiness():
    for cv in (0.5, 1.0, 2.0):
        times = gamma_arrivals(50, 4000, cv, np.random.default_rng(5))
        gaps = np.diff(times)
        assert len(times) / 4000 == pytest.approx(50, rel=0.03)
        assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)


# ------------------------------------------------------------------------------------------- balancers
def test_power_of_two_does_not_herd_where_least_outstanding_does():
    # identical requests at 85% load on 8 engines: least-outstanding sends bursts to engines that finished
    # together; power-of-two spreads them
    steps = FixedSteps(2.0, 0.05, 10.0, 0.05)
    capacity = 8 * saturated_rps(steps, 16, 1000, 100)
    arrivals = poisson_arrivals(0.85 * capacity, 1200, np.random.default_rng(7))
    p99 = {}
    for balancer in ("power-of-two", "least-outstanding", "least-tokens", "round-robin"):
        reqs = Requests(arrivals, np.full(len(arrivals), 1000), np.full(len(arrivals), 100))
        run([ServingEngine(steps, 16) for _ in range(8)], reqs, balancer)
        stats = run_statistics(reqs, [], (120.0, 1200.0))
        assert stats.completed == stats.requests
        p99[balancer] = stats.ttft_ms.p99
    assert p99["power-of-two"] < p99["least-outstanding"]


@pytest.mark.parametrize("speculation", [False, True])
def test_round_robin_on_several_processes_gives_the_same_bytes(monkeypatch, speculation):
    """Round-robin's engines never look at each other: forked, each runs its share alone, and every request's
    times, every gap, preemption and rejection come back as one process computes them (speculative engines draw
    their accepted tokens from their own seeds). The KV cache is small enough to preempt and to refuse prompts."""
    from planner.perf.roofline import Speculation

    rng = np.random.default_rng(5)
    n = 24_000
    arrivals = np.sort(rng.uniform(0, 600, n))
    isl = rng.integers(1, 3000, n)
    osl = rng.integers(1, 300, n)
    steps = FixedSteps(2.0, 0.01, 8.0, 0.02)
    spec = Speculation("mtp", 2, 0.7) if speculation else None
    results = []
    for workers in ("1", "2"):
        monkeypatch.setenv("PLANNER_WORKERS", workers)
        reqs = Requests(arrivals, isl, osl)
        kv_tokens = 2_900  # preempts and refuses (speculative sequences resume with no fewer tokens than they had)
        engines = [ServingEngine(steps, 24, kv_tokens, 1024, 3.0, speculation=spec, seed=[1, k]) for k in range(4)]
        run(engines, reqs, "round-robin")
        results.append((reqs.admitted_s.tobytes(), reqs.first_token_s.tobytes(), reqs.finish_s.tobytes(),
                        reqs.rejected.tobytes(), [(e.gaps[1].tobytes(), e.preemptions, e.samples) for e in engines]))
    assert results[0] == results[1]
    assert np.isfinite(np.frombuffer(results[0][2])).sum() > n / 2


def test_a_random_split_feeds_each_engine_poisson_arrivals_and_round_robin_smoother_ones():
    """Random: each of 3 one-seat engines (100 ms each request) is an M/D/1 queue at a third of the rate, its mean
    wait Pollaczek-Khinchine's; round-robin hands each every third arrival (Erlang-3 gaps): far shorter waits. The
    performance model prices an instance for Poisson arrivals: the random split is what it assumes."""
    rho, service_s, engines = 0.8, 0.1, 3
    rate = rho * engines / service_s
    waits = {}
    for balancer in ("random", "round-robin"):
        means = []
        for seed in (1, 2, 3):
            rng = np.random.default_rng(seed)
            arrivals = poisson_arrivals(rate, 8000.0, rng)
            reqs = Requests(arrivals, np.ones(len(arrivals)), np.full(len(arrivals), 100))
            run([ServingEngine(FixedSteps(1.0, 0.0, 1.0), max_batch=1) for _ in range(engines)], reqs, balancer, seed)
            keep = arrivals > 800.0
            means.append(float(np.mean(reqs.admitted_s[keep] - arrivals[keep])))
        waits[balancer] = float(np.mean(means))
    assert waits["random"] == pytest.approx(rho * service_s / (2 * (1 - rho)), rel=0.06)
    assert waits["round-robin"] < 0.5 * waits["random"]


def test_least_loaded_picks_the_emptiest_engine():
    # 3 engines; a long request on engine 0 and 1 each: the third request goes to the idle engine 2
    steps = FixedSteps(1.0, 0.0, 10.0)
    engines = [ServingEngine(steps, 4) for _ in range(3)]
    reqs = Requests(np.array([0.0, 0.001, 0.002]), np.ones(3), np.array([1000, 1000, 5]))
    run(engines, reqs, "least-tokens")
    assert [e.outstanding() for e in engines] == [0, 0, 0]
    assert [len(e.samples) for e in engines] == [1, 1, 1]


# ------------------------------------------------------------------------------------------- plans
@pytest.fixture(scope="module")
def contact_center():
    from planner.api import plan_in_context

    return plan_in_context(SCENARIOS / "contact-center.yaml")


def test_every_shipped_plan_can_be_simulated():
    from planner.api import plan_in_context
    from planner.simulate import SimulationOptions, simulate_plan

    for path in sorted(SCENARIOS.glob("*.yaml")):
        planned = plan_in_context(path)
        checks = simulate_plan(planned.plan, planned.scenario, planned.catalog, SimulationOptions(duration_s=120))
        assert checks, path
        for check in checks:  # every route, disaggregated pools included (issue 32): nothing is "not simulated"
            assert check.verdict != "not simulated", (path, check.workload, check.engines)
            assert check.stats is not None and check.stats.completed > 0, (path, check.workload, check.engines)
            assert check.checks, (path, check.workload)


def test_measured_point_engines_respond_to_load(contact_center):
    # at 10% of the measured rate the queue is empty: TTFT is a prefill, far below the point's loaded 2,606 ms
    import dataclasses

    from planner.simulate import SimulationOptions, simulate_plan

    plan = contact_center.plan
    light = dataclasses.replace(plan, routing=tuple(dataclasses.replace(r, rps=r.rps / 10) for r in plan.routing))
    (check,) = simulate_plan(light, contact_center.scenario, contact_center.catalog, SimulationOptions(duration_s=600))
    assert check.stats.ttft_ms.p50 < 500
    assert check.stats.mean_queue_length < 0.1  # waits of one iteration at most


def test_the_seeds_13_dgx_h100_need_more_seeds_and_repair_adds_nothing(contact_center):
    """At 99.4% load one run's interval straddles the 3 s TTFT limit (the old verdict called that a miss and bought a
    fourteenth node): more seeds are run within the request budget and decide it (3 seeds of 9,600 s hold at about
    1.1 s, as 8 seeds of 9,600 s did in docs/simulation.md; it is never a miss), and repair, which acts on
    conclusive misses only, keeps 13 nodes."""
    from planner.repair import repair_plan
    from planner.simulate import SimulationOptions, simulate_plan
    from planner.api import solve_scenario

    catalog = contact_center.catalog
    options = SimulationOptions()
    (check,) = simulate_plan(contact_center.plan, contact_center.scenario, catalog, options)
    assert check.instances == 13 and check.verdict in ("holds", "inconclusive")
    assert check.duration_s > 600  # the settling loop ran longer than the old fixed 600 s
    assert check.seeds > 1 and check.extra_seeds == check.seeds - 1 and "straddled the TTFT limit" in check.seeds_note
    (ttft,) = check.checks
    assert ttft.verdict == check.verdict and ttft.ci_low_ms < 3000
    repaired = repair_plan(contact_center.plan, contact_center.scenario, catalog,
                           lambda p, s: simulate_plan(p, s, catalog, options), lambda s: solve_scenario(s, catalog))  # fmt: skip
    assert repaired.original_nodes == 13 and repaired.plan.totals.nodes_by_system == {"dgx-h100": 13}
    assert not repaired.steps


def test_same_seed_same_verdict_bytes(cli):
    args = ("simulate", SCENARIOS / "chat-and-summarize.yaml", "--duration", "60", "--json", "--seed")
    outputs = [cli(*args, "3")[1] for _ in range(2)]
    assert outputs[0] == outputs[1]
    other = json.loads(cli(*args, "4")[1])
    assert other["workloads"][0]["stats"] != json.loads(outputs[0])["workloads"][0]["stats"]


def test_seeds_pool_and_count_passes(cli):
    code, out, err = cli("simulate", SCENARIOS / "chat-and-summarize.yaml", "--duration", "60", "--seeds", "3", "--json")
    assert code == 0, err
    for item in json.loads(out)["workloads"]:
        assert item["seeds"] == 3
        for check in item["checks"]:
            assert 0 <= check["seeds_passed"] <= 3
            assert check["ci_low_ms"] <= check["simulated_ms"] * 1.5


def test_repair_needs_verify(cli):
    code, _, err = cli("plan", SCENARIOS / "contact-center.yaml", "--repair")
    assert code == 2 and "--verify" in err


def test_a_balancer_for_the_plan_needs_verify(cli):
    code, out, err = cli("plan", SCENARIOS / "contact-center.yaml", "--balancer", "random")
    assert code == 2 and "--balancer" in err and "--verify" in err and not out


@pytest.mark.skipif(not (REAL_TRACES / "AzureLLMInferenceTrace_conv.csv").exists(), reason="../shared/real traces absent")
def test_a_real_trace_replays_on_the_plan(cli):
    trace = REAL_TRACES / "AzureLLMInferenceTrace_conv.csv"
    code, out, err = cli("simulate", SCENARIOS / "chat-and-summarize.yaml", "--trace", trace, "--workload", "chat", "--json")
    assert code == 0, err
    (item,) = json.loads(out)["workloads"]
    assert item["workload"] == "chat" and "trace" in item["note"]
    from planner.traces import load_trace

    loaded = load_trace(trace)
    assert item["requests_simulated"] == loaded.requests
    assert item["rate_rps"] == pytest.approx(loaded.requests / loaded.duration_s)
    stats = item["stats"]
    assert stats["completed"] > 0 and stats["completed"] + stats["rejected"] == stats["requests"]


def test_a_trace_of_an_unknown_workload_is_refused(cli, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,input_tokens,output_tokens\n0,100,10\n1,200,20\n")
    code, _, err = cli("simulate", SCENARIOS / "chat-and-summarize.yaml", "--trace", trace, "--workload", "nope")
    assert code == 2 and "nope" in err and "chat" in err
    code, _, err = cli("simulate", SCENARIOS / "chat-and-summarize.yaml", "--trace", trace)
    assert code == 2 and "several workloads" in err


def test_erlang_helper_is_right():
    # the reference itself against a textbook value: M/M/2 at rho 0.5 waits with probability 1/3
    assert erlang_c_wait_s(2, 0.5, 1.0) == pytest.approx((1 / 3) / (2 * 0.5))
    assert scipy_stats.poisson.mean(3) == 3


def test_prompt_tokens_left_returns_to_zero_through_preemptions_and_caches():
    """The count a new prompt waits behind (ServingEngine.prompt_tokens_left) is kept incrementally: after any run,
    with chunked prompts, cached prefixes, a KV cache small enough to preempt and prompts it refuses, it is 0."""
    rng = np.random.default_rng(11)
    steps = FixedSteps(2.0, 0.01, 10.0, 0.05)
    for kv_tokens in (None, 6_000, 2_500):
        n = 3000
        isl = rng.integers(1, 3000, n)
        requests = Requests(np.sort(rng.uniform(0, 300, n)), isl, rng.integers(1, 400, n),
                            np.where(rng.uniform(size=n) < 0.5, np.minimum(isl - 1, 800), 0))  # fmt: skip
        engines = [ServingEngine(steps, 32, kv_tokens, 512) for _ in range(3)]
        run(engines, requests, "least-wait")
        assert all(e.prompt_tokens_left == 0 for e in engines), [e.prompt_tokens_left for e in engines]
        if kv_tokens == 2_500:
            assert sum(e.preemptions for e in engines) > 0 and requests.rejected.any()


def test_expected_wait_is_the_step_in_progress_and_the_prompts_ahead():
    steps = FixedSteps(5.0, 0.1, 20.0)
    engine = ServingEngine(steps, 2)
    requests = Requests(np.array([0.0, 0.0, 0.0]), np.array([100, 100, 100]), np.array([50, 50, 50]))
    assert engine.expected_wait_ms(0.0) == 0.0  # an idle engine
    from planner.simulate.engines import Book

    engine.book = Book(requests)
    for i in range(3):
        engine.submit(i)
    assert engine.expected_wait_ms(0.0) == pytest.approx(steps.fused_work_ms(300))  # three prompts ahead
    engine.advance_to(1e-6)  # the first step starts: two prompts in it (two seats), one waiting for a seat
    assert engine.clock > 0 and engine.prompt_tokens_left == 100
    wait = engine.expected_wait_ms(1e-6)
    assert wait > (engine.clock - 1e-6) * 1e3 + steps.fused_work_ms(100)  # and the seat it waits for


@pytest.mark.parametrize("scenario", ["chat-and-summarize", "contact-center", "chat-and-code-p95"])
def test_least_wait_is_no_worse_than_round_robin_on_shipped_plans(scenario):
    """Issue 32: a balancer that looks at the engines spreads load at least as well as round-robin. With identical
    requests (the default --length-cv 0) round-robin is close to optimal (each engine sees arrivals every n-th
    one); least-wait, which sends each request where it would wait least, matches or beats it on every limit.
    chat-and-code-p95 with fp4 asked for: the plan of issue 32 (its quality-keeping default since issue 34, code on
    4 TP1 fp8 engines, has least-wait's code ITL P95 1.6% above round-robin's, 20.68 vs 20.35 ms)."""
    from planner.api import plan_in_context
    from planner.scenario import ScenarioOverrides
    from planner.simulate import SimulationOptions, simulate_plan

    overrides = ScenarioOverrides(precisions=("fp4",)) if scenario == "chat-and-code-p95" else None
    planned = plan_in_context(SCENARIOS / f"{scenario}.yaml", overrides=overrides)
    figures = {}
    for balancer in ("round-robin", "least-wait"):
        for seed in range(3):
            for check in simulate_plan(planned.plan, planned.scenario, planned.catalog,
                                       SimulationOptions(balancer=balancer, seed=seed, duration_s=600)):  # fmt: skip
                for limit in check.checks:
                    figures.setdefault((balancer, check.workload, limit.metric), []).append(limit.simulated_ms)
    worse = {key[1:]: (np.mean(figures[("round-robin", *key[1:])]), np.mean(v)) for key, v in figures.items()
             if key[0] == "least-wait" and np.mean(v) > 1.01 * np.mean(figures[("round-robin", *key[1:])])}  # fmt: skip
    assert not worse, worse


def test_a_preempted_speculative_sequence_never_loses_tokens():
    """A speculative engine draws how many steps a sequence takes; its tokens at a preemption are estimated at the
    mean rate. Each time it is preempted again it keeps at least what it had when it last ran again, so every
    preemption moves it on (the estimate alone went backwards after an unlucky draw: more preemptions, and a cache
    barely above one sequence could thrash). The tokens it is resumed with only grow, request by request."""
    from planner.perf.roofline import Speculation

    history: dict[int, list[int]] = {}

    class Watched(ServingEngine):
        def _preempt_for_decode(self):
            before = dict(self.resume)
            super()._preempt_for_decode()
            for request, (generated, _) in self.resume.items():
                if before.get(request) != self.resume[request]:
                    history.setdefault(request, []).append(generated)

    rng = np.random.default_rng(5)
    n = 400
    reqs = Requests(np.sort(rng.uniform(0, 5, n)), np.full(n, 500), np.full(n, 400))
    engine = Watched(FixedSteps(2.0, 0.01, 8.0, 0.02), 24, 1400, 1024, 3.0, speculation=Speculation("mtp", 3, 0.5), seed=[1, 0])
    run([engine], reqs, "round-robin")
    assert engine.preemptions > 100 and np.isfinite(reqs.finish_s).all()
    again = [counts for counts in history.values() if len(counts) > 1]
    assert len(again) > 20
    assert all(b > a for counts in again for a, b in zip(counts, counts[1:])), again[:5]
