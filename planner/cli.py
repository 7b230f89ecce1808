"""`planner` command line: parses options, calls one API function, prints. No logic lives here.

Exit codes: 0 ok, 1 infeasible plan, 2 bad input (one line on stderr, no traceback; --debug shows it), 3 a defect
of the planner, 4 the solver stopped at its time limit before it found any plan, 5 `plan --verify` (after --repair
when given) found a simulated latency limit conclusively missed (inconclusive verdicts exit 0). A closed stdout
(`planner plan ... | head`) ends the process by SIGPIPE, quietly: shells report 141.
"""

from __future__ import annotations

import math
import os
import sys
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.console import Console
from typer.core import TyperGroup

from planner import deadline
from planner.errors import InfeasiblePlanError, PlannerInputError, SolverStoppedError
from planner.metrics import percentile_problem
from planner.perf.types import DEFAULT_TOKEN_BUDGET, Layout, PerfQuery, SteadyStateError


class _OnFirstUse:
    """A module imported when a command first uses it: `planner --help` and option parsing do not import the
    planner's library (numpy, scipy, PuLP, the performance model)."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attribute: str):
        import importlib

        return getattr(importlib.import_module(self._name), attribute)


api = _OnFirstUse("planner.api")
json_out = _OnFirstUse("planner.report.json_out")
files = _OnFirstUse("planner.report.files")
text = _OnFirstUse("planner.report.text")


class Engine(str, Enum):
    trtllm = "trtllm"
    vllm = "vllm"
    sglang = "sglang"


PRECISION_HELP = "bf16 | fp16 | fp8 | fp4 | w4a16 | w4a8 (4-bit weights, bf16 / fp8 compute)."


def _examples(*commands: str) -> str:
    """A command's --help epilog: runnable examples, paths relative to the planner checkout (scenarios/ holds
    contact-center, llama3-8b-assistant, chat-and-summarize, disaggregated-serving, daily-hybrid and
    sweeps/summarize-tpot). Rich markup: a literal '[' is written '\\['."""
    return "Examples (in the planner checkout):\n\n" + "\n\n".join(f"  {command}" for command in commands)


class _WorkflowOrder(TyperGroup):
    """`planner --help` lists the commands in the order of a planning session, `plan` first (typer would list
    them in the order they are defined); a command missing from ORDER comes last."""

    ORDER = ("plan", "compare", "simulate", "bom", "report", "sensitivity", "sweep", "validate", "catalog", "perf",
             "curve", "peak", "users", "workload", "ingest", "tables")  # fmt: skip

    def list_commands(self, ctx) -> list[str]:
        names = super().list_commands(ctx)
        return sorted(names, key=lambda name: self.ORDER.index(name) if name in self.ORDER else len(self.ORDER))


app = typer.Typer(
    name="planner",
    cls=_WorkflowOrder,
    help="LLM inference fleet sizing and cost: how many of which GPU servers a workload needs.",
    epilog=_examples(
        "planner plan scenarios/contact-center.yaml",
        "planner compare scenarios/daily-hybrid.yaml",
        "planner plan --help   (every command's help ends with examples)",
    ) + "\n\nShell completion: planner --install-completion (bash, zsh, fish, PowerShell), then open a new shell.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

EXIT_INFEASIBLE = 1
EXIT_BAD_INPUT = 2
EXIT_DEFECT = 3  # the performance model could not solve (a planner defect, said as such)
EXIT_STOPPED = 4  # the solver's time limit came before any plan: not infeasible, raise --time-limit
EXIT_SLO_MISSED = 5  # plan --verify [--repair]: a simulated limit is conclusively missed (not when only inconclusive)


def _finite(value: float | None) -> float | None:
    """Every number option must be a finite number: 'inf' and 'nan' parse as floats but plan nothing."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"must be a finite number (got {value})")
    return value

CatalogOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--catalog",
        help="User catalog directory layered over the shipped catalogs (repeatable; a catalog.yaml with "
        "'base: none' makes it standalone).",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
PerfSourceOption = Annotated[
    str | None,
    typer.Option("--perf-source", help="auto (rows, the calibrated roofline, aic where installed for what the roofline would extrapolate) | tables | model | aic."),
]
ScenarioArgument = Annotated[Path, typer.Argument(help="Scenario YAML file.")]
PlanFileOption = Annotated[Path | None, typer.Option(
    "--plan", help="A saved `planner plan --json` (repaired with --verify --repair, or edited) to use as it is, "
    "checked against the scenario (default: plan now).")]
DebugOption = Annotated[bool, typer.Option("--debug", help="Show tracebacks of errors.")]
TimeLimitOption = Annotated[float | None, typer.Option("--time-limit", callback=_finite, min=0.001, max=1e6,
                                                          help="Time limit of the whole command, seconds: loading, candidates, solves and simulation (exit code 4 when reached before a plan). Without it only solves are bounded, by the scenario's solver.time_limit_s.")]


def _percentile(value: float | None) -> float | None:
    """50 to 99.9, as a scenario's slo.percentile; a fraction (0.95) gets 'did you mean 95?'."""
    _finite(value)
    problem = percentile_problem(value) if value is not None else None
    if problem:
        raise typer.BadParameter(problem)
    return value


# the latency limits and their percentile (planner/metrics.py), as perf and curve take them
TtftOption = Annotated[float | None, typer.Option("--ttft-ms", callback=_finite, min=0.0, help="TTFT limit (arrival to first token).")]
TpotOption = Annotated[float | None, typer.Option("--tpot-ms", callback=_finite, min=0.0,
                                                  help="TPOT limit: a request's mean gap between tokens.")]
ItlOption = Annotated[float | None, typer.Option("--itl-ms", callback=_finite, min=0.0,
                                                 help="ITL limit: one gap between consecutive tokens.")]
E2eOption = Annotated[float | None, typer.Option("--e2e-ms", callback=_finite, min=0.0, help="End-to-end limit.")]
PercentileOption = Annotated[float | None, typer.Option(
    "--percentile", callback=_percentile,
    help="Every latency (and limit) at this percentile, 50-99.9 (P50 is the median); default: means.")]
