"""The full integer program: periods, hybrid, every limit binding, every infeasibility message, three solvers.

All numbers are worked out by hand in the comments; the catalogs are test fixtures (prices made up for arithmetic).
"""

from __future__ import annotations

import json

import pulp
import pytest
import yaml
from helpers import (
    SCENARIOS,
    check_plan_covers_demand,
    cloud_system,
    fleets,
    make_catalog,
    node_row,
    on_prem_system,
    solve,
    write_scenario,
)
from hypothesis import HealthCheck, given, settings

from planner.api import plan_file
from planner.catalog import load_catalog
from planner.errors import InfeasiblePlanError
from planner.scenario import load_scenario

# ---------------------------------------------------------------- hybrid beats both pure options
# One workload, 10 rps per node everywhere. On-prem node: 50,000 USD/year (price 50,000, 1 year, free power).
# Cloud node: 10 USD/h. Peak period 2,000 h at 100 rps, off-peak 6,760 h at 20 rps.
#   on-prem only: 10 nodes x 50,000                                   = 500,000
#   cloud only:   10 x 2,000 x 10 + 2 x 6,760 x 10 = 200,000 + 135,200 = 335,200
#   hybrid, N on-prem: 50,000 N + (10 - N) x 20,000 + max(0, 2 - N) x 67,600
#       N=1: 297,600   N=2: 260,000   N=3: 290,000   -> N = 2, 8 cloud nodes at peak, none off-peak
HYBRID_SYSTEMS = [on_prem_system("rack", "H100-SXM-80GB", 50_000.0), cloud_system("rent", "H100-SXM-80GB", 10.0)]
HYBRID_ROWS = [node_row("llama-3-8b", "H100-SXM-80GB", 1000, 100, 10.0)]


def hybrid_scenario(deployment: str) -> dict:
    return {
        "name": "peaky", "deployment": deployment, "perf": {"sizing": "closed-loop"},
        "workloads": [{"name": "chat", "model": "llama-3-8b", "isl_tokens": 1000, "osl_tokens": 100, "peak_rps": 100,
                       "slo": {"ttft_ms": 500}}],
        "periods": [{"name": "peak", "hours_per_year": 2000, "demand_factor": {"chat": 1.0}},
                    {"name": "off-peak", "hours_per_year": 6760, "demand_factor": {"chat": 0.2}}],
        "sites": {"on_prem": {"systems": ["rack"], "amortization_years": 1, "usd_per_kwh": 0},
                  "cloud": {"systems": ["rent"]}},
    }  # fmt: skip


@pytest.fixture()
def hybrid_catalog(tmp_path):
    return make_catalog(tmp_path, HYBRID_SYSTEMS, HYBRID_ROWS)


@pytest.mark.parametrize(("deployment", "cost"), [("on-prem", 500_000), ("cloud", 335_200), ("hybrid", 260_000)])
def test_hybrid_beats_both_pure_options(tmp_path, hybrid_catalog, deployment, cost):
    result = plan_file(write_scenario(tmp_path, hybrid_scenario(deployment)), hybrid_catalog)
    assert result.status == "optimal"
    assert result.objective_usd_per_year == pytest.approx(cost)
    if deployment == "hybrid":
        bought = {line.period: line.nodes for line in result.lines if line.role == "bought"}
        rented = {line.period: line.nodes for line in result.lines if line.role == "on-demand"}
        assert bought == {"all": 2} and rented == {"peak": 8}
        assert result.totals.nodes_by_system == {"rack": 2, "rent": 8}
        assert result.totals.cost_breakdown.cloud_on_demand_usd == pytest.approx(160_000)
        assert result.totals.cost_breakdown.capex_amortized_usd == pytest.approx(100_000)
    if deployment == "cloud":
        rented = {line.period: line.nodes for line in result.lines}
        assert rented == {"peak": 10, "off-peak": 2}


