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


def analyze_workload(
    trace_path: Path | str, period: str = "hour", engines: int = 2, quantile: float | None = None,
    name: str | None = None, model: str | None = None, mode: str = "streaming",
    columns: tuple[str | None, str | None, str | None] = (None, None, None), time_unit: str = "auto",
    base_scenario: Path | str | None = None, catalog_dirs: CatalogDirs = None,
) -> WorkloadFromTrace:
    """Rates per period, the ISL x OSL histogram and engine variants of a request trace, as a scenario block."""
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
    block = workload_block(analysis, name or Path(trace_path).stem, model or "set-a-model-id", mode)
    document = None
    if base_scenario is not None:
        document = scenario_with_workload(base_scenario, block, catalog)
    return WorkloadFromTrace(analysis, block, document)


def scenario_with_workload(base_scenario: Path | str, block: dict, catalog: Catalog) -> dict:
    """The base scenario with the block's workload added (or replacing the one of the same name) and its daily
    profile as the scenario's periods; checked against the catalog before anything is written."""
    from planner.loading import read_yaml, validate_model
    from planner.scenario import ScenarioSpec, build_scenario

    file = str(base_scenario)
    document = read_yaml(Path(base_scenario))
    if not isinstance(document, dict):
        raise PlannerInputError(file, "", "expected a scenario (a YAML mapping)")
    workload = block["workloads"][0]
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
    return document


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

