"""The fleet program's switches: nodes shared across models and reconfigured between periods (docs/optimizer.md).

Properties over random fleets of per-instance benchmark rows (where sharing matters): each switch only widens
what a plan may do, so turning one on never costs more; every plan covers its demand; and the optimum equals an
independent re-solve of the same math written from the benchmark rows with scipy's MILP (HiGHS), not from the
planner's model-building code.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    check_plan_covers_demand,
    instance_row,
    make_catalog,
    on_prem_system,
    write_scenario,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import LinearConstraint, milp

from planner.catalog import load_catalog
from planner.optimize import plan
from planner.scenario import load_scenario

GPUS = ("H100-SXM-80GB", "H200-SXM-141GB")
ENGINES = (("llama-3-8b", 1), ("llama-3-8b", 2), ("llama-2-70b", 4), ("llama-2-70b", 8))  # (model, TP) that fit
SWITCHES = {
    "shared": {"reconfigure_between_periods": True, "share_nodes_across_models": True},
    "reconfigure": {"reconfigure_between_periods": True, "share_nodes_across_models": False},
    "share": {"reconfigure_between_periods": False, "share_nodes_across_models": True},
    "fixed": {"reconfigure_between_periods": False, "share_nodes_across_models": False},
}


@st.composite
def shared_fleets(draw):
    systems, rows, rates = [], [], {}
    for index, gpu in enumerate(GPUS):
        system_id = f"sys-{index}"
        systems.append(on_prem_system(system_id, gpu, draw(st.integers(50, 400)) * 1000.0, power_kw=draw(st.integers(2, 12))))
        for model, tp in ENGINES:
            if draw(st.booleans()) or (index == 0 and tp in (1, 4)):  # system 0 serves both models
                rps = draw(st.integers(5, 200)) / 10 * tp ** 0.8
                rows.append(instance_row(model, gpu, tp, rps))
                rates[(system_id, model, tp)] = float(f"{rps:g}")
    periods = [
        {"name": f"p{t}", "hours_per_year": 8760 / 3,
         "demand_factor": {"chat": draw(st.integers(0, 10)) / 10, "batch": draw(st.integers(0, 10)) / 10}}
        for t in range(3)
    ]  # fmt: skip
    scenario = {
        "name": "shared",
        "workloads": [
            {"name": "chat", "model": "llama-3-8b", "isl_tokens": 1000, "osl_tokens": 100,
             "peak_rps": draw(st.integers(1, 400)) / 10, "slo": {"ttft_ms": 500}},
            {"name": "batch", "model": "llama-2-70b", "isl_tokens": 1000, "osl_tokens": 100,
             "peak_rps": draw(st.integers(1, 200)) / 10, "slo": {"ttft_ms": 500}},
        ],
        "periods": periods,
        "sites": {"on_prem": {"systems": [s["id"] for s in systems], "amortization_years": 3, "usd_per_kwh": 0.1}},
        "perf": {"sizing": "closed-loop", "sources": ["measured"]},
    }  # fmt: skip
    return systems, rows, scenario, rates


def solve_all(systems, rows, scenario):
    """The plan under each pair of fleet switches, with its catalog and loaded scenario."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        catalog = load_catalog(make_catalog(Path(tmp), systems, rows))
        for name, switches in SWITCHES.items():
            path = write_scenario(Path(tmp), {**scenario, "fleet": switches}, f"{name}.yaml")
            loaded = load_scenario(path, catalog)
            out[name] = (plan(loaded, catalog), catalog, loaded)
    return out


def independent_optimum(systems, scenario, rates, catalog) -> float:
    """The shared, reconfigured fleet as a MILP written from the rows: N[s] nodes, U[e,t] instances of engine e
    in period t, x[w,e,t] requests/s; sum_e x = demand, x <= rate U, sum TP U <= 8 N."""
    loaded_costs = catalog.defaults
    periods = scenario["periods"]
    model_of = {w["name"]: w["model"] for w in scenario["workloads"]}
    peak = {w["name"]: w["peak_rps"] for w in scenario["workloads"]}
    engines = sorted(rates)
    names = [f"N_{s['id']}" for s in systems]
    names += [f"U_{e}_{t}" for e in engines for t in range(len(periods))]
    names += [f"x_{w}_{e}_{t}" for w in model_of for e in engines if e[1] == model_of[w] for t in range(len(periods))]
    index = {n: i for i, n in enumerate(names)}
    cost = np.zeros(len(names))
    for s in systems:
        price, power = s["price_usd"], s["power_kw"]
        cost[index[f"N_{s['id']}"]] = (
            price / 3 + power * loaded_costs.utilization_power_factor.value * loaded_costs.pue.value * 0.1 * 8760
            + loaded_costs.maintenance_fraction_per_year.value * price
        )  # fmt: skip
    rows_a, lower, upper = [], [], []

    def row(terms: dict, lo: float, hi: float) -> None:
        a = np.zeros(len(names))
        for name, coefficient in terms.items():
            a[index[name]] = coefficient
        rows_a.append(a), lower.append(lo), upper.append(hi)

    for t, period in enumerate(periods):
        for w, model in model_of.items():
            demand = peak[w] * period["demand_factor"][w]
            row({f"x_{w}_{e}_{t}": 1.0 for e in engines if e[1] == model}, demand, demand)
        for e in engines:
            row({f"x_{w}_{e}_{t}": 1.0 for w in model_of if model_of[w] == e[1]} | {f"U_{e}_{t}": -rates[e]}, -np.inf, 0.0)
        for s in systems:
            row({f"U_{e}_{t}": e[2] for e in engines if e[0] == s["id"]} | {f"N_{s['id']}": -8.0}, -np.inf, 0.0)
    integrality = np.array([0 if n.startswith("x_") else 1 for n in names])
    result = milp(cost, constraints=LinearConstraint(np.array(rows_a), lower, upper), integrality=integrality,
                  bounds=(0, np.inf), options={"mip_rel_gap": 0.0})  # fmt: skip
    assert result.success, result.message
    return float(result.fun)


SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(shared_fleets())
def test_each_switch_only_widens_the_plans(fleet):
    systems, rows, scenario, _ = fleet
    plans = solve_all(systems, rows, scenario)
    cost = {name: result.objective_usd_per_year for name, (result, _, _) in plans.items()}
    slack = 0.05  # objectives are sums of line costs rounded to cents: a few half-cents apart at equal optima
    assert cost["shared"] <= cost["reconfigure"] + slack and cost["shared"] <= cost["share"] + slack
    assert cost["reconfigure"] <= cost["fixed"] + slack and cost["share"] <= cost["fixed"] + slack
    for name, (result, catalog, loaded) in plans.items():
        assert result.status == "optimal"
        check_plan_covers_demand(result, loaded, catalog)
        assert sum(line.annual_cost_usd for line in result.lines) == pytest.approx(result.objective_usd_per_year, abs=0.05)
    # one configuration per node all year: every line is one engine, and its instance count never changes
    for line in plans["fixed"][0].lines:
        assert "+" not in line.runs and ";" not in line.runs and line.tp is not None
    # no sharing: a node never runs two models in one period
    for line in plans["reconfigure"][0].lines:
        assert all(" + " not in span for span in line.runs.split(";"))


@SETTINGS
@given(shared_fleets())
def test_shared_optimum_equals_an_independent_milp(fleet):
    systems, rows, scenario, rates = fleet
    result, catalog, _ = solve_all(systems, rows, {**scenario})["shared"]
    assert result.objective_usd_per_year == pytest.approx(independent_optimum(systems, scenario, rates, catalog), abs=0.05)


DAY_NIGHT_SYSTEMS = [on_prem_system("sys-0", "H100-SXM-80GB", 200_000.0)]
DAY_NIGHT_ROWS = [instance_row("llama-3-8b", "H100-SXM-80GB", 1, 10.0), instance_row("llama-2-70b", "H100-SXM-80GB", 4, 5.0)]


def day_night(periods: list[dict]) -> dict:
    """Chat (8B) and batch (70B) on one node type, over these periods."""
    return {
        "name": "day-night",
        "workloads": [
            {"name": "chat", "model": "llama-3-8b", "isl_tokens": 1000, "osl_tokens": 100, "peak_rps": 75, "slo": {"ttft_ms": 500}},
            {"name": "batch", "model": "llama-2-70b", "isl_tokens": 1000, "osl_tokens": 100, "peak_rps": 15, "slo": {"ttft_ms": 500}},
        ],
        "periods": periods,
        "sites": {"on_prem": {"systems": ["sys-0"]}},
        "perf": {"sizing": "closed-loop", "sources": ["measured"]},
    }  # fmt: skip


def test_sharing_and_reconfiguring_cut_the_cost_of_a_day_night_fleet(tmp_path):
    """Chat by day, batch by night, on one kind of node: sharing the nodes between the two models and switching
    them between periods needs the peak of the sum, not the sum of the peaks."""
    scenario = day_night([
        {"name": "day", "hours_per_year": 4380, "demand_factor": {"chat": 1.0, "batch": 0.0}},
        {"name": "night", "hours_per_year": 4380, "demand_factor": {"chat": 0.2, "batch": 1.0}},
    ])
    plans = solve_all(DAY_NIGHT_SYSTEMS, DAY_NIGHT_ROWS, scenario)
    nodes = {name: result.totals.nodes_by_system["sys-0"] for name, (result, _, _) in plans.items()}
    # day: chat 75 rps / 10 per instance = 8 TP1 instances (8 GPUs); night: chat 15 rps = 2 TP1 + batch 15 / 5 =
    # 3 TP4 (12 GPUs) = 14 GPUs. Shared and reconfigured: max(8, 14) GPUs = 2 nodes. Reconfigured, one engine
    # per node: at night 1 chat node + 2 batch nodes (2 TP4 each) = 3. Shared, not reconfigured: 8 chat + 3 TP4
    # instances all year = 20 GPUs = 3 nodes. Neither: 1 chat node + 2 batch nodes = 3.
    assert nodes == {"shared": 2, "reconfigure": 3, "share": 3, "fixed": 3}
    shared = plans["shared"][0]
    assert any("day:" in line.runs and "night:" in line.runs for line in shared.lines)