TokenBudgetOption = Annotated[int, typer.Option(
    "--token-budget", min=64, max=1_000_000,
    help="Tokens one engine iteration carries (decodes + prompt chunks; vLLM max_num_batched_tokens).")]


class SolverChoice(str, Enum):
    cbc = "cbc"
    highs = "highs"
    ortools = "ortools"


SolverOption = Annotated[
    SolverChoice | None, typer.Option("--solver", help="MILP solver: cbc (default), highs, ortools (SCIP).")
]


class DeploymentChoice(str, Enum):
    on_prem = "on-prem"
    cloud = "cloud"
    hybrid = "hybrid"


# one run's changes to the scenario (planner.scenario.ScenarioOverrides), echoed in the output
DeploymentOption = Annotated[DeploymentChoice | None, typer.Option(
    "--deployment", help="Override the scenario's deployment for this run: on-prem, cloud or hybrid.")]
SystemsOption = Annotated[str | None, typer.Option(
    "--systems", help="Override the scenario's systems (comma-separated catalog ids; each to the site of its kind).")]
PrecisionsOption = Annotated[str | None, typer.Option(
    "--precisions", help="Override every workload's precisions (comma-separated: bf16, fp8, fp4, w4a16, ...).")]
EnginesOption = Annotated[str | None, typer.Option(
    "--engines", help="Override every workload's serving engines (comma-separated: trtllm, vllm, sglang).")]


def _overrides(deployment: DeploymentChoice | None, systems: str | None, precisions: str | None, engines: str | None):
    """The run's ScenarioOverrides from the options (None when none is given); echoed on stderr."""
    from planner.scenario import ScenarioOverrides

    def listed(text: str | None) -> tuple[str, ...] | None:
        return None if text is None else tuple(part.strip() for part in text.split(",") if part.strip())

    overrides = ScenarioOverrides(deployment.value if deployment else None, listed(systems), listed(precisions),
                                  listed(engines))  # fmt: skip
    if not overrides:
        return None
    print(f"overrides for this run: {overrides.describe()}", file=sys.stderr)
    return overrides


class CatalogKind(str, Enum):
    gpus = "gpus"
    systems = "systems"
    models = "models"
    benchmarks = "benchmarks"
    calibration = "calibration"


def _stdout() -> Console:
    # a pipe or file gets wide lines rather than rich's default 80 columns with clipped cells
    return Console(highlight=False, width=None if sys.stdout.isatty() else 140)


class ProgressMode(str, Enum):
    auto = "auto"
    bar = "bar"
    plain = "plain"
    none = "none"


ProgressOption = Annotated[ProgressMode, typer.Option(
    "--progress", help="Progress on stderr: auto (a bar on a terminal, else one line per stage; none with --json), "
                       "bar, plain (one line per stage, for logs) or none.")]  # fmt: skip


def _seconds(value: float) -> str:
    if value < 60:
        return f"{value:.2f} s" if value < 1 else f"{value:.1f} s"
    minutes, seconds = divmod(round(value), 60)
    return f"{minutes} min {seconds:02d} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


class _Stages:
    """Turns the API's `progress(done, total, phase=None)` calls into stages for a display. A call with a phase
    starts a stage of that name (total None: of unknown length, such as the solve, shown without a count); other
    calls advance the current stage, the first of them starting one named `description`, and a stage that had
    finished starts again (another round) when its count goes back below its total."""

    def __init__(self, description: str, display) -> None:
        self.description, self.display = description, display
        self.name: str | None = None
        self.total: int | None = None
        self.done, self.finished, self.started = 0, False, 0.0

    def __call__(self, done: int, total: int | None = None, phase: str | None = None) -> None:
        import time

        if phase is not None:
            self._start(phase, total, done)
        elif self.name is None:
            self._start(self.description, total, done)
        elif self.finished and total is not None and done < total:
            self._start(self.name, total, done, again=True)
        elif self.total is None and total is not None:  # a counted stage after one of unknown length
            self._start(self.description, total, done)
        elif self.finished:  # the last count said again
            return
        else:
            self.done, self.total = done, total
            if total is not None and done >= total:
                self._finish()
            elif total is not None:
                self.display.advance(self.name, done, total, time.perf_counter() - self.started)

    def _start(self, name: str, total: int | None, done: int, again: bool = False) -> None:
        import time

        self.close()
        self.name, self.total, self.done, self.finished, self.started = name, total, done, False, time.perf_counter()
        self.display.start(name, total, again)
        if total is not None and done >= total:
            self._finish()
        elif total is not None and done:
            self.display.advance(name, done, total, 0.0)

    def _finish(self) -> None:
        import time

        self.finished = True
        self.display.finish(self.name, self.done, self.total, time.perf_counter() - self.started)

    def close(self) -> None:
        """End the current stage (at the next stage, or when the work is over)."""
        if self.name is not None and not self.finished:
            self._finish()


class _PlainLines:
    """A short line per stage on stderr (never stdout): started, done, and for long stages a line at most every
    10% of its steps and 5 s apart, so that a CI log shows the run is alive without a line per step."""

    def __init__(self) -> None:
        self.last_line, self.last_done = 0.0, 0

    @staticmethod
    def _print(line: str) -> None:
        print(f"[planner] {line}", file=sys.stderr, flush=True)

    def start(self, name: str, total: int | None, again: bool) -> None:
        import time

        steps = "" if total is None else f", {total} step{'' if total == 1 else 's'}"
        self._print(f"{name}: started{' again' if again else ''}{steps}")
        self.last_line, self.last_done = time.perf_counter(), 0

    def advance(self, name: str, done: int, total: int, elapsed: float) -> None:
        import time

        now = time.perf_counter()
        if now - self.last_line < 5.0 or total <= 0 or done * 10 // total <= self.last_done * 10 // total:
            return
        left = elapsed / max(done, 1) * (total - done)
        self._print(f"{name.split(' (')[0]}: {done}/{total} ({done * 100 // total}%), {_seconds(elapsed)} elapsed, "
                    f"about {_seconds(left)} left")  # fmt: skip
        self.last_line, self.last_done = now, done

    def finish(self, name: str, done: int, total: int | None, elapsed: float) -> None:
        count = "" if total is None else f"{done}/{total} "
        self._print(f"{name.split(' (')[0]}: {count}done in {_seconds(elapsed)}")


