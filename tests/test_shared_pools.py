"""Configurations shared by several workloads are simulated as the deployment runs them: every route's requests go to
all the instances of its configuration, mixed with the other workloads' there (one pool per connected component of
workloads and configurations), and each workload is judged on its own requests and its own token gaps (per-class
gap accounting in `ServingEngine`). A configuration used by one workload gives exactly the results of before."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import SCENARIOS

from planner.plan import Route, configuration_key
from planner.scenario import Slo
from planner.simulate import FixedSteps, Requests, ServingEngine, SimulationOptions, run, simulate_plan
from planner.simulate.pools import Group as _Group, Pool as _Pool, RouteRun as _RouteRun, run_pool_once
from planner.simulate.setups import EngineSetup
from planner.simulate.settling import simulate_pool
from planner.simulate.verdicts import HOLDS, INCONCLUSIVE, MISSES
from planner.simulate.verify import _pools


def _toy_route(rps: float, isl: int, osl: int) -> SimpleNamespace:
    return SimpleNamespace(rps=rps, bucket_isl=isl, bucket_osl=osl, engine_isl=4 * isl, engine_osl=4 * osl)


def _toy_pool(setup: EngineSetup, slos=(Slo(ttft_ms=1e6), Slo(ttft_ms=1e6))) -> _Pool:
    """chat (short prompts, 40 rps) and code (long prompts, 10 rps) on the same engines."""
    routes = (_toy_route(40.0, 200, 20), _toy_route(10.0, 1000, 50))
    specs = tuple(SimpleNamespace(name=name, slo=slo, buckets=()) for name, slo in zip(("chat", "code"), slos))
    return _Pool(tuple(_RouteRun(r, setup) for r in routes), (0, 1), (_Group(setup, (0, 1)),), specs, (40.0, 10.0))


# ------------------------------------------------------------------------------------------- (1) a shared pool
def test_a_shared_pool_gives_each_workload_its_own_requests_and_gaps():
    setup = EngineSetup(FixedSteps(5.0, 0.01, 4.0, 0.05), 16, None, 3, "toy")
    pool = _toy_pool(setup)
    (chat, chat_gaps, _), (code, code_gaps, _) = run_pool_once(pool, 120.0, 7, SimulationOptions())
    # each workload has its own requests, at its own lengths and rate, all served
    assert set(chat.isl.tolist()) == {200} and set(chat.osl.tolist()) == {20}
    assert set(code.isl.tolist()) == {1000} and set(code.osl.tolist()) == {50}
    assert len(chat) == pytest.approx(40 * 120, rel=0.1) and len(code) == pytest.approx(10 * 120, rel=0.2)
    assert not np.isnan(chat.finish_s).any() and not np.isnan(code.finish_s).any()
    # its gaps on every engine of the configuration (3), each token after a request's first exactly once
    assert len(chat_gaps) == len(code_gaps) == 3
    chat_tokens = sum(g[2].sum() for g in chat_gaps)
    code_tokens = sum(g[2].sum() for g in code_gaps)
    assert chat_tokens == (chat.osl - 1).sum() and code_tokens == (code.osl - 1).sum()
    assert all(len(g[0]) for g in chat_gaps + code_gaps)  # both workloads ran on all three engines

    # the same requests mixed on engines that keep no classes: the same times, and the run's gap tokens are the sum
    mixed = Requests.merged([chat, code])
    tagged = Requests(mixed.arrival_s, mixed.isl, mixed.osl)
    plain = Requests(mixed.arrival_s, mixed.isl, mixed.osl)
    classes = (tagged.isl == 1000).astype(int).tolist()
    engines = [ServingEngine(setup.steps, setup.max_batch, setup.kv_tokens, 8192, classes=classes) for _ in range(3)]
    run(engines, tagged, seed=7)
    run([ServingEngine(setup.steps, setup.max_batch, setup.kv_tokens, 8192) for _ in range(3)], plain, seed=7)
    assert np.array_equal(tagged.finish_s, plain.finish_s) and np.array_equal(tagged.first_token_s, plain.first_token_s)
    total = sum(e.gaps[2].sum() for e in engines)
    per_class = [sum(e.class_gaps(c)[2].sum() for e in engines) for c in (0, 1)]
    assert per_class[0] + per_class[1] == total == (tagged.osl - 1).sum()

    # through simulate_pool: each workload's statistics and requests are its own
    runs = simulate_pool(pool, SimulationOptions(duration_s=120.0, seed=7))
    assert [r.requests_simulated for r in runs] == [len(chat), len(code)]
    assert runs[0].stats.requests < len(chat) and runs[1].stats.requests < len(code)  # the warm-up is cut per workload
    assert runs[1].stats.ttft_ms.p50 > runs[0].stats.ttft_ms.p50  # a 1000-token prompt takes longer than 200


def test_pools_are_connected_components_of_workloads_and_configurations():
    def route(workload: str, tp: int, rps: float = 1.0, period: str = "day") -> Route:
        return Route(period, workload, 100, 10, "on-prem", "bought", "dgx-h100", "llama-3.1-8b", tp, "fp8", 64, 1000,
                     100, rps, 10.0, 5.0)  # fmt: skip

    routing = [route("x", 1), route("x", 2), route("y", 2), route("z", 4), route("w", 4, rps=0.0), route("y", 1, period="night")]
    jobs = []
    for period in ("day", "night"):
        routes = [r for r in routing if r.period == period]
        for name in "xyzw":
            mine = [r for r in routes if r.workload == name]
            if mine:
                jobs.append((period, SimpleNamespace(name=name), mine, routes))
    pools = [[(job[0], job[1].name) for job in pool] for pool in _pools(jobs)]
    # x on TP1 and TP2, y on TP2: one pool; z alone on TP4 (w's route there carries nothing); night apart
    assert pools == [[("day", "x"), ("day", "y")], [("day", "z")], [("day", "w")], [("night", "y")]]
    assert configuration_key(routing[1]) == configuration_key(routing[2])


# ------------------------------------------------------------------------------------------- (2) chat and code at P90
def test_chat_and_code_at_p90_runs_on_the_whole_shared_pool(tmp_path, monkeypatch):
    """The plan runs both workloads on 4 TP1 fp4 instances (chat keeps ~2.1 of them busy, code ~1.6). Split by
    share, chat had 2 engines and missed ITL P90 (53.7 ms, 95% 53.6-53.9, vs 50 ms); on the whole pool it holds.
    fp4 asked for (--precisions fp4): since issue 34 a workload without `precisions:` is planned at bf16/fp8 only.
    The routes as the integer program leaves them: balanced (planner/optimize/balance.py), chat moves to the 2 TP2
    instances the program ran idle on the node's other 4 GPUs and code keeps the TP1 ones (38.5% busy each; ITL P90
    chat 11.6 ms, code 14.1 ms), so no pool is shared but by a sliver of code; a saved or edited plan still can."""
    from planner.api import plan_in_context
    from planner.scenario import ScenarioOverrides

    monkeypatch.setattr("planner.optimize.balance_routing", lambda *args: ())

    text = (SCENARIOS / "chat-and-code-p95.yaml").read_text()
    assert text.count("percentile: 95") == 2
    path = tmp_path / "chat-and-code-p90.yaml"
    path.write_text(text.replace("percentile: 95", "percentile: 90"))
    planned = plan_in_context(path, overrides=ScenarioOverrides(precisions=("fp4",)))
    plan = planned.plan
    (key,) = {configuration_key(r) for r in plan.routing}  # one configuration serves both workloads
    running = sum(a.instances for a in plan.instances if configuration_key(a) == key)
    chat, code = simulate_plan(plan, planned.scenario, planned.catalog, SimulationOptions(seeds=4))
    assert (chat.workload, code.workload) == ("chat", "code")
    for check, other in ((chat, "code"), (code, "chat")):
        assert check.instances == running == 4
        assert f"{running} x TP1 fp4 engines shared with {other}" in check.engines
    itl = next(c for c in chat.checks if c.metric == "ITL")
    assert itl.verdict == HOLDS and itl.ci_high_ms < 50.0
    assert chat.verdict != MISSES and code.verdict != MISSES
    # each workload is judged on its own requests: about 12 and 6 rps of them completed
    assert chat.stats.throughput_rps == pytest.approx(12.0, rel=0.05)
    assert code.stats.throughput_rps == pytest.approx(6.0, rel=0.05)


# ------------------------------------------------------------------------------------------- (3) unchanged alone
# planner.simulate before pools (the same code path, then the only one), chat-and-summarize, 60 s, 2 seeds from 3:
# (workload, instances, requests simulated, window requests, completed, TTFT P50, ITL P95, TPOT P99, E2E mean,
# preemptions, checks (metric, estimate, 95% low, high, verdict)). Recorded again with issue 29's open-loop plan
# (chat on 4 engines, not 3) and balancers that weigh the work left (docs/simulation.md): a regression pin since.
# Recorded again when fp4 weights got their block scales and bf16 embeddings (docs/perf-model.md, "Precisions"): the
# B200 fp4 engines' steps are up to 2% longer, the same engines and requests. Recorded again when power-of-two
# compared the wait a new prompt would see instead of the work left (issue 32, planner/simulate/balance.py), and
# again when round-robin became the default balancer (issue 32: same requests, TTFT P50 34.9 -> 34.4 and 262 -> 260),
# and again when the engines took TensorRT-LLM's admission and per-rank limits (issue 45: same engines and requests,
# TTFT P50 34.4 -> 34.1 and 259.8 -> 259.2).
BEFORE = [
    ("chat", 4, 20445, 9203, 9203, 34.10119225868158, 16.2786839822792, 10.856108477913246, 1911.5620311638627, 0,
     (("TTFT", 34.47522889602084, 33.696092139498866, 35.24758184218328, "holds"),)),
    ("summarize", 8, 2415, 1091, 1091, 259.1788749321289, 235.72972842054125, 44.115289069638095, 18591.636343141756, 0,
     (("TTFT", 261.2558065039998, 257.02281552518116, 266.0202879059352, "holds"),
      ("TPOT", 41.60178819872874, 34.807021836177285, 45.7788795006208, "holds"))),
]  # fmt: skip
# (the runs and estimates are those of before pools; the intervals are the seeds' pooled batches since issue 48: the
# summarize TPOT's 2-seed interval across the seeds' estimates was 0-84.5 ms, inconclusive; since issue 48's item 5
# the batched quantile interval, the values' own percentiles at p -+ h: stats.quantile_interval)


def test_a_configuration_of_one_workload_gives_the_results_of_before():
    from planner.api import plan_in_context

    from planner.scenario import ScenarioOverrides

    # fp4 asked for: the plan these figures were recorded on (issue 34's default plans it at fp8)
    planned = plan_in_context(SCENARIOS / "chat-and-summarize.yaml", overrides=ScenarioOverrides(precisions=("fp4",)))
    checks = simulate_plan(planned.plan, planned.scenario, planned.catalog, SimulationOptions(duration_s=60, seeds=2, seed=3))
    for check, before in zip(checks, BEFORE, strict=True):
        s = check.stats
        now = (check.workload, check.instances, check.requests_simulated, s.requests, s.completed, s.ttft_ms.p50,
               s.itl_ms.p95, s.tpot_ms.p99, s.e2e_ms.mean, s.preemptions,
               tuple((c.metric, c.simulated_ms, c.ci_low_ms, c.ci_high_ms, c.verdict) for c in check.checks))  # fmt: skip
        assert now == before
        assert "shared" not in check.engines


# ------------------------------------------------------------------------------------------- (4) by hand
def test_per_class_gaps_by_hand():
    # FixedSteps: prefill 10 + 0.1/token, decode 5 ms at any batch. r0 (class 0, 100 in, 5 out) at 0 ms: first token
    # at 20 ms. r1 (class 1, 100 in, 3 out) at 5 ms is prefilled beside r0's decode: 5 + 10 = 15 ms, so r0's second
    # token and r1's first at 35 ms. Then both decode (40, 45 ms: r1 is done) and r0 alone (50 ms).
    requests = Requests(np.array([0.0, 0.005]), np.array([100, 100]), np.array([5, 3]))
    engine = ServingEngine(FixedSteps(10.0, 0.1, 5.0), max_batch=8, classes=[0, 1])
    run([engine], requests)
    assert requests.first_token_s.tolist() == pytest.approx([0.020, 0.035])
    assert requests.finish_s.tolist() == pytest.approx([0.050, 0.045])
    end, gap_ms, tokens = engine.gaps  # 35 ms: r0's 15 ms gap; 40-45 ms: one jump of 2 steps x 2; 50 ms: r0
    assert end.tolist() == pytest.approx([0.035, 0.045, 0.050])
    assert gap_ms.tolist() == pytest.approx([15.0, 5.0, 5.0]) and tokens.tolist() == [1, 4, 1]
    end0, ms0, tokens0 = engine.class_gaps(0)
    assert end0.tolist() == pytest.approx([0.035, 0.045, 0.050])
    assert ms0.tolist() == pytest.approx([15.0, 5.0, 5.0]) and tokens0.tolist() == [1, 2, 1]  # 4 = 5 - 1 gaps
    end1, ms1, tokens1 = engine.class_gaps(1)  # r1 only rode the jump: 2 = 3 - 1 gaps
    assert end1.tolist() == pytest.approx([0.045]) and ms1.tolist() == pytest.approx([5.0]) and tokens1.tolist() == [2]
    assert engine.class_running == [0, 0] and engine.class_preemptions == [0, 0]


def test_per_class_gaps_through_preemption():
    # the preemption case of test_simulator_against_closed_forms: the later sequence (class 1) is preempted, recomputed and finishes;
    # its resumed token's gap (its wait and recompute) is one token of class 1
    requests = Requests(np.zeros(2), np.full(2, 20), np.full(2, 20))
    engine = ServingEngine(FixedSteps(1.0, 0.01, 1.0), max_batch=8, kv_tokens=60, classes=[0, 1])
    run([engine], requests)
    assert engine.preemptions >= 1 and engine.class_preemptions == [0, engine.preemptions]
    _, gap_ms, tokens = engine.gaps
    _, ms0, tokens0 = engine.class_gaps(0)
    _, ms1, tokens1 = engine.class_gaps(1)
    assert tokens0.sum() == tokens1.sum() == 19 and tokens0.sum() + tokens1.sum() == tokens.sum()
    assert ms1.max() == gap_ms.max() > 5.0 and ms0.max() < 5.0  # the long gap is class 1's alone
    with pytest.raises(ValueError):
        ServingEngine(FixedSteps(1.0, 0.01, 1.0), max_batch=8).class_gaps(0)


# ------------------------------------------------------------------------------------------- seeds of a pool
def test_a_pool_runs_more_seeds_for_its_inconclusive_workload_and_says_so():
    setup = EngineSetup(FixedSteps(5.0, 0.01, 4.0, 0.05), 16, None, 2, "toy")
    options = SimulationOptions(max_duration_s=240.0)
    first = simulate_pool(_toy_pool(setup), options)
    chat_ttft = first[0].checks[0].simulated_ms
    assert first[0].extra_seeds == 0 and first[0].seeds_note == ""
    # chat's limit on its own estimate: inconclusive, so the pool runs more seeds; code's is far: it says why it has them
    chat, code = simulate_pool(_toy_pool(setup, (Slo(ttft_ms=chat_ttft), Slo(ttft_ms=1e6))), options)
    assert chat.extra_seeds == code.extra_seeds > 0 and chat.seeds == code.seeds == 1 + chat.extra_seeds
    assert chat.seeds_note.startswith("the interval straddled the TTFT limit: ")
    assert code.seeds_note.startswith(f"{code.extra_seeds} more seeds, {code.seeds} in all, run for chat (inconclusive)")
    assert code.checks[0].verdict == HOLDS and chat.checks[0].verdict in (HOLDS, MISSES, INCONCLUSIVE)


def test_a_traced_workload_shares_its_engines_with_the_others_at_their_rates(tmp_path):
    from planner.api import plan_in_context
    from planner.traces import load_trace

    rng = np.random.default_rng(0)
    times = np.cumsum(rng.exponential(1 / 12, 1200))
    trace = tmp_path / "chat.csv"
    trace.write_text("timestamp,input_tokens,output_tokens\n" + "".join(f"{t:.4f},1000,300\n" for t in times))
    from planner.scenario import ScenarioOverrides

    # fp4 asked for: the shared fp4 engines of before issue 34 (the default now plans chat and code apart, bf16/fp8)
    planned = plan_in_context(SCENARIOS / "chat-and-code-p95.yaml", overrides=ScenarioOverrides(precisions=("fp4",)))
    options = SimulationOptions(trace=load_trace(trace, time_unit="s"), trace_workload="chat")
    (check,) = simulate_plan(planned.plan, planned.scenario, planned.catalog, options)
    # the plan runs fp4 engines for chat and code together (their load 3.02 instances: 3 before fp4 weights got
    # their block scales, at 2.99), and chat's trace takes all of them beside code's requests. Which engines fill
    # the one node (4 TP2, or 1 TP1 + 3 TP2 and a GPU idle) is a tie the solver breaks (both cost one node since
    # issue 34's site costs moved its path): the simulation runs whatever the plan runs for chat
    from planner.plan import configuration_key

    chat = {configuration_key(r) for r in planned.plan.routing if r.workload == "chat" and r.rps > 0}
    running = sum(i.instances for i in planned.plan.instances if configuration_key(i) in chat and i.period == check.period)
    assert check.workload == "chat" and check.instances == running >= 3 and "shared with code" in check.engines
    assert "code ran on the shared engines at the plan's rates" in check.note
    assert check.requests_simulated == 1200  # its own requests: the trace's
    assert dataclasses.asdict(check.stats)["completed"] > 0
