"""Benchmark results users bring (genai-perf, AIPerf, `vllm bench serve`, GuideLLM) as catalog benchmark rows.

Each tool module turns one result file into `Run`s (what the tool measured, in the tool's words); `engine_of`
finds the engine each file measured: the catalog model from the file's model id (or --model), TP and precision
where the path or model id states them (or the options; never assumed), the GPU from the options, one instance or
a whole node. `ingest` makes rows of `catalogs/benchmarks/*.csv` with the source named: tool, version when the file
has it, file name, and where each engine fact came from.
The formats were read from the tools' own exporters: `tests/fixtures/ingest/<tool>/FORMAT.md`.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from planner.catalog import PRECISIONS, BenchmarkRow, Catalog, ModelArch, accelerator_count, benchmark_csv_text
from planner.catalog.weights import weight_gb
from planner.errors import PlannerInputError, bounded_listing, clip_text
from planner.loading import MAX_INGEST_BYTES, parse_json, read_bounded_text, short_repr, validate_model


TOOLS = ("genai-perf", "aiperf", "vllm", "guidellm")
_PARSERS = {"genai-perf": "genai_perf", "aiperf": "genai_perf", "vllm": "vllm", "guidellm": "guidellm"}
STATISTICS = ("mean", "median", "p90", "p95", "p99")
FEW_REQUESTS = 10  # fewer completed requests than this: rates and percentiles are noise, and a row says so
MAX_DIRECTORY_DEPTH = 32  # folders below a directory given to ingest: tools' run layouts are 1 to 4 deep


@dataclass(frozen=True)
class Run:
    """One benchmark run (one concurrency or rate) as the tool reported it. Latencies in ms at `statistic`, in the
    planner's metrics (planner/metrics.py, docs/metrics.md): `tpot_ms` a request's mean gap (what genai-perf, AIPerf
    and GuideLLM call ITL), `itl_ms` one gap between tokens (vLLM's ITL, AIPerf's inter-chunk latency)."""

    tool: str
    tool_version: str | None
    file: str
    model_name: str | None  # the served model's name as the file gives it
    concurrency: int | None
    request_rate: float | None  # requests/s the client offered; None = as fast as possible
    isl: float
    osl: float
    ttft_ms: float | None
    tpot_ms: float | None
    request_throughput_rps: float
    output_tokens_per_s: float | None
    statistic: str
    run_kind: str = "online"
    notes: tuple[str, ...] = ()
    model_hints: tuple[str, ...] = ()  # other names of the model the file records (the tokenizer's)
    requests: int | None = None  # completed requests the statistics rest on, where the file says
    itl_ms: float | None = None  # one token gap, where the tool records gaps
    cached_prompts: str | None = None  # why the run's prompts were served from a prefix cache (its TTFT then dropped)


@dataclass(frozen=True)
class IngestOptions:
    """What the files may not record: catalog ids, the engine, and whether a whole node was measured. None means
    "as the file states": model id, TP and precision are read from the file and its path where they are there."""

    model: str | None = None
    gpu: str | None = None  # a catalog GPU id or alias; SkyPilot's 'H100:8' also says 8 GPUs were loaded
    tp: int | None = None
    precision: str | None = None
    node: str | None = None  # a catalog system: the benchmark loaded a whole node of it
    statistic: str = "median"
    isl: int | None = None  # override the lengths read from the files
    osl: int | None = None
    concurrency: int | None = None  # for a single run whose file does not record it (a genai-perf CSV)


@dataclass(frozen=True)
class Engine:
    """What one file's runs were measured on; `notes` say where each fact came from."""

    model: str
    gpu: str
    gpus: int
    tp: int
    precision: str
    per: str
    notes: tuple[str, ...]


@dataclass(frozen=True)
class IngestResult:
    rows: tuple[BenchmarkRow, ...]
    runs: tuple[Run, ...]
    notes: tuple[str, ...]
    skipped: tuple[str, ...] = ()  # files of the directories read that are not runs (a summary table), and why

    def csv_text(self) -> str:
        return benchmark_csv_text(self.rows)

    @property
    def warnings(self) -> tuple[str, ...]:
        return tuple(n for n in self.notes if n.startswith("warning:"))


