"""TensorRT-LLM workers of the dynamo target (`python3 -m dynamo.trtllm`, ai-dynamo 1.6.1), without a TensorRT-LLM
argument list (schema.TRTLLM_NOT_BUILT): what the plan assumed goes where the wheel shows it goes.

- Dynamo's own worker flags (schemas/dynamo.trtllm-1.6.1.json, read from dynamo/trtllm/backend_args.py): the model,
  the layout (`--tensor-parallel-size` = TP x attention DP with `--enable-attention-dp`, `--pipeline-parallel-size`,
  `--expert-parallel-size`), `--max-batch-size`, `--max-num-tokens` (the token budget), `--max-seq-len` (engine ISL +
  OSL) and `--disaggregation-mode prefill|decode`. The worker hands them to TensorRT-LLM as the LLM-API keys of its
  `arg_map` (dynamo/trtllm/workers/llm_worker.py).
- The engine config (`--extra-engine-args`, a YAML file: the flag of Dynamo's TRT-LLM templates, here from a
  ConfigMap): only keys NVIDIA's own files in the wheel set, with values they set
  (schemas/dynamo.trtllm_engine_keys-1.6.1.json, tools/trtllm_keys.py): `enable_chunked_prefill: true` (the token
  budget is a chunked-prefill budget), `kv_cache_config.enable_block_reuse: true` where a workload states a prefix
  cache, and on prefill and decode workers `cache_transceiver_config.backend: DEFAULT`, plus
  `disable_overlap_scheduler: true` on prefill (the disaggregated worker config of the profiler's test, which its
  prefill and decode conversions remove).
- Not passed on, per pool in the README: what the plan needs and no NVIDIA file of the wheel shows a key for (an
  fp8 KV cache, quantizing a checkpoint at load), a batch cap the plan's row does not state, and the memory fraction
  (`--free-gpu-memory-fraction` is a fraction of the memory left after weights, not of the GPU's: another quantity).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache

import yaml

from planner.deploy.engines import FOUR_BIT, hugging_face_id
from planner.deploy.pools import Pool
from planner.deploy.schema import SCHEMA_DIR
from planner.perf.shapes import kv_bytes_for

CONFIG_KEY = "engine.yaml"
CONFIG_DIR = "/etc/planner/engine"  # where the pool's ConfigMap is mounted
CONFIG_VOLUME = "engine-config"
# candidates for what the plan assumes beyond Dynamo's flags: written only where the key list has the key and value
FP8_KV = ("kv_cache_config.dtype", "fp8")
DISAGG_TRANSFER = ("cache_transceiver_config.backend", "DEFAULT")
PREFILL_NO_OVERLAP = ("disable_overlap_scheduler", True)
CHUNKED_PREFILL = ("enable_chunked_prefill", True)
BLOCK_REUSE = ("kv_cache_config.enable_block_reuse", True)


@dataclass(frozen=True)
class EngineKeys:
    """The TensorRT-LLM LLM-API keys NVIDIA's files in the ai-dynamo wheel set: dotted key -> files, values set."""

    version: str
    keys: dict  # "a.b" -> {"files": [...], "values": [...], "computed": bool}
    source: dict

    def allows(self, key: str, value) -> bool:
        entry = self.keys.get(key)
        if entry is None:
            return False
        return entry["computed"] or any(v == value and type(v) is type(value) for v in entry["values"])

    def problems(self, config: dict) -> list[str]:
        """Each leaf of the engine config whose key, or constant value, no file of the wheel sets."""
        return [f"{key}: {value!r} is not set by any file of ai-dynamo {self.version} ({', '.join(self.source['files'])})"
                for key, value in flatten(config) if not self.allows(key, value)]  # fmt: skip


@cache
def engine_keys(version: str) -> EngineKeys:
    document = json.loads((SCHEMA_DIR / f"dynamo.trtllm_engine_keys-{version}.json").read_text(encoding="utf-8"))
    return EngineKeys(document["version"], document["keys"], document["source"])


