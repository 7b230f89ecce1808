"""NVIDIA's operator-level performance database (aiconfigurator-core) as a perf source: `pip install '.[aic]'` in the planner checkout.

The package estimates one serving configuration (model, system, backend and its version, TP, quantization,
batch, ISL, OSL) from measured GEMM/attention/communication kernels, offline, on a CPU. This adapter maps
catalog ids to the package's names, calls its Python API (`aiconfigurator_core.sdk`, the same calls as its
`cli estimate`), and answers with the planner's `PerfResult`, provenance `aic:<package>:<backend>:<db version>`.
Every estimate is kept in a persistent SQLite cache keyed by all its inputs (package and database versions
included), so a plan over many candidates asks the package for each point once.

The support matrix is the package's: models whose config ships with it (offline), systems with a measured
database for the backend. Anything else is a miss that says why.
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
}
# catalog GPU id -> the package's system name (only systems with a measured database answer)
SYSTEM_NAMES = {
    "H100-SXM-80GB": "h100_sxm",
    "H200-SXM-141GB": "h200_sxm",
    "B200-SXM-180GB": "b200_sxm",
    "A100-SXM-80GB": "a100_sxm",
    "L40S-48GB": "l40s",
    "L4-24GB": "l4",
    "H100-PCIe-80GB": "h100_pcie",
}
# planner precision -> (GEMM, KV cache) quantization modes of the package
QUANT_MODES = {"bf16": ("bfloat16", "bfloat16"), "fp16": ("bfloat16", "bfloat16"), "fp8": ("fp8", "fp8"),
               "fp4": ("nvfp4", "fp8")}  # fmt: skip


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


def _engine(model_name: str, system: str, backend: str, db_version: str, tp: int, precision: str):
    """The package's database view, model and a new backend object for one engine (TP, quantization), set up as its
    `cli estimate` does. A new backend per call: one caches results by (isl, osl, batch) only, not by model."""
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.config_builders import build_model_config
    from aiconfigurator_core.sdk.models import check_is_moe, get_model, resolve_context_fmha_by_data, resolve_nvfp4_for_system
    from aiconfigurator_core.sdk.perf_database import get_database_view

    gemm, kv = QUANT_MODES[precision]
    database = get_database_view(system, backend, db_version, allow_missing_data=False, database_mode="SILICON")
    config = build_model_config(tp, 1, 1, None, None, gemm, kv, None, None, None)
    if check_is_moe(model_name):
        config.moe_tp_size, config.moe_ep_size = 1, tp
    resolve_context_fmha_by_data(config, model_name, database, backend, is_context_role=True)
    resolve_nvfp4_for_system(config, system, model_name, backend_name=backend)
    return database, get_model(model_name, config, backend), get_backend(backend)


def _inputs(model: str, gpu: str, tp: int, precision: str, backend: str, **more) -> dict:
    """Everything an answer depends on: the cache key."""
    system = SYSTEM_NAMES[gpu]
    return {"package": package_version(), "model": MODEL_NAMES[model], "system": system, "backend": backend,
            "db": database_version(system, backend), "tp": tp, "precision": precision, "quant": QUANT_MODES[precision],
            **more}  # fmt: skip


def _call_package(model_name: str, system: str, backend: str, db_version: str, tp: int, precision: str, batch: int,
                  isl: int, osl: int) -> AicPoint:  # fmt: skip
    """One estimate, as the package's `cli estimate` (agg mode) makes it."""
    from aiconfigurator_core.sdk.config import RuntimeConfig

    try:
        database, model, engine = _engine(model_name, system, backend, db_version, tp, precision)
        summary = engine.run_agg(model, database, RuntimeConfig(isl=isl, osl=osl, batch_size=batch), ctx_tokens=isl)
    except Exception as exc:  # the package's own way of saying "no data for this combination"
        return AicPoint(0.0, 0.0, 0.0, 0.0, False, f"{type(exc).__name__}: {exc}")
    result = summary.get_result_dict()
    return AicPoint(float(result["ttft"]), float(result["tpot"]), float(result["tokens/s"]), float(result["memory"]),
                    bool(summary.check_oom()), None)  # fmt: skip


def estimate_point(model: str, gpu: str, tp: int, precision: str, batch: int, isl: int, osl: int,
                   backend: str = DEFAULT_BACKEND, cache: EstimateCache | None = None) -> AicPoint:  # fmt: skip
    """The package's estimate for one configuration, through the cache."""
    inputs = _inputs(model, gpu, tp, precision, backend, batch=batch, isl=isl, osl=osl)
    cache = cache or default_cache()
    return cache.get_or_compute(inputs, lambda: _call_package(
        inputs["model"], inputs["system"], backend, inputs["db"], tp, precision, batch, isl, osl))  # fmt: skip


