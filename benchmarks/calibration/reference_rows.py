"""Serving measurements of ../shared/reference/benchmarks/serving_amd_and_engines.csv as planner cases.

The CSV (its columns, sources and caveats: SOURCES_amd_engines.md beside it) holds vLLM, SGLang, TGI and
TensorRT-LLM runs on AMD Instinct and NVIDIA GPUs, dense and MoE. `reference_cases(catalog)` returns one dict per
row the planner can replay, in the planner's terms (catalog GPU and model ids, a precision it names, a TP x DP x EP
layout, fixed lengths, a closed / batch / rate run), and the count of the other rows by the reason they were left.

Rows left, following the sources' caveats:
- TGI (no planner engine) and PD-disaggregated deployments (not colocated serving);
- the prefix-caching test (generated-shared-prefix dataset: prompts share 2000 tokens);
- saienduri/vllm-docs (may overlap the excluded ROCm/vllm dev-docker README) and dstack's TensorRT-LLM offline
  C++ BF16 engine (dstack flags it as not representative);
- lengths that are not fixed or not stated (ShareGPT, sonnet, a dataset not named, --ignore-eos not set);
- no throughput or latency the planner can read: a throughput whose label does not say it counts output tokens
  (total tokens/s is left out: its output share depends on lengths the run may not have produced);
- a model or GPU the catalog does not know, a precision not stated, and layouts the planner cannot hold (pipeline
  stages; experts over EP GPUs that are neither 1 nor TP x DP, e.g. TensorRT-LLM's TP8 with EP4).

Layouts: `tp` GPUs per attention rank, `dp` attention ranks, `ep` 1 (experts split by TP) or tp x dp (whole experts
per GPU), as planner.perf.types.Layout. SGLang 0.4.x `--tp N --enable-dp-attention` runs attention as N DP ranks of
one GPU (dp_size = tp_size) with the experts split by TP over all N GPUs; the planner has no "experts TP over DP
ranks", so such rows are given as DEP N (tp 1, dp N, ep N): the same weights and expert FLOPs per GPU, all-to-all in
place of the MoE all-reduce. `gpus` = tp x dp; the CSV's figures are whole-system, for `instances` = gpu_count //
gpus identical instances.

Runs: "closed" (a fixed concurrency cap), "batch" (offline or burst: all `num_prompts` submitted at once, given as
`concurrency`) or "rate" (Poisson arrivals at `rate_rps`; a rate of inf is a batch). Latencies are the CSV's means
where it has any, else its medians (`statistic`).

Use: spec = importlib.util.spec_from_file_location("reference_rows", PATH); ... module.reference_cases(catalog).
"""

from __future__ import annotations

import csv
import math
import re
from collections import Counter
from pathlib import Path

from planner.errors import PlannerInputError

REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference" / "benchmarks"
DEFAULT_PATH = REFERENCE / "serving_amd_and_engines.csv"
PATH_2026 = REFERENCE / "serving_2026.csv"  # 2025-H2 / 2026 runs, same columns (SOURCES_2026.md)

ENGINES = {"vllm": "vllm", "vllm (rocm fork)": "vllm", "sglang": "sglang", "tensorrt-llm": "trtllm", "atom": "atom",
           "vllm (llm-d v0.5.0 on openshift)": "vllm", "vllm (via nvidia dynamo backend)": "vllm",
           "vllm (via llm-d wide-ep)": "vllm"}  # fmt: skip
# the share of a run's tokens its prompts may be for a throughput labelled without saying total or output to be read
# as output tokens/s (it is then at most this much high)
AMBIGUOUS_LABEL_SHARE = 0.05
PRECISIONS = ("bf16", "fp8", "fp4", "w4a16")
RUNS = ("closed", "batch", "rate")
KEYS = (
    "row_id", "source", "engine", "gpu", "model", "precision", "tp", "dp", "ep", "gpus", "instances", "isl", "osl",
    "run", "concurrency", "rate_rps", "output_tokens_per_s", "request_throughput_rps", "ttft_ms", "tpot_ms", "itl_ms",
    "e2e_ms", "statistic", "engine_version", "origin", "token_budget",
)  # fmt: skip
# an engine version in free text: the engine's name (or a container tag) then the version; a version at the start;
# "version ... X.Y"; ATOM has no releases: its version is the date of the main commit the run used (YYYY.MM.DD)
_VERSION = r"v?(\d+\.\d+(?:\.\d+)*(?:rc\d+|\.post\d+)?)"
_VERSION_PATTERNS = tuple(re.compile(p, re.IGNORECASE) for p in (
    r"(?:vllm|sglang|tensorrt-llm|trtllm)[\s_:-]*" + _VERSION,
    r"(?:openai(?:-rocm)?|sglang):" + _VERSION,
    r"^\s*" + _VERSION,
    r"(?:version|as online)[^\d]{0,12}" + _VERSION,
))  # fmt: skip
_DATE = re.compile(r"(20\d\d)-(\d\d)(?:-(\d\d))?")

