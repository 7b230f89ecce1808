"""Commands that explore the performance model and the inputs: perf, curve, peak, users, catalog, sensitivity,
sweep."""

from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import (
    EXIT_NO_ANSWER,
    PRECISION_HELP,
    CatalogKind,
    CatalogOption,
    DebugOption,
    E2eOption,
    ItlOption,
    JsonOption,
    PercentileOption,
    PerfSourceOption,
    ProgressMode,
    ProgressOption,
    ScenarioArgument,
    SolverOption,
    TimeLimitOption,
    TokenBudgetOption,
    TpotOption,
    TtftOption,
    _check_output,
    _examples,
    _finite,
    _progress,
    _run,
    _scales,
    _stdout,
    _write_text,
    api,
    app,
    files,
    json_out,
    text,
)
from planner.errors import PlannerInputError
from planner.perf.serving import EngineSpec
from planner.perf.types import DEFAULT_TOKEN_BUDGET, Layout, PerfQuery


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
    engine: Annotated[str, typer.Option("--engine", help="Serving engine: trtllm | vllm | sglang | atom, optionally pinned to a calibrated release as engine@version (vllm@0.12); without one, the newest (docs/perf-model.md).")] = "trtllm",
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
    No answer (the model does not fit, no point meets the limits, the rate is beyond the engine): one line on stderr
    saying why for each configuration tried, and exit code 1 (with --json the document, its `reason`, on stdout too).
    """

    def action() -> None:
        _check_precision(precision)
        if concurrency is not None and rate_rps is not None:
            raise PlannerInputError("--rate", "rate", "give --concurrency (closed loop) or --rate (open loop), not both")
        parsed = _parse_layout(layout, tp)
        beyond_tp = parsed if parsed is not None and parsed.beyond_tp else None  # plain TP is --tp's
        try:
            spec = EngineSpec.parse(engine)
        except ValueError as error:
            raise PlannerInputError("--engine", "engine", str(error)) from None
        query = PerfQuery(model, gpu, isl, osl, parsed.tp if parsed else tp, precision, concurrency, ttft_ms, itl_ms,
                          e2e_ms, tpot_ms, token_budget, rate_rps=rate_rps, engine=spec.engine,
                          engine_version=spec.version, layout=beyond_tp)  # fmt: skip
        answer = api.perf_point(query, catalog, perf_source, percentile, layout_given=layout is not None)
        if json:
            sys.stdout.write(json_out.dumps(json_out.perf_document(answer, gpus_per_node)))
        elif answer.result is not None:
            text.print_perf(answer, gpus_per_node, _stdout())
        if answer.result is None:  # nothing meets the query: one line on stderr, exit 1 (the JSON says it too)
            print(text.perf_miss_line(answer), file=sys.stderr)
            raise typer.Exit(EXIT_NO_ANSWER)

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