def flatten(config: dict, prefix: str = "") -> list[tuple[str, object]]:
    out = []
    for key, value in config.items():
        if isinstance(value, dict) and value:
            out += flatten(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", value))
    return out


def _set(config: dict, key: str, value) -> None:
    *sections, last = key.split(".")
    for section in sections:
        config = config.setdefault(section, {})
    config[last] = value


@dataclass(frozen=True)
class TrtllmWorker:
    pool: str
    model_id: str
    args: tuple[tuple[str, str | None], ...]  # Dynamo's flags, --extra-engine-args among them
    engine_config: dict  # the --extra-engine-args YAML (nested LLM-API keys)
    notes: tuple[str, ...]  # what the plan assumed and was not passed on, and why

    @property
    def config_map(self) -> str:
        return f"{self.pool}-engine"

    def config_text(self) -> str:
        return yaml.safe_dump(self.engine_config, sort_keys=True, default_flow_style=False)


def _not_shown(what: str, keys: EngineKeys) -> str:
    return (f"{what}: not passed on: no NVIDIA file of the ai-dynamo {keys.version} wheel sets a TensorRT-LLM key "
            "for it (the engine-config keys are limited to those, schemas/dynamo.trtllm_engine_keys-"
            f"{keys.version}.json) and dynamo.trtllm has no flag for it")  # fmt: skip


def _precision_notes(pool: Pool, model_id: str, quantized: bool, checkpoint: str, keys: EngineKeys) -> list[str]:
    precision = pool.precision
    if precision is None:
        return ["the plan's row states no precision: the checkpoint is served as it is"]
    if quantized or precision == checkpoint or (precision in FOUR_BIT and checkpoint == "fp4"):
        return [(f"{precision}: served from a checkpoint already in {precision if quantized else checkpoint} "
                 f"({model_id}; TensorRT-LLM reads its quantization from it)")]  # fmt: skip
    return [_not_shown(f"{precision} (quantizing or casting the {checkpoint} checkpoint {model_id} at load)", keys)
            + f"; the checkpoint is served as it is: replace the model id with a {precision} checkpoint"]


def trtllm_worker(pool: Pool, context, keys: EngineKeys) -> TrtllmWorker | str:
    """The dynamo.trtllm worker of `pool`, or why the plan's layout cannot be written with dynamo.trtllm's flags."""
    layout = pool.layout
    if layout.dp > 1 and layout.tp > 1:
        return (f"planned as TP{layout.tp} x attention DP{layout.dp}; dynamo.trtllm's `--enable-attention-dp` makes "
                "the attention DP size equal to `--tensor-parallel-size` (dynamo/trtllm/backend_args.py), so "
                "attention TP above 1 with attention DP cannot be written")  # fmt: skip
    model_id, quantized = hugging_face_id(context.model_ids.get(pool.model, ()), pool.model, pool.precision)
    checkpoint = context.checkpoint_precision.get(pool.model, "bf16")
    notes = _precision_notes(pool, model_id, quantized, checkpoint, keys)
    args: list[tuple[str, str | None]] = [("--model", model_id), ("--served-model-name", pool.model),
                                          ("--tensor-parallel-size", str(layout.tp * layout.dp))]  # fmt: skip
    args += [("--enable-attention-dp", None)] if layout.dp > 1 else []
    args += [("--pipeline-parallel-size", str(layout.pp))] if layout.pp > 1 else []
    args += [("--expert-parallel-size", str(layout.ep))] if layout.ep > 1 else []
    if pool.max_batch:
        args.append(("--max-batch-size", str(pool.max_batch)))
    else:
        notes.append("the plan's row states no batch cap: dynamo.trtllm's default `--max-batch-size` is kept")
    args += [("--max-num-tokens", str(context.token_budget)), ("--max-seq-len", str(pool.max_model_len))]
    wanted = [CHUNKED_PREFILL]
    if any(context.prefix_cache.get(w, False) for w in pool.workloads):
        wanted.append(BLOCK_REUSE)
    if pool.precision is not None and kv_bytes_for(pool.precision) == 1:
        if keys.allows(*FP8_KV):
            wanted.append(FP8_KV)
        else:
            notes.append(_not_shown("fp8 KV cache (the plan sized the KV cache at 1 byte per value)", keys)
                         + "; TensorRT-LLM's default KV cache dtype holds, which may hold fewer tokens than planned")
    if pool.speculative:
        notes.append(_not_shown("speculative decoding (the route is speculative)", keys))
    if pool.stage in ("prefill", "decode"):
        args.append(("--disaggregation-mode", pool.stage))
        wanted += [DISAGG_TRANSFER, *((PREFILL_NO_OVERLAP,) if pool.stage == "prefill" else ())]
    config: dict = {}
    for key, value in wanted:
        if keys.allows(key, value):
            _set(config, key, value)
        else:
            notes.append(_not_shown(f"`{key}: {value}`", keys))
    args.append(("--extra-engine-args", f"{CONFIG_DIR}/{CONFIG_KEY}"))
    return TrtllmWorker(pool.name, model_id, tuple(args), config, tuple(notes))