def test_both_switches_off_reproduce_the_one_configuration_per_node_plan_and_sharing_saves_a_node():
    """daily-hybrid: the v1 optimizer (commit fb61f59, one configuration per node all year) planned 15 DGX H100 for
    980,681.98 USD/year; the shared, reconfigured fleet runs the nightly batch on the assistant's daytime nodes."""
    import yaml
    from helpers import SCENARIOS

    document = yaml.safe_load((SCENARIOS / "daily-hybrid.yaml").read_text())
    # the v1 cost model: the servers alone, straight-line amortization (issue 34's site costs off)
    document["sites"]["on_prem"].update(infrastructure={"include": False}, maintenance_fraction_per_year=0,
                                        cost_of_capital_per_year=0)  # fmt: skip
    document["sites"]["cloud"]["software_usd_per_gpu_per_year"] = 0
    document["perf"] = {"sizing": "closed-loop"}  # v1 read the seed rows as the course does
    costs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("fixed", "shared"):
            path = write_scenario(Path(tmp), {**document, "fleet": SWITCHES[name]}, f"{name}.yaml")
            from planner.api import plan_file

            result = plan_file(path)
            costs[name] = (result.objective_usd_per_year, result.totals.nodes_by_system)
    assert costs["fixed"] == (pytest.approx(980_681.98, abs=0.01), {"dgx-h100": 15})
    assert costs["shared"] == (pytest.approx(915_303.18, abs=0.01), {"dgx-h100": 14})


def test_periods_with_equal_demand_are_one_period_of_the_program(tmp_path):
    """Two night periods with the same demand cost what one period of their added hours costs, and the plan still
    lists each with its routes and instances."""
    night = {"chat": 0.2, "batch": 1.0}
    split = [{"name": "day", "hours_per_year": 4380, "demand_factor": {"chat": 1.0, "batch": 0.0}},
             {"name": "early", "hours_per_year": 2000, "demand_factor": night},
             {"name": "late", "hours_per_year": 2380, "demand_factor": night}]  # fmt: skip
    joined = [split[0], {"name": "night", "hours_per_year": 4380, "demand_factor": night}]
    catalog = load_catalog(make_catalog(tmp_path, DAY_NIGHT_SYSTEMS, DAY_NIGHT_ROWS))
    from planner.candidates import enumerate_candidates
    from planner.optimize import build_fleet_model

    results = {}
    for name, periods in (("split", split), ("joined", joined)):
        loaded = load_scenario(write_scenario(tmp_path, day_night(periods), f"{name}.yaml"), catalog)
        results[name] = plan(loaded, catalog)
        program = build_fleet_model(loaded, enumerate_candidates(loaded, catalog), catalog)
        assert len([c for c in program.problem.constraints if c.startswith("demand_")]) == 2 * 1 + 1  # day: chat only
    assert results["split"].objective_usd_per_year == pytest.approx(results["joined"].objective_usd_per_year)
    early = sorted((r.workload, r.rps) for r in results["split"].routing if r.period == "early")
    late = sorted((r.workload, r.rps) for r in results["split"].routing if r.period == "late")
    assert early == late and early
    assert {i.period for i in results["split"].instances} == {"day", "early", "late"}


def test_the_bom_lists_what_to_buy_and_the_plan_what_each_node_runs(tmp_path):
    from planner.report.bom import build_bom

    scenario = day_night([
        {"name": "day", "hours_per_year": 4380, "demand_factor": {"chat": 1.0, "batch": 0.0}},
        {"name": "night", "hours_per_year": 4380, "demand_factor": {"chat": 0.2, "batch": 1.0}},
    ])
    result, catalog, loaded = solve_all(DAY_NIGHT_SYSTEMS, DAY_NIGHT_ROWS, scenario)["shared"]
    bom = build_bom(result, loaded, catalog)
    (line,) = [line for line in bom.lines if line.item == "sys-0"]  # one server item: 2 nodes of sys-0, bought
    assert (line.item, line.how, line.count) == ("sys-0", "bought", 2)
    assert line.annual_cost_usd == pytest.approx(result.objective_usd_per_year)  # the site's figures are 0 here
    assert sum(plan_line.nodes for plan_line in result.lines) == 2
    for plan_line in result.lines:  # every node group says what it runs by day and by night
        assert plan_line.runs in line.runs
        assert "day:" in plan_line.runs and "night:" in plan_line.runs


def test_progress_names_the_solve_after_the_enumeration(tmp_path):
    catalog = load_catalog(make_catalog(tmp_path, DAY_NIGHT_SYSTEMS, DAY_NIGHT_ROWS))
    loaded = load_scenario(write_scenario(tmp_path, day_night([{"name": "all", "hours_per_year": 8760}])), catalog)
    calls = []
    plan(loaded, catalog, progress=lambda *args: calls.append(args))
    assert calls[-1] == (0, None, "solving the integer program (cbc, at most 60 s)")
    total = len(loaded.workloads) * len(loaded.offers)
    assert calls[0][:2] == (0, total) and calls[1][:2] == (1, total)  # the total known before the first pair