def require(mapping: dict, key: str, file: str, what: str, where: str = ""):
    """mapping[key], or an input error naming the missing key and what the file was taken for."""
    if not isinstance(mapping, dict) or key not in mapping or mapping[key] is None:
        raise PlannerInputError(file, f"{where}{key}", f"missing key '{key}': not a {what} (or an incomplete one)")
    return mapping[key]


def number(value, file: str, field: str) -> float:
    """A finite number from JSON or a CSV cell ('1,234.5' and quoted cells included), at most 1e15 in size."""
    parsed = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        parsed = float(value)
    elif isinstance(value, str):
        text = value.strip().strip('"').replace(",", "")
        try:
            parsed = float(text)
        except ValueError:
            parsed = None
    if parsed is None or not math.isfinite(parsed) or abs(parsed) > 1e15:
        raise PlannerInputError(file, field, f"expected a finite number, got {short_repr(value)}")
    return parsed


def count(value, file: str, field: str) -> int:
    """A whole number >= 1 (a concurrency, a stream count): 2.7 or 'eight' is refused, not rounded or guessed."""
    parsed = number(value, file, field)
    if parsed < 1 or parsed != int(parsed):
        raise PlannerInputError(file, field, f"expected a whole number >= 1, got {short_repr(value)}")
    return int(parsed)




def read_result_text(path: Path) -> str:
    """The text of one result file: a regular file of at most MAX_INGEST_BYTES (planner.loading.open_bounded)."""
    return read_bounded_text(path, "a benchmark result file", MAX_INGEST_BYTES)


def read_result_json(path: Path, what: str):
    """One result file's JSON document, nested at most planner.loading.MAX_JSON_DEPTH deep; a malformed one is
    refused naming its line and what the file was taken for (`what`)."""
    file = str(path)
    text = read_result_text(path)
    try:
        return parse_json(text, file)
    except ValueError as exc:  # json.JSONDecodeError
        raise PlannerInputError(file, f"line {getattr(exc, 'lineno', '?')}", f"not valid JSON ({getattr(exc, 'msg', exc)}): not a {what}") from None


class NotARun(Exception):
    """A file a tool writes beside its runs that is not one (vLLM's nightly summary table): skipped when found in a
    directory, refused with this reason when named alone."""


def files_below(directory: Path) -> list[Path]:
    """Every file below `directory` other than a folder (iteratively, at most MAX_DIRECTORY_DEPTH folders deep;
    symlinked folders not followed, so no loop), sorted. A deeper tree raises PlannerInputError naming the folder."""
    found: list[Path] = []
    pending = [(directory, 0)]
    while pending:
        folder, depth = pending.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        if depth + 1 > MAX_DIRECTORY_DEPTH:
                            raise PlannerInputError(
                                str(directory), "", f"folders nested more than {MAX_DIRECTORY_DEPTH} deep (at "
                                f"{clip_text(entry.path)}): not a benchmark tool's run layout; name the run folders",
                            )  # fmt: skip
                        pending.append((Path(entry.path), depth + 1))
                    elif not (entry.is_symlink() and os.path.isdir(entry.path)):
                        found.append(Path(entry.path))
        except OSError as exc:
            raise PlannerInputError(str(folder), "", f"cannot read the folder: {exc.strerror or exc}") from None
    return sorted(found)


def files_of(paths: list[Path], parser) -> list[tuple[Path, Path | None]]:
    """(result file, the directory it was found in or None when named) for PATHs: files as given, directories
    searched (`files_below`: bounded in depth, sorted, deterministic). A result file's name on something that is not a
    regular file (a FIFO, a link to a device) is kept: reading it refuses it by name (`read_result_text`)."""
    found: list[tuple[Path, Path | None]] = []
    for path in paths:
        if path.is_dir():
            matches = [p for p in files_below(path) if parser.is_result_file(p)]
            if not matches:
                raise PlannerInputError(str(path), "", f"no result files of this tool in the directory (looked for {parser.FILE_NAMES})")
            found.extend((match, path) for match in matches)
        elif path.exists():  # a regular file, or a FIFO or device that reading refuses by name
            found.append((path, None))
        else:
            raise PlannerInputError(str(path), "", "no such file or directory")
    return found


