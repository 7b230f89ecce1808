"""What the plan's text says of each share (issue 49 point 10): a Why line names the period its share belongs to
where the plan has several; the capacity table shows a row per configuration serving a workload under the
workload's 'worst of N configurations' row; a simulated interval cut at 0 reads as the upper bound it is."""

from __future__ import annotations

import dataclasses

import pytest
from rich.console import Console

from planner.api import plan_file
from planner.report.text import print_plan
from planner.simulate.verdicts import LimitCheck
from planner.simulate.wording import describe_check, interval_text
from helpers import write_scenario


def _scenario(periods: list[dict] | None) -> dict:
    document = {
        "name": "periods", "metrics_version": 2, "deployment": "on-prem",
        "workloads": [{"name": "chat", "model": "llama-3.1-8b", "isl_tokens": 1000, "osl_tokens": 200, "peak_rps": 20,
                       "mode": "streaming", "slo": {"ttft_ms": 2000, "itl_ms": 100}, "precisions": ["fp8"]}],
        "sites": {"on_prem": {"systems": ["dgx-h100"]}}, "perf": {"source": "model"},
    }  # fmt: skip
    if periods:
        document["periods"] = periods
    return document


@pytest.fixture(scope="module")
def two_periods(tmp_path_factory):
    periods = [{"name": "day", "hours_per_year": 3000}, {"name": "night", "hours_per_year": 5760, "demand_factor": {"chat": 0.2}}]
    return plan_file(write_scenario(tmp_path_factory.mktemp("periods"), _scenario(periods)))


def test_why_names_the_period_of_each_share_where_the_plan_has_several(two_periods, tmp_path):
    (chat,) = two_periods.workloads
    assert chat.assignments and all(" in day on dgx-h100 " in a.why for a in chat.assignments), chat.why
    one = plan_file(write_scenario(tmp_path, _scenario(None)))
    assert all(" in " not in a.why.split(" on ")[0] for a in one.workloads[0].assignments)  # one period: not named


def test_the_capacity_table_shows_a_row_per_configuration_under_the_workloads_worst(two_periods):
    (chat,) = two_periods.workloads
    first = chat.assignments[0]
    other = dataclasses.replace(first, layout="TP2", tp=2, ttft_ms=(first.ttft_ms or 1.0) * 2, itl_ms=1.0, system="dgx-b200")
    plan = dataclasses.replace(two_periods, workloads=(dataclasses.replace(chat, assignments=(first, other)),))
    console = Console(record=True, width=250)
    print_plan(plan, console)
    shown = console.export_text()
    assert "P50, worst of 2 configurations" in shown
    assert f"{first.layout or f'TP{first.tp}'} fp8 on dgx-h100" in shown and "TP2 fp8 on dgx-b200" in shown
    # one configuration: no rows below the workload's
    console = Console(record=True, width=250)
    print_plan(dataclasses.replace(two_periods, workloads=(dataclasses.replace(chat, assignments=(first,)),)), console)
    assert "worst of" not in console.export_text()


def test_a_simulated_interval_cut_at_zero_reads_as_an_upper_bound():
    assert interval_text(0.0, 3296.4) == "< 3,296"
    assert interval_text(48.14, 55.9) == "48.1-55.9"
    assert interval_text(12.0, float("inf")) == "> 12.0" and interval_text(12.0, None) == "> 12.0"
    assert interval_text(None, None) == ""
    check = LimitCheck("TTFT", 3000.0, 50.0, 1200.0, 0.0, 3296.4, 1, False, "inconclusive")
    assert describe_check(check) == "TTFT P50 1,200 ms (95% < 3,296) vs 3,000 ms: inconclusive"