def provenance(gpu: str, backend: str = DEFAULT_BACKEND) -> str:
    return f"aic:{package_version()}:{backend}:{database_version(SYSTEM_NAMES[gpu], backend)}"


def aic_points(query: PerfQuery, gpu_memory_gb: float, tp: int, precision: str, backend: str = DEFAULT_BACKEND,
               batches: tuple[int, ...] = BATCH_LADDER, cache: EstimateCache | None = None) -> list[PerfResult] | str:  # fmt: skip
    """Points over the batch ladder (the batch is the concurrency of an in-flight engine), up to the first that
    runs out of memory; a string says why there are none."""
    reason = unsupported_reason(query.model, query.gpu, precision, backend)
    if reason:
        return reason
    if query.isl is None or query.osl is None:
        return "aic: needs ISL and OSL"
    label = provenance(query.gpu, backend)
    points: list[PerfResult] = []
    for batch in (query.concurrency,) if query.concurrency else batches:
        point = estimate_point(query.model, query.gpu, tp, precision, batch, query.isl, query.osl, backend, cache)
        if point.error:
            return f"aic TP{tp} {precision}: {point.error}" if not points else points
        if points and (point.ttft_ms, point.tpot_ms) == (points[-1].ttft_ms, points[-1].tpot_ms):
            break  # the package capped the batch (memory or engine limit): the same point again
        if point.oom:
            if not points:
                return f"aic TP{tp} {precision}: out of memory at batch {batch} ({point.memory_gb_per_gpu:.1f} GB per GPU)"
            break
        e2e = point.ttft_ms + (query.osl - 1) * point.tpot_ms
        memory = MemoryFit(True, 0.0, gpu_memory_gb, None, f"aic: {point.memory_gb_per_gpu:.1f} GB per GPU at batch {batch}")
        points.append(PerfResult(
            model=query.model, gpu=query.gpu, tp=tp, precision=precision, isl=query.isl, osl=query.osl,
            concurrency=batch, gpus_per_instance=tp, ttft_ms=point.ttft_ms, itl_ms=None, e2e_ms=e2e, tpot_ms=point.tpot_ms,
            ttft_ms_bound=None, itl_ms_bound=None, request_throughput_rps=point.tokens_per_s / query.osl,
            output_tokens_per_s=point.tokens_per_s, provenance=label,
            source=f"{PACKAGE} {package_version()} {backend} db {database_version(SYSTEM_NAMES[query.gpu], backend)} on "
                   f"{SYSTEM_NAMES[query.gpu]}: {MODEL_NAMES[query.model]} TP{tp} {precision} batch {batch}",
            memory=memory,
            derivations=("request_throughput_rps = output tokens/s / OSL", "tpot_ms = aiconfigurator TPOT (it gives no single token gap, ITL)"),
        ))  # fmt: skip
    return points



def table_rows(catalog, models: list[str], gpus: list[str], tps: tuple[int, ...], precisions: tuple[str, ...],
               concurrencies: tuple[int, ...], lengths: tuple[tuple[int, int], ...], backend: str = DEFAULT_BACKEND,
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


def _call_step(model_name: str, system: str, backend: str, db_version: str, tp: int, precision: str,
               decode_batch: int, decode_context: int, prefill_prompts: int, prefill_isl: int) -> AicPoint:  # fmt: skip
    """One engine iteration from the kernel database: `prefill_prompts` prompts of `prefill_isl` tokens fused with
    one decode token for each of `decode_batch` sequences holding `decode_context` tokens (the package's
    `run_mixed`, or its decode-only step). ttft_ms carries the step time; the other fields are unused."""
    from aiconfigurator_core.sdk.config import RuntimeConfig
    from aiconfigurator_core.sdk.step_estimate import MixedStepInput

    try:
        database, model, engine = _engine(model_name, system, backend, db_version, tp, precision)
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
            cache: EstimateCache | None = None) -> AicPoint:  # fmt: skip
    """The kernel database's time for one engine iteration (see `_call_step`), through the cache."""
    inputs = _inputs(model, gpu, tp, precision, backend, kind="step", decode_batch=decode_batch,
                     decode_context=decode_context, prefill_prompts=prefill_prompts, prefill_isl=prefill_isl)  # fmt: skip
    cache = cache or default_cache()
    return cache.get_or_compute(inputs, lambda: _call_step(
        inputs["model"], inputs["system"], backend, inputs["db"], tp, precision, decode_batch, decode_context,
        prefill_prompts, prefill_isl))  # fmt: skip