class _Bar:
    """A rich bar on stderr: the stage, the bar, done/total, percentage, elapsed time and ETA; a stage of unknown
    length (the solve) shows a spinner, a pulsing bar and the elapsed time only."""

    def __init__(self, progress) -> None:
        self.progress, self.task = progress, None

    def start(self, name: str, total: int | None, again: bool) -> None:
        # a task per stage: its own clock for elapsed time and ETA, and a total of None (reset keeps the old one)
        if self.task is not None:
            self.progress.remove_task(self.task)
        self.task = self.progress.add_task(name, total=total)

    def advance(self, name: str, done: int, total: int, elapsed: float) -> None:
        self.progress.update(self.task, completed=done, total=total)

    def finish(self, name: str, done: int, total: int | None, elapsed: float) -> None:
        if total is not None:
            self.progress.update(self.task, completed=done, total=total)


def _bar_progress():
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, SpinnerColumn,
                               TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn)  # fmt: skip
    from rich.text import Text

    class KnownTotal(ProgressColumn):
        """A column shown only for a stage of known length: no '0/None' and no ETA while solving."""

        def __init__(self, inner: ProgressColumn) -> None:
            super().__init__()
            self.inner = inner

        def render(self, task):
            return self.inner.render(task) if task.total is not None else Text("")

    return Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), KnownTotal(MofNCompleteColumn()),
        KnownTotal(TaskProgressColumn()), TimeElapsedColumn(), KnownTotal(TimeRemainingColumn()),
        console=Console(stderr=True, force_terminal=True), transient=True, redirect_stdout=False,
    )  # fmt: skip


@contextmanager
def _progress(mode: ProgressMode, json: bool = False, description: str = "pricing candidates (workload x system)"):
    """The `progress(done, total, phase=None)` callback the API reports to, drawn on stderr as `mode` says: auto is
    a bar on a terminal and plain lines otherwise, and nothing with --json (JSON consumers read stdout)."""
    if mode is ProgressMode.auto:
        mode = ProgressMode.none if json else ProgressMode.bar if sys.stderr.isatty() else ProgressMode.plain
    if mode is ProgressMode.none:
        yield None
        return
    if mode is ProgressMode.plain:
        stages = _Stages(description, _PlainLines())
        yield stages
        stages.close()  # not reached on an error: its message says what happened
        return
    with _bar_progress() as bar:  # a bar asked for by name is drawn even where stderr is no terminal
        stages = _Stages(description, _Bar(bar))
        yield stages
        stages.close()


def _write_text(path: Path, text: str) -> None:
    """Write an output file (its folder created), only once the command's work has succeeded, all or nothing."""
    from planner.report.files import write_text_atomic

    write_text_atomic(path, text)


def _check_output(out: Path | None, inputs, flag: str = "--out") -> None:
    """Refuse, before any work, an output path that is a folder or any file the command reads
    (planner.report.files.check_output_path); `inputs()` lists what it reads, called only when there is an output."""
    if out is not None:
        files.check_output_path(out, inputs(), flag)


def _run(action, debug: bool, json: bool = False, time_limit_s: float | None = None) -> None:
    """Run one command body, turning the planner's own errors into messages and exit codes. With --json an
    infeasible or stopped plan is a JSON document on stdout too (the message still goes to stderr). `time_limit_s`
    (--time-limit) bounds the whole body (planner.deadline)."""
    try:
        with deadline.time_limit(time_limit_s):
            action()
    except PlannerInputError as exc:
        if debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except InfeasiblePlanError as exc:
        if debug:
            raise
        print("infeasible: no plan meets the scenario", file=sys.stderr)
        for line in exc.diagnosis:
            print(f"- {line}", file=sys.stderr)
        if json:
            sys.stdout.write(json_out.dumps({"status": "infeasible", "diagnosis": exc.diagnosis}))
        raise typer.Exit(EXIT_INFEASIBLE) from None
    except (SolverStoppedError, deadline.TimeLimitError) as exc:  # the solver's limit, or --time-limit in any stage
        if debug:
            raise
        print(str(exc), file=sys.stderr)
        if json:
            where = {"solver": exc.solver} if isinstance(exc, SolverStoppedError) else {"stage": exc.stage}
            sys.stdout.write(json_out.dumps({
                "status": "stopped", **where, "time_limit_s": exc.time_limit_s, "diagnosis": [str(exc)],
            }))  # fmt: skip
        raise typer.Exit(EXIT_STOPPED) from None
    except SteadyStateError as exc:
        if debug:
            raise
        print(f"internal error: {exc}; a defect of the planner, not of your input (--debug shows where)", file=sys.stderr)
        raise typer.Exit(EXIT_DEFECT) from None
    except (MemoryError, RecursionError) as exc:  # inputs are bounded where they are read: one that was not
        if debug:
            raise
        what = "ran out of memory" if isinstance(exc, MemoryError) else "nested too deep"
        print(f"internal error: the command {what}; an input the planner should have bounded (a defect; --debug "
              "shows where)", file=sys.stderr)  # fmt: skip
        raise typer.Exit(EXIT_DEFECT) from None


class Balancer(str, Enum):
    round_robin = "round-robin"
    power_of_two = "power-of-two"
    least_wait = "least-wait"
    least_tokens = "least-tokens"
    least_outstanding = "least-outstanding"


class TimeUnit(str, Enum):
    auto = "auto"
    s = "s"
    ms = "ms"
    us = "us"
    ns = "ns"


