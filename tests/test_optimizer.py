"""The integer program on small catalogs whose answers are worked out by hand."""

from __future__ import annotations

import json
import math

import pytest

from planner.api import plan_file
from planner.errors import InfeasiblePlanError
from planner.optimize import plan
from planner.scenario import load_scenario

from helpers import SCENARIOS, make_catalog, node_row, on_prem_system, write_scenario

# Two systems, two models. Annual cost per node = price (1-year amortization, free power):
#   sys-a 300, sys-b 200.
#   model m1 (llama-3-8b):   10 rps/node on A, 5 on B  -> A is cheaper per rps (30 vs 40)
#   model m2 (llama-2-70b):   4 rps/node on A, 4 on B  -> B is cheaper
# w1 needs 25 rps: 3A = 900, 2A + 1B = 800, 1A + 3B = 900, 5B = 1000  -> 2A + 1B
# w2 needs 7 rps:  2B = 400 (2A = 600)                                 -> 2B
# Total: 2 x sys-a, 3 x sys-b, 1200 USD/year.
MIXED_SYSTEMS = [
    on_prem_system("sys-a", "H100-SXM-80GB", 300.0, power_kw=10.0, rack_units=8),
    on_prem_system("sys-b", "H200-SXM-141GB", 200.0, power_kw=6.0, rack_units=4),
]
MIXED_ROWS = [
    node_row("llama-3-8b", "H100-SXM-80GB", 1000, 100, 10.0),
    node_row("llama-3-8b", "H200-SXM-141GB", 1000, 100, 5.0),
    node_row("llama-2-70b", "H100-SXM-80GB", 1000, 100, 4.0),
    node_row("llama-2-70b", "H200-SXM-141GB", 1000, 100, 4.0),
]


def mixed_scenario(**limits) -> dict:
    return {
        "name": "mixed", "perf": {"sizing": "closed-loop"},
        "workloads": [
            {"name": "w1", "model": "llama-3-8b", "isl_tokens": 1000, "osl_tokens": 100, "peak_rps": 25,
             "slo": {"ttft_ms": 500}},
            {"name": "w2", "model": "llama-2-70b", "isl_tokens": 1000, "osl_tokens": 100, "peak_rps": 7,
             "slo": {"ttft_ms": 500}},
        ],
        "sites": {"on_prem": {"systems": ["sys-a", "sys-b"], "amortization_years": 1, "usd_per_kwh": 0}},
        "limits": limits,
    }  # fmt: skip


@pytest.fixture()
def mixed(tmp_path):
    catalog_dir = make_catalog(tmp_path, MIXED_SYSTEMS, MIXED_ROWS)

    def run(solver="cbc", **limits):
        return plan_file(write_scenario(tmp_path, mixed_scenario(**limits)), catalog_dir, solver=solver)

    return run


@pytest.mark.parametrize("solver", ["cbc", "highs"])
def test_cheapest_answer_mixes_two_system_types(mixed, solver):
    result = mixed(solver=solver)
    assert result.status == "optimal"
    assert result.totals.nodes_by_system == {"sys-a": 2, "sys-b": 3}
    assert result.objective_usd_per_year == pytest.approx(1200)
    w1, w2 = result.workloads
    assert {a.system: a.rps for a in w1.assignments} == pytest.approx({"sys-a": 20, "sys-b": 5})
    assert {a.system: a.rps for a in w2.assignments} == pytest.approx({"sys-b": 7})
    assert w1.capacity_rps == pytest.approx(25) and w2.capacity_rps == pytest.approx(8)


def test_cost_recomputed_from_lines_equals_objective(mixed):
    result = mixed()
    assert sum(line.annual_cost_usd for line in result.lines) == pytest.approx(result.objective_usd_per_year)
    assert result.totals.gpus == 8 * sum(line.nodes for line in result.lines)
    assert result.totals.power_kw == pytest.approx(2 * 10 + 3 * 6)
    assert result.totals.rack_units == 2 * 8 + 3 * 4


