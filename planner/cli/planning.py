"""Commands that plan a scenario and say what it holds: simulate, plan, compare, bom, report, validate."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import (
    EXIT_SLO_MISSED,
    EXIT_UNDECIDED,
    Balancer,
    CatalogOption,
    DebugOption,
    DeploymentOption,
    DurationOption,
    EnginesOption,
    JsonOption,
    PerfSourceOption,
    PlanFileOption,
    PrecisionsOption,
    ProgressMode,
    ProgressOption,
    ScenarioArgument,
    SeedsOption,
    SolverOption,
    SystemsOption,
    TimeLimitOption,
    TimeUnit,
    _check_output,
    _examples,
    _finite,
    _overrides,
    _progress,
    _run,
    _simulation_options,
    _verify_options,
    _stdout,
    _write_text,
    api,
    app,
    files,
    json_out,
    text,
)
from planner.errors import PlannerInputError


@app.command(epilog=_examples(
    "planner simulate scenarios/contact-center.yaml --duration 120",
    "planner simulate scenarios/daily-hybrid.yaml --seeds 3 --arrival-cv 2 --json",
    "planner plan scenarios/llama3-8b-assistant.yaml --json > plan.json && "
    "planner simulate scenarios/llama3-8b-assistant.yaml --plan plan.json",
))
def simulate(
    scenario: ScenarioArgument,
    plan_file: PlanFileOption = None,
    duration: DurationOption = None,
    seeds: SeedsOption = 1,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Random seed of the first run (>= 0).")] = 0,
    balancer: Annotated[Balancer, typer.Option("--balancer", help="Load balancer across engine instances (docs/simulation.md).")] = Balancer.round_robin,
    trace: Annotated[Path | None, typer.Option("--trace", help="Replay this request trace (CSV/JSONL: arrival time, "
                                                                  "input and output tokens) instead of random arrivals.")] = None,
    workload: Annotated[str | None, typer.Option("--workload", help="The workload the trace is of (needed with several).")] = None,
    period: Annotated[str | None, typer.Option("--period", help="The period whose fleet serves the trace (default: "
                                                                   "the workload's busiest).")] = None,
    time_unit: Annotated[
        TimeUnit, typer.Option("--time-unit", help="Unit of the trace's numeric timestamps (auto: seconds where that reads as traffic, else asks).")
    ] = TimeUnit.auto,
    length_cv: Annotated[float, typer.Option("--length-cv", callback=_finite, min=0.0, max=10.0,
                                             help="Spread of request lengths without a trace: lognormal with the "
                                                  "bucket's mean and this coefficient of variation (0: fixed), served "
                                                  "up to the model's context.")] = 0.0,
    arrival_cv: Annotated[float, typer.Option("--arrival-cv", callback=_finite, min=0.1, max=10.0,
                                              help="Burstiness of arrivals: Gamma inter-arrival times with this "
                                                   "coefficient of variation (1: Poisson).")] = 1.0,
    token_budget: Annotated[int | None, typer.Option("--token-budget", min=16, max=1_000_000,
                                                     help="Tokens an engine iteration takes (decodes + prompt chunks); "
                                                          "default: the scenario's engine.token_budget.")] = None,
    json: JsonOption = False,
    solver: SolverOption = None,
    time_limit: TimeLimitOption = None,
    catalog: CatalogOption = None,
    progress_mode: ProgressOption = ProgressMode.auto,
    debug: DebugOption = False,
) -> None:
    """Run the plan's fleet at each period's peak (or on a trace); report latency percentiles, token gaps, SLO attainment and a verdict per limit at the scenario's percentile."""

    def action() -> None:
        import time as time_module

        document = _plan_document(plan_file)
        options = _simulation_options(duration, seeds, seed, balancer, length_cv, arrival_cv, token_budget, workload, period)
        started = time_module.perf_counter()
        with _progress(progress_mode, json, "simulating (workload x period)") as progress:
            planned, checks = api.simulate(scenario, catalog, options, document, solver.value if solver else None,
                                           time_limit, trace, time_unit.value, progress)  # fmt: skip
        if json:
            sys.stdout.write(json_out.dumps(json_out.simulation_document(checks)))
        else:
            text.print_simulation(checks, _stdout(), time_module.perf_counter() - started, planned)

    _run(action, debug, json, time_limit)