def test_compare_puts_the_three_side_by_side(cli, tmp_path, hybrid_catalog):
    path = write_scenario(tmp_path, hybrid_scenario("hybrid"))
    code, out, err = cli("compare", path, "--catalog", hybrid_catalog, "--json")
    assert code == 0, err
    sides = {s["deployment"]: s for s in json.loads(out)["deployments"]}
    assert {d: s["objective_usd_per_year"] for d, s in sides.items()} == pytest.approx(
        {"on-prem": 500_000, "cloud": 335_200, "hybrid": 260_000}
    )
    # output tokens per year: (100 x 2000 + 20 x 6760) x 3600 s x 100 tokens
    tokens = (100 * 2000 + 20 * 6760) * 3600 * 100
    assert sides["hybrid"]["usd_per_million_output_tokens"] == pytest.approx(260_000 / (tokens / 1e6))
    assert sides["cloud"]["peak_nodes"] == 10 and sides["hybrid"]["peak_nodes"] == 10
    code, out, _ = cli("compare", path, "--catalog", hybrid_catalog)
    assert code == 0 and "hybrid" in out and "USD per M output" in out  # the header may wrap before "tokens"


def test_reserved_cloud_behaves_like_on_prem(tmp_path, hybrid_catalog):
    # reserved at 4 USD/h = 35,040 per node-year, constant count: 2 reserved + 8 on demand at peak
    #   N reserved: 35,040 N + (10 - N) x 20,000 + max(0, 2 - N) x 67,600 -> N=2: 70,080 + 160,000 = 230,080
    document = hybrid_scenario("cloud")
    document["sites"]["cloud"]["reserved_usd_per_hour"] = {"rent": 4.0}
    result = plan_file(write_scenario(tmp_path, document), hybrid_catalog)
    assert result.objective_usd_per_year == pytest.approx(230_080)
    assert {line.role: line.nodes for line in result.lines if line.period in ("all", "peak")} == {"reserved": 2, "on-demand": 8}


def test_period_peaks_come_from_the_poisson_quantile_of_the_period_mean(tmp_path, hybrid_catalog):
    document = hybrid_scenario("cloud")
    document["workloads"][0].pop("peak_rps")
    document["workloads"][0]["mean_rps"] = 64
    document["periods"][1]["demand_factor"]["chat"] = 7 / 64
    result = plan_file(write_scenario(tmp_path, document), hybrid_catalog)
    (chat,) = result.workloads
    assert [p.demand_rps for p in chat.periods] == [77, 12]  # poisson.ppf(0.95, 64), poisson.ppf(0.95, 7)
    assert {line.period: line.nodes for line in result.lines} == {"peak": 8, "off-peak": 2}


# ---------------------------------------------------------------- every limit binds
# One workload, 25 rps. sys-a (H100): 10 rps/node, 300 USD/year, 10 kW, 8 RU. sys-b (H200): 5 rps/node, 210, 3 kW, 2 RU.
# Mixes that serve 25 rps without waste:
#   3A: 900 USD, 30 kW, 24 RU, 24 H100      2A+1B: 810, 23 kW, 18 RU, 16 H100 + 8 H200
#   1A+3B: 930, 19 kW, 14 RU, 8 + 24        5B: 1050, 15 kW, 10 RU, 40 H200
LIMIT_SYSTEMS = [
    on_prem_system("sys-a", "H100-SXM-80GB", 300.0, power_kw=10.0, rack_units=8),
    on_prem_system("sys-b", "H200-SXM-141GB", 210.0, power_kw=3.0, rack_units=2),
]
LIMIT_ROWS = [node_row("llama-3-8b", "H100-SXM-80GB", 1000, 100, 10.0), node_row("llama-3-8b", "H200-SXM-141GB", 1000, 100, 5.0),
              node_row("llama-2-70b", "H200-SXM-141GB", 1000, 100, 5.0)]  # fmt: skip