def test_rack_limit_changes_the_mix(mixed):
    # 2A + 3B takes 28 RU. With 26 RU: w2 must stay on B (2 x 4 RU, or 2 A = 16 RU); w1 options within 18 RU:
    # 3A = 24 RU too much with 2B (8) -> 32; 2A+1B = 20 + 8 = 28; 1A+3B = 8 + 12 + 8 = 28; 5B = 20 + 8 = 28.
    # None fits 26 RU: 2A (16) + 2B(w2, 8) leaves 2 RU -> infeasible. So at 26 RU the plan is infeasible.
    with pytest.raises(InfeasiblePlanError) as error:
        mixed(rack_units=26)
    assert "rack-unit budget 26 RU < 28 RU needed at minimum" in error.value.diagnosis[0]


def test_power_budget_used_up_at_no_cost_is_not_binding(mixed):
    result = mixed(power_kw=38)  # exactly what the unconstrained optimum draws: used up, but it costs nothing
    assert result.totals.nodes_by_system == {"sys-a": 2, "sys-b": 3}
    assert not any("power budget" in line for line in result.binding_limits)


def test_power_budget_too_small_is_diagnosed(mixed):
    # least power that serves both: w1 on B costs 6 kW per 5 rps, on A 10 kW per 10 rps -> 3A (30) or 2A+1B (26)
    # or 1A+3B (28) or 5B (30); w2: 2B (12) -> minimum 26 + 12 = 38 kW
    with pytest.raises(InfeasiblePlanError) as error:
        mixed(power_kw=30)
    assert error.value.diagnosis == ["power budget 30 kW < 38 kW needed at minimum"]


def test_capex_budget_forces_a_different_mix(mixed):
    # prices equal annual costs here; capex 1200 is the optimum itself, 1100 is infeasible
    assert mixed(capex_usd=1200).objective_usd_per_year == pytest.approx(1200)
    with pytest.raises(InfeasiblePlanError):
        mixed(capex_usd=1100)


def test_headroom_scales_demand(tmp_path):
    catalog_dir = make_catalog(tmp_path, MIXED_SYSTEMS[:1], MIXED_ROWS[:1])
    document = mixed_scenario(headroom_fraction=0.25)
    document["workloads"] = document["workloads"][:1]
    document["sites"]["on_prem"]["systems"] = ["sys-a"]
    result = plan_file(write_scenario(tmp_path, document), catalog_dir)
    assert result.totals.nodes_by_system == {"sys-a": math.ceil(25 * 1.25 / 10)}  # 31.25 rps -> 4 nodes


def test_workload_without_candidate_is_diagnosed(cli, tmp_path):
    path = write_scenario(tmp_path, {
        "name": "no-data",
        "workloads": [{"name": "big", "model": "llama-3.1-405b", "isl_tokens": 1000, "osl_tokens": 100,
                       "peak_rps": 1, "slo": {"ttft_ms": 500}}],
        "sites": {"on_prem": {"systems": ["dgx-h100"]}},
        "perf": {"sources": ["measured", "interpolated"]},
    })  # fmt: skip
    code, out, err = cli("plan", path)
    assert code == 1
    assert "workload big: no candidate can serve it" in err
    assert "dgx-h100: no benchmark row for llama-3.1-405b" in err


def test_modeled_reasons_name_memory_and_latency(cli, tmp_path):
    path = write_scenario(tmp_path, {
        "name": "too-big",
        "workloads": [{"name": "big", "model": "llama-3.1-405b", "isl_tokens": 8000, "osl_tokens": 100,
                       "peak_rps": 1, "slo": {"ttft_ms": 100}}],
        "sites": {"on_prem": {"systems": ["dgx-h100"]}},
    })  # fmt: skip
    code, out, err = cli("plan", path)
    assert code == 1
    assert "workload big: TTFT at P50 100 ms is below the fastest candidate's" in err
    assert "(dgx-h100 TP8 fp8)" in err  # the only configuration that fits 405B on one node is fastest


def test_no_fit_anywhere_is_diagnosed_as_memory(cli, tmp_path):
    path = write_scenario(tmp_path, {
        "name": "too-big",
        "workloads": [{"name": "big", "model": "llama-3.1-405b", "isl_tokens": 8000, "osl_tokens": 100,
                       "peak_rps": 1}],
        "sites": {"cloud": {"systems": ["aws-g6.48xlarge"]}}, "deployment": "cloud",
    })  # fmt: skip
    code, out, err = cli("plan", path)
    assert code == 1
    assert "workload big: does not fit in memory on any allowed system" in err  # 8 x L4 = 192 GB < 203 GB at fp8


