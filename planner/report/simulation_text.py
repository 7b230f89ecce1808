"""The simulation's verdicts and the repair, as text: the table of workload checks, the overall verdict (and why a
plan sized by the course's closed-loop method may miss under random arrivals), what --repair added."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


def print_simulation(checks, console: Console, wall_s: float | None = None, plan=None) -> None:
    """The table of workload checks (statistics and the verdict of each limit: holds, MISSES, inconclusive), then
    per workload its engines, run and what was done about inconclusive verdicts, then the overall verdict (and, for
    a `plan` sized by the course's closed-loop method that the simulation does not confirm, why: `sizing_line`)."""
    from planner.simulate.verdicts import NOT_SIMULATED
    from planner.simulate.wording import VERDICT_WORDS, describe_check, unserved

    table = Table(title="Simulation (each period at its peak, or the trace)", title_justify="left")
    for column in ("workload", "period", "rps", "engines", "TTFT P50/P95/P99 ms", "token gap P50/P99 ms", "E2E P99 ms",
                   "within limits", "verdict"):  # fmt: skip
        table.add_column(column, justify="left" if column in ("workload", "period", "verdict") else "right")
    for check in checks:
        stats = check.stats
        if stats is None:
            table.add_row(check.workload, check.period, f"{check.rate_rps:,.4g}", str(check.instances), "-", "-", "-", "-",
                          VERDICT_WORDS[NOT_SIMULATED])  # fmt: skip
            continue
        verdicts = [describe_check(c, check.extra_seeds) for c in check.checks]
        lost = unserved(check)
        if lost:
            verdicts.append(lost + ": MISSES")
        verdict = VERDICT_WORDS.get(check.verdict, check.verdict) + (": " + "; ".join(verdicts) if verdicts else "")
        table.add_row(
            check.workload, check.period, f"{check.rate_rps:,.4g}", str(check.instances),
            f"{stats.ttft_ms.p50:,.0f} / {stats.ttft_ms.p95:,.0f} / {stats.ttft_ms.p99:,.0f}",
            f"{stats.itl_ms.p50:,.1f} / {stats.itl_ms.p99:,.1f}",
            f"{stats.e2e_ms.p99:,.0f}", "-" if stats.slo_attainment is None else f"{stats.slo_attainment:.1%}", verdict,
        )  # fmt: skip
    console.print(table)
    for check in checks:
        console.print(f"- {check.workload} ({check.period}): {check.engines}", soft_wrap=True)
        if check.stats is not None:
            stats = check.stats
            spread = f", {check.balancer} balancer" if check.balancer else ""
            run = (f"  {check.duration_s:,.0f} s simulated x {check.seeds} seed(s){spread}, warm-up {stats.warmup_s:,.0f} s excluded; "
                   f"{'settled' if check.settled else 'NOT settled (an interval is wider than 5%: run longer or use --seeds)'}; "
                   f"throughput {stats.throughput_rps:,.4g} rps completed, {stats.mean_in_system:,.1f} requests in system and "
                   f"{stats.mean_queue_length:,.1f} waiting on average, {stats.preemptions:,} preemptions")  # fmt: skip
            console.print(run, soft_wrap=True)
        if check.seeds_note:
            console.print(f"  {check.seeds_note}", soft_wrap=True)
        if check.note:
            console.print(f"  {check.note}", soft_wrap=True)
    simulated = sum(c.requests_simulated for c in checks)
    if wall_s and simulated:
        console.print(f"{simulated:,} requests simulated in {wall_s:.1f} s ({simulated / wall_s:,.0f} per second)")
    console.print(verdict_line(checks), soft_wrap=True)
    if plan is not None and (line := sizing_line(plan, checks)):
        console.print(line, soft_wrap=True)


def sizing_line(plan, checks) -> str:
    """Why a plan sized by the course's method (perf.sizing: closed-loop) can miss in the simulation, which sends
    requests at random, and what sizing for that gives (the plan's sizing note); empty where the plan holds or is
    sized for random arrivals."""
    from planner.simulate.verdicts import HOLDS, overall_verdict

    if plan.sizing != "closed-loop" or overall_verdict(checks) == HOLDS:
        return ""
    at_random = next((part for part in plan.sizing_note.split("; ") if part.startswith("under random arrivals")), "")
    return ("The plan is sized by the course's method (perf.sizing: closed-loop: a closed-loop benchmark's capacity at "
            "the limits, as the seed sizes it); the simulation sends requests at random, which that method does not "
            "size for" + (f": {at_random}" if at_random else "") + ".")


def verdict_line(checks) -> str:
    """One line: the overall verdict and what it means ('inconclusive: ... not a conclusive miss')."""
    from planner.simulate.verdicts import HOLDS, INCONCLUSIVE, MISSES, overall_verdict

    verdict = overall_verdict(checks)
    named = lambda v: ", ".join(f"{c.workload} ({c.period})" for c in checks if c.verdict == v)  # noqa: E731
    if verdict == MISSES:
        return f"Verdict: MISSES: a limit is conclusively missed by {named(MISSES)} (the interval's lower end is above it)"
    if verdict == INCONCLUSIVE:
        return (f"Verdict: inconclusive: no conclusive miss, but {named(INCONCLUSIVE)} could not be decided (an interval "
                "straddles its limit; see the notes above): the plan is not confirmed; not repaired")  # fmt: skip
    if verdict == HOLDS:
        return "Verdict: holds: every simulated limit holds (estimate and the interval's upper end within it)"
    return "Verdict: nothing could be simulated"


def print_repair(repair, console: Console) -> None:
    """What --repair added and why, and why it stopped."""
    stopped = repair.stopped
    if not repair.steps:
        console.print(f"Repair: nothing to add ({stopped}).", soft_wrap=True)
    else:
        plan = repair.plan
        console.print(
            f"Repair: {len(repair.steps)} change(s); annual cost {repair.original_annual_cost_usd:,.0f} -> "
            f"{plan.totals.annual_cost_usd:,.0f} USD, nodes {repair.original_nodes} -> {plan.totals.nodes}; {stopped}",
            soft_wrap=True,
        )  # fmt: skip
    for step in repair.steps:
        console.print(f"- round {step.round}: {step.workload} ({step.period}) because {step.why}: {step.added}",
                      soft_wrap=True)  # fmt: skip
    for line in repair.inconclusive:
        console.print(f"- not repaired (inconclusive): {line}", soft_wrap=True)
