"""The planner's optimum under every fleet switch and limit equals a brute force written here (issue 31).

Small random fleets: two on-prem systems (different GPUs), two workloads of different models, two periods, engines
from per-instance benchmark rows. Every combination of `reconfigure_between_periods` and
`share_nodes_across_models`, with a random `max_engine_variants`, power budget, GPU limit and N + k spares. The brute
force enumerates node counts and, for each, whether whole engine instances on those nodes cover every period's
demand; it knows the fleet semantics of docs/optimizer.md (a unit is an instance's GPUs when nodes are shared,
a whole node running one engine when not; one count all year when not reconfigured) and nothing of
planner.optimize. Order relations are checked on the planner's own answers: a relaxation never costs more.
"""

from __future__ import annotations

import itertools
import math
import tempfile
from pathlib import Path

import pytest
from conftest import make_catalog, on_prem_system, write_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.catalog import load_catalog
from planner.errors import InfeasiblePlanError
from planner.optimize import plan
from planner.scenario import load_scenario

GPUS = ("H100-SXM-80GB", "H200-SXM-141GB")
TPS = {"llama-3-8b": (1, 2), "llama-2-70b": (4, 8)}  # TPs that fit each model on both GPUs
WORKLOADS = {"chat": "llama-3-8b", "batch": "llama-2-70b"}
GPUS_PER_NODE = 8
HOURS = 8760 / 2


def instance_row(model: str, gpu: str, tp: int, rps: float) -> str:
    """A test-only row measured per engine instance of `tp` GPUs (bf16)."""
    return f"test fixture,{model},{gpu},{tp},{tp},bf16,1000,100,16,online,100,,10,,{rps},,instance,"


@st.composite
def cases(draw):
    systems, rows, engines = [], [], []
    for index, gpu in enumerate(GPUS):
        system_id = f"sys-{index}"
        systems.append(on_prem_system(system_id, gpu, draw(st.integers(50, 400)) * 1000.0, power_kw=draw(st.integers(2, 12))))
        for model, tps in TPS.items():
            if index == 0 or draw(st.booleans()):  # system 0 serves both models
                tp = draw(st.sampled_from(tps))
                rps = float(f"{draw(st.integers(10, 120)) / 10 * tp ** 0.8:.3g}")
                rows.append(instance_row(model, gpu, tp, rps))
                engines.append((system_id, model, gpu, tp, rps))
    demand = {
        name: [draw(st.integers(0, 10)) / 10 * peak for _ in range(2)]
        for name, peak in (("chat", draw(st.integers(1, 250)) / 10), ("batch", draw(st.integers(1, 120)) / 10))
    }  # fmt: skip
    limits = {}
    if draw(st.booleans()):
        limits["max_engine_variants"] = draw(st.integers(1, 3))
    if draw(st.booleans()):
        limits["power_kw"] = draw(st.integers(10, 80))
    if draw(st.booleans()):
        limits["max_gpus"] = {GPUS[draw(st.integers(0, 1))]: 8 * draw(st.integers(1, 6))}
    if draw(st.booleans()):
        limits["spare_nodes_per_system"] = 1
    return systems, rows, engines, demand, limits


def scenario_document(systems, demand, limits, reconfigure: bool, share: bool) -> dict:
    peak = {name: max(values) or 0.1 for name, values in demand.items()}
    return {
        "name": "brute",
        "workloads": [{"name": name, "model": model, "isl_tokens": 1000, "osl_tokens": 100, "peak_rps": peak[name],
                       "slo": {"ttft_ms": 500}} for name, model in WORKLOADS.items()],
        "periods": [{"name": f"p{t}", "hours_per_year": HOURS,
                     "demand_factor": {name: values[t] / peak[name] for name, values in demand.items()}}
                    for t in range(2)],
        "sites": {"on_prem": {"systems": [s["id"] for s in systems], "amortization_years": 3, "usd_per_kwh": 0.1}},
        "perf": {"sources": ["measured"]},
        "limits": limits,
        "fleet": {"reconfigure_between_periods": reconfigure, "share_nodes_across_models": share},
    }  # fmt: skip


def node_cost(system: dict, defaults) -> float:
    """Annual cost of one bought node: straight-line capital over 3 years, energy at 0.1 USD/kWh, maintenance."""
    price, power = system["price_usd"], system["power_kw"]
    return (price / 3 + power * defaults.utilization_power_factor.value * defaults.pue.value * 0.1 * 8760
            + defaults.maintenance_fraction_per_year.value * price)  # fmt: skip