# the GPU named in the free-text column, most specific first (GB200 before B200); H100 PCIe by its form factor
_GPU = re.compile(r"(?<![A-Z0-9])(GB200|B300|B200|MI355X|MI325X|MI300X|H200|H100|A100|L40S|L4)(?![A-Z0-9])", re.IGNORECASE)
_HF_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
# the model column by hand where the HF id is a quantized repack the catalog does not list
_MODELS = (
    (re.compile(r"llama[\s-]*3(?:\.1)?\D*405b", re.IGNORECASE), "llama-3.1-405b"),
    (re.compile(r"llama[\s-]*3(?:\.1)?\D*70b", re.IGNORECASE), "llama-3.1-70b"),
    (re.compile(r"llama[\s-]*3(?:\.1)?\D*(?<!\d)8b", re.IGNORECASE), "llama-3.1-8b"),
    (re.compile(r"deepseek[\s-]*r1", re.IGNORECASE), "deepseek-r1"),
    (re.compile(r"deepseek[\s-]*v3(?![.\d])", re.IGNORECASE), "deepseek-v3"),
    (re.compile(r"gpt-oss-120b", re.IGNORECASE), "gpt-oss-120b"),
    (re.compile(r"qwen3-235b-a22b", re.IGNORECASE), "qwen3-235b-a22b"),
)
_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")
_THOUSANDS = re.compile(r"\d{1,3}(,\d{3})+(\.\d+)?")
_LEADING_INT = re.compile(r"\s*(\d+)\b")


class _Skip(Exception):
    """A row the planner cannot replay; the message is the reason counted."""


def reference_cases(catalog, path=None) -> tuple[list[dict], dict[str, int]]:
    """(cases, skipped): one dict of KEYS per usable row of the CSV at `path` (default DEFAULT_PATH), and the number
    of rows left by reason. An absent file gives ([], {"file absent": 1})."""
    path = Path(path) if path is not None else DEFAULT_PATH
    if not path.is_file():
        return [], {"file absent": 1}
    cases: list[dict] = []
    skipped: Counter[str] = Counter()
    with path.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            try:
                cases.append(_case(catalog, row, path.name))
            except _Skip as reason:
                skipped[str(reason)] += 1
    return cases, dict(sorted(skipped.items(), key=lambda item: (-item[1], item[0])))


def _case(catalog, row: dict, file_name: str) -> dict:
    text = {key: (value or "").strip() for key, value in row.items() if key is not None}
    engine = _engine(text)
    _source_caveats(text)
    isl, osl = _lengths(text)
    model = _model(catalog, text)
    gpu = _gpu(catalog, text)
    precision = _precision(text["precision"], catalog.gpus[gpu])
    tp, dp, ep, gpus, instances = _layout(text)
    run, concurrency, rate = _run(text)
    figures = _figures(text, isl, osl)
    return {
        "row_id": int(text["row_id"]),
        "source": f"{file_name} row {text['row_id']}: {text['source']}",
        "engine": engine, "gpu": gpu, "model": model, "precision": precision,
        "tp": tp, "dp": dp, "ep": ep, "gpus": gpus, "instances": instances,
        "isl": isl, "osl": osl, "run": run, "concurrency": concurrency, "rate_rps": rate,
        **figures, "engine_version": engine_version(engine, text["engine_version"]),
        "token_budget": _token_budget(text),
        "origin": source_group(text["source"]),
    }  # fmt: skip


def _token_budget(text: dict) -> int | None:
    """The run's tokens per iteration where its launch command states them (vLLM/ATOM --max-num-batched-tokens,
    SGLang --chunked-prefill-size, TensorRT-LLM --max_num_tokens), else None (the engine's default)."""
    found = re.search(r"(?:max-num-batched-tokens|chunked-prefill-size|max_num_tokens)[ =](\d+)",
                      f"{text['deployment']} {text['notes']}", re.IGNORECASE)  # fmt: skip
    return int(found.group(1)) if found else None


def engine_version(engine: str, text: str) -> str | None:
    """The version label of the engine a row ran (module docstring of planner/perf/serving.py orders them), or None
    where the row does not state one."""
    if engine == "atom":
        found = _DATE.search(text)
        return ".".join(part for part in found.groups() if part) if found else None
    for pattern in _VERSION_PATTERNS:
        found = pattern.search(text)
        if found:
            return found.group(1)
    return None


