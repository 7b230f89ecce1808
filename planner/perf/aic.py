"""NVIDIA's operator-level performance database (aiconfigurator-core) as a perf source: `pip install '.[aic]'` in the planner checkout.

The package estimates one serving configuration (model, system, backend and its version, TP, quantization,
batch, ISL, OSL) from measured GEMM/attention/communication kernels, offline, on a CPU. This adapter maps
catalog ids to the package's names, calls its Python API (`aiconfigurator_core.sdk`, the same calls as its
`cli estimate`), and answers with the planner's `PerfResult`, provenance `aic:<package>:<backend>:<db version>`.
Every estimate is kept in a persistent SQLite cache keyed by all its inputs (package and database versions
included), so a plan over many candidates asks the package for each point once.

The support matrix is the package's: models whose config ships with it (offline: Llama 3.x, Qwen3 dense and MoE,
DeepSeek-V3/R1, gpt-oss, Llama 4), systems with a measured database for the backend (TensorRT-LLM, vLLM
or SGLang: the query's engine), and the query's layout (TP, attention DP, EP, PP). Anything else is a miss that
says why.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from planner.perf.types import MemoryFit, PerfQuery, PerfResult

PACKAGE = "aiconfigurator-core"
DEFAULT_BACKEND = "trtllm"
BATCH_LADDER = (1, 2, 4, 8, 16, 32, 64, 128, 256)

# catalog model id -> the package's model name (configs shipped in aiconfigurator_core/model_configs)
MODEL_NAMES = {
    "llama-3.1-8b": "meta-llama/Meta-Llama-3.1-8B",
    "llama-3.1-70b": "meta-llama/Meta-Llama-3.1-70B",
    "llama-3.1-405b": "meta-llama/Meta-Llama-3.1-405B",
    # same architecture as Llama 3.1 70B / 8B (layers, heads, KV heads, FFN, vocab): same kernels
    "llama-3.3-70b": "meta-llama/Meta-Llama-3.1-70B",
    "llama-3-8b": "meta-llama/Meta-Llama-3.1-8B",
    "qwen3-8b": "Qwen/Qwen3-8B",
    "qwen3-32b": "Qwen/Qwen3-32B",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    "deepseek-r1": "deepseek-ai/DeepSeek-R1",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "gpt-oss-120b": "openai/gpt-oss-120b",
    "gpt-oss-20b": "openai/gpt-oss-20b",
    "llama-4-maverick": "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
    "llama-4-scout": "meta-llama/Llama-4-Scout-17B-16E-Instruct",
}
BACKENDS = ("trtllm", "vllm", "sglang")  # the planner's engines are the package's backends
# catalog GPU id -> the package's system name (only systems with a measured database answer)
SYSTEM_NAMES = {
    "H100-SXM-80GB": "h100_sxm",
    "H200-SXM-141GB": "h200_sxm",
    "B200-SXM-180GB": "b200_sxm",
    "A100-SXM-80GB": "a100_sxm",
    "L40S-48GB": "l40s",
    "L4-24GB": "l4",
    "H100-PCIe-80GB": "h100_pcie",
    "B300-SXM-288GB": "b300_sxm",
    "GB200-186GB": "gb200",
    "RTX-PRO-6000-96GB": "rtx_pro_6000_server",
}
# planner precision -> (GEMM, KV cache, MoE) quantization modes of the package (`quant_modes` adjusts per model)
QUANT_MODES = {"bf16": ("bfloat16", "bfloat16", "bfloat16"), "fp16": ("bfloat16", "bfloat16", "bfloat16"),
               "fp8": ("fp8", "fp8", "fp8"), "fp4": ("nvfp4", "fp8", "nvfp4"),
               "w4a16": ("int4_wo", "bfloat16", "int4_wo"), "w4a8": ("fp8", "fp8", "w4afp8")}  # fmt: skip
# checkpoints whose own format the engines keep: DeepSeek's fp8 is block-scaled (128 x 128), gpt-oss ships MXFP4
# experts with bf16 attention
BLOCK_FP8_MODELS = ("deepseek-r1", "deepseek-v3")
MXFP4_MODELS = ("gpt-oss-120b", "gpt-oss-20b")


def quant_modes(model: str, precision: str, backend: str = DEFAULT_BACKEND) -> tuple[str, str, str]:
    """(GEMM, KV cache, MoE) quantization modes of the package for a planner precision: QUANT_MODES, with fp8
    block-scaled for DeepSeek's checkpoints and SGLang's MoE kernels (its only fp8 MoE), and gpt-oss's MXFP4 experts
    with 16-bit (w4a16) or 8-bit (w4a8, fp4) activations beside bf16 attention."""
    gemm, kv, moe = QUANT_MODES[precision]
    if precision == "fp8" and (model in BLOCK_FP8_MODELS or backend == "sglang"):
        gemm, moe = ("fp8_block" if model in BLOCK_FP8_MODELS else gemm), "fp8_block"
    if model in MXFP4_MODELS:
        if precision in ("w4a16", "fp8", "bf16"):
            return "bfloat16", kv, "w4a16_mxfp4"
        if precision in ("w4a8", "fp4"):
            return "bfloat16", kv, "w4a8_mxfp4_mxfp8"
    return gemm, kv, moe


class AicUnavailable(Exception):
    """The extra is not installed (or does not import)."""


@lru_cache(maxsize=1)
def package_version() -> str:
    """The installed aiconfigurator-core version; AicUnavailable when it is not installed."""
    from importlib import metadata

    try:
        version = metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        raise AicUnavailable(f"the aic perf source needs {PACKAGE}: pip install '.[aic]' in the planner checkout") from None
    try:
        import aiconfigurator_core.sdk  # noqa: F401
    except Exception as exc:  # a broken install: say so rather than crash the plan
        raise AicUnavailable(f"{PACKAGE} {version} is installed but does not import: {exc}") from None
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    return version


def available() -> bool:
    try:
        package_version()
        return True
    except AicUnavailable:
        return False


@lru_cache(maxsize=None)
def database_version(system: str, backend: str) -> str | None:
    from aiconfigurator_core.sdk.perf_database import get_latest_database_version

    return get_latest_database_version(system=system, backend=backend)


def unsupported_reason(model: str, gpu: str, precision: str, backend: str = DEFAULT_BACKEND) -> str | None:
    """None when the package can estimate this model on this GPU at this precision, else why not."""
    package_version()
    if model not in MODEL_NAMES:
        return f"aic: model {model} is not mapped to an aiconfigurator model (mapped: {', '.join(sorted(MODEL_NAMES))})"
    if gpu not in SYSTEM_NAMES:
        return f"aic: GPU {gpu} has no aiconfigurator system"
    if precision not in QUANT_MODES:
        return f"aic: precision {precision} has no quantization mode"
    if backend not in BACKENDS:
        return f"aic: engine {backend} is not one of the package's backends ({', '.join(BACKENDS)})"
    system = SYSTEM_NAMES[gpu]
    if database_version(system, backend) is None:
        return f"aic: no measured {backend} database for {system} in {PACKAGE} {package_version()}"
    return None


@dataclass(frozen=True)
class AicPoint:
    ttft_ms: float
    tpot_ms: float
    tokens_per_s: float  # output tokens/s of one instance (all its GPUs)
    memory_gb_per_gpu: float
    oom: bool
    error: str | None


def cache_path() -> Path:
    base = os.environ.get("PLANNER_CACHE_DIR") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "planner")
    return Path(base).expanduser() / "aic-estimates.sqlite"


class EstimateCache:
    """Persistent answers keyed by a hash of every input (model, system, backend, versions, TP, quant, batch, ISL,
    OSL). `calls` counts package calls made by this process, so tests can see the cache work."""

    def __init__(self, path: Path | None = None):
        self.path = path or cache_path()
        self.calls = 0
        self._db: sqlite3.Connection | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path)
            self._db.execute("CREATE TABLE IF NOT EXISTS estimates (key TEXT PRIMARY KEY, inputs TEXT, answer TEXT)")
        return self._db

    def get_or_compute(self, inputs: dict, compute) -> AicPoint:
        text = json.dumps(inputs, sort_keys=True)
        key = hashlib.sha256(text.encode()).hexdigest()
        row = self._connection().execute("SELECT answer FROM estimates WHERE key = ?", (key,)).fetchone()
        if row is not None:
            return AicPoint(**json.loads(row[0]))
        self.calls += 1
        point = compute()
        with self._connection() as db:
            db.execute("INSERT OR REPLACE INTO estimates VALUES (?, ?, ?)", (key, text, json.dumps(point.__dict__)))
        return point


_CACHE: EstimateCache | None = None


def default_cache() -> EstimateCache:
    global _CACHE
    if _CACHE is None or _CACHE.path != cache_path():
        _CACHE = EstimateCache()
    return _CACHE


def _engine(model_name: str, system: str, backend: str, db_version: str, layout: tuple[int, int, int, int],
            quant: tuple[str, str, str]):  # fmt: skip
    """The package's database view, model and a new backend object for one engine (layout (TP, DP, EP, PP) and
    quantization modes), set up as its `cli estimate` does. A new backend per call: one caches results by (isl,
    osl, batch) only, not by model. Experts are split by TP x DP (EP 1) or spread whole over EP GPUs."""
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.config_builders import build_model_config
    from aiconfigurator_core.sdk.models import get_model, resolve_context_fmha_by_data, resolve_nvfp4_for_system
    from aiconfigurator_core.sdk.perf_database import get_database_view

    tp, dp, ep, pp = layout
    gemm, kv, moe = quant
    database = get_database_view(system, backend, db_version, allow_missing_data=False, database_mode="SILICON")
    moe_tp, moe_ep = (1, ep) if ep > 1 else (tp * dp, 1)
    config = build_model_config(tp, pp, dp, moe_tp, moe_ep, gemm, kv, None, moe, None)
    resolve_context_fmha_by_data(config, model_name, database, backend, is_context_role=True)
    resolve_nvfp4_for_system(config, system, model_name, backend_name=backend)
    return database, get_model(model_name, config, backend), get_backend(backend)


def _engine_of(inputs: dict):
    """`_engine` for the cache inputs of one answer (`_inputs`)."""
    return _engine(inputs["model"], inputs["system"], inputs["backend"], inputs["db"], tuple(inputs["layout"]),
                   tuple(inputs["quant"]))  # fmt: skip


def _layout(tp: int, layout) -> tuple[int, int, int, int]:
    """(TP, DP, EP, PP) of a query's layout, or TP alone."""
    return (layout.tp, layout.dp, layout.ep, layout.pp) if layout is not None else (tp, 1, 1, 1)