@app.command(epilog=_examples(
    "planner plan scenarios/contact-center.yaml",
    "planner plan scenarios/chat-and-summarize.yaml --verify --repair --progress plain",
    "planner plan scenarios/contact-center.yaml --perf-margin 0.2 --json > plan.json",
))
def plan(
    scenario: ScenarioArgument,
    json: JsonOption = False,
    verify: Annotated[bool, typer.Option("--verify", help="Simulate the plan under Poisson arrivals: each limit holds, MISSES or is "
                                                        "inconclusive; exit code 5 when one is conclusively missed, 6 "
                                                        "when none is but one is inconclusive.")] = False,
    allow_inconclusive: Annotated[bool, typer.Option("--allow-inconclusive", help="With --verify: exit 0 when no limit "
                                                     "is missed but one is inconclusive (a gate fails on it otherwise, "
                                                     "exit code 6).")] = False,
    repair: Annotated[bool, typer.Option("--repair", help="With --verify: add the cheapest capacity until no simulated "
                                                           "limit is conclusively missed, and say what was added and "
                                                           "why (inconclusive ones are reported, not repaired).")] = False,
    duration: DurationOption = None,
    seeds: SeedsOption = 1,
    balancer: Annotated[Balancer | None, typer.Option("--balancer", help="With --verify: the load balancer across a "
                                                      "pool's instances. Default random: each instance's arrivals Poisson "
                                                      "at its share, as the plan sizes it and a Kubernetes Service spreads "
                                                      "them; round-robin (NGINX, Envoy) is more regular and does better "
                                                      "(docs/simulation.md).", show_default=False)] = None,
    perf_margin: Annotated[
        float | None,
        typer.Option("--perf-margin", callback=_finite, help="Robust plan: derate every throughput by this fraction (e.g. 0.2)."),
    ] = None,
    confidence: Annotated[
        float | None,
        typer.Option("--confidence", callback=_finite, help="Robust plan: size each modeled line at the pessimistic "
                     "edge of its expected-error band covering this share of its class's held-out errors (e.g. 0.8)."),
    ] = None,
    perf_source: PerfSourceOption = None,
    deployment: DeploymentOption = None,
    systems: SystemsOption = None,
    precisions: PrecisionsOption = None,
    engines: EnginesOption = None,
    solver: SolverOption = None,
    time_limit: TimeLimitOption = None,
    catalog: CatalogOption = None,
    progress_mode: ProgressOption = ProgressMode.auto,
    executor: Annotated[str | None, typer.Option(
        "--executor", help="Where engine curves are priced: process (forked workers on this machine; default) or ray "
        "(tasks on the Ray cluster at RAY_ADDRESS, else a local one; pip install '.[ray]'). The plan is the same.")] = None,
    debug: DebugOption = False,
) -> None:
    """Size the fleet: the cheapest node counts that serve every workload's peak within its latency limits."""

    def action() -> None:
        if repair and not verify:  # refused before any solving
            raise PlannerInputError("--repair", "repair", "works with --verify (it repairs what the simulation finds)")
        if balancer is not None and not verify:
            raise PlannerInputError("--balancer", "balancer", "works with --verify (it balances the simulated pools)")
        if allow_inconclusive and not verify:
            raise PlannerInputError("--allow-inconclusive", "allow_inconclusive", "works with --verify (it decides "
                                    "what an inconclusive simulated verdict exits with)")  # fmt: skip
        overrides = _overrides(deployment, systems, precisions, engines)
        with _progress(progress_mode, json) as progress:
            result = api.plan_file(scenario, catalog, solver.value if solver else None, time_limit, progress, perf_margin,
                                   perf_source, confidence, overrides, executor)  # fmt: skip
        options = _verify_options(duration, seeds, balancer) if verify else None
        repaired = checks = None
        if repair:
            with _progress(progress_mode, json, "simulating and repairing") as progress:
                repaired = api.repair(result, scenario, catalog, options, solver.value if solver else None, time_limit,
                                      progress, perf_margin, perf_source, overrides)  # fmt: skip
            result, checks = repaired.plan, repaired.checks
        elif verify:
            with _progress(progress_mode, json, "simulating (workload x period)") as progress:
                checks = api.verify(result, scenario, catalog, options, progress, overrides)
        if json:
            document = json_out.plan_document(result)
            if overrides:
                document["overrides"] = overrides.as_dict()
            if checks is not None:
                document["verification"] = json_out.simulation_document(checks)
            if repaired is not None:
                document["repair"] = json_out.repair_document(repaired)
            sys.stdout.write(json_out.dumps(document))
            for warning in result.warnings:  # the document holds them; a pipeline's log should too
                print(f"warning: {warning}", file=sys.stderr)
        else:
            if overrides:
                print(f"Overrides for this run: {overrides.describe()}")
            text.print_plan(result, _stdout())
            if checks is not None:
                text.print_simulation(checks, _stdout(), plan=result)
            if repaired is not None:
                text.print_repair(repaired, _stdout())
                print(f"Bill of materials: planner bom {scenario} --format xlsx --out bom.xlsx; "
                      f"report with plots: planner report {scenario} --out report/")  # fmt: skip
        _exit_on_verdict(checks, repaired is not None, allow_inconclusive)

    _run(action, debug, json, time_limit)