DurationOption = Annotated[float | None, typer.Option(
    "--duration", callback=_finite, min=1.0, max=86_400.0,
    help="Simulated seconds per workload and period (at most a day). Default: until every verdict's 95% interval "
         "is within 5% (doubling from ~6,000 requests, at most 4 h or 1M requests).")]  # fmt: skip
SeedsOption = Annotated[int, typer.Option("--seeds", min=1, max=100, help="Runs with different arrivals (1-100); "
                                                                           "verdicts pool them.")]  # fmt: skip


def _simulation_options(duration, seeds, seed=0, balancer=Balancer.round_robin, length_cv=0.0, arrival_cv=1.0,
                        token_budget=None, workload=None, period=None):  # fmt: skip
    from planner.simulate import SimulationOptions

    return SimulationOptions(duration_s=duration, seeds=seeds, seed=seed, balancer=balancer.value, length_cv=length_cv,
                             arrival_cv=arrival_cv, token_budget=token_budget, trace_workload=workload,
                             trace_period=period)  # fmt: skip


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
                                                  "bucket's mean and this coefficient of variation (0: fixed).")] = 0.0,
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
            _, checks = api.simulate(scenario, catalog, options, document, solver.value if solver else None, time_limit,
                                     trace, time_unit.value, progress)  # fmt: skip
        if json:
            sys.stdout.write(json_out.dumps(json_out.simulation_document(checks)))
        else:
            text.print_simulation(checks, _stdout(), time_module.perf_counter() - started)

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
                                                        "inconclusive; exit code 5 when one is conclusively missed.")] = False,
    repair: Annotated[bool, typer.Option("--repair", help="With --verify: add the cheapest capacity until no simulated "
                                                           "limit is conclusively missed, and say what was added and "
                                                           "why (inconclusive ones are reported, not repaired).")] = False,
    duration: DurationOption = None,
    seeds: SeedsOption = 1,
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
    debug: DebugOption = False,
) -> None:
    """Size the fleet: the cheapest node counts that serve every workload's peak within its latency limits."""

    def action() -> None:
        if repair and not verify:  # refused before any solving
            raise PlannerInputError("--repair", "repair", "works with --verify (it repairs what the simulation finds)")
        overrides = _overrides(deployment, systems, precisions, engines)
        with _progress(progress_mode, json) as progress:
            result = api.plan_file(scenario, catalog, solver.value if solver else None, time_limit, progress, perf_margin,
                                   perf_source, confidence, overrides)  # fmt: skip
        options = _simulation_options(duration, seeds) if verify else None  # the simulator is imported only to run
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
                text.print_simulation(checks, _stdout())
            if repaired is not None:
                text.print_repair(repaired, _stdout())
                print(f"Bill of materials: planner bom {scenario} --format xlsx --out bom.xlsx; "
                      f"report with plots: planner report {scenario} --out report/")  # fmt: skip
        _exit_on_conclusive_miss(checks, repaired is not None)

    _run(action, debug, json, time_limit)


def _exit_on_conclusive_miss(checks, repaired: bool) -> None:
    """`plan --verify`: exit 5 when a simulated limit is conclusively missed (after the repair, with --repair);
    inconclusive verdicts are reported and exit 0."""
    from planner.simulate.verify import MISSES, overall_verdict

    if checks is not None and overall_verdict(checks) == MISSES:
        missed = ", ".join(f"{c.workload} ({c.period})" for c in checks if c.verdict == MISSES)
        print(f"verify: a simulated latency limit is conclusively missed{' after the repair' if repaired else ''}: "
              f"{missed} (exit code {EXIT_SLO_MISSED})", file=sys.stderr)  # fmt: skip
        raise typer.Exit(EXIT_SLO_MISSED)


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
        options = _simulation_options(duration, seeds) if verify else None
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


@app.command(epilog=_examples(
    "planner perf --model llama-3.1-8b --gpu H100 --isl 1024 --osl 128",
    "planner perf --model llama-3.3-70b --gpu H100 --tp 2 --precision fp8 --isl 4096 --osl 512 --concurrency 32",
    "planner perf --model llama-3.3-70b --gpu B200 --tp 2 --precision fp4 --isl 1000 --osl 300 --rate 12 --percentile 95",
))
def perf(
    model: Annotated[str, typer.Option("--model", help="Model id (planner catalog models).")],
    gpu: Annotated[str, typer.Option("--gpu", help="GPU id (planner catalog gpus).")],
    isl: Annotated[int | None, typer.Option("--isl", min=1, max=100_000_000, help="Input tokens.")] = None,
    osl: Annotated[int | None, typer.Option("--osl", min=1, max=100_000_000, help="Output tokens.")] = None,
    tp: Annotated[int | None, typer.Option("--tp", min=1, help="Tensor parallelism.")] = None,
    layout: Annotated[str | None, typer.Option("--layout", help="TP4 | DEP8 (attention DP 8 with EP 8) | TP2EP4 | TP4PP2: the instance's layout (instead of --tp).")] = None,
    engine: Annotated[Engine, typer.Option("--engine", help="Serving engine: its calibrated class (docs/perf-model.md).")] = Engine.trtllm,
    precision: Annotated[str | None, typer.Option("--precision", help=PRECISION_HELP)] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", min=1, max=1_000_000, help="Requests in flight (closed loop, as a benchmark runs).")] = None,
    rate_rps: Annotated[float | None, typer.Option("--rate", min=1e-9, max=1e9, help="Requests/s arriving at random (Poisson, open loop): the engine as a plan sizes it.")] = None,
    ttft_ms: TtftOption = None,
    tpot_ms: TpotOption = None,
    itl_ms: ItlOption = None,
    e2e_ms: E2eOption = None,
    percentile: PercentileOption = None,
    token_budget: TokenBudgetOption = DEFAULT_TOKEN_BUDGET,
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", min=1, help="GPUs per node for normalization.")] = 8,
    json: JsonOption = False,
    perf_source: PerfSourceOption = None,
    catalog: CatalogOption = None,
    debug: DebugOption = False,
) -> None:
    """Latency and throughput of one engine configuration, with provenance.

    No concurrency, no rate and no limits: the max-throughput point. --concurrency answers as a benchmark at that
    many requests in flight measures; --rate as a plan's instance serving that many requests/s arriving at random.
    """

    def action() -> None:
        _check_precision(precision)
        if concurrency is not None and rate_rps is not None:
            raise PlannerInputError("--rate", "rate", "give --concurrency (closed loop) or --rate (open loop), not both")
        parsed = _parse_layout(layout, tp)
        beyond_tp = parsed if parsed is not None and parsed.beyond_tp else None  # plain TP is --tp's
        query = PerfQuery(model, gpu, isl, osl, parsed.tp if parsed else tp, precision, concurrency, ttft_ms, itl_ms,
                          e2e_ms, tpot_ms, token_budget, rate_rps=rate_rps, engine=engine.value, layout=beyond_tp)  # fmt: skip
        answer = api.perf_point(query, catalog, perf_source, percentile)
        if json:
            sys.stdout.write(json_out.dumps(json_out.perf_document(answer, gpus_per_node)))
        else:
            text.print_perf(answer, gpus_per_node, _stdout())

    _run(action, debug, json)


