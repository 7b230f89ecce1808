"""Commands that bring data in: ingest (benchmark results), tables (from a perf source), workload (from traces)."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
import yaml

from planner.cli.common import (
    CatalogOption,
    DebugOption,
    JsonOption,
    ProgressMode,
    ProgressOption,
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
    "planner workload analyze requests.csv --model llama-3.1-8b --name chat --peak-rps 40   (size for 40 rps)",
))
def workload_analyze(
    trace: Annotated[Path, typer.Argument(help="Request trace: CSV, TSV or JSONL, one request per line.")],
    period: Annotated[str, typer.Option("--period", help="Rate window: second, minute, hour, day or e.g. 15min.")] = "hour",
    engines: Annotated[int, typer.Option("--engines", min=1, help="Engine variants (max ISL/OSL) to choose.")] = 2,
    quantile: Annotated[float | None, typer.Option("--quantile", callback=_finite, help="Peak quantile (default: catalog's).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model id of the workload (planner catalog models).")] = None,
    name: Annotated[str | None, typer.Option("--name", help="Workload name (default: the trace file's stem).")] = None,
    mode: Annotated[str | None, typer.Option("--mode", help="streaming, sequential or offline (default: the --base "
                                                            "workload's of that name, else streaming).")] = None,
    time_column: Annotated[str | None, typer.Option("--time-column", help="Arrival time column.")] = None,
    input_column: Annotated[str | None, typer.Option("--input-column", help="Input tokens column.")] = None,
    output_column: Annotated[str | None, typer.Option("--output-column", help="Output tokens column.")] = None,
    time_unit: Annotated[
        str, typer.Option("--time-unit", help="Unit of numeric timestamps: auto (seconds where that reads as traffic, else asks), s, ms, us, ns.")
    ] = "auto",
    base: Annotated[Path | None, typer.Option("--base", help="Scenario to add the workload to (needs --model); a "
                                              "workload of the same name is replaced, keeping its slo, engines and "
                                              "precisions.")] = None,
    peak_rps: Annotated[float | None, typer.Option("--peak-rps", callback=_finite, help="Size for this peak rate "
                                                   "at the busiest period (the others in proportion).")] = None,
    scale: Annotated[float | None, typer.Option("--scale", callback=_finite, help="Multiply the trace's rates "
                                                "(e.g. 3 for next year's traffic).")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the block (or, with --base, the scenario) here.")] = None,
    json: JsonOption = False,
    catalog: CatalogOption = None,
    debug: DebugOption = False,
) -> None:
    """Request rate per period, the ISL x OSL histogram and engine variants of a trace, as a scenario workload."""

    def action() -> None:
        if mode is not None and mode not in ("streaming", "sequential", "offline"):
            raise PlannerInputError("--mode", "mode", f"unknown mode '{mode}'; allowed: streaming, sequential, offline")
        # --base dh.yaml --out dh.yaml would rewrite it without its comments
        _check_output(out, lambda: [trace, *files.scenario_inputs(base, catalog)])
        answer = api.analyze_workload(
            trace, period, engines, quantile, name, model, mode, (time_column, input_column, output_column), time_unit,
            base, catalog, peak_rps, scale,
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

