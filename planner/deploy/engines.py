"""Launch commands of vLLM and SGLang for a pool, with the flag names of the engine version the plan assumed.

What the plan assumed becomes a flag: the model (its Hugging Face id from the catalog's aliases), the precision
(`--dtype` / `--quantization`, or a checkpoint already quantized), the layout (TP, PP, attention DP, EP), the batch
cap per attention-DP rank, the engine lengths as the maximum model length, an fp8 KV cache where the precision
computes in fp8 or fp4, the memory fraction (1 - the catalog's memory_reserve_fraction), chunked prefill with the
scenario's token budget, prefix caching where a workload states one, speculative decoding where the route is
speculative, and the KV transfer of a disaggregated prefill or decode pool.

Per-rank and per-instance caps (checked in the engines' source): vLLM's `--max-num-seqs` and
`--max-num-batched-tokens` hold per data-parallel engine core, as the plan's cap per rank; SGLang divides
`--max-running-requests` and `--chunked-prefill-size` by `--dp-size` under `--enable-dp-attention`
(managers/scheduler.py, server_args.py), so they are given for the whole instance (cap x DP).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from planner.deploy.pools import Pool
from planner.deploy.schema import ArgSchema, schema_for
from planner.perf.shapes import kv_bytes_for

LAUNCH_ENGINES = ("vllm", "sglang")
PORT = 8000
IMAGES = {"vllm": "vllm/vllm-openai:v{version}", "sglang": "lmsysorg/sglang:v{version}"}
FOUR_BIT = ("fp4", "w4a16", "w4a8")
_QUANT_MARKS = {"fp8": ("fp8",), "fp4": ("nvfp4", "fp4"), "w4a16": ("awq", "gptq", "w4a16"), "w4a8": ("w4a8", "w4afp8")}
_ANY_QUANT = ("fp8", "fp4", "awq", "gptq", "w4a", "int4", "int8")
NOT_HUGGING_FACE = ("meta",)  # served names of NVIDIA NIM ('meta/llama3-8b-instruct'), not Hugging Face repositories


@dataclass(frozen=True)
class ServingContext:
    """What a launch takes from the scenario and catalog beside the pool."""

    model_ids: dict[str, tuple[str, ...]]  # catalog model id -> its aliases
    checkpoint_precision: dict[str, str]
    memory_fraction: float  # 1 - catalog defaults.memory_reserve_fraction
    token_budget: int
    prefix_cache: dict[str, bool]  # workload -> states a prefix cache
    speculation: object | None  # perf.shapes.Speculation of the scenario's engine.speculative
    draft_model_id: str | None


@dataclass(frozen=True)
class Launch:
    engine: str
    version: str  # the plan's
    schema: ArgSchema
    schema_note: str
    image: str
    program: tuple[str, ...]  # ('vllm', 'serve', MODEL) | ('python3', '-m', 'sglang.launch_server')
    args: tuple[tuple[str, str | None], ...]  # every node's
    leader_args: tuple[tuple[str, str | None], ...]  # node 0 only (multi-node)
    worker_args: tuple[tuple[str, str | None], ...]  # nodes 1.. only (multi-node)
    notes: tuple[str, ...] = field(default=())

    def all_args(self) -> list[tuple[str, str | None]]:
        return [*self.args, *self.leader_args, *self.worker_args]


def hugging_face_id(aliases: tuple[str, ...], model: str, precision: str | None) -> tuple[str, bool]:
    """The repository to serve and whether it is already quantized to `precision`: an alias whose name says the
    precision (an '-FP8' or '-NVFP4' checkpoint), else the instruct model, else the first repository id."""
    repos = [a for a in aliases if "/" in a and a.split("/")[0] not in NOT_HUGGING_FACE]
    if not repos:
        return model, False
    marks = _QUANT_MARKS.get(precision or "", ())
    for repo in repos:
        if any(m in repo.lower().split("/")[1] for m in marks) and "static" not in repo.lower():
            return repo, True
    plain = [r for r in repos if not any(q in r.lower().split("/")[1] for q in _ANY_QUANT)] or repos
    instruct = [r for r in plain if "instruct" in r.lower()]
    return (instruct or plain)[0], False


def _precision_args(engine: str, pool: Pool, checkpoint: str, quantized: bool) -> tuple[list, list[str]]:
    precision = pool.precision
    if precision is None:
        return [], ["the plan's row states no precision: the checkpoint is served as it is"]
    if quantized or precision == checkpoint or (precision in FOUR_BIT and checkpoint == "fp4"):
        return [], [f"{precision}: served from a checkpoint already in {precision if quantized else checkpoint} "
                    "(the engine reads its quantization from it)"]
    if precision in ("bf16", "fp16"):
        return [("--dtype", "bfloat16" if precision == "bf16" else "float16")], []
    if precision == "fp8":
        return [("--quantization", "fp8")], ["fp8: quantized at load time from the bf16 checkpoint (no FP8 checkpoint among the catalog's aliases)"]
    return [], [f"{precision}: the engine cannot quantize a {checkpoint} checkpoint to it at load time and no such "
                "checkpoint is among the catalog's aliases: replace the model id with one (e.g. quantized with "
                "NVIDIA TensorRT Model Optimizer or llm-compressor); its format is read from it"]  # fmt: skip


def _speculative_args(engine: str, context: ServingContext) -> tuple[list, list[str]]:
    spec = context.speculation
    if spec is None:
        return [], ["the route is speculative but the scenario states no engine.speculative: not enabled"]
    k, note = spec.draft_tokens, f"speculative decoding: {spec.method}, {spec.draft_tokens} draft tokens, acceptance {spec.acceptance:g} assumed"
    if engine == "vllm":
        config = {"method": "mtp", "num_speculative_tokens": k}
        if spec.method == "draft":
            config = {"method": "draft_model", "model": context.draft_model_id, "num_speculative_tokens": k}
        return [("--speculative-config", json.dumps(config, sort_keys=True))], [note]
    algorithm = [("--speculative-algorithm", "EAGLE" if spec.method == "mtp" else "STANDALONE")]
    if spec.method == "draft":
        algorithm.append(("--speculative-draft-model-path", context.draft_model_id))
    return [*algorithm, ("--speculative-num-steps", str(k)), ("--speculative-eagle-topk", "1"),
            ("--speculative-num-draft-tokens", str(k + 1))], [note]  # fmt: skip


def build_launch(pool: Pool, context: ServingContext) -> Launch:
    """The launch of `pool` on its own engine (vllm or sglang)."""
    engine = pool.engine
    schema, schema_note = schema_for(engine, pool.engine_version)
    model_id, quantized = hugging_face_id(context.model_ids.get(pool.model, ()), pool.model, pool.precision)
    checkpoint = context.checkpoint_precision.get(pool.model, "bf16")
    layout, notes = pool.layout, []
    precision_args, precision_notes = _precision_args(engine, pool, checkpoint, quantized)
    notes += precision_notes
    fp8_kv = pool.precision is not None and kv_bytes_for(pool.precision) == 1
    prefix = any(context.prefix_cache.get(w, False) for w in pool.workloads)
    budget = context.token_budget
    if engine == "vllm":
        program = ("vllm", "serve", model_id)
        args = [("--served-model-name", pool.model), ("--host", "0.0.0.0"), ("--port", str(PORT)),
                ("--tensor-parallel-size", str(layout.tp))]  # fmt: skip
        args += [("--pipeline-parallel-size", str(layout.pp))] if layout.pp > 1 else []
        args += [("--data-parallel-size", str(layout.dp))] if layout.dp > 1 else []
        args += [("--enable-expert-parallel", None)] if layout.ep > 1 else []
        args += precision_args
        args += [("--kv-cache-dtype", "fp8")] if fp8_kv else []
        args += [("--max-num-seqs", str(pool.max_batch))] if pool.max_batch else []
        args += [("--max-model-len", str(pool.max_model_len)), ("--gpu-memory-utilization", f"{context.memory_fraction:g}"),
                 ("--enable-chunked-prefill", None), ("--max-num-batched-tokens", str(budget))]  # fmt: skip
        args += [("--enable-prefix-caching", None)] if prefix else []
        if pool.stage in ("prefill", "decode"):
            args.append(("--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"}, sort_keys=True)))
    else:
        program = ("python3", "-m", "sglang.launch_server")
        args = [("--model-path", model_id), ("--served-model-name", pool.model), ("--host", "0.0.0.0"),
                ("--port", str(PORT)), ("--tp-size", str(layout.tp * layout.dp))]  # fmt: skip
        args += [("--pp-size", str(layout.pp))] if layout.pp > 1 else []
        args += [("--dp-size", str(layout.dp)), ("--enable-dp-attention", None)] if layout.dp > 1 else []
        args += [("--ep-size", str(layout.ep))] if layout.ep > 1 else []
        args += precision_args
        args += [("--kv-cache-dtype", "fp8_e4m3")] if fp8_kv else []
        args += [("--max-running-requests", str(pool.max_batch * layout.dp))] if pool.max_batch else []
        args += [("--context-length", str(pool.max_model_len)), ("--mem-fraction-static", f"{context.memory_fraction:g}"),
                 ("--chunked-prefill-size", str(budget * layout.dp))]  # fmt: skip
        if pool.stage in ("prefill", "decode"):
            args.append(("--disaggregation-mode", pool.stage))
    if pool.speculative:
        speculative, spec_notes = _speculative_args(engine, context)
        args += speculative
        notes += spec_notes
    if not pool.max_batch:
        notes.append("the plan's row states no batch cap: the engine's default is kept")
    leader, worker = _multi_node_args(engine, pool)
    version = schema.version if schema is not None else pool.engine_version
    return Launch(engine, pool.engine_version, schema, schema_note, IMAGES[engine].format(version=version), program,
                  tuple(args), tuple(leader), tuple(worker), tuple(notes))  # fmt: skip


def _multi_node_args(engine: str, pool: Pool) -> tuple[list, list]:
    """Node 0's and the other nodes' arguments of an instance spanning nodes: the rank and the leader's address
    come from $NODE_RANK and $LEADER_ADDR at launch (a LeaderWorkerSet sets them from LWS_WORKER_INDEX and
    LWS_LEADER_ADDRESS)."""
    nodes = pool.nodes_per_instance
    if nodes == 1:
        return [], []
    if engine == "vllm":  # the multiprocessing executor across nodes (ParallelConfig.nnodes / node_rank)
        common = [("--nnodes", str(nodes)), ("--master-addr", "$LEADER_ADDR")]
        return [*common, ("--node-rank", "0")], [*common, ("--node-rank", "$NODE_RANK"), ("--headless", None)]
    common = [("--nnodes", str(nodes)), ("--dist-init-addr", "$LEADER_ADDR:5000")]
    return [*common, ("--node-rank", "0")], [*common, ("--node-rank", "$NODE_RANK")]
