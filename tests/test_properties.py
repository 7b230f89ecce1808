"""Property tests (hypothesis) on small random scenarios: coverage, cost accounting, monotonicity."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.catalog import load_catalog
from planner.optimize import plan
from planner.plan import configuration_key
from planner.requirements import daily_active_users, peak_rps_from_mean, rps_from_users, words_to_tokens
from planner.scenario import load_scenario

from conftest import make_catalog, node_row, on_prem_system, write_scenario

MODELS = ("llama-3-8b", "llama-2-70b")
GPUS = ("H100-SXM-80GB", "H200-SXM-141GB", "B200-SXM-180GB")


@st.composite
def fleets(draw):
    """2-3 systems with random prices and power, random per-node rates, 1-2 workloads with random demand."""
    n_systems = draw(st.integers(2, 3))
    systems, rows = [], []
    for index in range(n_systems):
        gpu = GPUS[index]
        price = draw(st.integers(50, 500)) * 1000.0
        power = draw(st.integers(2, 15))
        systems.append(on_prem_system(f"sys-{index}", gpu, price, power_kw=power, rack_units=draw(st.integers(2, 10))))
        for model in MODELS:
            if draw(st.booleans()) or index == 0:  # system 0 serves everything, so a plan exists
                rows.append(node_row(model, gpu, 1000, 100, draw(st.integers(1, 400)) / 10))
    workloads = [
        {"name": f"w{i}", "model": MODELS[i], "isl_tokens": 1000, "osl_tokens": 100,
         "peak_rps": draw(st.integers(0, 3000)) / 10, "slo": {"ttft_ms": 500}}
        for i in range(draw(st.integers(1, 2)))
    ]  # fmt: skip
    scenario = {
        "name": "random", "workloads": workloads,
        "sites": {"on_prem": {"systems": [s["id"] for s in systems], "amortization_years": draw(st.integers(1, 6)),
                              "usd_per_kwh": draw(st.integers(0, 30)) / 100}},
        "limits": {"headroom_fraction": draw(st.integers(0, 30)) / 100},
        "perf": {"sources": ["measured"]},  # the optimizer is under test here: table rows keep examples fast
    }  # fmt: skip
    return systems, rows, scenario


def solve(systems, rows, scenario):
    with tempfile.TemporaryDirectory() as tmp:
        directory = make_catalog(Path(tmp), systems, rows)
        catalog = load_catalog(directory)
        loaded = load_scenario(write_scenario(Path(tmp), scenario), catalog)
        return plan(loaded, catalog), catalog, loaded


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check_plan_covers_demand(result, scenario, catalog) -> None:
    """Independently of the solver's rows: in every period, routes add up to each workload's demand, the routes
    sent to each configuration fit in its running instances, and the instances' GPUs fit in the nodes of the
    plan lines that are up in that period."""
    headroom = 1 + scenario.limits.headroom_fraction
    for period in scenario.periods:
        routes = [r for r in result.routing if r.period == period.name]
        for workload in scenario.workloads:
            sent = sum(r.rps for r in routes if r.workload == workload.name)
            assert sent == pytest.approx(period.demand_rps[workload.name] * headroom, rel=1e-6, abs=1e-6)
        running = [i for i in result.instances if i.period == period.name]
        for allocation in running:
            load = sum(r.rps / r.rps_per_instance for r in routes if configuration_key(r) == configuration_key(allocation))
            assert load <= allocation.instances + 1e-6
        assert {configuration_key(r) for r in routes} <= {configuration_key(i) for i in running}
        for hardware in {(i.site, i.role, i.system) for i in running}:
            used = sum(i.gpus for i in running if (i.site, i.role, i.system) == hardware)
            up = sum(
                line.gpus for line in result.lines
                if (line.site, line.role, line.system) == hardware and line.period in ("all", period.name)
            )  # fmt: skip
            assert used <= up


@SETTINGS
@given(fleets())
def test_capacity_covers_demand_for_every_workload(fleet):
    result, catalog, scenario = solve(*fleet)
    check_plan_covers_demand(result, scenario, catalog)
    for workload in result.workloads:
        assert workload.capacity_rps >= workload.demand_rps * (1 + scenario.limits.headroom_fraction) - 1e-5


@SETTINGS
@given(fleets())
def test_cost_recomputed_from_the_bill_equals_the_objective(fleet):
    result, catalog, scenario = solve(*fleet)
    costs = scenario.on_prem_costs
    recomputed = 0.0
    for line in result.lines:
        system = catalog.systems[line.system]
        per_node = (
            system.price_usd / costs.amortization_years
            + system.power_kw * costs.utilization_power_factor * costs.pue * costs.usd_per_kwh * 8760
            + costs.maintenance_fraction_per_year * system.price_usd
        )
        recomputed += per_node * line.nodes
    assert recomputed == pytest.approx(result.objective_usd_per_year, abs=0.05)
    assert result.totals.gpus == sum(8 * line.nodes for line in result.lines)


@SETTINGS
@given(fleets())
def test_optimum_is_no_dearer_than_one_system_per_workload(fleet):
    systems, rows, scenario = fleet
    result, catalog, loaded = solve(systems, rows, scenario)
    costs = loaded.on_prem_costs
    # a simple feasible plan: every workload on system 0 alone, rounded up
    simple = 0.0
    system = catalog.systems["sys-0"]
    per_node = system.price_usd / costs.amortization_years + system.power_kw * costs.pue * costs.usd_per_kwh * 8760
    for workload in loaded.workloads:
        rate = next(r for r in catalog.benchmarks if r.model == workload.model and r.gpu == system.gpu)
        simple += math.ceil(round(workload.peak_rps * (1 + loaded.limits.headroom_fraction) / rate.request_throughput_rps, 9)) * per_node
    assert result.objective_usd_per_year <= simple + 0.05


@SETTINGS
@given(fleets(), st.integers(1, 50))
def test_more_demand_never_costs_less(fleet, extra_tenths):
    systems, rows, scenario = fleet
    base, _, _ = solve(systems, rows, scenario)
    scenario["workloads"][0]["peak_rps"] += extra_tenths / 10
    more, _, _ = solve(systems, rows, scenario)
    assert more.objective_usd_per_year >= base.objective_usd_per_year - 0.05


@given(st.floats(0.1, 500), st.floats(0.5, 0.999))
def test_poisson_peak_is_at_least_the_median_count_and_grows_with_the_quantile(mean, quantile):
    peak = peak_rps_from_mean(mean, quantile)
    assert peak >= math.floor(mean) - 1
    assert peak_rps_from_mean(mean, min(0.9999, quantile + 0.0009)) >= peak


@given(st.floats(0.01, 1e4), st.floats(0.5, 24), st.floats(0.5, 50))
def test_users_round_trip(rps, hours, per_user):
    users = daily_active_users(rps, hours, per_user)
    assert rps_from_users(users, per_user, hours) <= rps + 1e-9
    assert rps_from_users(users + 1, per_user, hours) > rps - 1e-9


@given(st.integers(0, 10**6), st.floats(0.3, 1.5))
def test_words_to_tokens_covers_the_text(words, words_per_token):
    tokens = words_to_tokens(words, words_per_token)
    assert tokens * words_per_token >= words - 1e-6
    assert (tokens - 1) * words_per_token < words + 1e-6 or tokens == 0