@pytest.fixture()
def limited(tmp_path):
    catalog_dir = make_catalog(tmp_path, LIMIT_SYSTEMS, LIMIT_ROWS)

    def run(limits: dict | None = None, on_prem: dict | None = None, extra_workload: bool = False):
        document = {
            "name": "limits", "perf": {"sizing": "closed-loop"},
            "workloads": [{"name": "w", "model": "llama-3-8b", "isl_tokens": 1000, "osl_tokens": 100, "peak_rps": 25,
                           "slo": {"ttft_ms": 500}}],
            "sites": {"on_prem": {"systems": ["sys-a", "sys-b"], "amortization_years": 1, "usd_per_kwh": 0,
                                  **(on_prem or {})}},
            "limits": limits or {},
        }  # fmt: skip
        if extra_workload:
            document["workloads"].append({"name": "big", "model": "llama-2-70b", "isl_tokens": 1000, "osl_tokens": 100,
                                          "peak_rps": 5, "slo": {"ttft_ms": 500}})  # fmt: skip
        return plan_file(write_scenario(tmp_path, document), catalog_dir)

    return run


def mix(result) -> dict:
    return {s: n for s, n in result.totals.nodes_by_system.items()}


def test_unconstrained_mix(limited):
    assert mix(limited()) == {"sys-a": 2, "sys-b": 1}


@pytest.mark.parametrize(("power_kw", "expected"), [(23, {"sys-a": 2, "sys-b": 1}), (20, {"sys-a": 1, "sys-b": 3}), (16, {"sys-b": 5})])
def test_power_budget_binds(limited, power_kw, expected):
    result = limited({"power_kw": power_kw})
    assert mix(result) == expected
    # binding = costs money: at 23 kW the unconstrained mix fits exactly (used up, free); at 20 and 16 kW the cap
    # forces a dearer mix that leaves 1 kW unused
    binding = [b for b in result.binding_limits if b.startswith("power budget")]
    assert bool(binding) == (power_kw != 23)
    if binding:
        assert "without it the plan costs" in binding[0] and "used up" not in binding[0]


@pytest.mark.parametrize(("rack_units", "expected"), [(18, {"sys-a": 2, "sys-b": 1}), (15, {"sys-a": 1, "sys-b": 3}), (10, {"sys-b": 5})])
def test_rack_units_bind(limited, rack_units, expected):
    assert mix(limited({"rack_units": rack_units})) == expected


@pytest.mark.parametrize(("capex", "expected"), [(1100, {"sys-b": 5}), (1000, {"sys-a": 1, "sys-b": 3}), (900, {"sys-a": 2, "sys-b": 1})])
def test_capex_budget_binds(limited, capex, expected):
    # 20-year amortization and 0.5 USD/kWh at PUE 1 make energy dominate: per node-year
    #   A = 300/20 + 10 kW x 0.5 x 8760 = 43,815;  B = 10.5 + 3 x 0.5 x 8760 = 13,150.5
    #   annual: 5B 65,752 < 1A+3B 83,266 < 2A+1B 100,780 < 3A 131,445; capex (price): 5B 1050, 1A+3B 930, 2A+1B 810
    result = limited({"capex_usd": capex}, {"amortization_years": 20, "usd_per_kwh": 0.5, "pue": 1.0})
    assert mix(result) == expected


@pytest.mark.parametrize(("max_gpus", "expected"), [({"H100-SXM-80GB": 16}, {"sys-a": 2, "sys-b": 1}),
                                                    ({"H100-SXM-80GB": 8}, {"sys-a": 1, "sys-b": 3}),
                                                    ({"H100-SXM-80GB": 0}, {"sys-b": 5})])  # fmt: skip
def test_gpu_availability_binds(limited, max_gpus, expected):
    assert mix(limited({"max_gpus": max_gpus})) == expected


