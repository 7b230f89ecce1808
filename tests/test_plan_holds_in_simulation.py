"""Issue 29's acceptance, as far as it holds today: a plan sized at percentile P holds at P in a settled multi-seed
simulation of every shipped scenario (no conclusive miss: a limit whose whole interval lies above it), for P in 50,
90, 95 and 99.

Where it does not hold yet the case is marked `xfail(strict=True)` with the measured gap, so that it fails the day
the model catches up (and the mark must go). Where no plan can exist by the rules (a model without a published
architecture has only mean rows, which cannot answer at P90+), the diagnosis must say why.
"""

from __future__ import annotations

import pytest
import yaml

from helpers import SCENARIOS
from planner import api
from planner.errors import InfeasiblePlanError
from planner.simulate import SimulationOptions, simulate_plan

PERCENTILES = (50, 90, 95, 99)
MEAN_ROWS_ONLY = {"contact-center", "daily-hybrid"}  # NeMo 43B: mean rows, no architecture to model a tail
KNOWN_MISSES: dict[tuple[str, int], str] = {}  # (scenario, percentile): what the simulator finds, against the plan's
# Each scenario is planned by the default sizing (requests arriving at random: the seed scenarios' `perf.sizing:
# closed-loop`, the course's method, is taken out; test_the_courses_sizing_misses_under_random_arrivals keeps it).
# Until issue 48 item 0 the Llama 3 8B assistant's P50 was a known miss: one DGX H100 at its row's measured 70.7
# requests/s, TTFT P50 ~3.2 s under Poisson arrivals against 500 ms.
# What the simulator found, against the plan's
# figure. Empty from the open-loop model (issue 29) to issue 34: the closed-loop model had chat-and-summarize's
# summarize TTFT at P90/95/99 639/716/903 ms where the simulator found 1,078/1,038/1,184 (limit 1,000). Since issue
# 34's site costs daily-hybrid P50 missed until the routes were balanced (planner/optimize/balance.py): the night's
# summarize ran on 9 rented and 4 bought nodes of the same engine, the program routed 21.6 requests/s to the rented
# ones (exactly their 9 x 2.4 capacity) and 9.4 to the bought ones (of 9.6), and the simulator, which feeds each
# route's pool its own rate, queued without bound there: TTFT 11.3 s against 3 s. Balanced: 21.46 and 9.54 (99.4%).
SCENARIO_NAMES = ("agent-prefix-cache", "chat-and-code-p95", "chat-and-summarize", "contact-center", "daily-hybrid", "disaggregated-serving",
                  "llama3-8b-assistant")  # fmt: skip


def _cases():
    for name in SCENARIO_NAMES:
        for percentile in PERCENTILES:
            reason = KNOWN_MISSES.get((name, percentile))
            marks = [pytest.mark.xfail(strict=True, reason=f"model optimistic: {reason}")] if reason else []
            yield pytest.param(name, percentile, marks=marks, id=f"{name}-P{percentile}")


@pytest.mark.parametrize("name, percentile", list(_cases()))
def test_a_plan_sized_at_p_holds_at_p_in_simulation(tmp_path, name, percentile):
    document = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text())
    document.get("perf", {}).pop("sizing", None)  # the default sizing
    for workload in document["workloads"]:
        if workload.get("mode") != "offline":
            workload.setdefault("slo", {})["percentile"] = percentile
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    try:
        planned = api.plan_in_context(path)
    except InfeasiblePlanError as error:
        assert name in MEAN_ROWS_ONLY and percentile > 50, str(error)
        assert f"no benchmark row at P{percentile:g}" in str(error) and "give the mean" in str(error)
        return
    checks = simulate_plan(planned.plan, planned.scenario, planned.catalog, SimulationOptions(seeds=2))
    simulated = [c for c in checks if c.verdict != "not simulated"]
    assert len(simulated) == len(checks), [c.workload for c in checks if c not in simulated]  # disaggregated pools too
    misses = [f"{c.workload} ({c.period}): " + "; ".join(f"{k.metric} {k.simulated_ms:,.1f} ms (95% {k.ci_low_ms}-"
                                                          f"{k.ci_high_ms}) vs {k.limit_ms:g}" for k in c.checks if k.verdict == "misses")
              for c in simulated if c.verdict == "misses"]  # fmt: skip
    assert not misses, misses
    assert all(k.percentile == percentile for c in simulated for k in c.checks)


def test_the_courses_sizing_misses_under_random_arrivals_where_the_default_holds():
    """Seed case C2 by the course's method (its scenario's `perf.sizing: closed-loop`): one DGX H100 at the row's
    closed-loop 70.7 requests/s, whose TTFT under Poisson arrivals misses 500 ms conclusively; the plan says what the
    default sizing gives, and that plan holds (test above)."""
    planned = api.plan_in_context(SCENARIOS / "llama3-8b-assistant.yaml")
    assert planned.plan.sizing == "closed-loop" and "under random arrivals" in planned.plan.sizing_note
    (check,) = simulate_plan(planned.plan, planned.scenario, planned.catalog, SimulationOptions(seeds=2))
    assert check.verdict == "misses", check
