"""The command line's shared parts: lazily loaded modules, enums and options declared once (typer Annotated
aliases), progress display, output checks and `_run`, the one error handler of every command."""

from __future__ import annotations

import math
import sys
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from typer.core import TyperGroup

from planner import deadline
from planner.errors import InfeasiblePlanError, PlannerInputError, SolverStoppedError
from planner.metrics import percentile_problem
from planner.perf.types import SteadyStateError


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


PRECISION_HELP = "bf16 | fp16 | fp8 | fp4 | w4a16 | w4a8 (4-bit weights, bf16 / fp8 compute)."


def _examples(*commands: str) -> str:
    """A command's --help epilog: runnable examples, paths relative to the planner checkout (scenarios/ holds
    contact-center, llama3-8b-assistant, chat-and-summarize, disaggregated-serving, daily-hybrid and
    sweeps/summarize-tpot). Rich markup: a literal '[' is written '\\['."""
    return "Examples (in the planner checkout):\n\n" + "\n\n".join(f"  {command}" for command in commands)


class _WorkflowOrder(TyperGroup):
    """`planner --help` lists the commands in the order of a planning session, `plan` first (typer would list
    them in the order they are defined); a command missing from ORDER comes last."""

    ORDER = ("plan", "compare", "simulate", "bom", "report", "deploy", "bench", "check", "sensitivity", "sweep", "validate", "catalog", "perf",
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
EXIT_NO_ANSWER = 1  # `planner perf`: nothing meets the query (as an infeasible plan: nothing meets what was asked)
EXIT_BAD_INPUT = 2
EXIT_DEFECT = 3  # the performance model could not solve (a planner defect, said as such)
EXIT_STOPPED = 4  # the solver's time limit came before any plan: not infeasible, raise --time-limit
EXIT_SLO_MISSED = 5  # plan --verify [--repair]: a simulated limit is conclusively missed
EXIT_UNDECIDED = 6  # plan --verify [--repair]: no limit missed, but one could not be decided (--allow-inconclusive: 0)


def _finite(value: float | None) -> float | None:
    """Every number option must be a finite number: 'inf' and 'nan' parse as floats but plan nothing."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"must be a finite number (got {value})")
    return value

def _limit_ms(value: float | None) -> float | None:
    """A latency limit is a finite time above 0, as a scenario's `slo` (0 ms: no engine meets it)."""
    value = _finite(value)
    if value is not None and value <= 0:
        raise typer.BadParameter(f"must be above 0 ms (got {value:g})")
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
TtftOption = Annotated[float | None, typer.Option("--ttft-ms", callback=_limit_ms, help="TTFT limit (arrival to first token).")]
TpotOption = Annotated[float | None, typer.Option("--tpot-ms", callback=_limit_ms,
                                                  help="TPOT limit: a request's mean gap between tokens.")]
ItlOption = Annotated[float | None, typer.Option("--itl-ms", callback=_limit_ms,
                                                 help="ITL limit: one gap between consecutive tokens.")]
E2eOption = Annotated[float | None, typer.Option("--e2e-ms", callback=_limit_ms, help="End-to-end limit.")]
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
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        SpinnerColumn,
        TaskProgressColumn,  # fmt: skip
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
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
    random = "random"
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


def _verify_options(duration, seeds, balancer: Balancer | None = None):
    """`--verify`'s simulation options: by default the split the plan sizes an instance for (VERIFY_BALANCER)."""
    from planner.simulate.options import VERIFY_BALANCER  # the simulator imported only to run

    return _simulation_options(duration, seeds, balancer=balancer or Balancer(VERIFY_BALANCER))


def _simulation_options(duration, seeds, seed=0, balancer=Balancer.round_robin, length_cv=0.0, arrival_cv=1.0,
                        token_budget=None, workload=None, period=None):  # fmt: skip
    from planner.simulate import SimulationOptions

    return SimulationOptions(duration_s=duration, seeds=seeds, seed=seed, balancer=balancer.value, length_cv=length_cv,
                             arrival_cv=arrival_cv, token_budget=token_budget, trace_workload=workload,
                             trace_period=period)  # fmt: skip


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