def test_latency_limit_below_every_measured_point_is_diagnosed(cli, tmp_path):
    document = {
        "name": "too-fast", "perf": {"sizing": "closed-loop"},  # the rows read as measured (the course's method)
        "workloads": [{"name": "summ", "model": "llama-3.3-70b", "isl_tokens": 5000, "osl_tokens": 500,
                       "peak_rps": 1, "slo": {"ttft_ms": 300}}],
        "sites": {"on_prem": {"systems": ["dgx-h100"]}},
    }  # fmt: skip
    code, _, err = cli("plan", write_scenario(tmp_path, document))
    assert code == 1
    assert "TTFT 406.77 ms > limit 300 ms" in err


def test_limits_pick_the_highest_throughput_point_that_meets_them(catalog, tmp_path):
    # NIM rows for llama-3.3-70b TP2 fp8, 5000/500: ITL <= 40 ms allows concurrency 25 (38.75 ms), not 50 (59.73)
    document = {
        "name": "itl", "perf": {"sizing": "closed-loop"},  # the rows read as measured (the course's method)
        "workloads": [{"name": "summ", "model": "llama-3.3-70b", "isl_tokens": 5000, "osl_tokens": 500,
                       "peak_rps": 10, "slo": {"ttft_ms": 1000, "itl_ms": 40}}],
        "sites": {"on_prem": {"systems": ["dgx-h100"]}},
    }  # fmt: skip
    result = plan(load_scenario(write_scenario(tmp_path, document), catalog), catalog)
    assert {(line.tp, line.precision) for line in result.lines} == {(2, "fp8")}
    line = result.lines[0]
    assert line.max_batch == 25 and line.tp == 2 and line.precision == "fp8"
    rps_per_node = 4 * 623.4 / 500
    assert sum(line.nodes for line in result.lines) == math.ceil(10 / rps_per_node)


def test_cloud_one_period_costs_hours_of_the_year(catalog, tmp_path):
    document = {
        "name": "cloud",
        "deployment": "cloud",
        "perf": {"sizing": "closed-loop"},  # the row read as the course reads it (2.4 rps a node): node-row arithmetic
        "workloads": [{"name": "c", "model": "nemo-43b-gpt", "words_in": 3500, "words_out": 500, "peak_rps": 31,
                       "slo": {"ttft_ms": 3000}}],
        "sites": {"cloud": {"systems": ["aws-p5.48xlarge", "lambda-gpu-8x-h100-sxm5"]}},
    }  # fmt: skip
    result = plan(load_scenario(write_scenario(tmp_path, document), catalog), catalog)
    assert result.totals.nodes_by_system == {"lambda-gpu-8x-h100-sxm5": 13}
    # 13 nodes rented all year, each with its 8 GPUs' software licences (4,500 USD/GPU/year, prorated per hour)
    assert result.objective_usd_per_year == pytest.approx(13 * (31.92 + 8 * 4500 / 8760) * 8760)
    assert result.totals.capex_usd == 0


def test_hybrid_picks_the_cheaper_site(catalog, tmp_path):
    document = {
        "name": "hybrid",
        "deployment": "hybrid",
        "perf": {"sizing": "closed-loop"},  # the row read as the course reads it (2.4 rps a node): node-row arithmetic
        "workloads": [{"name": "c", "model": "nemo-43b-gpt", "words_in": 3500, "words_out": 500, "peak_rps": 31,
                       "slo": {"ttft_ms": 3000}}],
        "sites": {"on_prem": {"systems": ["dgx-h100"]}, "cloud": {"systems": ["aws-p5.48xlarge"]}},
    }  # fmt: skip
    result = plan(load_scenario(write_scenario(tmp_path, document), catalog), catalog)
    # on-prem, per node: 270000 x a(7%, 5 y) + 10.2 kW x 1.58 x 0.0806 x 8760 + support, facility, licences and its
    # share of racks and networks: about 170,000 USD/year < (55.04 + 8 x 4500 / 8760) x 8760 = 518,150
    assert result.totals.nodes_by_system == {"dgx-h100": 13}