class XAxis(str, Enum):
    tokens_per_gpu = "tokens-per-gpu"
    rps_per_node = "rps-per-node"


class Arrivals(str, Enum):
    closed = "closed"  # a fixed number of requests in flight, as a benchmark runs
    poisson = "poisson"  # requests arriving at random at a rate, as a plan sizes an instance


class YAxis(str, Enum):
    ttft = "ttft"
    tpot = "tpot"
    itl = "itl"
    e2e = "e2e"
    tokens_per_user = "tokens-per-user"  # 1000 / TPOT: with --x tokens-per-gpu, every engine and the Pareto front


@app.command(epilog=_examples(
    "planner curve --model llama-3.3-70b --gpu H100 --tp 2 --precision fp8 --isl 1024 --osl 128 --ttft-ms 500",
    "planner curve --model llama-3.1-8b --gpu H100 --tp 1 --precision bf16 --isl 4096 --osl 512 --png curve.png",
    "planner curve --model llama-3.3-70b --gpu B200 --tp 2 --precision fp4 --isl 1000 --osl 300 --itl-ms 50 "
    "--percentile 95 --arrivals poisson",
    "planner curve --model llama-3.3-70b --gpu H100 --tp 4 --precision fp8 --isl 1000 --osl 300 --itl-ms 30 "
    "--x tokens-per-gpu --y tokens-per-user --png engines.png",
))
def curve(
    model: Annotated[str, typer.Option("--model", help="Model id (planner catalog models).")],
    gpu: Annotated[str, typer.Option("--gpu", help="GPU id (planner catalog gpus).")],
    tp: Annotated[int, typer.Option("--tp", min=1, help="Tensor parallelism.")],
    precision: Annotated[str, typer.Option("--precision", help=PRECISION_HELP)],
    isl: Annotated[int, typer.Option("--isl", min=1, max=100_000_000, help="Input tokens.")],
    osl: Annotated[int, typer.Option("--osl", min=1, max=100_000_000, help="Output tokens.")],
    ttft_ms: TtftOption = None,
    tpot_ms: TpotOption = None,
    itl_ms: ItlOption = None,
    e2e_ms: E2eOption = None,
    percentile: PercentileOption = None,
    token_budget: TokenBudgetOption = DEFAULT_TOKEN_BUDGET,
    x: Annotated[XAxis, typer.Option("--x", help="x axis of the plot.")] = XAxis.tokens_per_gpu,
    y: Annotated[YAxis, typer.Option("--y", help="y axis of the plot.")] = YAxis.ttft,
    png: Annotated[Path | None, typer.Option("--png", help="Write the plot to this PNG file.")] = None,
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", min=1, help="GPUs per node for normalization.")] = 8,
    arrivals: Annotated[Arrivals, typer.Option(
        "--arrivals", help="closed: over concurrency, as a benchmark runs; poisson: over the rate of requests arriving "
                           "at random, as a plan sizes an instance (its points are the plan's).")] = Arrivals.closed,
    json: JsonOption = False,
    perf_source: PerfSourceOption = None,
    catalog: CatalogOption = None,
    debug: DebugOption = False,
) -> None:
    """Latency-throughput curve over concurrency (or, --arrivals poisson, over the rate of requests arriving at random, as a plan sizes an instance), with the limit and the chosen point (optionally as a PNG); --x tokens-per-gpu --y tokens-per-user: every TP x precision on the GPU, tokens/s per GPU vs per user, and the Pareto front."""

    def action() -> None:
        _check_precision(precision)
        _check_output(png, lambda: catalog or (), "--png")
        query = PerfQuery(model, gpu, isl, osl, tp, precision, None, ttft_ms, itl_ms, e2e_ms, tpot_ms, token_budget,
                          arrivals=arrivals.value)  # fmt: skip
        landscape = y == YAxis.tokens_per_user and x == XAxis.tokens_per_gpu
        answer = api.curve(query, gpus_per_node, catalog, perf_source, with_landscape=landscape, percentile=percentile)
        if png is not None:
            from planner.report import plots

            figure = (plots.landscape_figure(answer.landscape, f"{answer.query.gpu} TP{tp} {precision}") if landscape
                      else plots.curve_figure(answer, x.value, y.value))  # fmt: skip
            plots.save_figure(figure, png)
        if json:
            sys.stdout.write(json_out.dumps(json_out.curve_document(answer)))
        else:
            text.print_curve(answer, _stdout())
            if png is not None:
                print(f"plot written to {png}")

    _run(action, debug, json)


def _parse_layout(layout: str | None, tp: int | None) -> Layout | None:
    """--layout as a Layout (None where not given; a plain TP layout is --tp's)."""
    if layout is None:
        return None
    if tp is not None:
        raise PlannerInputError("--layout", "layout", "give --layout or --tp, not both")
    try:
        parsed = Layout.parse(layout)
    except ValueError as error:
        raise PlannerInputError("--layout", "layout", str(error)) from None
    return parsed


