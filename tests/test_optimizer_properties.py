"""The optimizer's properties (hypothesis) on small random fleets: coverage, cost accounting, monotonicity."""

from __future__ import annotations

import math

import pytest
from helpers import check_plan_covers_demand, fleets, solve
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


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