def _inputs(model: str, gpu: str, tp: int, precision: str, backend: str, layout=None, **more) -> dict:
    """Everything an answer depends on: the cache key."""
    system = SYSTEM_NAMES[gpu]
    return {"package": package_version(), "model": MODEL_NAMES[model], "system": system, "backend": backend,
            "db": database_version(system, backend), "layout": list(_layout(tp, layout)), "precision": precision,
            "quant": list(quant_modes(model, precision, backend)), **more}  # fmt: skip


def _call_package(inputs: dict, batch: int, isl: int, osl: int) -> AicPoint:
    """One estimate, as the package's `cli estimate` (agg mode) makes it."""
    from aiconfigurator_core.sdk.config import RuntimeConfig

    try:
        database, model, engine = _engine_of(inputs)
        summary = engine.run_agg(model, database, RuntimeConfig(isl=isl, osl=osl, batch_size=batch), ctx_tokens=isl)
    except Exception as exc:  # the package's own way of saying "no data for this combination"
        return AicPoint(0.0, 0.0, 0.0, 0.0, False, f"{type(exc).__name__}: {exc}")
    result = summary.get_result_dict()
    return AicPoint(float(result["ttft"]), float(result["tpot"]), float(result["tokens/s"]), float(result["memory"]),
                    bool(summary.check_oom()), None)  # fmt: skip