def test_spare_nodes_change_the_mix(limited):
    # N+1 per system in use: 2A+1B + 2 spares = 810 + 510 = 1320; 3A + 1 spare = 1200; 5B + 1 = 1260 -> 3A + 1 spare
    result = limited({"spare_nodes_per_system": 1})
    assert mix(result) == {"sys-a": 4}
    assert result.objective_usd_per_year == pytest.approx(1200)
    assert [(line.role, line.nodes) for line in result.lines] == [("bought", 3), ("spare", 1)]


def test_engine_variant_limit_binds(limited):
    # one variant only: all on sys-a (3A = 900) rather than 5B (1050)
    result = limited({"max_engine_variants": 1})
    assert mix(result) == {"sys-a": 3}
    assert any("engine variants" in b for b in result.binding_limits)


def test_headroom_binds(limited):
    # 25 x 1.2 = 30 rps: 3A = 900 (2A+2B = 1020, 1A+4B = 1140, 6B = 1260)
    assert mix(limited({"headroom_fraction": 0.2})) == {"sys-a": 3}


# ---------------------------------------------------------------- every infeasibility message
@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"power_kw": 14}, "power budget 14 kW < 15 kW needed at minimum"),
        ({"rack_units": 9}, "rack-unit budget 9 RU < 10 RU needed at minimum"),
        ({"capex_usd": 800}, "capex budget 800 USD < 810 USD needed at minimum"),
        ({"max_gpus": {"H100-SXM-80GB": 8, "H200-SXM-141GB": 16}}, "GPUs available of H200-SXM-141GB 16 GPUs < 24 GPUs needed at minimum"),
        ({"power_kw": 14, "rack_units": 9}, "the limits together (power budget, rack-unit budget) cannot all be met at once"),
        ({"max_gpus": {"H100-SXM-80GB": 0, "H200-SXM-141GB": 32}}, "GPUs available of H200-SXM-141GB 32 GPUs < 40 GPUs needed at minimum"),
    ],
)
def test_limit_infeasibility_messages(limited, limits, message):
    with pytest.raises(InfeasiblePlanError) as error:
        limited(limits)
    assert any(message in line for line in error.value.diagnosis), error.value.diagnosis


def test_variant_limit_infeasibility_message(limited):
    with pytest.raises(InfeasiblePlanError) as error:
        limited({"max_engine_variants": 1}, extra_workload=True)
    assert error.value.diagnosis == ["at most 1 engine variants cannot serve every workload bucket"]


def test_time_limit_without_a_solution_is_not_a_plan(limited, monkeypatch):
    import planner.optimize as optimize
    from planner.errors import SolverStoppedError

    monkeypatch.setattr(optimize.solve, "_solve_cbc", lambda problem, limit: ("stopped", None))
    with pytest.raises(SolverStoppedError) as error:
        limited()
    assert "before finding any plan" in str(error.value) and "raise --time-limit" in str(error.value)


def test_feasible_status_carries_the_gap_from_the_bound(limited, monkeypatch):
    import planner.optimize as optimize

    real = optimize.solve._solve_cbc

    def stopped_early(problem, limit):
        status, _ = real(problem, limit)
        # a bound 3.89% under the objective: the gap is that, not CBC's rounded log figure
        return ("feasible", 0.9611 * pulp.value(problem.objective)) if status == "optimal" else (status, None)

    monkeypatch.setattr(optimize.solve, "_solve_cbc", stopped_early)
    result = limited()
    assert result.status == "feasible" and result.mip_gap == pytest.approx(0.0389, abs=1e-6)


def test_cbc_bound_is_read_from_its_summary_not_its_rounded_gap():
    from planner.optimize import _cbc_bound

    log = "Result - Stopped on time limit\n\nObjective value:                725049.00000000\n" \
          "Lower bound:                    696843.500\nGap:                            0.04\n"
    assert _cbc_bound(log) == 696843.5
    assert _cbc_bound("Cbc0010I After 100 nodes, 5 on tree, 725049 best solution, best possible 700000.25 (1.2 seconds)") == 700000.25