def _hardware(options: IngestOptions, catalog: Catalog) -> tuple[str, int | None, str | None]:
    """(GPU id, GPUs loaded when the name says so ('H100:8'), node system id), names resolved."""
    node = catalog.resolve("system", options.node, "--node", "node") if options.node is not None else None
    gpu = catalog.resolve("gpu", options.gpu, "--gpu", "gpu") if options.gpu is not None else None
    count = accelerator_count(options.gpu) if options.gpu is not None else None
    if node is not None:
        system = catalog.systems[node]
        if gpu is not None and gpu != system.gpu:
            raise PlannerInputError("--gpu", "gpu", f"{node} has {system.gpu} GPUs, not {gpu}")
        if count is not None and count != system.gpus_per_node:
            raise PlannerInputError("--gpu", "gpu", f"{node} has {system.gpus_per_node} GPUs, not {count}")
        gpu = system.gpu
    if gpu is None:
        raise PlannerInputError("--gpu", "gpu", "required: result files do not record the GPU (give --gpu ID, e.g. "
                                "H100 or H100:8, or --node SYSTEM, whose GPU is then used)")  # fmt: skip
    return gpu, count, node


# what file and directory names say of the engine: vLLM's '..._tp8_pp1_...', GuideLLM's '..._tp4_quant-fp8_...'
_TP_NAME = re.compile(r"(?:^|[_\-./])tp[_\-]?(\d+)(?=$|[_\-./])", re.IGNORECASE)
_PP_NAME = re.compile(r"(?:^|[_\-./])pp[_\-]?(\d+)(?=$|[_\-./])", re.IGNORECASE)
_QUANT_NAME = re.compile(r"(?:^|[_\-./])quant[_\-]?([a-z0-9]+)(?=$|[_\-./])", re.IGNORECASE)
# quantization a name states ('-FP8', 'NVFP4', 'MXFP4', 'AWQ', 'GPTQ-Int4'): 4-bit integer weights run dequantized
# in 16-bit GEMMs (w4a16); 8-bit integer formats have no catalog precision ('GPTQ' alone states no bit width)
_QUANT_WORDS = (("nvfp4", "fp4"), ("mxfp4", "fp4"), ("fp4", "fp4"), ("fp8", "fp8"), ("w4a16", "w4a16"), ("w4a8", "w4a8"),
                ("awq", "w4a16"), ("int4", "w4a16"), ("int8", None), ("w8a8", None), ("bf16", "bf16"),
                ("fp16", "fp16"))  # fmt: skip


def _name_parts(path: Path) -> str:
    """The file name and its two parent directories' names: where tools and users write the engine's shape."""
    return "/".join(p for p in (path.parent.parent.name, path.parent.name, path.name) if p)


def stated_tp(path: Path) -> tuple[int | None, str | None]:
    """(TP, where stated) from the path's names; pipeline parallelism beyond 1 is refused (rows hold TP engines)."""
    names = _name_parts(path)
    pp = _PP_NAME.search(names)
    if pp and int(pp.group(1)) > 1:
        raise PlannerInputError(str(path), "pp", f"the run used pipeline parallelism {pp.group(1)} (path '{names}'); "
                                "benchmark rows hold tensor-parallel engines, PP 1")  # fmt: skip
    tp = _TP_NAME.search(names)
    return (int(tp.group(1)), f"the path '{names}'") if tp else (None, None)


def _quant_precision(word: str, file: str) -> str | None:
    for marker, precision in _QUANT_WORDS:
        if marker in word:
            if precision is None:
                raise PlannerInputError(file, "precision", f"the run states '{word}' weights, which the catalog has no "
                                        f"precision for (allowed: {', '.join(PRECISIONS)})")  # fmt: skip
            return precision
    return None


