"""NVIDIA Dynamo: a DynamoGraphDeployment per serving group (groups.py), the layout of Dynamo 1.6.1.

The layout is the one the ai-dynamo 1.6.1 wheel on PyPI ships in its profiler's templates
(dynamo/profiler/templates/dgd/{vllm,sglang}/{agg,disagg}.yaml) and models in dynamo/profiler/utils/config.py:
`apiVersion: nvidia.com/v1beta1`, `spec.components[]` each with `name`, `type` (frontend | worker | prefill |
decode), `replicas`, `podTemplate.spec` (a Kubernetes PodTemplateSpec, container `main`) and, for an instance that
spans nodes, `multinode.nodeCount` with the GPUs of one node in the container's limits. A graph holds a Frontend
(`python3 -m dynamo.frontend`) and the group's workers (`python3 -m dynamo.vllm` / `dynamo.sglang`) whose arguments
are the engine's launch arguments of engines.py (checked against the plan's engine version) plus Dynamo's own
(checked against schemas/dynamo.<engine>-1.6.1.json). TensorRT-LLM workers (`python3 -m dynamo.trtllm`,
dynamo_trtllm.py) take Dynamo's flags only, plus an engine config (`--extra-engine-args`, as the wheel's
dgd/trtllm templates) from a ConfigMap written before the graph. The pod templates and ConfigMaps are validated
with kubernetes-validate; the rest of the custom resource is not schema-checked here (its CRD is not in the wheel).
"""

from __future__ import annotations

from planner.deploy.dynamo_trtllm import (
    CONFIG_DIR,
    CONFIG_KEY,
    CONFIG_VOLUME,
    TrtllmWorker,
    engine_keys,
    trtllm_worker,
)
from planner.deploy.engines import Launch
from planner.deploy.groups import ServingGroup, serving_groups
from planner.deploy.k8s import (
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    NAME,
    PART_OF,
    validate_units,
)
from planner.deploy.pools import Pool, dns_label
from planner.deploy.schema import ArgSchema, check_args, load_schema

DYNAMO_VERSION = "1.6.1"
API_VERSION = "nvidia.com/v1beta1"
ENGINES = ("vllm", "sglang", "trtllm")
IMAGES = {"vllm": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:{v}", "sglang": "nvcr.io/nvidia/ai-dynamo/sglang-runtime:{v}",
          "trtllm": "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:{v}"}  # fmt: skip
# the engine versions ai-dynamo 1.6.1 pins (its wheel's Requires-Dist of the vllm, sglang and trtllm extras)
RUNTIME_ENGINES = {"vllm": "0.31.0", "sglang": "0.5.21", "trtllm": "1.3.0rc29"}
HF_SECRET = "hf-token-secret"  # the Secret name of Dynamo's templates
FRONTEND_REPLICAS = 1  # not sized by the plan: the Frontend routes, it holds no GPU
_NOT_PASSED_ON = {"vllm": ("--host", "--port"), "sglang": ("--port",)}  # not engine arguments of the worker


def dynamo_schema(engine: str) -> ArgSchema:
    return load_schema(f"dynamo.{engine}", DYNAMO_VERSION)


def worker_args(pool: Pool, launch: Launch) -> tuple[list[tuple[str, str | None]], list[tuple[str, str | None]]]:
    """(engine arguments, Dynamo's arguments) of the pool's worker. The engine's are the launch's of a single node:
    the operator starts the nodes of a multinode component and gives each its rank and the leader's address."""
    dropped = _NOT_PASSED_ON[pool.engine]
    engine_args = [(flag, value) for flag, value in launch.args if flag not in dropped]
    dynamo_args: list[tuple[str, str | None]] = []
    if pool.engine == "vllm":
        engine_args.insert(0, ("--model", launch.program[2]))
        if pool.stage in ("prefill", "decode"):
            dynamo_args.append(("--disaggregation-mode", pool.stage))
    elif pool.stage in ("prefill", "decode"):  # the KV transfer of Dynamo's SGLang templates
        engine_args.append(("--disaggregation-transfer-backend", "nixl"))
    return engine_args, dynamo_args


def _words(args) -> list[str]:
    return [word for flag, value in args for word in ((flag,) if value is None else (flag, value))]


def _env_from() -> list[dict]:
    return [{"secretRef": {"name": HF_SECRET, "optional": True}}]