def _exit_on_verdict(checks, repaired: bool, allow_inconclusive: bool) -> None:
    """`plan --verify` as a gate: exit 5 when a simulated limit is conclusively missed (after the repair, with
    --repair), 6 when none is but one is inconclusive (a plan the simulation could not confirm is not passed),
    unless --allow-inconclusive."""
    if checks is None:
        return
    from planner.simulate.verdicts import INCONCLUSIVE, MISSES, overall_verdict

    verdict = overall_verdict(checks)
    after = " after the repair" if repaired else ""
    if verdict == MISSES:
        missed = ", ".join(f"{c.workload} ({c.period})" for c in checks if c.verdict == MISSES)
        print(f"verify: a simulated latency limit is conclusively missed{after}: {missed} (exit code {EXIT_SLO_MISSED})",
              file=sys.stderr)  # fmt: skip
        raise typer.Exit(EXIT_SLO_MISSED)
    if verdict == INCONCLUSIVE and not allow_inconclusive:
        undecided = ", ".join(f"{c.workload} ({c.period})" for c in checks if c.verdict == INCONCLUSIVE)
        print(f"verify: no simulated limit is missed{after}, but {undecided} could not be decided: the plan is not "
              f"confirmed (exit code {EXIT_UNDECIDED}; more --seeds or a longer --duration may decide it, "
              "--allow-inconclusive exits 0)", file=sys.stderr)  # fmt: skip
        raise typer.Exit(EXIT_UNDECIDED)


@app.command(epilog=_examples(
    "planner compare scenarios/daily-hybrid.yaml",
    "planner compare scenarios/daily-hybrid.yaml --json --solver highs",
))
def compare(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML file with on_prem and/or cloud sites.")],
    json: JsonOption = False,
    plan_file: PlanFileOption = None,
    systems: SystemsOption = None,
    precisions: PrecisionsOption = None,
    engines: EnginesOption = None,
    solver: SolverOption = None,
    time_limit: TimeLimitOption = None,
    catalog: CatalogOption = None,
    debug: DebugOption = False,
) -> None:
    """Plan on-prem, cloud and hybrid side by side: annual cost, cost per million output tokens, GPUs, peak nodes."""

    def action() -> None:
        overrides = _overrides(None, systems, precisions, engines)
        saved = _plan_document(plan_file)
        results = api.compare(scenario, catalog, solver.value if solver else None, time_limit, overrides, saved)
        if json:
            document = json_out.compare_document(results)
            if overrides:
                document["overrides"] = overrides.as_dict()
            sys.stdout.write(json_out.dumps(document))
        else:
            if overrides:
                print(f"Overrides for this run: {overrides.describe()}")
            text.print_compare(results, _stdout())

    _run(action, debug, json, time_limit)


class BomFormat(str, Enum):
    csv = "csv"
    xlsx = "xlsx"
    md = "md"


@app.command(epilog=_examples(
    "planner bom scenarios/contact-center.yaml",
    "planner bom scenarios/contact-center.yaml --format md",
    "planner bom scenarios/daily-hybrid.yaml --format xlsx --out bom.xlsx",
))
def bom(
    scenario: ScenarioArgument,
    format: Annotated[BomFormat, typer.Option("--format", help="csv | xlsx | md.")] = BomFormat.csv,
    out: Annotated[Path | None, typer.Option("--out", help="Output file (csv and md print to stdout without it).")] = None,
    plan_file: PlanFileOption = None,
    deployment: DeploymentOption = None,
    systems: SystemsOption = None,
    precisions: PrecisionsOption = None,
    engines: EnginesOption = None,
    solver: SolverOption = None,
    time_limit: TimeLimitOption = None,
    catalog: CatalogOption = None,
    progress_mode: ProgressOption = ProgressMode.auto,
    debug: DebugOption = False,
) -> None:
    """Bill of materials of the plan: what to buy or rent, unit and extended prices, totals, assumptions."""

    def action() -> None:
        if format is BomFormat.xlsx and out is None:
            raise PlannerInputError("--out", "out", "an XLSX bill of materials needs --out FILE.xlsx")
        _check_writable(out)
        _check_output(out, lambda: files.scenario_inputs(scenario, catalog, plan_file))
        from planner.report import bom as bom_report

        overrides = _overrides(deployment, systems, precisions, engines)
        document = _plan_document(plan_file)
        with _progress(progress_mode) as progress:
            result = api.bom(scenario, catalog, solver.value if solver else None, time_limit, progress, overrides, document)
        if format is BomFormat.xlsx:
            bom_report.write_xlsx(result, out)
        else:
            content = bom_report.csv_text(result) if format is BomFormat.csv else bom_report.to_markdown(result)
            if out is None:
                sys.stdout.write(content)
            else:
                _write_text(out, content)
        if out is not None:
            print(f"bill of materials written to {out}", file=sys.stderr)

    _run(action, debug, time_limit_s=time_limit)


