"""Kubernetes manifests of a plan: a Deployment per pool whose instance fits a node, a LeaderWorkerSet
(leaderworkerset.x-k8s.io/v1) per pool whose instance spans nodes (one pod per pipeline stage's node), and a Service
per workload. Validated with `kubernetes-validate` (the `deploy` extra) where it is installed: Deployments and
Services against the Kubernetes schema; a LeaderWorkerSet is a custom resource outside that schema, so its leader
and worker pod templates are validated as the PodTemplateSpec of a core PodTemplate."""

from __future__ import annotations

from planner.deploy.engines import PORT, Launch
from planner.deploy.pools import Pool, dns_label
from planner.errors import PlannerInputError
from planner.report.files import slug

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
# the values NVIDIA GPU Feature Discovery gives `nvidia.com/gpu.product` (nvidia-smi's product name, dashed); a GPU
# not listed gets its catalog name dashed: check `kubectl get nodes -L nvidia.com/gpu.product`
GPU_PRODUCTS = {
    "H100-SXM-80GB": "NVIDIA-H100-80GB-HBM3", "H100-PCIe-80GB": "NVIDIA-H100-PCIe", "H200-SXM-141GB": "NVIDIA-H200",
    "B200-SXM-180GB": "NVIDIA-B200", "A100-SXM-80GB": "NVIDIA-A100-SXM4-80GB", "L40S-48GB": "NVIDIA-L40S",
    "L4-24GB": "NVIDIA-L4",
}  # fmt: skip
PART_OF = "app.kubernetes.io/part-of"
NAME = "app.kubernetes.io/name"
WORKLOAD_LABEL = "workload.planner.io/"


def gpu_product(gpu: str, catalog) -> str:
    if gpu in GPU_PRODUCTS:
        return GPU_PRODUCTS[gpu]
    name = getattr(catalog.gpus.get(gpu), "name", "") or gpu
    return slug(name.replace(" ", "-"), "gpu")[:63]


def workload_label(workload: str) -> str:
    return WORKLOAD_LABEL + slug(workload, "workload")[:63]


def _k8s_command(launch: Launch, extra) -> list[str]:
    words = [*launch.program]
    for flag, value in [*launch.args, *extra]:
        words.append(flag)
        if value is not None:
            words.append(value.replace("$NODE_RANK", "$(LWS_WORKER_INDEX)").replace("$LEADER_ADDR", "$(LWS_LEADER_ADDRESS)"))
    return words


def _pod_spec(pool: Pool, launch: Launch, command: list[str], gpu_label: str, serves: bool) -> dict:
    container = {
        "name": "engine", "image": launch.image, "command": command,
        "resources": {"limits": {GPU_RESOURCE: pool.gpus_per_pod}, "requests": {GPU_RESOURCE: pool.gpus_per_pod}},
        "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token", "optional": True}}}],
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }  # fmt: skip
    if serves:
        container["ports"] = [{"name": "http", "containerPort": PORT}]
        container["readinessProbe"] = {"httpGet": {"path": "/health", "port": PORT}, "initialDelaySeconds": 60, "periodSeconds": 10}
    return {"nodeSelector": {GPU_PRODUCT_LABEL: gpu_label}, "containers": [container],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]}  # fmt: skip


def _labels(pool: Pool, part_of: str, serves: bool) -> dict:
    labels = {NAME: pool.name, PART_OF: part_of}
    if serves:
        value = "serve" if pool.stage == "aggregated" else pool.stage
        labels.update({workload_label(w): value for w in pool.workloads})
    return labels


def _annotations(pool: Pool, launch: Launch) -> dict:
    return {
        "planner.io/instances-by-period": ", ".join(f"{p} {n}" for p, n in pool.instances_by_period),
        "planner.io/configuration": f"{pool.model} {pool.layout_label} {pool.precision or '-'} batch {pool.max_batch or '-'} "
                                    f"{pool.engine_isl}/{pool.engine_osl} {pool.stage} {launch.engine} {launch.version or '-'}",
    }  # fmt: skip