def stated_precision(path: Path, model_names: list[str], model: ModelArch) -> tuple[str | None, str | None]:
    """(precision, where stated): 'quant-X' in the path, else a quantization named in the model id (an FP8 release
    serves FP8), else 'quant-none' in the path: the checkpoint as published (`checkpoint_precision`)."""
    names = _name_parts(path)
    quant = _QUANT_NAME.search(names)
    word = quant.group(1).lower() if quant else None
    if word is not None and word != "none":
        precision = _quant_precision(word, str(path))
        if precision is not None:
            return precision, f"the path '{names}'"
    for name in model_names:
        for part in re.split(r"[_\-./]", name.casefold()):
            precision = _quant_precision(part, str(path)) if part in dict(_QUANT_WORDS) else None
            if precision is not None:
                return precision, f"the model id '{name}'"
    if word == "none":
        return model.checkpoint_precision, f"'quant-none' in the path '{names}' (the checkpoint as published)"
    return None, None


def model_of(runs: list[Run], options: IngestOptions, catalog: Catalog, file: str) -> tuple[str, list[str], str]:
    """(catalog model id, names the file records, where the id came from): --model, else a name in the file."""
    names = list(dict.fromkeys(n for n in (runs[0].model_name, *runs[0].model_hints) if isinstance(n, str) and n.strip()))
    from_file = named = None
    for name in names:
        try:
            from_file, named = catalog.resolve("model", name), name
            break
        except PlannerInputError:
            continue
    if options.model is not None:
        chosen = catalog.resolve("model", options.model, "--model", "model")
        if from_file is not None and from_file != chosen:
            raise PlannerInputError(
                file, "model", f"the file records '{clip_text(named)}', which is catalog model '{from_file}', but --model says "
                f"'{chosen}'; leave --model out to take the file's, or check the file",
            )  # fmt: skip
        return chosen, names, f"model {chosen} from --model"
    if from_file is None:
        if not names:
            raise PlannerInputError(file, "model", "required: the file records no model name; give --model ID "
                                    "(planner catalog models lists them)")  # fmt: skip
        hint = catalog.did_you_mean("model", clip_text(names[-1])).strip()
        raise PlannerInputError(
            file, "model", f"the file records {bounded_listing(repr(clip_text(n)) for n in names)}, which names no catalog model. "
            f"{hint + ' ' if hint else ''}"
            "Give --model ID (planner catalog models lists them; a user catalog may add the model, with this name as "
            "an alias)",
        )  # fmt: skip
    return from_file, names, f"model {from_file} from the file's '{clip_text(named)}'"