def source_group(source: str) -> str:
    """The publisher of a row, for leave-one-source-out validation: 'MLPerf' for every MLPerf submission, else the
    source's name up to its first ':' or '(' ("ROCm/ATOM recipe", "GPUStack performance lab")."""
    if source.lower().startswith("mlperf"):
        return "MLPerf"
    return re.split(r"[:(]", source, maxsplit=1)[0].strip()


def _engine(text: dict) -> str:
    name = text["engine"]
    if "disaggregated" in name.lower() or "disaggregated" in text["deployment"].lower():
        raise _Skip("PD-disaggregated deployment (not colocated serving)")
    if name.lower().startswith("tgi"):
        raise _Skip("engine TGI (no planner engine)")
    if name.lower() not in ENGINES:
        raise _Skip(f"engine not known: {name}")
    return ENGINES[name.lower()]


def _source_caveats(text: dict) -> None:
    dataset, notes, deployment = text["dataset"].lower(), text["notes"].lower(), text["deployment"].lower()
    if "--method mtp" in deployment or "speculative decoding: mtp" in notes:
        raise _Skip("speculative decoding (MTP) run: calibration rows decode one token a step")
    memory = re.search(r"gpu-memory-utilization[ =]([0-9.]+)", deployment)
    if memory and float(memory.group(1)) < 0.8:
        raise _Skip("engine memory fraction set far below its default (a flag ablation, not a deployment)")
    if "shared-prefix" in dataset or "prefix caching on" in dataset or "prefix caching benefits" in notes:
        raise _Skip("prefix-caching run (generated-shared-prefix dataset)")
    if text["source"].lower().startswith("saienduri/vllm-docs"):
        raise _Skip("saienduri/vllm-docs: may overlap the excluded ROCm/vllm dev-docker README (SOURCES caveat)")
    if text["precision"].lower().startswith("bf16 engine") or "flags this as a limitation" in notes:
        raise _Skip("TensorRT-LLM offline C++ BF16 engine (dstack flags it as not representative)")


def _lengths(text: dict) -> tuple[int, int]:
    dataset = text["dataset"].lower()
    if "ignore-eos not set" in dataset:
        raise _Skip("output lengths not fixed (--ignore-eos not set)")
    if "not stated" in dataset:
        raise _Skip("dataset not stated: lengths not known to be fixed")
    isl, osl = _plain_int(text["isl"]), _plain_int(text["osl"])
    if isl is not None and osl is not None and isl > 0 and osl > 0:
        return isl, osl
    if "sharegpt" in dataset:
        raise _Skip("lengths not fixed (ShareGPT)")
    if "sonnet" in dataset:
        raise _Skip("lengths not fixed (sonnet: output up to 150 tokens)")
    raise _Skip("lengths not stated")


def _figures(text: dict, isl: int, osl: int) -> dict:
    output = _number(text, "output_throughput_tok_s")
    if output is None and text["throughput_as_labelled"] and (
            _label_is_output(text["throughput_label"]) or isl / (isl + osl) <= AMBIGUOUS_LABEL_SHARE):
        # a throughput that does not say total or output: read as output where the prompts are a small share
        output = _number(text, "throughput_as_labelled")
    mean = any(text[f"{name}_mean_ms"] for name in ("ttft", "tpot", "itl", "e2e"))
    median = any(text[f"{name}_median_ms"] for name in ("ttft", "tpot", "itl", "e2e"))
    statistic = "median" if median and not mean else "mean"
    latencies = {f"{name}_ms": _number(text, f"{name}_{statistic}_ms") for name in ("ttft", "tpot", "itl", "e2e")}
    figures = {
        "output_tokens_per_s": output,
        "request_throughput_rps": _number(text, "request_throughput_req_s"),
        **latencies,
        "statistic": statistic,
    }
    if all(figures[key] is None for key in ("output_tokens_per_s", "request_throughput_rps", "ttft_ms", "tpot_ms")):
        if text["throughput_as_labelled"] or text["total_token_throughput_tok_s"]:
            raise _Skip("no usable figure: the throughput given is not stated as output tokens/s")
        raise _Skip("no throughput and no TTFT/TPOT")
    return figures


def _label_is_output(label: str) -> bool:
    """A throughput label that says the figure counts output (generated) tokens per second."""
    label = label.lower()
    return "not stated" not in label and ("output tokens/s" in label or "output throughput" in label)


