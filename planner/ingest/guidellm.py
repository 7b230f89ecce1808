"""GuideLLM reports (`benchmarks.json` / `.yaml`): a list `benchmarks`, one per strategy of a sweep.

Layouts (tests/fixtures/ingest/guidellm/FORMAT.md, read from the guidellm 0.2-0.8 wheels):
- 0.4-0.8: `benchmarks[i].config.backend.model`, `benchmarks[i].config.strategy` (`type_`: synchronous |
  concurrent (`streams`) | throughput | constant / poisson (`rate`)), `metadata.guidellm_version` from 0.5 on;
- 0.2-0.3 (legacy): `benchmarks[i].worker.backend_model`, `benchmarks[i].args.strategy`.
Metrics (all layouts) are status distributions: `metrics.<name>.successful.{mean, median, percentiles.pNN}`:
`time_to_first_token_ms`, `inter_token_latency_ms` (ms), `requests_per_second`, `output_tokens_per_second`,
`request_concurrency` (time-weighted in flight), `prompt_token_count`, `output_token_count`.
"""

from __future__ import annotations

from pathlib import Path

from planner.errors import PlannerInputError, clip_text
from planner.ingest import Run, count, number, read_result_json, require
from planner.loading import MAX_INGEST_BYTES, read_yaml

WHAT = "GuideLLM benchmarks report"


FILE_NAMES = "benchmarks.json|yaml, *_benchmarks.json|yaml"
MAX_YAML_REPORT_VALUES = 5_000_000  # values of a YAML report, aliases expanded (a report with every request's stats)


def is_result_file(path: Path) -> bool:
    stem = path.stem.lower()
    return (stem.startswith("benchmarks") or stem.endswith("_benchmarks")) and path.suffix.lower() in (".json", ".yaml", ".yml")


def _load(path: Path) -> dict:
    file = str(path)
    if path.suffix.lower() in (".csv", ".html"):  # GuideLLM's other exports flatten the report: not read
        raise PlannerInputError(file, "", f"GuideLLM's {path.suffix.lower()[1:].upper()} export is not read: ingest "
                                "the benchmarks.json or .yaml GuideLLM writes (guidellm benchmark --output-path "
                                "benchmarks.json), which holds every statistic with its units")  # fmt: skip
    if path.suffix.lower() in (".yaml", ".yml"):
        # the loader of scenarios, with the bound of result files: regular file, size, nesting, aliases expanded
        document = read_yaml(path, MAX_INGEST_BYTES, MAX_YAML_REPORT_VALUES)
    else:
        document = read_result_json(path, WHAT)
    if not isinstance(document, dict):
        raise PlannerInputError(file, "", f"expected a mapping with 'benchmarks': not a {WHAT}")
    return document


def _successful(metrics: dict, name: str, file: str, where: str) -> dict:
    metric = require(metrics, name, file, WHAT, f"{where}metrics.")
    return require(metric, "successful", file, WHAT, f"{where}metrics.{name}.")


def _stat(summary: dict, statistic: str, file: str, field: str) -> float:
    if statistic in ("mean", "median"):
        return number(require(summary, statistic, file, WHAT, f"{field}."), file, f"{field}.{statistic}")
    percentiles = require(summary, "percentiles", file, WHAT, f"{field}.")
    return number(require(percentiles, statistic, file, WHAT, f"{field}.percentiles."), file, f"{field}.percentiles.{statistic}")


def _strategy_and_model(benchmark: dict, document: dict) -> tuple[dict, str | None]:
    config = benchmark.get("config")
    if isinstance(config, dict) and "strategy" in config:
        model = (config.get("backend") or {}).get("model")
        if model is None:  # the run-wide settings: config.spec (0.7+) or args (0.4-0.6)
            spec = (document.get("config") or {}).get("spec") or {}
            model = (spec.get("backend") or {}).get("model") or (document.get("args") or {}).get("model")
        return config["strategy"] or {}, model
    if isinstance(benchmark.get("args"), dict):  # 0.2-0.3
        return benchmark["args"].get("strategy") or {}, (benchmark.get("worker") or {}).get("backend_model")
    return {}, None