def _worker(pool: Pool, launch: Launch | TrtllmWorker, gpu_label: str) -> dict:
    if isinstance(launch, TrtllmWorker):
        engine_args, dynamo_args = [], list(launch.args)
        problems = check_args(dynamo_schema(pool.engine), dynamo_args)
        problems += engine_keys(DYNAMO_VERSION).problems(launch.engine_config)
    else:
        engine_args, dynamo_args = worker_args(pool, launch)
        problems = check_args(launch.schema, engine_args) + check_args(dynamo_schema(pool.engine), dynamo_args)
    if problems:  # a flag the engine or Dynamo does not take, a key no NVIDIA file sets: a defect of the planner
        raise RuntimeError(f"planner defect: Dynamo worker {pool.name}: {'; '.join(problems)}")
    gpus = {GPU_RESOURCE: str(pool.gpus_per_pod)}
    container = {
        "name": "main", "image": IMAGES[pool.engine].format(v=DYNAMO_VERSION),
        "command": ["python3", "-m", f"dynamo.{pool.engine}"], "args": _words([*engine_args, *dynamo_args]),
        "envFrom": _env_from(), "resources": {"limits": dict(gpus), "requests": dict(gpus)}}  # fmt: skip
    spec = {"nodeSelector": {GPU_PRODUCT_LABEL: gpu_label}, "containers": [container]}
    if isinstance(launch, TrtllmWorker):
        container["volumeMounts"] = [{"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR, "readOnly": True}]
        spec["volumes"] = [{"name": CONFIG_VOLUME, "configMap": {"name": launch.config_map}}]
    component = {
        "name": pool.name, "type": "worker" if pool.stage == "aggregated" else pool.stage,
        "replicas": pool.peak_instances, "podTemplate": {"spec": spec},
    }  # fmt: skip
    if pool.nodes_per_instance > 1:
        component["multinode"] = {"nodeCount": pool.nodes_per_instance}
    return component


def graph(group: ServingGroup, launches: dict[str, Launch | TrtllmWorker], part_of: str, gpu_label_of) -> dict:
    engine = group.pools[0].engine
    frontend = {
        "name": "Frontend", "type": "frontend", "replicas": FRONTEND_REPLICAS,
        "podTemplate": {"spec": {"containers": [{
            "name": "main", "image": IMAGES[engine].format(v=DYNAMO_VERSION), "command": ["python3"],
            "args": ["-m", "dynamo.frontend"], "envFrom": _env_from()}]}},
    }  # fmt: skip
    workers = [_worker(pool, launches[pool.name], gpu_label_of(pool)) for pool in group.pools]
    return {
        "apiVersion": API_VERSION, "kind": "DynamoGraphDeployment",
        "metadata": {"name": group.name, "labels": {NAME: group.name, PART_OF: part_of},
                     "annotations": {"planner.io/workloads": ", ".join(group.workloads) or "-"}},
        "spec": {"components": [frontend, *workers]},
    }  # fmt: skip


def config_map(worker: TrtllmWorker, group: ServingGroup, part_of: str) -> dict:
    """The engine config of a TensorRT-LLM worker, mounted at CONFIG_DIR (its `--extra-engine-args`)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": worker.config_map, "labels": {NAME: group.name, PART_OF: part_of}},
            "data": {CONFIG_KEY: worker.config_text()}}  # fmt: skip


def validation_units(document: dict) -> list[tuple[str, dict]]:
    """A ConfigMap as it is; each component's pod template as the PodTemplateSpec of a core PodTemplate."""
    name = document["metadata"]["name"]
    if document["kind"] == "ConfigMap":
        return [(f"ConfigMap {name}", document)]
    return [(f"{name} {c['name']}", {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name},
                                     "template": c["podTemplate"]}) for c in document["spec"]["components"]]  # fmt: skip


def build(
    planned, pools, launches: dict[str, Launch], gpu_label_of, context
) -> tuple[tuple[ServingGroup, ...], list[dict], dict, str | None, dict[str, tuple[str, ...]]]:
    """(groups, their documents: each group's ConfigMaps then its graph, why each other pool is not generated, the
    Kubernetes version the pods passed, the notes of the TensorRT-LLM workers: what was not passed on)."""
    workers: dict[str, Launch | TrtllmWorker] = dict(launches)
    unwritable: dict[str, str] = {}
    for pool in pools:
        if pool.engine == "trtllm":
            worker = trtllm_worker(pool, context, engine_keys(DYNAMO_VERSION))
            if isinstance(worker, str):
                unwritable[pool.name] = worker
            else:
                workers[pool.name] = worker
    eligible = [p for p in pools if p.name in workers and p.engine in ENGINES]
    groups, skipped = serving_groups(eligible)
    part_of = dns_label(f"planner-{planned.scenario.name}")
    documents = []
    for group in groups:
        documents += [config_map(workers[p.name], group, part_of) for p in group.pools
                      if isinstance(workers[p.name], TrtllmWorker)]  # fmt: skip
        documents.append(graph(group, workers, part_of, gpu_label_of))
    version = validate_units([u for d in documents for u in validation_units(d)], "--target dynamo")
    notes = {p.name: workers[p.name].notes for g in groups for p in g.pools if isinstance(workers[p.name], TrtllmWorker)}
    return groups, documents, {**unwritable, **skipped}, version, notes