def _check_precision(precision: str | None) -> None:
    from planner.catalog import PRECISIONS

    if precision is not None and precision not in PRECISIONS:
        raise PlannerInputError("--precision", "precision", f"unknown precision '{precision}'; allowed: {', '.join(PRECISIONS)}")


@app.command(epilog=_examples(
    "planner peak --mean-rps 64",
    "planner peak --mean-rps 10 --quantile 0.99 --json",
))
def peak(
    mean_rps: Annotated[float, typer.Option("--mean-rps", callback=_finite, help="Mean requests per second.")],
    quantile: Annotated[float, typer.Option("--quantile", callback=_finite, help="Quantile of the Poisson arrival count.")] = 0.95,
    json: JsonOption = False,
    debug: DebugOption = False,
) -> None:
    """Peak requests/s to size for, from a mean rate with Poisson arrivals."""

    def action() -> None:
        answer = api.peak(mean_rps, quantile)
        if json:
            sys.stdout.write(json_out.dumps(json_out.peak_document(answer)))
        else:
            text.print_peak(answer, _stdout())

    _run(action, debug, json)


@app.command(epilog=_examples(
    "planner users --rps 70.7",
    "planner users --rps 70.7 --hours 8 --requests-per-user 3 --json",
))
def users(
    rps: Annotated[float, typer.Option("--rps", callback=_finite, help="Sustained requests per second.")],
    hours: Annotated[float, typer.Option("--hours", callback=_finite, help="Working hours per day.")] = 8.0,
    requests_per_user: Annotated[float, typer.Option("--requests-per-user", callback=_finite, help="Requests per person per day.")] = 3.0,
    json: JsonOption = False,
    debug: DebugOption = False,
) -> None:
    """Requests per day and daily active users a sustained rate serves."""

    def action() -> None:
        answer = api.users(rps, hours, requests_per_user)
        if json:
            sys.stdout.write(json_out.dumps(json_out.users_document(answer)))
        else:
            text.print_users(answer, _stdout())

    _run(action, debug, json)


@app.command("catalog", epilog=_examples(
    "planner catalog systems",
    "planner catalog models --json",
    "planner catalog calibration",
))
def catalog_list(
    kind: Annotated[CatalogKind, typer.Argument(help="What to list.")] = CatalogKind.systems,
    json: JsonOption = False,
    catalog: CatalogOption = None,
    debug: DebugOption = False,
) -> None:
    """List catalog entries (ids and key figures) with their sources."""

    def action() -> None:
        entries = api.catalog_entries(kind.value, catalog)
        if json:
            sys.stdout.write(json_out.dumps({kind.value: entries}))
        else:
            text.print_catalog(kind.value, entries, _stdout())

    _run(action, debug, json)


def _scales(text: str, flag: str) -> tuple[float, ...]:
    try:
        scales = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        scales = ()
    if not scales or len(scales) > 100 or not all(math.isfinite(v) and 0 < v <= 1000 for v in scales):
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise PlannerInputError(flag, flag.lstrip("-"), "expected 1 to 100 comma-separated numbers in (0, 1000] such as "
                                f"1,0.9,0.8 (got '{shown}')")  # fmt: skip
    return scales


@app.command(epilog=_examples(
    "planner sensitivity scenarios/contact-center.yaml",
    "planner sensitivity scenarios/contact-center.yaml --throughput 1,0.8 --demand 1,1.5,2 --out grid.csv",
))
def sensitivity(
    scenario: ScenarioArgument,
    throughput: Annotated[str, typer.Option("--throughput", help="Throughput scales, comma-separated.")] = "1,0.9,0.8,0.7",
    demand: Annotated[str, typer.Option("--demand", help="Demand scales, comma-separated.")] = "1,1.25,1.5,2",
    latency: Annotated[str, typer.Option("--latency", help="Latency-limit scales (0.8 = 20% tighter).")] = "1",
    out: Annotated[Path | None, typer.Option("--out", help="Also write the grid as CSV here.")] = None,
    json: JsonOption = False,
    solver: SolverOption = None,
    time_limit: TimeLimitOption = None,
    catalog: CatalogOption = None,
    progress_mode: ProgressOption = ProgressMode.auto,
    debug: DebugOption = False,
) -> None:
    """Where the nominal plan breaks (less throughput, more demand, tighter limits) and what a plan for each point costs."""

    def action() -> None:
        scales = (_scales(throughput, "--throughput"), _scales(demand, "--demand"), _scales(latency, "--latency"))
        _check_output(out, lambda: files.scenario_inputs(scenario, catalog))
        with _progress(progress_mode, json) as progress:
            result = api.sensitivity(scenario, catalog, *scales, solver.value if solver else None, time_limit, progress)
        if out is not None:
            _write_text(out, json_out.sensitivity_csv(result))
        if json:
            sys.stdout.write(json_out.dumps(json_out.sensitivity_document(result)))
        else:
            text.print_sensitivity(result, _stdout())

    _run(action, debug, json, time_limit)