def engine_of(path: Path, runs: list[Run], options: IngestOptions, catalog: Catalog,
              hardware: tuple[str, int | None, str | None]) -> Engine:  # fmt: skip
    """The engine a file measured: model, TP and precision from the options or, where not given, as the file states
    them. A fact neither gives is refused (no silent TP 1 / bf16), as is one they disagree on; the weights must fit
    the GPUs of the stated shape."""
    file = str(path)
    gpu_id, count, node = hardware
    gpu = catalog.gpus[gpu_id]
    model_id, names, model_note = model_of(runs, options, catalog, file)
    model = catalog.models[model_id]
    notes = [model_note]
    tp_file, tp_where = stated_tp(path)
    if options.tp is not None and tp_file is not None and options.tp != tp_file:
        raise PlannerInputError("--tp", "tp", f"--tp {options.tp}, but {tp_where} of {file} says TP {tp_file}")
    tp = options.tp if options.tp is not None else tp_file
    if tp is None:
        raise PlannerInputError(file, "tp", "required: the file does not state the tensor parallelism of the engine it "
                                "measured; give --tp N")  # fmt: skip
    notes.append(f"TP {tp} from --tp" if options.tp is not None else f"TP {tp} from {tp_where}")
    precision_file, precision_where = stated_precision(path, names, model)
    # 'quant-none' states the checkpoint's precision only by default: a GPU without its tensor format (MXFP4
    # weights on Hopper run dequantized) ran it otherwise, which --precision may say
    soft = precision_where is not None and "quant-none" in precision_where
    if options.precision is None:
        precision, where = precision_file, precision_where
        if precision is None:
            raise PlannerInputError(file, "precision", "required: the file does not state the precision the engine ran "
                                    "at (no FP8/NVFP4/quant-... in its model id or path); give --precision "
                                    f"({', '.join(gpu.precisions)})")  # fmt: skip
        if soft and precision not in gpu.precisions:
            raise PlannerInputError(
                file, "precision", f"{precision_where} says {precision}, which {gpu_id} has no tensor format for: "
                f"give --precision for how it ran ({', '.join(gpu.precisions)})",
            )  # fmt: skip
    else:
        precision, where = options.precision, "--precision"
        if precision_file is not None and precision != precision_file:
            if not soft:
                raise PlannerInputError("--precision", "precision",
                                        f"--precision {precision}, but {precision_where} of {file} says {precision_file}")  # fmt: skip
            where = f"--precision (the checkpoint ships {precision_file}: {precision_where})"
    notes.append(f"{precision} from {where}")
    if precision not in gpu.precisions:
        raise PlannerInputError("--precision", "precision", f"{gpu_id} does not support {precision}; allowed: {', '.join(gpu.precisions)}")
    weights_per_gpu = weight_gb(model, precision) / tp
    if weights_per_gpu > gpu.memory_gb:
        raise PlannerInputError(
            file, "tp", f"{model_id} at {precision} has {weight_gb(model, precision):,.0f} GB of weights: over TP {tp} "
            f"that is {weights_per_gpu:,.0f} GB per GPU, more than the {gpu.memory_gb:g} GB of a {gpu_id}; the run "
            "cannot have had this shape (check --tp, --precision and --gpu)",
        )  # fmt: skip
    if node is not None:
        system = catalog.systems[node]
        if tp > system.gpus_per_node:
            raise PlannerInputError("--tp", "tp", f"{node} has {system.gpus_per_node} GPUs; TP {tp} does not fit")
        return Engine(model_id, gpu_id, system.gpus_per_node, tp, precision, "node", tuple(notes))
    if count is not None and count != tp:
        if count < tp or count % tp:
            raise PlannerInputError("--gpu", "gpu", f"{options.gpu} loads {count} GPUs; TP {tp} engines do not divide them")
        notes.append(f"{count} GPUs loaded ({options.gpu}): {count // tp} TP {tp} engines behind one endpoint")
        return Engine(model_id, gpu_id, count, tp, precision, "node", tuple(notes))
    return Engine(model_id, gpu_id, tp, tp, precision, "instance", tuple(notes))


def _snap(values: list[float]) -> tuple[list[int], str | None]:
    """Lengths of one sweep measured a little differently per run (tokenizer, BOS) are one length: runs within
    2% of the most common rounded value take it, so that the rows group for interpolation."""
    rounded = [int(round(v)) for v in values]
    common = Counter(rounded).most_common(1)[0][0]
    snapped = [common if abs(v - common) <= 0.02 * common else v for v in rounded]
    if snapped != rounded:
        return snapped, f"lengths within 2% of {common} taken as {common}"
    return snapped, None


def _short_path(file: str) -> str:
    """'run-directory/file': genai-perf names every run's export alike, its directory tells them apart."""
    path = Path(file)
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name




def run_warnings(run: Run) -> list[str]:
    """What makes a run's numbers doubtful: prompts served from a prefix cache, few requests, throughput figures
    that disagree."""
    warnings = []
    if run.cached_prompts:
        warnings.append(f"warning: {_short_path(run.file)}: {run.cached_prompts}")
    if run.requests is not None and run.requests < FEW_REQUESTS:
        warnings.append(f"warning: {_short_path(run.file)} rests on {run.requests} completed requests (fewer than "
                        f"{FEW_REQUESTS}): its rates and percentiles are noise, not a measurement to size a fleet on")  # fmt: skip
    if run.output_tokens_per_s and run.request_throughput_rps and run.osl:
        implied = run.request_throughput_rps * run.osl
        if abs(implied / run.output_tokens_per_s - 1) > 0.25:
            warnings.append(
                f"warning: {_short_path(run.file)}: request throughput x OSL = {run.request_throughput_rps:.3g} x "
                f"{run.osl:.0f} = {implied:,.0f} tokens/s, but the file reports {run.output_tokens_per_s:,.0f} output "
                "tokens/s: the run was too short or unsteady for its rates to agree",
            )  # fmt: skip
    return warnings