@app.command(epilog=_examples(
    "planner report scenarios/contact-center.yaml --out report/",
    "planner report scenarios/chat-and-code-decision.yaml --out report/ --verify --seeds 2 --sensitivity",
    "planner plan scenarios/chat-and-summarize.yaml --verify --json > plan.json && "
    "planner report scenarios/chat-and-summarize.yaml --plan plan.json --out report/ --force",
))
def report(
    scenario: ScenarioArgument,
    out: Annotated[Path, typer.Option("--out", help="Folder for report.md, report.html and the PNG plots.")],
    force: Annotated[bool, typer.Option("--force", help="Write into a non-empty folder that holds no previous report.")] = False,
    plan_file: PlanFileOption = None,
    verify: Annotated[bool, typer.Option("--verify", help="Simulate the plan (as `planner plan --verify`) and put the "
                                                        "verdict in the report; without it a --plan file's own "
                                                        "verification is shown, if it has one.")] = False,
    duration: DurationOption = None,
    seeds: SeedsOption = 1,
    sensitivity: Annotated[bool, typer.Option("--sensitivity", help="Add the sensitivity grid (demand x 0.8-1.5, "
                                                                   "throughput x 1 and 0.8): re-plans the scenario "
                                                                   "at each point.")] = False,
    deployment: DeploymentOption = None,
    systems: SystemsOption = None,
    precisions: PrecisionsOption = None,
    engines: EnginesOption = None,
    solver: SolverOption = None,
    time_limit: TimeLimitOption = None,
    catalog: CatalogOption = None,
    progress_mode: ProgressOption = ProgressMode.auto,
    debug: DebugOption = False,
) -> None:
    """Write the decision report: what to buy and why, on-prem vs cloud vs hybrid, latencies against limits, the simulated verdict, assumptions, plots (Markdown + HTML)."""

    def action() -> None:
        from planner.report import document

        if (duration is not None or seeds != 1) and not verify:  # refused before any solving
            raise PlannerInputError("--duration" if duration is not None else "--seeds", "verify",
                                    "works with --verify (it says how to simulate)")  # fmt: skip
        inputs = files.scenario_inputs(scenario, catalog, plan_file)
        files.check_report_folder(out, force, inputs)  # before planning; write_report clears a previous report's files
        overrides = _overrides(deployment, systems, precisions, engines)
        saved = _plan_document(plan_file)
        options = _verify_options(duration, seeds) if verify else None  # as `plan --verify`
        with _progress(progress_mode) as progress:
            planned, decision = api.decision_report(scenario, catalog, solver.value if solver else None, time_limit,
                                                    progress, overrides, saved, options, sensitivity)  # fmt: skip
        written = document.write_report(document.build_report(planned, decision), out, force, inputs)
        verdict = decision.verification.get("verdict") if decision.verification else "not simulated (--verify)"
        print(f"report written to {written[0]} and {written[1]} ({len(written) - 2} plots); simulation: {verdict}")

    _run(action, debug, time_limit_s=time_limit)


MAX_PLAN_BYTES = 64 * 2**20  # a plan of thousands of lines is a few MiB


def _plan_document(plan_file: Path | None) -> dict | None:
    """The JSON of --plan FILE (None without one); a file that is not JSON is refused by name."""
    if plan_file is None:
        return None
    from planner.loading import parse_json, read_bounded_text

    text = read_bounded_text(plan_file, "a plan JSON of `planner plan --json`", MAX_PLAN_BYTES)
    try:
        return parse_json(text, str(plan_file))
    except ValueError as exc:
        raise PlannerInputError(str(plan_file), "", f"not a plan JSON of `planner plan --json`: {str(exc)[:200]}") from None


def _check_writable(path: Path | None) -> None:
    if path is not None and not path.parent.exists():
        raise PlannerInputError("--out", "out", f"folder {path.parent} does not exist")


@app.command(epilog=_examples(
    "planner validate scenarios/chat-and-summarize.yaml",
    "planner validate scenarios/disaggregated-serving.yaml",
))
def validate(
    scenario: ScenarioArgument,
    catalog: CatalogOption = None,
    debug: DebugOption = False,
) -> None:
    """Check a scenario against the catalog and show what was read (tokens, peak rates, limits)."""
    _run(lambda: text.print_validation(api.validate_file(scenario, catalog), _stdout()), debug)


