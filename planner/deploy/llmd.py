"""llm-d: a values file of the `llm-d-modelservice` Helm chart per serving group (groups.py) planned on vLLM.

The layout is the chart's values as llm-d's v0.2 guides write them (chart llm-d-modelservice 0.2.x; the chart is
not in a package registry this project reaches, so the file is not checked against its values.schema.json):
`modelArtifacts` (uri `hf://<repo>`, name, authSecretName), `routing` (servicePort, modelName, the routing
sidecar's `proxy` with its targetPort and NIXL connector), and `decode` / `prefill` sections with `create`,
`replicas`, `acceleratorTypes`, `parallelism` (tensor, data) and `containers` (modelCommand `custom`: `vllm serve`
with the launch arguments of engines.py, checked against the plan's vLLM version; GPU requests and limits). A
disaggregated group gets both sections, an aggregated pool the decode section alone. Behind the routing sidecar the
decode pods' vLLM listens on proxy.targetPort and the prefill pods' on servicePort. Each section's pod is validated
with kubernetes-validate as a PodTemplateSpec (the chart's own keys taken out).
"""

from __future__ import annotations

from planner.deploy.engines import Launch
from planner.deploy.groups import ServingGroup, serving_groups
from planner.deploy.k8s import GPU_PRODUCT_LABEL, GPU_RESOURCE, validate_units
from planner.deploy.pools import Pool
from planner.deploy.schema import check_args

CHART = "llm-d-modelservice"
CHART_LAYOUT = "0.2"  # the values layout followed (llm-d v0.2 guides)
ENGINES = ("vllm",)
SERVICE_PORT = 8000  # routing.servicePort: the port clients and the inference gateway reach
DECODE_PORT = 8200  # routing.proxy.targetPort: vLLM behind the routing sidecar of the decode pods
PROXY_CONNECTOR = "nixlv2"  # the sidecar's connector of llm-d's P/D guide (vLLM NixlConnector)
HF_SECRET = "llm-d-hf-token"  # the Secret name of llm-d's guides
_CHART_KEYS = ("modelCommand", "mountModelVolume")  # container keys the chart reads, not Kubernetes fields
MULTI_NODE_WHY = ("one instance spans {n} nodes (pipeline stages across nodes); llm-d-modelservice's multinode mode "
                  "is laid out for data-parallel (wide expert-parallel) groups, not pipeline stages, so it is not "
                  "generated: use `--target k8s` (a LeaderWorkerSet) or `--target dynamo`")  # fmt: skip


SEVERAL_POOLS_WHY = ("its disaggregated workloads are served by {decode} decode and {prefill} prefill pools together "
                     "({pools}); an llm-d-modelservice release holds one decode and one prefill section, and two "
                     "releases would not share their prefill pods: use `--target dynamo` (one graph holds them all)")  # fmt: skip


def container_args(pool: Pool, launch: Launch) -> list[tuple[str, str | None]]:
    """The launch's arguments with the port the chart's layout gives the pool's pods."""
    port = str(DECODE_PORT if pool.stage != "prefill" else SERVICE_PORT)
    return [(flag, port if flag == "--port" else value) for flag, value in launch.args]


def _section(pool: Pool, launch: Launch, gpu_label: str) -> dict:
    args = container_args(pool, launch)
    problems = check_args(launch.schema, args)
    if problems:
        raise RuntimeError(f"planner defect: llm-d {pool.name}: {'; '.join(problems)}")
    port = DECODE_PORT if pool.stage != "prefill" else SERVICE_PORT
    gpus = {GPU_RESOURCE: pool.gpus_per_pod}
    words = [launch.program[2], *(w for flag, value in args for w in ((flag,) if value is None else (flag, value)))]
    return {
        "create": True, "replicas": pool.peak_instances,
        "acceleratorTypes": {"labelKey": GPU_PRODUCT_LABEL, "labelValues": [gpu_label]},
        "parallelism": {"tensor": pool.layout.tp, "data": pool.layout.dp},
        "containers": [{
            "name": "vllm", "image": launch.image, "modelCommand": "custom", "command": list(launch.program[:2]),
            "args": words, "ports": [{"containerPort": port, "protocol": "TCP"}],
            "resources": {"limits": dict(gpus), "requests": dict(gpus)}, "mountModelVolume": True,
        }],
    }  # fmt: skip


def values(group: ServingGroup, launches: dict[str, Launch], gpu_label_of) -> dict:
    """The values of a group of one serving pool and at most one prefill pool (decode-only when not disaggregated)."""
    (serve,) = group.serving
    model_id = launches[serve.name].program[2]
    document = {
        "multinode": False,
        "modelArtifacts": {"uri": f"hf://{model_id}", "name": model_id, "authSecretName": HF_SECRET},
        "routing": {"servicePort": SERVICE_PORT, "modelName": serve.model,
                    "proxy": {"targetPort": DECODE_PORT, "connector": PROXY_CONNECTOR}},
        "decode": _section(serve, launches[serve.name], gpu_label_of(serve)),
        "prefill": {"create": False},
    }  # fmt: skip
    for prefill in group.prefills:
        document["prefill"] = _section(prefill, launches[prefill.name], gpu_label_of(prefill))
    return document


def validation_units(name: str, document: dict) -> list[tuple[str, dict]]:
    """Each created section's pod (containers without the chart's keys, on its GPU) as a PodTemplateSpec."""
    units = []
    for part in ("prefill", "decode"):
        section = document[part]
        if not section.get("create"):
            continue
        containers = [{k: v for k, v in c.items() if k not in _CHART_KEYS} for c in section["containers"]]
        selector = {section["acceleratorTypes"]["labelKey"]: section["acceleratorTypes"]["labelValues"][0]}
        units.append((f"values-{name}.yaml {part}", {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name},
                      "template": {"spec": {"nodeSelector": selector, "containers": containers}}}))  # fmt: skip
    return units


def file_name(group: ServingGroup) -> str:
    return f"values-{group.name}.yaml"


def build(
    pools, launches: dict[str, Launch], gpu_label_of
) -> tuple[tuple[ServingGroup, ...], dict[str, dict], dict, str | None]:
    """(groups, {file name: values}, why each other pool is not generated, the Kubernetes version the pods passed)."""
    skipped = {p.name: MULTI_NODE_WHY.format(n=p.nodes_per_instance)
               for p in pools if p.name in launches and p.engine in ENGINES and p.nodes_per_instance > 1}  # fmt: skip
    eligible = [p for p in pools if p.name in launches and p.engine in ENGINES and p.name not in skipped]
    groups, unpaired = serving_groups(eligible)
    skipped.update(unpaired)
    for group in groups:
        if len(group.serving) > 1 or len(group.prefills) > 1:  # one release holds one decode and one prefill section
            for pool in group.pools:
                skipped[pool.name] = (SEVERAL_POOLS_WHY.format(decode=len(group.serving), prefill=len(group.prefills),
                                                               pools=", ".join(p.name for p in group.pools)))  # fmt: skip
    groups = tuple(g for g in groups if g.pools[0].name not in skipped)
    files = {file_name(g): values(g, launches, gpu_label_of) for g in groups}
    version = validate_units(
        [u for g in groups for u in validation_units(g.name, files[file_name(g)])], "--target llm-d"
    )
    return groups, files, skipped, version