def runs_to_rows(measured: list[tuple[Run, Engine]], options: IngestOptions, table: str = "ingested") -> IngestResult:
    """Benchmark rows from runs and the engine each measured, every row validated as the catalog loader would.
    Lengths are snapped per engine (one sweep measures one length a little differently per run)."""
    if not measured:
        raise PlannerInputError(table, "", "no benchmark runs found")
    notes: list[str] = []
    lengths: dict[int, tuple[int, int]] = {}
    groups: dict[tuple, list[int]] = {}
    for index, (_, engine) in enumerate(measured):
        groups.setdefault((engine.model, engine.gpu, engine.gpus, engine.tp, engine.precision), []).append(index)
    for indexes in groups.values():
        runs = [measured[i][0] for i in indexes]
        isls, isl_note = _snap([r.isl for r in runs]) if options.isl is None else ([options.isl] * len(runs), None)
        osls, osl_note = _snap([r.osl for r in runs]) if options.osl is None else ([options.osl] * len(runs), None)
        notes += [n for n in (isl_note, osl_note) if n and n not in notes]
        lengths.update({i: (isl, osl) for i, isl, osl in zip(indexes, isls, osls)})

    def order_key(i: int) -> tuple:
        run, engine = measured[i]
        return (engine.model, engine.tp, engine.precision, engine.gpus, *lengths[i], run.run_kind, run.concurrency or 0, run.file)

    order = sorted(range(len(measured)), key=order_key)
    rows = []
    for line, index in enumerate(order, start=2):
        run, engine = measured[index]
        if run.ttft_ms is not None and run.ttft_ms <= 0:
            # a first token takes time: 0 ms is a tool's placeholder (no streamed token seen), not a measurement;
            # refused, never dropped in silence (a row without TTFT would be sized on TPOT alone)
            raise PlannerInputError(
                run.file, f"TTFT ({run.statistic})",
                f"{run.ttft_ms:g} ms is not a measurement of a first token (the run recorded none, or a non-streaming "
                f"run); re-run with streaming, or leave this file{' (concurrency ' + str(run.concurrency) + ')' if run.concurrency else ''} out",
            )  # fmt: skip
        isl, osl = lengths[index]
        # the tool's version and the model's name are the file's own text: clipped, a 2 MB name is no 2 MB note
        version = clip_text(run.tool_version) if run.tool_version else "version not recorded"
        remarks = [f"{run.tool} {version}", f"model in file: {clip_text(run.model_name) if run.model_name else 'not recorded'}",
                   f"latencies: {run.statistic}", *engine.notes]  # fmt: skip
        if run.request_rate is not None:
            remarks.append(f"offered {run.request_rate:g} rps")
        if run.requests is not None:
            remarks.append(f"{run.requests} requests")
        remarks += list(run.notes)
        for warning in run_warnings(run):
            remarks.append(warning)
            if warning not in notes:
                notes.append(warning)
        values = {
            "table": table, "line": line, "source": f"{run.tool} ({version}): {_short_path(run.file)}",
            "model": engine.model, "gpu": engine.gpu, "gpus": engine.gpus, "tp": engine.tp, "precision": engine.precision,
            "isl": isl, "osl": osl, "concurrency": run.concurrency, "run_kind": run.run_kind,
            "statistic": run.statistic, "ttft_ms": run.ttft_ms, "tpot_ms": run.tpot_ms or None,
            "itl_ms": run.itl_ms or None,
            "request_throughput_rps": run.request_throughput_rps, "output_tokens_per_s": run.output_tokens_per_s or None,
            "per": engine.per, "notes": "; ".join(remarks),
        }  # fmt: skip
        rows.append(validate_model(BenchmarkRow, values, run.file))
    return IngestResult(tuple(rows), tuple(measured[i][0] for i in order), tuple(notes))