def estimate_point(model: str, gpu: str, tp: int, precision: str, batch: int, isl: int, osl: int,
                   backend: str = DEFAULT_BACKEND, cache: EstimateCache | None = None, layout=None) -> AicPoint:  # fmt: skip
    """The package's estimate for one configuration, through the cache."""
    inputs = _inputs(model, gpu, tp, precision, backend, layout, batch=batch, isl=isl, osl=osl)
    cache = cache or default_cache()
    return cache.get_or_compute(inputs, lambda: _call_package(inputs, batch, isl, osl))


def provenance(gpu: str, backend: str = DEFAULT_BACKEND) -> str:
    return f"aic:{package_version()}:{backend}:{database_version(SYSTEM_NAMES[gpu], backend)}"


def aic_points(query: PerfQuery, gpu_memory_gb: float, tp: int, precision: str, backend: str | None = None,
               batches: tuple[int, ...] = BATCH_LADDER, cache: EstimateCache | None = None) -> list[PerfResult] | str:  # fmt: skip
    """Points over the batch ladder (the batch is the concurrency of an in-flight engine), up to the first that
    runs out of memory; a string says why there are none. The backend is the query's engine unless given, the
    layout the query's (TP `tp` alone when it has none)."""
    backend = backend or query.engine
    layout = query.layout
    tp = layout.tp if layout is not None else tp
    gpus = layout.gpus if layout is not None else tp
    label_layout = layout.label if layout is not None else f"TP{tp}"
    reason = unsupported_reason(query.model, query.gpu, precision, backend)
    if reason:
        return reason
    if query.isl is None or query.osl is None:
        return "aic: needs ISL and OSL"
    label = provenance(query.gpu, backend)
    points: list[PerfResult] = []
    dp = layout.dp if layout is not None else 1
    # the package's batch is per attention-DP rank: an instance at concurrency C runs C / DP on each
    for concurrency in (query.concurrency,) if query.concurrency else tuple(b * dp for b in batches):
        batch = max(concurrency // dp, 1)
        point = estimate_point(query.model, query.gpu, tp, precision, batch, query.isl, query.osl, backend, cache, layout)
        if point.error:
            return f"aic {label_layout} {precision} {backend}: {point.error}" if not points else points
        if points and (point.ttft_ms, point.tpot_ms) == (points[-1].ttft_ms, points[-1].tpot_ms):
            break  # the package capped the batch (memory or engine limit): the same point again
        if point.oom:
            if not points:
                return f"aic {label_layout} {precision} {backend}: out of memory at batch {batch} ({point.memory_gb_per_gpu:.1f} GB per GPU)"
            break
        e2e = point.ttft_ms + (query.osl - 1) * point.tpot_ms
        memory = MemoryFit(True, 0.0, gpu_memory_gb, None, f"aic: {point.memory_gb_per_gpu:.1f} GB per GPU at batch {batch}")
        points.append(PerfResult(
            model=query.model, gpu=query.gpu, tp=tp, precision=precision, isl=query.isl, osl=query.osl,
            concurrency=batch * dp, gpus_per_instance=gpus, ttft_ms=point.ttft_ms, itl_ms=None, e2e_ms=e2e, tpot_ms=point.tpot_ms,
            ttft_ms_bound=None, itl_ms_bound=None, request_throughput_rps=point.tokens_per_s / query.osl,
            output_tokens_per_s=point.tokens_per_s, provenance=label,
            source=f"{PACKAGE} {package_version()} {backend} db {database_version(SYSTEM_NAMES[query.gpu], backend)} on "
                   f"{SYSTEM_NAMES[query.gpu]}: {MODEL_NAMES[query.model]} {label_layout} {precision} batch {batch}{' per DP rank' if dp > 1 else ''}",
            memory=memory, engine=backend, dp=layout.dp if layout else 1, ep=layout.ep if layout else 1,
            pp=layout.pp if layout else 1,
            derivations=("request_throughput_rps = output tokens/s / OSL", "tpot_ms = aiconfigurator TPOT (it gives no single token gap, ITL)"),
        ))  # fmt: skip
    return points



def table_rows(catalog, models: list[str], gpus: list[str], tps: tuple[int, ...], precisions: tuple[str, ...],
               concurrencies: tuple[int, ...], lengths: tuple[tuple[int, int], ...], backend: str | None = DEFAULT_BACKEND,
               progress=None) -> tuple[list, list[str]]:  # fmt: skip
    """Benchmark rows (provenance aic:...) over a grid, for `planner tables build`; and what was skipped, why."""
    from planner.catalog import BenchmarkRow

    rows, skipped = [], []
    grid = [(m, g, tp, p, length) for m in models for g in gpus for tp in tps for p in precisions for length in lengths]
    for done, (model, gpu, tp, precision, (isl, osl)) in enumerate(grid):
        if progress:  # the points done so far: 0 before the first, the total after the loop
            progress(done, len(grid))
        if precision not in catalog.gpus[gpu].precisions:
            continue
        reason = unsupported_reason(model, gpu, precision, backend)
        if reason:
            skipped.append(f"{model} on {gpu} {precision}: {reason}")
            continue
        query = PerfQuery(model=model, gpu=gpu, isl=isl, osl=osl)
        points = aic_points(query, catalog.gpus[gpu].memory_gb, tp, precision, backend, batches=concurrencies)
        if isinstance(points, str):
            skipped.append(f"{model} on {gpu} TP{tp} {precision} {isl}/{osl}: {points}")
            continue
        for point in points:
            rows.append(BenchmarkRow(
                table="aic", line=len(rows) + 2, source=point.source, model=model, gpu=gpu, gpus=tp, tp=tp,
                precision=precision, isl=isl, osl=osl, concurrency=point.concurrency, run_kind="online",
                ttft_ms=round(point.ttft_ms, 4), tpot_ms=round(point.tpot_ms, 4),
                request_throughput_rps=round(point.request_throughput_rps, 6),
                output_tokens_per_s=round(point.output_tokens_per_s, 4), per="instance",
                notes=f"estimate, not a measurement: {point.memory.reason}", provenance=point.provenance,
            ))  # fmt: skip
    if progress:
        progress(len(grid), len(grid))
    return rows, list(dict.fromkeys(skipped))


def _call_step(inputs: dict, decode_batch: int, decode_context: int, prefill_prompts: int, prefill_isl: int) -> AicPoint:
    """One engine iteration from the kernel database: `prefill_prompts` prompts of `prefill_isl` tokens fused with
    one decode token for each of `decode_batch` sequences holding `decode_context` tokens (the package's
    `run_mixed`, or its decode-only step). ttft_ms carries the step time; the other fields are unused."""
    from aiconfigurator_core.sdk.config import RuntimeConfig
    from aiconfigurator_core.sdk.step_estimate import MixedStepInput

    try:
        database, model, engine = _engine_of(inputs)
        if prefill_prompts:
            # the package takes a decoding sequence's context as isl + osl / 2: osl = 2 (context - isl) makes it ours
            isl = prefill_isl
            osl = max(2 * (decode_context - isl), 1) if decode_batch else 2
            runtime = RuntimeConfig(isl=isl, osl=osl, batch_size=1)
            step = MixedStepInput(context_tokens=prefill_prompts * prefill_isl, num_decode_requests=decode_batch)
            latency = engine.run_mixed(model, database, runtime, step).latency_ms
        else:
            runtime = RuntimeConfig(isl=decode_context, osl=1, batch_size=decode_batch)
            latency = engine._get_genonly_step_latency(model, database, runtime, decode_batch, decode_context, 1)[0]
    except Exception as exc:  # the package's own way of saying "no data for this combination"
        return AicPoint(0.0, 0.0, 0.0, 0.0, False, f"{type(exc).__name__}: {exc}")
    return AicPoint(float(latency), 0.0, 0.0, 0.0, False, None)


def step_ms(model: str, gpu: str, tp: int, precision: str, decode_batch: int, decode_context: int,
            prefill_prompts: int, prefill_isl: int, backend: str = DEFAULT_BACKEND,
            cache: EstimateCache | None = None, layout=None) -> AicPoint:  # fmt: skip
    """The kernel database's time for one engine iteration (see `_call_step`), through the cache."""
    inputs = _inputs(model, gpu, tp, precision, backend, layout, kind="step", decode_batch=decode_batch,
                     decode_context=decode_context, prefill_prompts=prefill_prompts, prefill_isl=prefill_isl)  # fmt: skip
    cache = cache or default_cache()
    return cache.get_or_compute(inputs, lambda: _call_step(inputs, decode_batch, decode_context, prefill_prompts, prefill_isl))