def test_on_prem_annual_cost_formula(catalog):
    """Seed 001's 13 DGX H100 at the catalog defaults, recomputed by hand (docs/optimizer.md, "Costs")."""
    scenario = load_scenario(SCENARIOS / "contact-center.yaml", catalog)
    result = plan(scenario, catalog)
    annuity = 0.07 / (1 - 1.07**-5)  # the capex annuity at 7% over 5 years
    per_node = (270_000 * annuity + 10.2 * 1.0 * 1.58 * 0.0806 * 8760  # capital, energy
                + 0.10 * 270_000 + 10.2 * 184.06 * 12 + 8 * 4500  # support, facility, licences
                + 10 * 500 * annuity)  # storage: 10 TB per node at 500 USD/TB (placeholders), as capital  # fmt: skip
    racks = max(math.ceil(13 * 8 / 42), math.ceil(13 * 10.2 / 41))  # 4: by power
    fabric_switches, fabric_links = 4 + 2, 104 + 4 * 32  # 104 ports > 64: 4 leaves (32 down) and 2 spines
    site = racks * (3000 + 2 * 2500) + fabric_switches * 35_000 + fabric_links * 2500 + 15_000 + 26 * 600
    assert racks == 4
    assert result.objective_usd_per_year == pytest.approx(13 * per_node + site * annuity, abs=0.05)


def test_plan_json_has_design_names_and_is_deterministic(cli):
    runs = []
    for _ in range(2):
        code, out, err = cli("plan", SCENARIOS / "chat-and-summarize.yaml", "--json")
        assert code == 0, err
        document = json.loads(out)
        document.pop("solve_seconds")  # wall time: the one field that differs between runs
        runs.append(json.dumps(document, sort_keys=True))
    assert runs[0] == runs[1]
    document = json.loads(out)
    for key in ("status", "objective_usd_per_year", "solve_seconds", "mip_gap", "lines", "totals", "workloads"):
        assert key in document
    for key in ("site", "system", "gpu", "tp", "precision", "max_batch", "engine_isl", "engine_osl", "nodes", "period"):
        assert key in document["lines"][0]
    for key in ("nodes_by_system", "gpus", "capex_usd", "power_kw"):
        assert key in document["totals"]
    for key in ("name", "demand_rps", "capacity_rps", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "percentile", "provenance"):
        assert key in document["workloads"][0]
    assert document["candidates"]["generated"] >= 2
    assert all(set(p) == {"workload", "system", "reason"} for p in document["candidates"]["pruned"])


def test_chat_and_summarize_on_measured_rows(cli_json, tmp_path):
    import yaml

    scenario = yaml.safe_load((SCENARIOS / "chat-and-summarize.yaml").read_text())
    scenario["perf"] = {"sources": ["measured", "interpolated"]}
    document = cli_json("plan", write_scenario(tmp_path, scenario))
    assert {p["system"] for p in document["candidates"]["pruned"]} == {"dgx-b200"}
    chat, summarize = document["workloads"]
    assert chat["demand_rps"] == 170  # poisson.ppf(0.95, 150)
    assert summarize["ttft_ms"] == 834.51 and summarize["tpot_ms"] == 59.73  # concurrency 50 meets TPOT <= 60
    assert document["totals"]["nodes_by_system"] == {"dgx-h100": math.ceil(170 / 70.7) + math.ceil(20 / (4 * 814.37 / 500))}


def test_modeled_b200_competes_where_no_row_exists(cli_json, tmp_path):
    import yaml

    document = cli_json("plan", SCENARIOS / "chat-and-summarize.yaml")
    measured = yaml.safe_load((SCENARIOS / "chat-and-summarize.yaml").read_text())
    measured["perf"] = {"sources": ["measured", "interpolated"]}  # the DGX H100 rows alone: 7 nodes
    measured_only = cli_json("plan", write_scenario(tmp_path, measured))
    assert measured_only["totals"]["nodes_by_system"] == {"dgx-h100": 7}
    assert document["objective_usd_per_year"] <= measured_only["objective_usd_per_year"]
    for workload in document["workloads"]:
        for assignment in workload["assignments"]:
            # B200: the roofline on aiconfigurator's Blackwell kernels (no measured B200 row), and it says so; H100:
            # the calibrated roofline for random arrivals (the node rows state no engine to anchor it on)
            expected = "modeled (aic kernels)" if assignment["system"] == "dgx-b200" else "modeled"
            assert assignment["provenance"] in (expected, "interpolated")