# ---------------------------------------------------------------- length buckets
def test_engine_serves_a_bucket_only_if_its_lengths_cover_it(tmp_path, catalog):
    document = {
        "name": "buckets",
        "workloads": [{"name": "mixed", "model": "llama-3.1-8b", "peak_rps": 50, "slo": {"ttft_ms": 2000},
                       "buckets": [{"isl_tokens": 500, "osl_tokens": 200, "share": 0.7},
                                   {"isl_tokens": 4000, "osl_tokens": 500, "share": 0.3}]}],
        "sites": {"on_prem": {"systems": ["dgx-h100"]}},
        "perf": {"sources": ["modeled"]},
    }  # fmt: skip
    result = plan_file(write_scenario(tmp_path, document))
    assert result.status == "optimal"
    for route in result.routing:
        assert route.engine_isl >= route.bucket_isl and route.engine_osl >= route.bucket_osl
    sent = {(r.bucket_isl, r.bucket_osl): 0.0 for r in result.routing}
    for r in result.routing:
        sent[(r.bucket_isl, r.bucket_osl)] += r.rps
    assert sent == pytest.approx({(500, 200): 35.0, (4000, 500): 15.0})


def test_bucket_shares_must_add_up(cli, tmp_path):
    document = {
        "name": "bad", "workloads": [{"name": "m", "model": "llama-3.1-8b", "peak_rps": 5,
                                      "buckets": [{"isl_tokens": 500, "osl_tokens": 200, "share": 0.7}]}],
        "sites": {"on_prem": {"systems": ["dgx-h100"]}},
    }  # fmt: skip
    code, _, err = cli("validate", write_scenario(tmp_path, document))
    assert code == 2 and "shares must add up to 1" in err


def test_period_hours_cannot_exceed_a_year(cli, tmp_path, hybrid_catalog):
    document = hybrid_scenario("cloud")
    document["periods"][1]["hours_per_year"] = 7000
    code, _, err = cli("validate", write_scenario(tmp_path, document), "--catalog", hybrid_catalog)
    assert code == 2 and "periods" in err and "8760" in err


# ---------------------------------------------------------------- solvers agree
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets())
def test_three_solvers_agree_on_the_optimum(fleet):
    systems, rows, scenario = fleet
    objectives = {}
    for solver in ("cbc", "highs", "ortools"):
        scenario["solver"] = {"name": solver}
        result, catalog, loaded = solve(systems, rows, scenario)
        assert result.status == "optimal"
        check_plan_covers_demand(result, loaded, catalog)
        objectives[solver] = result.objective_usd_per_year
    assert objectives["highs"] == pytest.approx(objectives["cbc"], rel=1e-6, abs=0.01)
    assert objectives["ortools"] == pytest.approx(objectives["cbc"], rel=1e-6, abs=0.01)


def test_a_diagnosis_never_quotes_a_minimum_from_a_stopped_re_solve(limited, monkeypatch):
    """Re-solves stopped by their time limit prove only their bound: the message quotes it as a lower bound."""
    import planner.optimize as optimize

    real = optimize.solve_model

    def stopped_with_a_bound(model, solver, limit):
        outcome = real(model, solver, limit)
        if outcome.status != "optimal":
            return outcome
        value = pulp.value(model.problem.objective)
        return optimize.SolveOutcome("feasible", 0.1, outcome.seconds, best_bound=0.99 * value)

    monkeypatch.setattr(optimize.diagnose, "solve_model", stopped_with_a_bound)  # the diagnosis' re-solves
    with pytest.raises(InfeasiblePlanError) as error:
        limited({"power_kw": 14})
    (message,) = error.value.diagnosis
    assert "needed at minimum" not in message
    assert message == "power budget 14 kW < 14.85 kW, a lower bound on what is needed (the re-solve stopped at its time limit)"