def system_capacities(nodes: int, engines: list, share: bool) -> list[dict[str, float]]:
    """Every way whole engines fill `nodes` nodes of one system (at most one engine per model): requests/s per
    workload. Shared nodes: instances of TP GPUs side by side; not shared: each node runs one engine, 8 // TP
    instances. Filling what is left with the second engine never hurts, so the first engine's count is the choice."""
    if not engines:
        return [{}]
    if share:
        slots = [(e, e[3], e[4]) for e in engines]  # (engine, GPUs per unit, rps per unit)
        room = GPUS_PER_NODE * nodes
    else:
        slots = [(e, 1, e[4] * (GPUS_PER_NODE // e[3])) for e in engines]
        room = nodes
    out = []
    first, *rest = slots
    for count in range(room // first[1] + 1):
        capacity = {first[0][1]: first[2] * count}
        if rest:
            (engine, size, rate), = rest
            capacity[engine[1]] = rate * ((room - count * first[1]) // size)
        out.append(capacity)
    return out


def covers(nodes: dict[str, int], engines: list, needs: list[dict[str, float]], share: bool) -> bool:
    """Whether some whole engines on these nodes serve every demand in `needs` (one dict per period with its own
    engine counts; a single dict when the counts hold all year)."""
    per_system = [system_capacities(nodes[s], [e for e in engines if e[0] == s], share) for s in sorted(nodes)]
    for need in needs:
        if not any(
            all(sum(c.get(WORKLOADS[w], 0.0) for c in combo) >= rps - 1e-9 for w, rps in need.items())
            for combo in itertools.product(*per_system)
        ):  # fmt: skip
            return False
    return True


def brute_force(systems, engines, demand, limits, reconfigure: bool, share: bool, defaults) -> float | None:
    """The cheapest node counts (with their spares) under which engines of at most V variants cover the demand."""
    cost = {s["id"]: node_cost(s, defaults) for s in systems}
    power = {s["id"]: s["power_kw"] for s in systems}
    gpu = {s["id"]: s["gpu"] for s in systems}
    spares = limits.get("spare_nodes_per_system", 0)
    periods = [{w: demand[w][t] for w in demand} for t in range(2)]
    if not reconfigure:  # one engine count all year: it must carry each workload's busiest period
        periods = [{w: max(demand[w]) for w in demand}]
    variants = sorted({(e[1], e[2], e[3]) for e in engines})
    limit = limits.get("max_engine_variants", len(variants))
    subsets = [set(s) for k in range(min(limit, len(variants)) + 1) for s in itertools.combinations(variants, k)]
    most = 12  # nodes per system: more than any drawn demand needs
    best = None
    for counts in itertools.product(range(most + 1), repeat=len(systems)):
        nodes = {s["id"]: n for s, n in zip(systems, counts)}
        held = {s: n + (spares if n > 0 else 0) for s, n in nodes.items()}  # spares cost, draw power, hold GPUs
        total = sum(cost[s] * n for s, n in held.items())
        if best is not None and total >= best - 1e-6:
            continue
        if "power_kw" in limits and sum(power[s] * n for s, n in held.items()) > limits["power_kw"] + 1e-9:
            continue
        if any(sum(GPUS_PER_NODE * n for s, n in held.items() if gpu[s] == g) > a for g, a in limits.get("max_gpus", {}).items()):
            continue
        if any(covers(nodes, [e for e in engines if (e[1], e[2], e[3]) in chosen], periods, share) for chosen in subsets):
            best = total
    return best


SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(cases())
def test_every_switch_and_limit_gives_the_brute_force_optimum(case):
    systems, rows, engines, demand, limits = case
    with tempfile.TemporaryDirectory() as tmp:
        catalog = load_catalog(make_catalog(Path(tmp), systems, rows))
        costs = {}
        for reconfigure, share in itertools.product((True, False), repeat=2):
            for name, applied in (("limited", limits), ("free", {})):
                document = scenario_document(systems, demand, applied, reconfigure, share)
                scenario = load_scenario(write_scenario(Path(tmp), document, f"{name}-{reconfigure}-{share}.yaml"), catalog)
                expected = brute_force(systems, engines, demand, applied, reconfigure, share, catalog.defaults)
                try:
                    result = plan(scenario, catalog)
                except InfeasiblePlanError:
                    assert expected is None, f"planner: infeasible; brute force: {expected} ({reconfigure=}, {share=}, {applied})"
                    costs[(reconfigure, share, name)] = math.inf
                    continue
                assert result.status == "optimal"
                assert expected is not None, f"brute force finds no plan; planner: {result.objective_usd_per_year}"
                slack = 0.01 * (1 + len(result.lines))  # line costs are rounded to cents
                assert result.objective_usd_per_year == pytest.approx(expected, abs=slack), (reconfigure, share, applied)
                costs[(reconfigure, share, name)] = result.objective_usd_per_year
    slack = 0.1
    for name in ("limited", "free"):
        shared, reconfigure_only = costs[(True, True, name)], costs[(True, False, name)]
        share_only, fixed = costs[(False, True, name)], costs[(False, False, name)]
        assert shared <= min(reconfigure_only, share_only) + slack
        assert max(reconfigure_only, share_only) <= fixed + slack or math.isinf(fixed)
    for switches in itertools.product((True, False), repeat=2):
        assert costs[(*switches, "free")] <= costs[(*switches, "limited")] + slack