@app.command("sweep", epilog=_examples(
    "planner sweep scenarios/sweeps/summarize-tpot.yaml",
    "planner sweep scenarios/sweeps/summarize-tpot.yaml --workers 2 --out sweep.csv --plot pareto.png",
))
def sweep_command(
    sweep_file: Annotated[Path, typer.Argument(help="Sweep YAML: a scenario and the fields to vary (grid / monte_carlo).")],
    executor: Annotated[str | None, typer.Option("--executor", help="process (default) or ray.")] = None,
    workers: Annotated[int | None, typer.Option("--workers", min=1, help="Local worker processes (default 1; at most the CPU count).")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Results table: .csv or .parquet.")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Pareto plot PNG (needs pareto: in the sweep).")] = None,
    json: JsonOption = False,
    progress_mode: ProgressOption = ProgressMode.auto,
    debug: DebugOption = False,
) -> None:
    """Plan many variants of a scenario in parallel: one table row per point, and the cost / latency Pareto front."""

    def action() -> None:
        if out is not None and out.suffix.lower() not in (".csv", ".parquet"):
            raise PlannerInputError("--out", "out", f"unknown table type '{out.suffix}'; allowed: .csv, .parquet")
        _check_output(out, lambda: files.sweep_inputs(sweep_file))
        _check_output(plot, lambda: files.sweep_inputs(sweep_file), "--plot")
        cpus = os.cpu_count() or 1
        if workers is not None and workers > cpus:
            print(f"note: --workers {workers} capped at {cpus}, the CPU count of this machine", file=sys.stderr)
        with _progress(progress_mode, json, "planning sweep points") as progress:
            result = api.sweep(sweep_file, executor, workers, progress)
        if out is not None:
            json_out.write_sweep_table(result.records, out)
        if plot is not None:
            if result.sweep.pareto is None:
                raise PlannerInputError(str(sweep_file), "pareto", "--plot needs a pareto: {x: FIELD} entry in the sweep")
            from planner.report.plots import pareto_figure, save_figure

            save_figure(pareto_figure(list(result.records), result.sweep.pareto.x, result.sweep.pareto.y,
                                      list(result.front)), plot)  # fmt: skip
        if json:
            sys.stdout.write(json_out.dumps({"points": list(result.records), "pareto_front": list(result.front)}))
        else:
            text.print_sweep(result, _stdout(), str(out) if out else None)

    _run(action, debug, json)


class IngestTool(str, Enum):
    genai_perf = "genai-perf"
    aiperf = "aiperf"
    vllm = "vllm"
    guidellm = "guidellm"


@app.command(epilog=_examples(
    "planner ingest vllm tests/fixtures/ingest/vllm/sweep --model llama-3.1-8b --gpu H100 --tp 1 --precision bf16",
    "planner ingest vllm tests/fixtures/ingest/vllm/sweep --model llama-3.1-8b --gpu H100 --tp 1 --precision bf16 "
    "--out my-lab/benchmarks/vllm-h100.csv",
    "planner plan scenarios/llama3-8b-assistant.yaml --catalog my-lab   (plans with the rows ingested)",
))
def ingest(
    tool: Annotated[IngestTool, typer.Argument(help="The tool that wrote the results.")],
    paths: Annotated[list[Path], typer.Argument(help="Result files, or directories of a sweep (searched recursively).")],
    model: Annotated[
        str | None, typer.Option("--model", help="Catalog model id or alias (default: the model id the file records).")
    ] = None,
    gpu: Annotated[
        str | None, typer.Option("--gpu", help="Catalog GPU id or alias (H100, h200_sxm; H100:8 = 8 GPUs loaded), or give --node.")
    ] = None,
    tp: Annotated[
        int | None, typer.Option("--tp", min=1, help="Tensor parallelism of the engine measured (required unless the path states it, e.g. _tp8_).")
    ] = None,
    precision: Annotated[
        str | None, typer.Option("--precision", help="Engine precision: bf16, fp16, fp8, fp4, w4a16, w4a8 (required unless the model id or path states it).")
    ] = None,
    node: Annotated[str | None, typer.Option("--node", help="Catalog system, when the benchmark loaded a whole node.")] = None,
    statistic: Annotated[str, typer.Option("--statistic", help="Latency statistic: mean, median, p90, p95, p99.")] = "median",
    isl: Annotated[int | None, typer.Option("--isl", min=1, help="Input length to record (default: from the files).")] = None,
    osl: Annotated[int | None, typer.Option("--osl", min=1, help="Output length to record (default: from the files).")] = None,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", min=1, help="Concurrency of a single run whose file lacks it.")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="CSV to write, e.g. my-catalog/benchmarks/NAME.csv.")] = None,
    json: JsonOption = False,
    catalog: CatalogOption = None,
    debug: DebugOption = False,
) -> None:
    """Turn benchmark results (genai-perf, AIPerf, vllm bench serve, GuideLLM) into catalog benchmark rows.

    Model id, TP and precision are read where the files state them (Hugging Face ids, '_tp8_', '-FP8', 'NVFP4').

    What no file states must be given: nothing is assumed."""
    from planner.ingest import IngestOptions

    def action() -> None:
        options = IngestOptions(model, gpu, tp, precision, node, statistic, isl, osl, concurrency)
        _check_output(out, lambda: [*paths, *(catalog or ())])
        result = api.ingest_results(tool.value, paths, options, out.name if out else "ingested", catalog)
        csv_text = result.csv_text()
        if out is not None:
            _write_text(out, csv_text)
        if json:
            sys.stdout.write(json_out.dumps(json_out.ingest_document(result, str(out) if out else None)))
        elif out is None:
            sys.stdout.write(csv_text)
            for note in result.notes:  # the CSV owns stdout: what to know about it goes to stderr
                print(f"note: {note}" if not note.startswith("warning:") else note, file=sys.stderr)
        else:
            text.print_ingest(result, str(out), _stdout())

    _run(action, debug, json)


tables_app = typer.Typer(help="Benchmark tables made from a perf source.", no_args_is_help=True, epilog=_examples(
    "planner tables build --models llama-3.1-8b --gpus H100 --tp 1,2 --precisions fp8 --out aic-llama.csv",
))
app.add_typer(tables_app, name="tables")


