"""Issue 34 follow-ups: infrastructure lines carry a kind (the cost breakdown reads it, not the item's name),
shared storage per bought node, a spare fraction beside N + k, one table of bounds for catalog defaults and the
scenario figures that override them, the decode-network warning found by a shared constant, and the engines chart
drawing only the precisions a workload may plan.

Checked against things independent of the code under test: the breakdown against the lines renamed, storage
against TB x USD/TB x a(r, n) by hand, spares against exact rational arithmetic and a brute force over every mix,
the bounds against the catalog's own table at and beyond each end."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import typing
from fractions import Fraction
from types import SimpleNamespace

import matplotlib
import pytest
import yaml
from pydantic import ValidationError

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from helpers import SCENARIOS, make_catalog, node_row, on_prem_system, program_objective, write_scenario  # noqa: E402

from planner import api  # noqa: E402
from planner.api import plan_file, plan_in_context  # noqa: E402
from planner.catalog import DEFAULT_RANGES, CatalogDefaults, load_catalog  # noqa: E402
from planner.infrastructure import BREAKDOWN_OF_KIND, FINANCE_FIELDS, INFRASTRUCTURE_FIELDS, annuity_factor  # noqa: E402
from planner.plan import plan_field_problems, plan_from_document  # noqa: E402
from planner.report import plots  # noqa: E402
from planner.report.bom import build_bom  # noqa: E402
from planner.scenario import InfrastructureSpec, LimitsSpec, OnPremSite  # noqa: E402

ASSISTANT = SCENARIOS / "llama3-8b-assistant.yaml"  # one DGX H100: quick to plan


def _variant(tmp_path, source, change, name="variant.yaml"):
    document = yaml.safe_load(source.read_text())
    change(document)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.fixture(scope="module")
def seed_plan():
    return plan_in_context(SCENARIOS / "contact-center.yaml")


# ---------------------------------------------------------------- 1. the kind of an infrastructure line


def test_every_line_has_a_kind_and_the_breakdown_adds_up_by_kind(seed_plan):
    plan = seed_plan.plan
    kinds = {item.kind for item in plan.infrastructure}
    assert kinds == {"support", "facility", "software", "storage", "rack", "pdu", "fabric", "frontend"}, kinds
    by_kind = {kind: sum(i.annual_cost_usd for i in plan.infrastructure if i.kind == kind) for kind in kinds}
    breakdown = plan.totals.cost_breakdown
    assert breakdown.maintenance_usd == pytest.approx(by_kind["support"], abs=0.01)
    assert breakdown.facility_usd == pytest.approx(by_kind["facility"], abs=0.01)
    assert breakdown.software_usd == pytest.approx(by_kind["software"], abs=0.01)
    site = sum(by_kind[k] for k in ("storage", "rack", "pdu", "fabric", "frontend"))
    assert breakdown.infrastructure_usd == pytest.approx(site, abs=0.05)


def test_the_breakdown_reads_the_kind_not_the_item_name(seed_plan):
    """Lines renamed beyond recognition classify as before; the same names with their kinds swapped do not."""
    from planner.optimize.readback import _totals

    plan, scenario, catalog = seed_plan.plan, seed_plan.scenario, seed_plan.catalog
    renamed = [dataclasses.replace(item, item=f"line {index}") for index, item in enumerate(plan.infrastructure)]
    assert _totals(scenario, None, catalog, list(plan.lines), renamed).cost_breakdown == plan.totals.cost_breakdown
    as_support = [dataclasses.replace(item, kind="support") if item.kind == "software" else item for item in plan.infrastructure]
    moved = _totals(scenario, None, catalog, list(plan.lines), as_support).cost_breakdown
    software = sum(i.annual_cost_usd for i in plan.infrastructure if i.kind == "software")
    assert moved.software_usd == 0 and moved.maintenance_usd == pytest.approx(plan.totals.cost_breakdown.maintenance_usd + software)
    # rentals' start-up and minimum billing lines (issue 49) count as the rented nodes they bill
    assert set(BREAKDOWN_OF_KIND.values()) == {"maintenance", "facility", "software", "infrastructure", "cloud_on_demand",
                                               "cloud_spot"}  # fmt: skip


def test_a_plan_file_without_kinds_still_loads_with_them(seed_plan):
    document = json.loads(json.dumps(seed_plan.plan.to_dict()))
    assert plan_from_document(document) == seed_plan.plan  # the round trip keeps every field, the kind too
    for item in document["infrastructure"]:
        del item["kind"]  # as saved before the field
    old = plan_from_document(document)
    assert [i.kind for i in old.infrastructure] == [
        "other" if i.kind == "storage" else i.kind for i in seed_plan.plan.infrastructure]  # storage came after it
    assert not plan_field_problems(old)


# ---------------------------------------------------------------- 2. shared storage per bought node


def test_the_seed_case_buys_storage_per_node_priced_from_placeholders(seed_plan):
    plan, scenario = seed_plan.plan, seed_plan.scenario
    (storage,) = [item for item in plan.infrastructure if item.kind == "storage"]
    annuity = annuity_factor(0.07, 5)
    assert storage.count == 13 * 10 and storage.unit == "TB" and storage.unit_usd == 500
    assert storage.capex_usd == pytest.approx(130 * 500) and storage.annual_cost_usd == pytest.approx(130 * 500 * annuity, abs=0.01)
    assert storage.origin == "catalog default (placeholder)"
    bom = build_bom(plan, scenario, seed_plan.catalog)
    assert storage.item in bom.placeholders()
    assert {a.name for a in bom.assumptions} >= {"storage_tb_per_node", "storage_usd_per_tb"}


@pytest.mark.parametrize("terabytes, usd_per_tb, spares", [(0, 500, 0), (20, 1000, 0), (4, 250, 1)])
def test_storage_enters_the_program_as_the_plan_prices_it(tmp_path, terabytes, usd_per_tb, spares):
    """The program's objective equals the plan's with the scenario's own storage figures, spares included (a spare
    is a bought node and gets its storage too); 0 TB: no line."""
    def change(document):
        document["sites"]["on_prem"]["infrastructure"] = {"storage_tb_per_node": terabytes, "storage_usd_per_tb": usd_per_tb}
        document["limits"] = {"spare_nodes_per_system": spares}

    seen, planned = program_objective(_variant(tmp_path, ASSISTANT, change))
    plan = planned.plan
    assert seen["objective"] == pytest.approx(plan.objective_usd_per_year, abs=0.05)
    nodes = sum(line.nodes for line in plan.lines if line.site == "on-prem")
    assert nodes == 1 + spares
    lines = [item for item in plan.infrastructure if item.kind == "storage"]
    if terabytes == 0:
        assert not lines
        return
    (storage,) = lines
    assert storage.count == nodes * terabytes and storage.origin == "scenario"
    assert storage.annual_cost_usd == pytest.approx(nodes * terabytes * usd_per_tb * annuity_factor(0.07, 5), abs=0.01)


def test_storage_costs_exactly_its_line(tmp_path):
    """The same plan without storage costs the storage line less, to the cent."""
    base = plan_in_context(ASSISTANT).plan
    none = plan_in_context(_variant(tmp_path, ASSISTANT, lambda d: d["sites"]["on_prem"].update(
        infrastructure={"storage_tb_per_node": 0}))).plan  # fmt: skip
    (storage,) = [item for item in base.infrastructure if item.kind == "storage"]
    assert base.objective_usd_per_year - none.objective_usd_per_year == pytest.approx(storage.annual_cost_usd, abs=0.02)


# ---------------------------------------------------------------- 3. spares: N + k and a fraction


def _spares_by_hand(nodes: int, k: int, fraction: float) -> int:
    """The fewest spares s >= 0 with s >= k and s >= f x nodes, f read as the decimal it is written as."""
    share = Fraction(str(fraction)) * nodes
    return next(s for s in itertools.count() if s >= k and s >= share) if nodes else 0


ONE_SYSTEM = [on_prem_system("node", "H100-SXM-80GB", 1000.0)]
ONE_ROW = [node_row("llama-3-8b", "H100-SXM-80GB", 1000, 100, 10.0)]


@pytest.fixture(scope="module")
def one_system(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("spares")
    catalog = make_catalog(tmp_path, ONE_SYSTEM, ONE_ROW)

    def run(nodes: int, limits: dict):
        document = {
            "name": "spares", "perf": {"sizing": "closed-loop"},
            "workloads": [{"name": "w", "model": "llama-3-8b", "isl_tokens": 1000, "osl_tokens": 100,
                           "peak_rps": 10 * nodes, "slo": {"ttft_ms": 500}}],
            "sites": {"on_prem": {"systems": ["node"], "amortization_years": 1, "usd_per_kwh": 0}},
            "limits": limits,
        }  # fmt: skip
        return plan_file(write_scenario(tmp_path, document, f"spares-{nodes}-{len(limits)}.yaml"), catalog)

    return run


@pytest.mark.parametrize("nodes, k, fraction", [
    (1, 0, 0.05), (19, 0, 0.05), (20, 0, 0.05), (21, 0, 0.05), (30, 0, 0.1), (7, 1, 0.1), (7, 1, 0.3), (13, 2, 0.1),
    (10, 0, 1.0), (3, 2, 0.0),
])  # fmt: skip
def test_spares_are_the_larger_of_k_and_the_fraction_rounded_up(one_system, nodes, k, fraction):
    """One system at 10 rps per node (1,000 USD a node-year): `nodes` serve the demand, the spares come on top."""
    limits = {"spare_fraction": fraction} if fraction else {}
    limits |= {"spare_nodes_per_system": k} if k else {}
    result = one_system(nodes, limits)
    spares = _spares_by_hand(nodes, k, fraction)
    roles = {line.role: line.nodes for line in result.lines}
    assert roles == ({"bought": nodes, "spare": spares} if spares else {"bought": nodes})
    assert result.objective_usd_per_year == pytest.approx(1000.0 * (nodes + spares))
    if spares:
        (note,) = [line.cost_note for line in result.lines if line.role == "spare"]
        if not fraction:
            assert note == f"N+{k} spare"
        elif spares > k:  # the fraction set them
            assert note.startswith(f"spare fraction {fraction:g}: ceil({fraction:g} x {nodes} nodes in use) = {spares}")
        else:
            assert note.startswith(f"N+{k} spare (the larger of it and the spare fraction")


# sys-a: 10 rps a node for 300 USD a year; sys-b: 5 rps for 210 (tests/test_fleet_limits_hybrid_and_periods.py's limit case)
MIX_SYSTEMS = [on_prem_system("sys-a", "H100-SXM-80GB", 300.0, power_kw=10.0, rack_units=8),
               on_prem_system("sys-b", "H200-SXM-141GB", 210.0, power_kw=3.0, rack_units=2)]  # fmt: skip
MIX_ROWS = [node_row("llama-3-8b", "H100-SXM-80GB", 1000, 100, 10.0), node_row("llama-3-8b", "H200-SXM-141GB", 1000, 100, 5.0)]


@pytest.mark.parametrize("rps, k, fraction", [(25, 0, 0.1), (95, 0, 0.1), (95, 1, 0.2), (45, 0, 0.5), (60, 1, 0.25)])
def test_the_spare_fraction_is_priced_into_the_mix_as_a_brute_force_finds(tmp_path, rps, k, fraction):
    """Every mix of A and B nodes that serves the demand, with max(k, ceil(f n)) spares per system in use: the
    program's plan costs what the cheapest of them costs."""
    catalog = make_catalog(tmp_path, MIX_SYSTEMS, MIX_ROWS)
    document = {
        "name": "mix", "perf": {"sizing": "closed-loop"}, "workloads": [{"name": "w", "model": "llama-3-8b", "isl_tokens": 1000, "osl_tokens": 100,
                                      "peak_rps": rps, "slo": {"ttft_ms": 500}}],
        "sites": {"on_prem": {"systems": ["sys-a", "sys-b"], "amortization_years": 1, "usd_per_kwh": 0}},
        "limits": {"spare_nodes_per_system": k, "spare_fraction": fraction},
    }  # fmt: skip
    result = plan_file(write_scenario(tmp_path, document), catalog)
    best = min(
        300 * (a + _spares_by_hand(a, k, fraction)) + 210 * (b + _spares_by_hand(b, k, fraction))
        for a in range(0, rps // 10 + 2) for b in range(0, rps // 5 + 2) if 10 * a + 5 * b >= rps
    )  # fmt: skip
    assert result.objective_usd_per_year == pytest.approx(best)
    for system, count in result.totals.nodes_by_system.items():
        bought = sum(line.nodes for line in result.lines if line.system == system and line.role == "bought")
        assert count == bought + _spares_by_hand(bought, k, fraction)


@pytest.mark.parametrize("fraction", [-0.1, 1.5])
def test_a_spare_fraction_out_of_range_is_refused(fraction):
    with pytest.raises(ValidationError, match="spare_fraction"):
        LimitsSpec(spare_fraction=fraction)


# ---------------------------------------------------------------- 4. one table of bounds


OVERRIDES = [(InfrastructureSpec, name) for name in INFRASTRUCTURE_FIELDS] + [
    (OnPremSite, name) for name in ("amortization_years", "usd_per_kwh", "pue", "utilization_power_factor", *FINANCE_FIELDS)]


@pytest.mark.parametrize("spec, name", OVERRIDES, ids=[name for _, name in OVERRIDES])
def test_a_scenario_figure_takes_the_range_of_its_catalog_default(spec, name):
    """At both ends of DEFAULT_RANGES and just beyond: the scenario's field and the catalog's default agree."""
    low, high, low_allowed = DEFAULT_RANGES[name]
    base = {"systems": ["dgx-h100"]} if spec is OnPremSite else {}
    defaults = load_catalog().defaults.model_dump()

    def accepted(value) -> tuple[bool, bool]:
        try:
            spec(**base, **{name: value})
            scenario = True
        except ValidationError:
            scenario = False
        try:
            CatalogDefaults(**{**defaults, name: {"value": value, "source": "test"}})
            catalog = True
        except ValidationError:
            catalog = False
        return scenario, catalog

    integer = int in typing.get_args(spec.model_fields[name].annotation)
    if integer:  # an integer field: whole numbers, as ints
        low, high = int(low), int(high)
    step = 1 if integer else 1e-3  # just beyond each end
    assert accepted(high) == (True, True)
    assert accepted(high + step) == (False, False)
    assert accepted(low) == (low_allowed, low_allowed)
    assert accepted(low - step) == (False, False)
    if not integer:  # within the end: both take it
        assert accepted(low + step) == (True, True) and accepted(high - step) == (True, True)


# ---------------------------------------------------------------- 5. the decode-network warning


def test_the_decode_network_warning_finds_the_reason_by_its_shared_start():
    """The reason decode_network_problem gives is what decode_placement_warnings looks for, and is said without its
    'disaggregated decode: ' start."""
    from planner.candidates import DECODE_NETWORK_REASON, DECODE_PRUNED, Pruned, CandidateBuilder
    from planner.optimize.readback import decode_placement_warnings
    from planner.scenario import load_scenario

    catalog = load_catalog()
    scenario = load_scenario(SCENARIOS / "disaggregated-serving.yaml", catalog)
    slow = scenario.offers[0].system
    system = catalog.systems[slow]
    slowed = catalog.model_copy(update={"systems": {**catalog.systems, slow: system.model_copy(update={"network_gbit_per_s": 0.001})}})
    reason = CandidateBuilder(scenario, slowed).decode_network_problem(scenario.offers[0])
    assert reason is not None and reason.startswith(DECODE_NETWORK_REASON)
    cset = SimpleNamespace(pruned=[Pruned("w", slow, reason, "data"), Pruned("w", "other", "disaggregated: no network", "data")])
    (warning,) = decode_placement_warnings(cset)
    assert warning == f"{slow} hosts no disaggregated decode pool: {reason.removeprefix(DECODE_PRUNED)}"
    assert warning.split(": ", 1)[1].startswith("its network is")


# ---------------------------------------------------------------- 6. the engines chart's precisions


def _chart_precisions(landscape) -> set[str]:
    figure = plots.landscape_figure(landscape)
    gids = [c.get_gid() for c in figure.axes[0].collections if (c.get_gid() or "").startswith("engines|")]
    plt.close(figure)
    return {gid.split("|")[2] for gid in gids}


@pytest.fixture(scope="module")
def decision():
    return plan_in_context(SCENARIOS / "chat-and-code-decision.yaml")


def test_the_engines_chart_draws_no_fp4_for_a_default_precision_workload(decision):
    """chat-and-code-decision names no precisions: its plans run bf16 and fp8 only, and so does its chart, which
    says what it left out (the B200 has fp4 tensor cores)."""
    landscapes = api.workload_landscapes(decision)
    assert landscapes
    for landscape in landscapes:
        drawn = _chart_precisions(landscape)
        assert drawn and drawn <= {"bf16", "fp8", "None"}, (landscape.workload, drawn)
        assert {p.precision for p in landscape.points} <= {"bf16", "fp8", None}
        assert "not drawn: fp4 (not allowed by default" in landscape.missing_note


def test_the_engines_chart_draws_fp4_where_the_workload_allows_it(tmp_path):
    def change(document):
        for workload in document["workloads"]:
            workload["precisions"] = ["fp4", "fp8"]

    planned = plan_in_context(_variant(tmp_path, SCENARIOS / "chat-and-code-decision.yaml", change))
    landscapes = api.workload_landscapes(planned)
    assert any("fp4" in _chart_precisions(landscape) for landscape in landscapes)
    for landscape in landscapes:
        assert _chart_precisions(landscape) <= {"fp4", "fp8"}
        assert "bf16" in landscape.missing_note and "not in the workload's precisions" in landscape.missing_note
        assert math.isfinite(max(p.tokens_per_gpu for p in landscape.points))