def test_time_limited_solve_is_never_reported_optimal_without_proof():
    # The status comes from the solver: 'optimal' only with sol_status optimal; check the mapping itself.
    import pulp

    from planner.optimize import FleetModel, solve_model

    problem = pulp.LpProblem("tiny", pulp.LpMinimize)
    n = pulp.LpVariable("n", lowBound=0, cat=pulp.LpInteger)
    problem += n
    problem += n >= 2.5
    outcome = solve_model(FleetModel(problem, {"n": n}, {}), "cbc", 10)
    assert outcome.status == "optimal" and outcome.mip_gap == 0.0 and n.value() == 3
    problem.sol_status = pulp.LpSolutionIntegerFeasible
    assert {pulp.LpSolutionIntegerFeasible: "feasible"}[problem.sol_status] == "feasible"


# --- node packing ---------------------------------------------------------------------------------------------------


def _hardware(gpus_per_node=8):
    from planner.optimize import Hardware

    return Hardware(("on-prem", "capex", "box"), "on-prem", "capex", "box", "H100-SXM-80GB", gpus_per_node, 1.0, None,
                    1.0, 1.0, 1, "")  # fmt: skip


def _unit(key, gpus, instances=1):
    from planner.candidates import Candidate

    return Candidate(key=key, site="on-prem", pricing="capex", system="box", gpu="H100-SXM-80GB", gpus_per_node=8,
                     model="m", tp=min(gpus, 8), precision="bf16", max_batch=8, engine_isl=100, engine_osl=10,
                     annual_cost_usd=1.0, usd_per_hour=None, capex_usd=1.0, power_kw=1.0, rack_units=1, cost_note="",
                     gpus_per_instance=gpus, gpus_per_unit=gpus, instances_per_unit=instances,
                     pp=max(gpus // 8, 1))  # fmt: skip


@pytest.mark.parametrize("seed", range(20))
def test_units_of_a_divisibility_chain_pack_whenever_their_gpus_fit(seed):
    """Random units of 1, 2, 4, 8 GPUs and of whole 2- and 3-node instances (pipeline stages), as many as the nodes
    hold: every unit is placed, no node holds more than its GPUs, whole-node units take empty nodes."""
    import random

    from planner.optimize import pack_nodes

    rng = random.Random(seed)
    nodes = rng.randint(1, 12)
    budget, running = nodes * 8, []
    for key, gpus in (("w3", 24), ("w2", 16), ("n8", 8), ("n4", 4), ("n2", 2), ("n1", 1)):
        count = rng.randint(0, budget // gpus)
        budget -= count * gpus
        if count:
            running.append((_unit(key, gpus), count))
    packed = pack_nodes(_hardware(), nodes, running)
    sizes = dict((c.key, c.gpus_per_unit) for c, _ in running)
    used = [sum(n * min(sizes[k], 8) for k, n in content) for content in packed]
    assert len(packed) == nodes and all(u <= 8 for u in used)
    for candidate, count in running:
        placed = sum(n for content in packed for k, n in content if k == candidate.key)
        assert placed == count * max(candidate.gpus_per_unit // 8, 1), candidate.key  # listed on each of its nodes


def test_packing_is_linear_in_the_units():
    """A million one-GPU units into 125,000 nodes (the size of a plan at the schema's largest demand) pack in
    bulk, without a scan per unit."""
    from planner.optimize import pack_nodes

    packed = pack_nodes(_hardware(), 125_000, [(_unit("a", 1), 999_993), (_unit("b", 8), 0)])
    assert sum(n for content in packed for _, n in content) == 999_993
    assert packed[0] == (("a", 8),) and packed[-1] == (("a", 1),)


def test_a_model_that_needs_pipeline_stages_plans(tmp_path):
    """Llama 3.1 405B in bf16 holds in no DGX H100: TP8 over two nodes (PP2) plans, its nodes saying so."""
    path = write_scenario(tmp_path, {
        "name": "pp", "metrics_version": 2,
        "workloads": [{"name": "big", "model": "llama-3.1-405b", "isl_tokens": 4000, "osl_tokens": 300, "peak_rps": 2,
                       "slo": {"ttft_ms": 5000, "tpot_ms": 100}, "precisions": ["bf16"]}],
        "sites": {"on_prem": {"systems": ["dgx-h100"]}}, "perf": {"source": "model"},
    })  # fmt: skip
    result = plan_file(path)
    assert result.status == "optimal" and result.lines
    assert all("PP2" in line.runs and "across 2 nodes" in line.runs for line in result.lines)
    assert sum(line.nodes for line in result.lines) % 2 == 0  # whole two-node instances