def test_the_batch_ladder_caps_table_rows_too(tmp_path, catalog):
    # NIM rows for llama-3.3-70b TP2 fp8, 5000/500 reach concurrency 25 within ITL 40 ms; a ladder up to 16 may not
    document = {
        "name": "ladder",
        "workloads": [{"name": "summ", "model": "llama-3.3-70b", "isl_tokens": 5000, "osl_tokens": 500,
                       "peak_rps": 10, "slo": {"ttft_ms": 1000, "itl_ms": 40}}],
        "sites": {"on_prem": {"systems": ["dgx-h100"]}},
        "perf": {"sources": ["measured", "interpolated"]},
    }  # fmt: skip
    from planner.optimize import plan

    wide = plan(load_scenario(write_scenario(tmp_path, document, "wide.yaml"), catalog), catalog)
    assert max(a.concurrency for w in wide.workloads for a in w.assignments) == 25
    narrow = plan(load_scenario(write_scenario(tmp_path, {**document, "engine": {"max_batch_ladder": [8, 16]}}, "narrow.yaml"),
                                catalog), catalog)  # fmt: skip
    assert max(a.concurrency for w in narrow.workloads for a in w.assignments) <= 16
    assert narrow.objective_usd_per_year >= wide.objective_usd_per_year


def test_compare_prices_candidates_once_and_reports_the_gap(cli, monkeypatch):
    import planner.candidates as candidates

    calls = []
    real = candidates.enumerate_candidates
    monkeypatch.setattr(candidates, "enumerate_candidates", lambda *a, **k: calls.append(1) or real(*a, **k))
    code, out, err = cli("compare", SCENARIOS / "daily-hybrid.yaml", "--json")
    assert code == 0, err
    sides = json.loads(out)["deployments"]
    assert [s["deployment"] for s in sides] == ["on-prem", "cloud", "hybrid"] and len(calls) == 1
    assert all(s["mip_gap"] == 0.0 and s["status"] == "optimal" and s["solve_seconds"] >= 0 for s in sides)


# ---------------------------------------------------------------- a variant limit that does not bind changes nothing
# Day chat (llama-3-8b) runs in the day period only, night batch (mistral-7b) in the night period only; nodes are
# bought, shared across models and not reconfigured, so each configuration has one unit count for the year. Two
# variants are needed; a limit of 2 must not change the optimum. It did: the limit's per-period bound capped a
# year-round unit count at the quiet period's bound (1 unit), a wrong optimum called optimal.
def test_a_variant_limit_that_does_not_bind_leaves_the_year_round_optimum(tmp_path):
    catalog = make_catalog(tmp_path, [on_prem_system("rack", "H100-SXM-80GB", 50_000.0)],
                           [node_row("llama-3-8b", "H100-SXM-80GB", 1000, 100, 10.0),
                            node_row("mistral-7b", "H100-SXM-80GB", 1000, 100, 10.0)])  # fmt: skip

    def planned(limits):
        document = {
            "name": "day-night", "deployment": "on-prem", "perf": {"sizing": "closed-loop"},
            "workloads": [{"name": "day", "model": "llama-3-8b", "isl_tokens": 1000, "osl_tokens": 100, "peak_rps": 40,
                           "slo": {"ttft_ms": 500}},
                          {"name": "night", "model": "mistral-7b", "isl_tokens": 1000, "osl_tokens": 100,
                           "peak_rps": 30, "slo": {"ttft_ms": 500}}],
            "periods": [{"name": "day", "hours_per_year": 4380, "demand_factor": {"day": 1.0, "night": 0.0}},
                        {"name": "night", "hours_per_year": 4380, "demand_factor": {"day": 0.0, "night": 1.0}}],
            "fleet": {"reconfigure_between_periods": False, "share_nodes_across_models": True},
            "sites": {"on_prem": {"systems": ["rack"], "amortization_years": 1, "usd_per_kwh": 0}},
            "limits": limits,
        }  # fmt: skip
        return plan_file(write_scenario(tmp_path, document, f"s{len(limits)}.yaml"), catalog)

    free, limited = planned({}), planned({"max_engine_variants": 2})
    # 4 nodes for the day chat and 3 for the night batch, side by side all year: 7 x 50,000
    assert free.status == limited.status == "optimal"
    assert free.objective_usd_per_year == pytest.approx(350_000)
    assert limited.objective_usd_per_year == pytest.approx(free.objective_usd_per_year)


