"""The Python API for data: workloads from traces, benchmark results ingested, tables built from a perf source."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from planner.api.planning import perf_layers, scenario_catalog
from planner.catalog import Catalog, CatalogDirs, load_catalog
from planner.errors import PlannerInputError


@dataclass(frozen=True)
class WorkloadFromTrace:
    """`planner workload analyze`: the trace analysis and the scenario block made from it (and, with a base
    scenario, the whole scenario with the workload in it, already checked against the catalog)."""

    analysis: object  # planner.workload_analysis.TraceAnalysis
    block: dict
    scenario_document: dict | None
    kept: tuple[str, ...] = ()  # fields of the base's workload of the same name kept in the new one (slo, engines, ...)
    scaled: str = ""  # how the trace's rates were scaled ("" where they were not)


# what a trace says of a workload: its lengths and demand (and a prefix cache where it names prompts' prefixes);
# every other field of a base scenario's workload of the same name (limits, engines, precisions) is the user's and
# is kept when the trace's workload replaces it
TRACE_FIELDS = ("name", "model", "buckets", "isl_tokens", "osl_tokens", "words_in", "words_out", "max_isl_tokens",
                "max_osl_tokens", "peak_rps", "mean_rps", "users", "peak_quantile", "prefix_cache")  # fmt: skip


def analyze_workload(
    trace_path: Path | str, period: str = "hour", engines: int = 2, quantile: float | None = None,
    name: str | None = None, model: str | None = None, mode: str | None = None,
    columns: tuple[str | None, str | None, str | None] = (None, None, None), time_unit: str = "auto",
    base_scenario: Path | str | None = None, catalog_dirs: CatalogDirs = None,
    peak_rps: float | None = None, scale: float | None = None,
) -> WorkloadFromTrace:
    """Rates per period, the ISL x OSL histogram and engine variants of a request trace, as a scenario block.
    `mode` None: the base's workload's (with --base, where it has one of that name), else streaming. `peak_rps`:
    the busiest period's rate set to it (the others in proportion); `scale`: every rate multiplied by it (a trace
    of today's traffic sized for next year's); at most one of the two."""
    from planner.traces import load_trace
    from planner.workload_analysis import analyze_trace, period_seconds, workload_block

    if name is not None and not (0 < len(name.strip()) <= 100):
        raise PlannerInputError("--name", "name", "a workload name of 1 to 100 characters")
    catalog = load_catalog(catalog_dirs) if base_scenario is None else scenario_catalog(base_scenario, catalog_dirs)
    if model is not None:
        model = catalog.resolve("model", model, "--model", "model")
    if base_scenario is not None and model is None:
        raise PlannerInputError("--model", "model", "required with --base: the workload must name a catalog model")
    trace = load_trace(trace_path, *columns, time_unit=time_unit)
    analysis = analyze_trace(
        trace, period_seconds(period), engines,
        quantile if quantile is not None else catalog.defaults.peak_quantile.value,
    )  # fmt: skip
    block = workload_block(analysis, name or Path(trace_path).stem, model or "set-a-model-id", mode or "streaming")
    block, scaled = scaled_block(block, peak_rps, scale)
    document, kept = None, ()
    if base_scenario is not None:
        document, kept = scenario_with_workload(base_scenario, block, catalog, mode_given=mode is not None)
    return WorkloadFromTrace(analysis, block, document, kept, scaled)


def scaled_block(block: dict, peak_rps: float | None, scale: float | None) -> tuple[dict, str]:
    """The block with its demand set to `peak_rps` at the busiest period (a peak replaces the trace's mean and its
    peak quantile) or multiplied by `scale`; the periods' demand factors are relative to the busiest and stay."""
    if peak_rps is not None and scale is not None:
        raise PlannerInputError("--peak-rps", "peak_rps", "give --peak-rps or --scale, not both")
    workload = dict(block["workloads"][0])
    if peak_rps is not None:
        if not (0 < peak_rps <= 1e7):
            raise PlannerInputError("--peak-rps", "peak_rps", "a rate above 0 and at most 10,000,000 requests/s")
        was = workload.pop("mean_rps")
        workload.pop("peak_quantile", None)
        workload["peak_rps"] = peak_rps
        note = f"the busiest period's rate set to a peak of {peak_rps:g} requests/s (the trace's mean there: {was:g})"
    elif scale is not None:
        if not (0 < scale <= 1e6):
            raise PlannerInputError("--scale", "scale", "a factor above 0 and at most 1,000,000")
        workload["mean_rps"] = round(workload["mean_rps"] * scale, 4)
        note = f"the trace's rates x{scale:g} (busiest period's mean {workload['mean_rps']:g} requests/s)"
    else:
        return block, ""
    return {**block, "workloads": [workload]}, note