def _model(catalog, text: dict) -> str:
    names = [match.group(0) for match in _HF_ID.finditer(text["model_hf_id"])][:1]
    names.append(text["model"])
    names += [model_id for pattern, model_id in _MODELS if pattern.search(text["model"])]
    for name in names:
        if name:
            try:
                return catalog.resolve("model", name)
            except PlannerInputError:
                continue
    raise _Skip(f"model not in the catalog: {text['model']}")


def _gpu(catalog, text: dict) -> str:
    match = _GPU.search(text["gpu"])
    if match is None:
        raise _Skip(f"GPU not known: {text['gpu']}")
    name = match.group(1).upper()
    if name == "H100" and "pcie" in text["gpu"].lower():
        name = "H100 PCIe"
    try:
        return catalog.resolve("gpu", name)
    except PlannerInputError:
        raise _Skip(f"GPU not in the catalog: {text['gpu']}") from None


def _precision(text: str, gpu) -> str:
    """The planner's precision for the free-text column: weights and activations in FP8 -> fp8, BF16/FP16 -> bf16,
    4-bit weights with 16-bit activations (AWQ, INT4, MXFP4 on a GPU without FP4) -> w4a16."""
    lowered = text.lower()
    has_fp4 = "fp4" in gpu.tflops_by_precision
    if not lowered or "not stated" in lowered or "presumed" in lowered:
        raise _Skip("precision not stated")
    if "mxfp4" in lowered or "nvfp4" in lowered:
        return "fp4" if has_fp4 else "w4a16"
    if "w4a16" in lowered or "awq" in lowered or "int4" in lowered:
        return "w4a16"
    if "fp8" in lowered:
        return "fp8"
    if "bf16" in lowered or "fp16" in lowered:
        return "bf16"
    raise _Skip(f"precision unclear: {text}")


def _layout(text: dict) -> tuple[int, int, int, int, int]:
    stated_tp = _leading_int(text["tp"])
    if not stated_tp:
        raise _Skip("TP not stated")
    pp = _leading_int(text["pp"]) if text["pp"] else 1
    if pp != 1:
        raise _Skip("pipeline parallel (PP > 1)")
    stated_ep = _leading_int(text["ep"]) if text["ep"] else 1
    if text["dp"] and "attention" in text["dp"].lower():
        # SGLang --enable-dp-attention: attention DP ranks of one GPU each over the TP GPUs; given as DEP (see above)
        tp, dp = 1, stated_tp
        ep = dp if stated_ep in (1, dp) else stated_ep
    else:
        tp, dp, ep = stated_tp, (_leading_int(text["dp"]) if text["dp"] else 1), stated_ep
    if not dp or not ep:
        raise _Skip("DP or EP not a count")
    if ep not in (1, tp * dp):
        raise _Skip(f"EP {ep} with TP {tp} x DP {dp}: experts neither split by TP nor over all GPUs")
    gpu_count = _leading_int(text["gpu_count"])
    gpus = tp * dp
    if not gpu_count or gpus > gpu_count or gpu_count % gpus:
        raise _Skip("GPU count not a multiple of the instance's GPUs")
    return tp, dp, ep, gpus, gpu_count // gpus


def _run(text: dict) -> tuple[str, int | None, float | None]:
    mode, rate = text["mode"].lower(), text["request_rate"].lower()
    if "offline" in mode or "burst" in mode or (rate.startswith("inf") and not text["concurrency"]):
        prompts = _plain_int(text["num_prompts"]) or _plain_int(text["completed"])  # a burst: every prompt at once
        if not prompts:
            raise _Skip("batch run without a number of prompts")
        return "batch", prompts, None
    concurrency = _plain_int(text["concurrency"])
    if concurrency:
        return "closed", concurrency, None
    rate_rps = _number(text, "request_rate")
    if rate_rps and math.isfinite(rate_rps):
        return "rate", None, rate_rps
    raise _Skip("run not stated (no concurrency, request rate or batch)")


def _number(text: dict, key: str) -> float | None:
    """A plain number (thousands commas allowed) or None when blank; any other text (approximate '~', 'k per
    node', '±') skips the row."""
    value = text[key]
    if not value:
        return None
    if _THOUSANDS.fullmatch(value):
        value = value.replace(",", "")
    if not _NUMBER.fullmatch(value):
        raise _Skip(f"{key} not a plain number")
    return float(value)


def _plain_int(value: str) -> int | None:
    value = value.strip()
    if not value or not _NUMBER.fullmatch(value):
        return None
    number = float(value)
    return int(number) if number.is_integer() else None


def _leading_int(value: str) -> int | None:
    match = _LEADING_INT.match(value)
    return int(match.group(1)) if match else None