def ingest(tool: str, paths: list[Path | str], options: IngestOptions, catalog: Catalog, table: str = "ingested") -> IngestResult:
    """Parse a tool's result files (or directories of them) into benchmark rows."""
    import importlib

    if tool not in TOOLS:
        raise PlannerInputError("ingest", "tool", f"unknown tool '{tool}'; allowed: {', '.join(TOOLS)}")
    if options.statistic not in STATISTICS:
        raise PlannerInputError("--statistic", "statistic", f"unknown '{options.statistic}'; allowed: {', '.join(STATISTICS)}")
    if options.tp is not None and options.tp < 1:
        raise PlannerInputError("--tp", "tp", f"must be >= 1 (got {options.tp})")
    hardware = _hardware(options, catalog)  # names checked before any file is read
    if options.model is not None:
        catalog.resolve("model", options.model, "--model", "model")
    if options.precision is not None and options.precision not in catalog.gpus[hardware[0]].precisions:
        gpu = catalog.gpus[hardware[0]]
        raise PlannerInputError("--precision", "precision", f"{gpu.id} does not support {options.precision}; allowed: {', '.join(gpu.precisions)}")
    parser = importlib.import_module(f"planner.ingest.{_PARSERS[tool]}")
    files = files_of([Path(p) for p in paths], parser)
    measured: list[tuple[Run, Engine]] = []
    skipped: list[str] = []
    with_runs: set[Path] = set()
    run_files = 0
    for file, directory in files:
        try:
            runs = parser.parse_file(file, options.statistic, options.concurrency)
        except NotARun as reason:
            if directory is None:
                raise PlannerInputError(str(file), "", f"{reason}; ingest the run files beside it (or their directory)") from None
            skipped.append(f"{file}: {reason}")
            continue
        except (TypeError, AttributeError, KeyError, IndexError, ValueError) as exc:
            # a file of the right name whose structure is not the tool's (a field of another type, a list where
            # a mapping belongs): refused as such, whatever the parser stumbled on
            raise PlannerInputError(
                str(file), "", f"not a {tool} result of a known layout: {type(exc).__name__}: {str(exc)[:120]}"
            ) from None
        try:
            engine = engine_of(file, runs, options, catalog, hardware)
        except PlannerInputError as reason:
            if directory is None:  # a file named on the command line: its problem is the user's to fix
                raise
            # a directory of mixed runs (one quantized to a format this GPU lacks, a model not in the catalog):
            # the others are ingested, this one skipped with its reason
            skipped.append(f"{file}: {reason.problem.field}: {reason.problem.message}")
            continue
        measured.extend((run, engine) for run in runs)
        with_runs.add(directory)
        run_files += 1
    if options.concurrency is not None and run_files > 1:
        raise PlannerInputError("--concurrency", "concurrency", f"applies to one run; {run_files} result files were found")
    for directory in sorted({d for _, d in files if d is not None} - with_runs):
        raise PlannerInputError(str(directory), "", f"no runs in the directory, only files that are not runs: {'; '.join(skipped)}")
    result = runs_to_rows(measured, options, table)
    return IngestResult(result.rows, result.runs, tuple(f"skipped {s}" for s in skipped) + result.notes, tuple(skipped))


def little_concurrency(rps: float, latency_ms: float | None) -> int | None:
    """Mean requests in flight by Little's law (L = lambda x W), for runs driven by a rate, not a concurrency."""
    if latency_ms is None or rps <= 0:
        return None
    return max(1, int(round(rps * latency_ms / 1000.0)))



__all__ = ["IngestOptions", "IngestResult", "Run", "TOOLS", "STATISTICS", "ingest", "runs_to_rows"]