def scenario_with_workload(base_scenario: Path | str, block: dict, catalog: Catalog,
                           mode_given: bool = True) -> tuple[dict, tuple[str, ...]]:  # fmt: skip
    """The base scenario with the block's workload added (or replacing the one of the same name, whose fields the
    trace does not give are kept: its limits, engines, precisions, and its mode unless `mode_given`) and its daily
    profile as the scenario's periods; checked against the catalog before anything is written. Returns the
    document and the names of the fields kept."""
    from planner.loading import read_yaml, validate_model
    from planner.scenario import ScenarioSpec, build_scenario

    file = str(base_scenario)
    document = read_yaml(Path(base_scenario))
    if not isinstance(document, dict):
        raise PlannerInputError(file, "", "expected a scenario (a YAML mapping)")
    workload = block["workloads"][0]
    replaced = next((w for w in document.get("workloads") or [] if isinstance(w, dict) and w.get("name") == workload["name"]), None)
    kept = ()
    if replaced is not None:
        carried = {k: v for k, v in replaced.items() if k not in TRACE_FIELDS and (k != "mode" or not mode_given)}
        if "prefix_cache" in replaced and "prefix_cache" not in workload:  # the trace names no prefixes: the user's stays
            carried["prefix_cache"] = replaced["prefix_cache"]
        workload = {**workload, **carried}
        kept = tuple(carried)
    workloads = [w for w in document.get("workloads") or [] if not (isinstance(w, dict) and w.get("name") == workload["name"])]
    document = {**document, "workloads": [*workloads, workload]}
    if "periods" in block:
        if document.get("periods"):
            raise PlannerInputError(
                file, "periods",
                "the base scenario has periods of its own; the trace's daily profile cannot be merged into them. "
                "Paste the block by hand, or analyze with --period day",
            )  # fmt: skip
        document["periods"] = block["periods"]
    build_scenario(validate_model(ScenarioSpec, document, file), catalog, file)
    return document, kept


def ingest_results(
    tool: str, paths: list[Path | str], options, table: str = "ingested", catalog_dirs: CatalogDirs = None
):
    """Benchmark result files of genai-perf / vLLM / GuideLLM as catalog rows (planner.ingest.IngestResult)."""
    from planner.ingest import ingest

    return ingest(tool, paths, options, load_catalog(catalog_dirs), table)



@dataclass(frozen=True)
class TablesBuild:
    rows: tuple
    skipped: tuple[str, ...]

    def csv_text(self) -> str:
        from planner.catalog import benchmark_csv_text

        return benchmark_csv_text(self.rows)


def tables_build(
    models: list[str], gpus: list[str], tps=(1, 2, 4, 8), precisions=("bf16", "fp8", "fp4"), concurrencies=(1, 8, 32, 128),
    lengths=((1024, 128), (4096, 512)), source: str = "aic", catalog_dirs: CatalogDirs = None, progress=None,
) -> TablesBuild:
    """Benchmark-table rows from a perf source over a grid (today: aic), so that catalogs carry them."""
    from planner.perf import aic

    if source != "aic":
        raise PlannerInputError("--source", "source", f"unknown source '{source}'; allowed: aic")
    perf_layers("aic")  # the clear message when the extra is not installed
    catalog = load_catalog(catalog_dirs)
    models = [catalog.resolve("model", model, "--models", "models") for model in models]
    gpus = [catalog.resolve("gpu", gpu, "--gpus", "gpus") for gpu in gpus]
    rows, skipped = aic.table_rows(catalog, models, gpus, tuple(tps), tuple(precisions), tuple(concurrencies),
                                   tuple(lengths), progress=progress)  # fmt: skip
    return TablesBuild(tuple(rows), tuple(skipped))


# ---- the decision report (`planner report`): the plan with what a decision rests on ----------------------------