@pytest.mark.parametrize("deployment", ["on-prem", "cloud", "hybrid"])
def test_peak_concurrent_nodes_are_what_runs_at_once(tmp_path, hybrid_catalog, deployment):
    """The compare table's peak nodes and GPUs, recounted from the plan lines: bought/reserved/spare nodes plus the
    busiest period's on-demand ones (hybrid: 2 bought + 8 rented at peak = 10 nodes, 80 GPUs)."""
    result = plan_file(write_scenario(tmp_path, hybrid_scenario(deployment)), hybrid_catalog)
    fixed = [line for line in result.lines if line.role != "on-demand"]
    periods = {line.period for line in result.lines if line.role == "on-demand"} or {"all"}
    nodes = max(sum(line.nodes for line in result.lines if line.role == "on-demand" and line.period == p) for p in periods)
    gpus = max(sum(line.gpus for line in result.lines if line.role == "on-demand" and line.period == p) for p in periods)
    assert result.totals.peak_concurrent_nodes == sum(line.nodes for line in fixed) + nodes
    assert result.totals.peak_concurrent_gpus == sum(line.gpus for line in fixed) + gpus == result.totals.gpus
    assert result.totals.peak_concurrent_nodes <= result.totals.nodes
    if deployment == "hybrid":
        assert (result.totals.peak_concurrent_nodes, result.totals.peak_concurrent_gpus) == (10, 80)


def test_compare_without_a_cloud_site_plans_cloud_and_hybrid_on_instances_of_the_same_gpus(cli):
    """The seeds' contact center has an on-prem site only: compare plans cloud and hybrid on the catalog's priced
    instances of its GPUs (H100), says so, and each side's plan is re-solved from the same candidates."""
    code, out, err = cli("compare", SCENARIOS / "contact-center.yaml", "--json")
    assert code == 0, err
    sides = {s["deployment"]: s for s in json.loads(out)["deployments"]}
    assert list(sides) == ["on-prem", "cloud", "hybrid"]
    assert sides["on-prem"]["note"] is None
    catalog = load_catalog()
    for deployment in ("cloud", "hybrid"):
        note = sides[deployment]["note"]
        assert "no cloud site" in note and "H100-SXM-80GB" in note
        for system in sides[deployment]["nodes_by_system"]:
            assert catalog.systems[system].gpu == "H100-SXM-80GB"
    assert all(catalog.systems[s].kind == "cloud" for s in sides["cloud"]["nodes_by_system"])
    # hybrid may use both sites: never dearer than either alone
    assert sides["hybrid"]["objective_usd_per_year"] <= min(sides["on-prem"]["objective_usd_per_year"],
                                                            sides["cloud"]["objective_usd_per_year"]) + 0.05
    code, out, _ = cli("compare", SCENARIOS / "contact-center.yaml")
    assert code == 0 and "Note (cloud, hybrid): the scenario has no cloud site" in out