def parse_benchmark(benchmark: dict, index: int, document: dict, path: Path, statistic: str,
                    concurrency_override: int | None) -> Run | None:  # fmt: skip
    """One benchmark of the report as a run; None when no request of it succeeded."""
    file, where = str(path), f"benchmarks[{index}]."
    if not isinstance(benchmark, dict):
        raise PlannerInputError(file, f"benchmarks[{index}]", f"expected a mapping: not a {WHAT}")
    metrics = require(benchmark, "metrics", file, WHAT, where)
    rps_summary = _successful(metrics, "requests_per_second", file, where)
    if not rps_summary.get("count"):
        return None
    strategy, model = _strategy_and_model(benchmark, document)
    if not isinstance(strategy, dict):
        raise PlannerInputError(file, f"{where}config.strategy", f"expected a mapping with type_ (got "
                                f"{type(strategy).__name__}): not a {WHAT} benchmark")  # fmt: skip
    kind = strategy.get("type_")
    if kind is None:
        raise PlannerInputError(file, f"{where}config.strategy.type_", f"missing key 'type_': not a {WHAT} benchmark")
    notes = [f"strategy {clip_text(kind)}"]
    rate = strategy.get("rate") if kind in ("constant", "poisson") else None
    run_kind = "request-rate" if rate is not None else "online"
    if concurrency_override is not None:
        concurrency = concurrency_override
    elif kind == "synchronous":
        concurrency = 1
    elif kind == "concurrent" and strategy.get("streams"):
        concurrency = count(strategy["streams"], file, "strategy.streams")
    else:
        measured = _successful(metrics, "request_concurrency", file, where)
        concurrency = max(1, round(number(require(measured, "mean", file, WHAT), file, "request_concurrency.mean")))
        notes.append("concurrency = the run's mean requests in flight (request_concurrency)")
    metric = lambda name: _successful(metrics, name, file, where)  # noqa: E731
    return Run(
        tool="guidellm", tool_version=(document.get("metadata") or {}).get("guidellm_version"), file=file,
        model_name=model, concurrency=concurrency,
        request_rate=number(rate, file, f"{where}strategy.rate") if rate is not None else None,
        isl=_stat(metric("prompt_token_count"), "mean", file, f"{where}metrics.prompt_token_count.successful"),
        osl=_stat(metric("output_token_count"), "mean", file, f"{where}metrics.output_token_count.successful"),
        ttft_ms=_stat(metric("time_to_first_token_ms"), statistic, file, f"{where}metrics.time_to_first_token_ms.successful"),
        # GuideLLM's inter_token_latency_ms is per request, (last - first token) / (OSL - 1), weighted by its gaps:
        # the planner's tpot_ms (docs/metrics.md); it records no single token gap
        tpot_ms=_stat(metric("inter_token_latency_ms"), statistic, file, f"{where}metrics.inter_token_latency_ms.successful"),
        request_throughput_rps=_stat(rps_summary, "mean", file, f"{where}metrics.requests_per_second.successful"),
        output_tokens_per_s=_stat(metric("output_tokens_per_second"), "mean", file,
                                  f"{where}metrics.output_tokens_per_second.successful"),
        statistic=statistic, run_kind=run_kind, notes=tuple(notes), requests=_completed(metrics, rps_summary, file, where),
    )  # fmt: skip


def _completed(metrics: dict, rps_summary: dict, file: str, where: str) -> int:
    """Successful requests: `request_totals.successful` (0.4+), else the count of the rate distribution."""
    totals = metrics.get("request_totals")
    if isinstance(totals, dict) and totals.get("successful") is not None:
        return count(totals.get("successful"), file, f"{where}metrics.request_totals.successful")
    return count(rps_summary.get("count"), file, f"{where}metrics.requests_per_second.successful.count")


def parse_file(path: Path, statistic: str, concurrency_override: int | None = None) -> list[Run]:
    document = _load(path)
    benchmarks = require(document, "benchmarks", str(path), WHAT)
    if not isinstance(benchmarks, list) or not benchmarks:
        raise PlannerInputError(str(path), "benchmarks", "the report holds no benchmarks")
    if concurrency_override is not None and len(benchmarks) > 1:
        raise PlannerInputError("--concurrency", "concurrency", f"applies to one run; the report has {len(benchmarks)}")
    runs = [parse_benchmark(b, i, document, path, statistic, concurrency_override) for i, b in enumerate(benchmarks)]
    runs = [r for r in runs if r is not None]
    if not runs:
        raise PlannerInputError(str(path), "benchmarks", "no benchmark of the report completed a request")
    return runs
