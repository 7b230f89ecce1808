"""genai-perf (0.0.8-0.0.16) and its successor AIPerf: `profile_export_genai_perf.json|csv`,
`profile_export_aiperf.json|csv`, one run (one concurrency) per directory.

JSON: metric objects (`time_to_first_token`, `inter_token_latency`, `request_latency` in ms with `avg, p25..p99`;
`request_throughput`, `output_token_throughput` with `avg`; `input_sequence_length`, `output_sequence_length`) and
the run settings under `input_config`, in one of three layouts:
- genai-perf <= 0.0.12 (flat): `model` (list), `concurrency` (null for rate runs), `request_rate`, `streaming`;
- genai-perf >= 0.0.13 (nested): `model_names`, `perf_analyzer.stimulus.{concurrency|request_rate}`,
  `endpoint.streaming`; `genai-perf analyze` sweeps write the one shared config into every run, so the run's
  concurrency is then read from its directory name (`...-concurrency<N>`);
- AIPerf: `models.items[].name` (and `tokenizer.name`, the Hugging Face id, when the served name is the
  user's own), the profiling phase (`kind: profiling` in 0.13, `name: profiling` and no `kind` in 0.10, else the
  phase not `exclude_from_results`) with `type: concurrency` + `concurrency`, or a rate (`type: poisson |
  constant | gamma | request_rate` + `rate` or `request_rate`), `endpoint.streaming`, `aiperf_version`.
CSV: a stats block (`Metric,avg,min,max,p99,...`) and a `Metric,Value` block, numbers possibly quoted with
thousands separators; it records no model or concurrency (those come from the directory name or --concurrency).
Keys confirmed against the packages' exporters: tests/fixtures/ingest/genai-perf/FORMAT.md.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from planner.errors import PlannerInputError, bounded_listing, clip_text
from planner.ingest import Run, count, little_concurrency, number, read_result_json, read_result_text, require

WHAT = "genai-perf/AIPerf profile export"
_STAT_KEY = {"mean": "avg", "median": "p50", "p90": "p90", "p95": "p95", "p99": "p99"}
# genai-perf names a run directory '...-concurrency8'; users' sweeps often 'c8' or 'concurrency_8'
_DIR_CONCURRENCY = re.compile(r"(?:^|[-_])(?:concurrency|c)[-_]?(\d+)$", re.IGNORECASE)
_CSV_ROWS = {  # display name without its unit suffix -> JSON metric key
    "time to first token": "time_to_first_token",
    "inter token latency": "inter_token_latency",
    "request latency": "request_latency",
    "output sequence length": "output_sequence_length",
    "input sequence length": "input_sequence_length",
    "output token throughput": "output_token_throughput",
    "request throughput": "request_throughput",
}


FILE_NAMES = "profile_export_genai_perf.json|csv, profile_export_aiperf.json|csv"


def is_result_file(path: Path) -> bool:
    name = path.name
    if name.endswith(("_genai_perf.json", "profile_export_aiperf.json")):
        return True
    # a CSV export only where no JSON export of the same run sits beside it
    return name.endswith(("_genai_perf.csv", "profile_export_aiperf.csv")) and not path.with_suffix(".json").is_file()


_RATE_PHASES = ("request_rate", "poisson", "constant", "gamma", "rate")


def _profiling_phase(phases: list, file: str) -> dict:
    """The phase whose requests the metrics describe."""
    phases = [p for p in phases if isinstance(p, dict)]
    for key in ("kind", "name"):
        named = [p for p in phases if p.get(key) == "profiling"]
        if named:
            return named[0]
    measured = [p for p in phases if not p.get("exclude_from_results")]
    if len(measured) == 1:
        return measured[0]
    raise PlannerInputError(file, "input_config.phases", f"no profiling phase among {len(phases)} phases: not an AIPerf layout this reader knows")


def _aiperf_load(config: dict, file: str) -> tuple[int | None, float | None, list[str]]:
    """(concurrency, offered rate, notes) of AIPerf's profiling phase; a phase stating neither is refused, never
    taken as concurrency 1."""
    phase = _profiling_phase(config.get("phases") or [], file)
    kind = phase.get("type")
    concurrency = phase.get("concurrency")
    rate = phase.get("rate", phase.get("request_rate"))
    if kind in _RATE_PHASES or (kind is None and rate is not None):
        if rate is None:
            raise PlannerInputError(file, "input_config.phases.profiling.rate", f"a '{kind}' phase without its rate")
        note = (f"AIPerf {clip_text(kind or 'rate')} phase at {clip_text(rate)} requests/s"
                + (f", at most {clip_text(concurrency)} in flight" if concurrency else ""))  # fmt: skip
        return None, rate, [note]
    if concurrency is None:
        raise PlannerInputError(
            file, "input_config.phases.profiling",
            f"the profiling phase (type {clip_text(repr(kind))}) states neither a concurrency nor a rate; give --concurrency",
        )  # fmt: skip
    return concurrency, None, []


def _dir_concurrency(path: Path) -> int | None:
    match = _DIR_CONCURRENCY.search(path.parent.name)
    return int(match.group(1)) if match else None


def _stat(metrics: dict, key: str, statistic: str, file: str, required: bool) -> float | None:
    metric = metrics.get(key)
    if metric is None:
        if required:
            raise PlannerInputError(file, key, f"missing key '{key}': not a {WHAT} (or a run that recorded none)")
        return None
    field = _STAT_KEY[statistic]
    if not isinstance(metric, dict) or field not in metric:
        has = bounded_listing(metric) if isinstance(metric, dict) else f"a {type(metric).__name__}, not a mapping"
        raise PlannerInputError(file, f"{key}.{field}", f"missing key '{field}' in '{key}' (it has: {has or 'no keys'})")
    return number(metric[field], file, f"{key}.{field}")


def _avg(metrics: dict, key: str, file: str) -> float:
    metric = require(metrics, key, file, WHAT)
    return number(require(metric, "avg", file, WHAT, f"{key}."), file, f"{key}.avg")


def _settings(config: dict, path: Path) -> tuple[str | None, int | None, float | None, bool, str | None, list[str]]:
    """(model, concurrency, request rate, streaming, version, notes) from any of the three input_config layouts."""
    file, notes = str(path), []
    if "models" in config or "phases" in config:  # AIPerf
        models = config.get("models") or {}
        if not isinstance(models, dict):
            raise PlannerInputError(file, "input_config.models", f"expected a mapping with items (got {type(models).__name__}): "
                                    f"not an {WHAT} of a known layout")  # fmt: skip
        items = models.get("items") or []
        model = items[0].get("name") if items and isinstance(items[0], dict) else None
        concurrency, rate, notes = _aiperf_load(config, file)
        return model, concurrency, rate, _streaming(config.get("endpoint")), None, notes
    if "model_names" in config:  # genai-perf >= 0.0.13
        model = (config.get("model_names") or [None])[0]
        stimulus = (config.get("perf_analyzer") or {}).get("stimulus") or {}
        concurrency, rate = stimulus.get("concurrency"), stimulus.get("request_rate")
        if config.get("subcommand") == "analyze":
            concurrency, rate = _dir_concurrency(path), None
            notes.append("genai-perf analyze sweep: concurrency read from the run directory's name")
        return model, concurrency, rate, _streaming(config.get("endpoint")), None, notes
    if "model" in config or "concurrency" in config:  # genai-perf <= 0.0.12
        models = config.get("model")
        model = models[0] if isinstance(models, list) and models else models
        return model, config.get("concurrency"), config.get("request_rate"), config.get("streaming"), None, notes
    raise PlannerInputError(
        file, "input_config", "no model_names/model/models key: not an input_config layout of genai-perf or AIPerf"
    )


def _streaming(endpoint) -> bool | None:
    """endpoint.streaming as recorded; None when the file does not say."""
    value = endpoint.get("streaming") if isinstance(endpoint, dict) else None
    return None if value is None else bool(value)


def _streamed(metrics: dict, streaming: bool | None, file: str, notes: list[str]) -> bool:
    """Whether TTFT and ITL were measured on a token stream. A file that does not say is taken as streamed when
    its first token came well before the end (TTFT under half the request latency) and it has ITL: without a
    stream, TTFT would equal the request latency."""
    if streaming is not None:
        return streaming
    ttft = _stat(metrics, "time_to_first_token", "mean", file, required=False)
    latency = _stat(metrics, "request_latency", "mean", file, required=False)
    if ttft is not None and latency and "inter_token_latency" in metrics and ttft < 0.5 * latency:
        notes.append(f"streaming not recorded; streamed, as mean TTFT {ttft:,.0f} ms < half the request latency "
                     f"{latency:,.0f} ms")  # fmt: skip
        return True
    return False


def _run(metrics: dict, path: Path, statistic: str, model, concurrency, rate, streaming: bool | None, tool: str,
         version: str | None, notes: list[str], hints: tuple[str, ...] = ()) -> Run:  # fmt: skip
    file = str(path)
    rps = _avg(metrics, "request_throughput", file)
    tokens_per_s = _avg(metrics, "output_token_throughput", file) if "output_token_throughput" in metrics else None
    isl = _avg(metrics, "input_sequence_length", file)
    osl = _avg(metrics, "output_sequence_length", file)
    streaming = _streamed(metrics, streaming, file, notes)
    ttft = _stat(metrics, "time_to_first_token", statistic, file, required=streaming)
    # genai-perf's and AIPerf's inter_token_latency is per request, (latency - TTFT) / (OSL - 1): the planner's
    # tpot_ms; AIPerf's inter_chunk_latency is the gaps between streamed chunks: its itl_ms (docs/metrics.md)
    tpot = _stat(metrics, "inter_token_latency", statistic, file, required=streaming)
    itl = _stat(metrics, "inter_chunk_latency", statistic, file, required=False)
    if not streaming:
        ttft = tpot = itl = None
        notes.append("non-streaming run: TTFT equals the whole request latency and ITL is not measured; neither recorded")
    requests = metrics.get("request_count")
    requests = count(requests.get("avg"), file, "request_count.avg") if isinstance(requests, dict) else None
    if rate is not None and rate != "":
        rate = number(rate, file, "request_rate")
    else:
        rate = None
    run_kind = "online"
    if rate is not None and concurrency in (None, ""):
        run_kind = "request-rate"
    if concurrency in (None, ""):
        if rate is None:
            raise PlannerInputError(
                file, "input_config.concurrency",
                "the run records neither a concurrency nor a request rate (give --concurrency, or name the run "
                "directory ...-concurrencyN as genai-perf does)",
            )  # fmt: skip
        latency = _stat(metrics, "request_latency", "mean", file, required=False)
        concurrency = little_concurrency(rps, latency)
        notes.append("concurrency = mean requests in flight = request_throughput x mean request latency (Little's "
                     "law): the run offered a rate, not a concurrency")  # fmt: skip
    return Run(
        tool=tool, tool_version=version, file=file, model_name=model, concurrency=count(concurrency, file, "concurrency"),
        request_rate=rate,
        isl=isl, osl=osl, ttft_ms=ttft, tpot_ms=tpot, itl_ms=itl, request_throughput_rps=rps, output_tokens_per_s=tokens_per_s,
        statistic=statistic, run_kind=run_kind, notes=tuple(notes), model_hints=hints, requests=requests,
    )  # fmt: skip


def parse_json(path: Path, statistic: str, concurrency_override: int | None = None) -> Run:
    file = str(path)
    document = read_result_json(path, WHAT)
    if not isinstance(document, dict):
        raise PlannerInputError(file, "", f"expected a JSON object: not a {WHAT}")
    config = require(document, "input_config", file, WHAT)
    model, concurrency, rate, streaming, _, notes = _settings(config, path)
    if concurrency_override is not None:
        concurrency, rate = concurrency_override, None
    version = document.get("aiperf_version")
    tool = "aiperf" if version is not None or "schema_version" in document else "genai-perf"
    tokenizer = config.get("tokenizer")
    tokenizer = tokenizer.get("name") if isinstance(tokenizer, dict) else tokenizer
    hints = (tokenizer,) if isinstance(tokenizer, str) and tokenizer != model else ()
    return _run(document, path, statistic, model, concurrency, rate, streaming, tool, version, notes, hints)


def parse_csv(path: Path, statistic: str, concurrency_override: int | None = None) -> Run:
    """The CSV export: stats block then value block; model and concurrency are not in it."""
    file = str(path)
    try:
        rows = list(csv.reader(io.StringIO(read_result_text(path))))
    except csv.Error as exc:
        raise PlannerInputError(file, "", f"cannot read: {clip_text(exc)}") from None
    metrics: dict[str, dict] = {}
    header: list[str] | None = None
    for row in rows:
        if not row or not any(cell.strip() for cell in row):
            header = None
            continue
        if row[0].strip() == "Metric":
            header = [cell.strip() for cell in row]
            continue
        if header is None:
            raise PlannerInputError(file, "Metric", f"missing the 'Metric,...' header line: not a {WHAT} CSV")
        name = re.sub(r"\s*\([^)]*\)\s*$", "", row[0]).strip().lower()
        key = _CSV_ROWS.get(name)
        if key is None:
            continue
        if header[1:2] == ["Value"]:
            metrics[key] = {"avg": row[1]}
        else:
            metrics[key] = dict(zip(header[1:], row[1:]))
    if not metrics:
        raise PlannerInputError(file, "Metric", f"no metric rows: not a {WHAT} CSV")
    concurrency = concurrency_override if concurrency_override is not None else _dir_concurrency(path)
    notes = ["CSV export: model not recorded"]
    if concurrency_override is None and concurrency is not None:
        notes.append(f"concurrency {concurrency} read from the run directory's name '{path.parent.name}'")
    if concurrency is None:
        raise PlannerInputError(
            file, "concurrency",
            "a CSV export records no concurrency: ingest the JSON export beside it, give --concurrency, "
            "or keep genai-perf's run directory name (...-concurrencyN)",
        )  # fmt: skip
    tool = "aiperf" if path.name.endswith("aiperf.csv") else "genai-perf"
    streaming = "inter_token_latency" in metrics
    return _run(metrics, path, statistic, None, concurrency, None, streaming, tool, None, notes)


def parse_file(path: Path, statistic: str, concurrency_override: int | None = None) -> list[Run]:
    if path.suffix.lower() == ".csv":
        return [parse_csv(path, statistic, concurrency_override)]
    return [parse_json(path, statistic, concurrency_override)]