def test_compare_of_a_cloud_only_scenario_weighs_the_catalogs_servers_of_the_same_gpus(cli):
    # both ways (issue 49): a cloud scenario is compared with buying the catalog's priced servers of its GPUs
    code, out, err = cli("compare", SCENARIOS / "disaggregated-serving.yaml", "--json")
    assert code == 0, err
    sides = {s["deployment"]: s for s in json.loads(out)["deployments"]}
    catalog = load_catalog()
    gpus = {catalog.systems[s].gpu for s in sides["cloud"]["nodes_by_system"]}
    for deployment in ("on-prem", "hybrid"):
        assert sides[deployment]["status"] in ("optimal", "feasible")
        note = sides[deployment]["note"]
        assert "no on-prem site" in note and "at catalog prices" in note
    assert all(catalog.systems[s].kind == "on-prem" and catalog.systems[s].gpu in gpus | {
        catalog.systems[c].gpu for c in catalog.systems if catalog.systems[c].kind == "cloud"}
        for s in sides["on-prem"]["nodes_by_system"])  # fmt: skip
    assert sides["hybrid"]["objective_usd_per_year"] <= min(sides["on-prem"]["objective_usd_per_year"],
                                                            sides["cloud"]["objective_usd_per_year"]) + 0.05


def test_a_site_the_catalog_cannot_supply_is_not_compared_and_says_why(cli, tmp_path):
    document = yaml.safe_load((SCENARIOS / "disaggregated-serving.yaml").read_text())
    document["sites"] = {"cloud": {"systems": ["aws-g6e.48xlarge"]}}  # L40S: no priced L40S server in the catalog
    document["fleet"] = {k: v for k, v in (document.get("fleet") or {}).items() if k != "disaggregated"} or None
    if document["fleet"] is None:
        del document["fleet"]
    path = tmp_path / "l40s.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    code, out, err = cli("compare", path, "--json")
    sides = {s["deployment"]: s for s in json.loads(out)["deployments"]}
    for deployment in ("on-prem", "hybrid"):
        assert sides[deployment]["status"] == "not compared"
        assert "no priced on-prem servers of L40S-48GB" in sides[deployment]["note"]
    code, _, err = cli("plan", path, "--deployment", "on-prem")
    assert code == 2 and "--deployment: on-prem: the scenario has no on-prem site" in err and "--systems" in err


def test_compare_takes_a_saved_plan_for_its_deployment(cli, tmp_path):
    code, out, err = cli("plan", SCENARIOS / "contact-center.yaml", "--json")
    assert code == 0, err
    document = json.loads(out)  # its figures are recomputed and must agree (tests/test_plan_files_recomputed.py)
    saved = tmp_path / "edited.json"
    saved.write_text(json.dumps(document))
    code, out, err = cli("compare", SCENARIOS / "contact-center.yaml", "--plan", saved, "--json")
    assert code == 0, err
    sides = {s["deployment"]: s for s in json.loads(out)["deployments"]}
    assert sides["on-prem"]["objective_usd_per_year"] == document["objective_usd_per_year"]
    assert "the saved plan (--plan), not re-solved" in sides["on-prem"]["note"]
    assert sides["hybrid"]["objective_usd_per_year"] <= document["objective_usd_per_year"]  # re-solved: the optimum


def test_the_time_limit_bounds_the_re_solves_after_the_solve(limited, monkeypatch):
    """--time-limit is shared: a costly-limit re-solve gets what the solve left of it, and none starts when nothing
    is left (the budget then counts as binding where the plan uses it up, as for an unproven plan)."""
    import time as time_module

    import planner.optimize.diagnose as diagnose

    given = []
    real = diagnose.solve_model
    monkeypatch.setattr(diagnose, "solve_model", lambda model, solver, limit: given.append(limit) or real(model, solver, limit))
    limited({"power_kw": 24})
    assert given and all(0 < limit <= 60 for limit in given)
    given.clear()
    start, calls = time_module.monotonic(), []

    def clock() -> float:  # the solve sets its deadline at the first reading; an hour has passed at every other
        calls.append(1)
        return start if len(calls) == 1 else start + 3600

    monkeypatch.setattr(time_module, "monotonic", clock)
    result = limited({"power_kw": 24})
    assert given == [] and result.status == "optimal"