@tables_app.command("build", epilog=_examples(
    "planner tables build --models llama-3.1-8b --gpus H100 --tp 1,2 --precisions fp8 --out aic-llama.csv"
    "   (needs pip install '.\\[aic]')",
))
def tables_build(
    models: Annotated[str, typer.Option("--models", help="Catalog model ids, comma-separated.")],
    gpus: Annotated[str, typer.Option("--gpus", help="Catalog GPU ids, comma-separated.")],
    out: Annotated[Path, typer.Option("--out", help="CSV to write, e.g. catalogs/benchmarks/aic-llama.csv.")],
    source: Annotated[str, typer.Option("--source", help="Perf source: aic.")] = "aic",
    tp: Annotated[str, typer.Option("--tp", help="TP degrees, comma-separated.")] = "1,2,4,8",
    precisions: Annotated[str, typer.Option("--precisions", help="Precisions, comma-separated.")] = "bf16,fp8,fp4",
    concurrency: Annotated[str, typer.Option("--concurrency", help="Concurrencies (batch), comma-separated.")] = "1,8,32,128",
    lengths: Annotated[str, typer.Option("--lengths", help="ISLxOSL pairs, comma-separated.")] = "1024x128,4096x512",
    catalog: CatalogOption = None,
    progress_mode: ProgressOption = ProgressMode.auto,
    debug: DebugOption = False,
) -> None:
    """Materialize table rows (provenance aic:...) over TP x precision x concurrency x ISL/OSL."""

    def action() -> None:
        def integers(text: str, flag: str) -> tuple[int, ...]:
            return tuple(int(v) for v in _scales(text, flag))

        _check_output(out, lambda: catalog or ())
        bad_lengths = PlannerInputError("--lengths", "lengths", f"expected ISLxOSL pairs such as 1024x128,4096x512 (got '{lengths}')")
        try:
            pairs = tuple(tuple(int(x) for x in pair.lower().split("x")) for pair in lengths.split(","))
        except ValueError:
            raise bad_lengths from None
        if not all(len(pair) == 2 and min(pair) > 0 for pair in pairs):
            raise bad_lengths
        grid_points = "estimating grid points (model x GPU x TP x precision x lengths)"
        with _progress(progress_mode, False, grid_points) as progress:
            result = api.tables_build(
                [m.strip() for m in models.split(",")], [g.strip() for g in gpus.split(",")], integers(tp, "--tp"),
                tuple(p.strip() for p in precisions.split(",")), integers(concurrency, "--concurrency"), pairs, source,
                catalog, progress,
            )  # fmt: skip
        _write_text(out, result.csv_text())
        print(f"{len(result.rows)} rows -> {out}; {len(result.skipped)} combinations skipped")
        for line in result.skipped[:20]:
            print(f"- skipped {line}")

    _run(action, debug)


workload_app = typer.Typer(help="Workloads from request traces.", no_args_is_help=True, epilog=_examples(
    "planner workload analyze requests.csv --period hour --engines 3 --model llama-3.1-8b   (your request log)",
))
app.add_typer(workload_app, name="workload")


@workload_app.command("analyze", epilog=_examples(
    "planner workload analyze requests.csv --model llama-3.1-8b --name chat   (your request log)",
    "planner workload analyze requests.csv --model llama-3.1-8b --base scenarios/contact-center.yaml "
    "--out my-scenario.yaml",
))
def workload_analyze(
    trace: Annotated[Path, typer.Argument(help="Request trace: CSV, TSV or JSONL, one request per line.")],
    period: Annotated[str, typer.Option("--period", help="Rate window: second, minute, hour, day or e.g. 15min.")] = "hour",
    engines: Annotated[int, typer.Option("--engines", min=1, help="Engine variants (max ISL/OSL) to choose.")] = 2,
    quantile: Annotated[float | None, typer.Option("--quantile", callback=_finite, help="Peak quantile (default: catalog's).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model id of the workload (planner catalog models).")] = None,
    name: Annotated[str | None, typer.Option("--name", help="Workload name (default: the trace file's stem).")] = None,
    mode: Annotated[str, typer.Option("--mode", help="streaming, sequential or offline.")] = "streaming",
    time_column: Annotated[str | None, typer.Option("--time-column", help="Arrival time column.")] = None,
    input_column: Annotated[str | None, typer.Option("--input-column", help="Input tokens column.")] = None,
    output_column: Annotated[str | None, typer.Option("--output-column", help="Output tokens column.")] = None,
    time_unit: Annotated[
        str, typer.Option("--time-unit", help="Unit of numeric timestamps: auto (seconds where that reads as traffic, else asks), s, ms, us, ns.")
    ] = "auto",
    base: Annotated[Path | None, typer.Option("--base", help="Scenario to add the workload to (needs --model).")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the block (or, with --base, the scenario) here.")] = None,
    json: JsonOption = False,
    catalog: CatalogOption = None,
    debug: DebugOption = False,
) -> None:
    """Request rate per period, the ISL x OSL histogram and engine variants of a trace, as a scenario workload."""

    def action() -> None:
        if mode not in ("streaming", "sequential", "offline"):
            raise PlannerInputError("--mode", "mode", f"unknown mode '{mode}'; allowed: streaming, sequential, offline")
        # --base dh.yaml --out dh.yaml would rewrite it without its comments
        _check_output(out, lambda: [trace, *files.scenario_inputs(base, catalog)])
        answer = api.analyze_workload(
            trace, period, engines, quantile, name, model, mode, (time_column, input_column, output_column), time_unit,
            base, catalog,
        )  # fmt: skip
        document = answer.scenario_document if answer.scenario_document is not None else answer.block
        block_yaml = yaml.safe_dump(document, sort_keys=False, width=120)
        if out is not None:
            _write_text(out, block_yaml)
        if json:
            sys.stdout.write(json_out.dumps(json_out.workload_analysis_document(answer)))
        else:
            text.print_trace_analysis(answer, _stdout(), block_yaml, str(out) if out else None)

    _run(action, debug, json)


def _default_sigpipe() -> None:
    """A closed stdout (`planner plan ... | head`) ends the command quietly as any Unix tool does: killed by
    SIGPIPE, which a shell reports as 141 (128 + 13), never 1 (an infeasible plan) or a traceback. Python ignores
    SIGPIPE and raises BrokenPipeError instead, which click turns into exit code 1."""
    import signal

    if hasattr(signal, "SIGPIPE"):
        try:
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        except ValueError:  # not the main thread (an embedding program): leave its handling as it is
            pass


def main() -> None:
    _default_sigpipe()
    app()


if __name__ == "__main__":
    main()