def pool_manifest(pool: Pool, launch: Launch, part_of: str, gpu_label: str) -> dict:
    """A Deployment (replicas: the busiest period's instances), or a LeaderWorkerSet of size = nodes per instance."""
    metadata = {"name": pool.name, "labels": {NAME: pool.name, PART_OF: part_of}, "annotations": _annotations(pool, launch)}
    if pool.nodes_per_instance == 1:
        return {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
            "spec": {"replicas": pool.peak_instances, "selector": {"matchLabels": {NAME: pool.name}},
                     "template": {"metadata": {"labels": _labels(pool, part_of, True)},
                                  "spec": _pod_spec(pool, launch, _k8s_command(launch, launch.leader_args), gpu_label, True)}},
        }  # fmt: skip
    leader = _pod_spec(pool, launch, _k8s_command(launch, launch.leader_args), gpu_label, True)
    worker = _pod_spec(pool, launch, _k8s_command(launch, launch.worker_args), gpu_label, False)
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": metadata,
        "spec": {"replicas": pool.peak_instances, "leaderWorkerTemplate": {
            "size": pool.nodes_per_instance, "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": {"metadata": {"labels": _labels(pool, part_of, True)}, "spec": leader},
            "workerTemplate": {"metadata": {"labels": _labels(pool, part_of, False)}, "spec": worker}}},
    }  # fmt: skip


def services(pools: list[Pool], part_of: str, workloads: tuple[str, ...]) -> list[dict]:
    """A Service per workload over its aggregated pools' serving pods; a disaggregated workload gets one per stage
    (`<workload>-prefill`, `<workload>-decode`) for the router in front of them (not generated here)."""
    out = []
    for workload in workloads:
        stages = sorted({("serve" if p.stage == "aggregated" else p.stage) for p in pools if workload in p.workloads})
        for stage in stages:
            name = dns_label(workload) + ("" if stage == "serve" else f"-{stage}")
            out.append({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "labels": {PART_OF: part_of}},
                "spec": {"selector": {workload_label(workload): stage},
                         "ports": [{"name": "http", "port": PORT, "targetPort": PORT, "protocol": "TCP"}]},
            })  # fmt: skip
    return out


def kubernetes_validate_available() -> bool:
    try:
        import kubernetes_validate  # noqa: F401
    except ImportError:
        return False
    return True


def validation_units(manifest: dict) -> list[tuple[str, dict]]:
    """What the Kubernetes schema can check of a manifest: itself, or a LeaderWorkerSet's pod templates each as the
    PodTemplateSpec of a core PodTemplate."""
    if manifest["kind"] != "LeaderWorkerSet":
        return [(manifest["metadata"]["name"], manifest)]
    template = manifest["spec"]["leaderWorkerTemplate"]
    return [(f"{manifest['metadata']['name']} {part}", {"apiVersion": "v1", "kind": "PodTemplate",
             "metadata": {"name": manifest["metadata"]["name"]}, "template": template[part]})
            for part in ("leaderTemplate", "workerTemplate")]  # fmt: skip


def validate_manifests(manifests: list[dict]) -> str | None:
    """Validate with kubernetes-validate (strict: no unknown fields) at its newest Kubernetes version; raises
    PlannerInputError naming the object on a failure (a planner defect or an impossible plan). Returns the
    version used, or None when the package is absent."""
    return validate_units([unit for manifest in manifests for unit in validation_units(manifest)])


def validate_units(units: list[tuple[str, dict]], option: str = "--target k8s") -> str | None:
    """Validate (name, object) pairs as validate_manifests does; None when kubernetes-validate is absent."""
    if not kubernetes_validate_available():
        return None
    import kubernetes_validate
    from kubernetes_validate.utils import latest_version

    version = latest_version()
    for name, unit in units:
        try:
            kubernetes_validate.validate(unit, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            raise PlannerInputError(option, name, f"manifest fails the Kubernetes {version} schema: "
                                    f"{str(error.message)[:300]}") from None  # fmt: skip
    return version
