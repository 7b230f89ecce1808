"""`planner deploy`: a plan's pools as engine launch scripts (vLLM, SGLang), Kubernetes manifests, llm-d Helm values
or NVIDIA Dynamo graphs.

- pools.py: the plan's pools (one engine configuration each) with their counts per period and workloads;
- engines.py: each pool's launch command for the engine version the plan assumed;
- schema.py + schemas/: every flag checked against that version's argument list (tools/engine_args.py);
- scripts.py, k8s.py: the files of the engine and k8s targets; groups.py: a serving pool with the prefill pool that
  feeds it, what llmd.py (llm-d-modelservice values) and dynamo.py (DynamoGraphDeployment) deploy as one;
- routers.py: the README parts of llm-d and dynamo; readme.py: the README of the folder;
- output.py: the folder written all at once, never over an input (docs/deploy.md).
TensorRT-LLM is not a target of its own: its argument list could not be read (TRTLLM_NOT_BUILT); its pools are
Dynamo TensorRT-LLM workers (dynamo_trtllm.py), whose flags and engine-config keys are read from the ai-dynamo wheel.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.deploy.schema import TRTLLM_NOT_BUILT
from planner.errors import PlannerInputError

TARGETS = ("vllm", "sglang", "k8s", "llm-d", "dynamo")
PLANNED_TARGETS = ("trtllm",)  # issue 50: not built, TRTLLM_NOT_BUILT says why
TARGET_ENGINES = {"vllm": ("vllm",), "sglang": ("sglang",), "k8s": ("vllm", "sglang"), "llm-d": ("vllm",),
                  "dynamo": ("vllm", "sglang", "trtllm")}  # fmt: skip


@dataclass(frozen=True)
class Deployment:
    target: str
    files: dict[str, str]  # file name -> text, README.md among them
    pools: tuple
    generated: tuple[str, ...]  # pool names with a launch file or manifest
    kubernetes_version: str | None = None  # the schema the manifests passed (None: not validated here)


def check_target(target: str) -> str:
    if target not in TARGETS:
        later = (f" (not built: {TRTLLM_NOT_BUILT}; TensorRT-LLM pools are generated as Dynamo TensorRT-LLM workers by "
                 "--target dynamo)") if target in PLANNED_TARGETS else ""  # fmt: skip
        raise PlannerInputError("--target", "target", f"unknown '{str(target)[:40]}'{later}; allowed: {', '.join(TARGETS)}")
    return target


def serving_context(planned):
    from planner.deploy.engines import ServingContext, hugging_face_id

    scenario, catalog = planned.scenario, planned.catalog
    spec = scenario.speculation
    draft = getattr(spec, "draft_model", None) if spec is not None else None
    draft_id = hugging_face_id(tuple(draft.aliases) if hasattr(draft, "aliases") else (), draft.id, None)[0] if draft else None
    return ServingContext(
        model_ids={m.id: tuple(m.aliases) for m in catalog.models.values()},
        checkpoint_precision={m.id: m.checkpoint_precision for m in catalog.models.values()},
        memory_fraction=round(1.0 - catalog.defaults.memory_reserve_fraction.value, 4),
        token_budget=scenario.token_budget,
        prefix_cache={w.name: w.prefix_cache is not None for w in scenario.workloads},
        speculation=spec, draft_model_id=draft_id,
    )  # fmt: skip


def build_deployment(planned, target: str) -> Deployment:
    """The files of `target` for a planned scenario (planner.api.PlannedScenario); nothing is written here."""
    from planner.deploy import readme, scripts
    from planner.deploy.engines import LAUNCH_ENGINES, build_launch
    from planner.deploy.pools import plan_pools
    from planner.deploy.schema import check_args

    check_target(target)
    pools = plan_pools(planned.plan, planned.scenario, planned.catalog)
    context = serving_context(planned)
    launches = {}
    for pool in pools:
        if pool.engine not in LAUNCH_ENGINES or pool.engine not in TARGET_ENGINES[target]:
            continue
        launch = build_launch(pool, context)
        problems = check_args(launch.schema, launch.all_args())
        if problems:  # a flag the engine version does not take: a defect of the planner, said as such
            raise RuntimeError(f"planner defect: pool {pool.name}: {'; '.join(problems)}")
        launches[pool.name] = launch
    if target in ("llm-d", "dynamo"):
        return _router_deployment(planned, target, pools, launches, context)
    files: dict[str, str] = {}
    version = None
    if target == "k8s":
        files, version = _k8s_files(planned, pools, launches)
    else:
        for pool in pools:
            if pool.name in launches:
                files[f"serve-{pool.name}.sh"] = scripts.serve_script(pool, launches[pool.name], planned.scenario.name)
    files["README.md"] = readme.readme(planned, target, pools, launches, files, context)
    return Deployment(target, dict(sorted(files.items())), pools, tuple(launches), version)


def _k8s_files(planned, pools, launches) -> tuple[dict[str, str], str | None]:
    import yaml

    from planner.deploy import k8s

    part_of = k8s.dns_label(f"planner-{planned.scenario.name}")
    manifests = [k8s.pool_manifest(p, launches[p.name], part_of, k8s.gpu_product(p.gpu, planned.catalog))
                 for p in pools if p.name in launches]  # fmt: skip
    served = [p for p in pools if p.name in launches]
    manifests += k8s.services(served, part_of, tuple(w.name for w in planned.scenario.workloads))
    version = k8s.validate_manifests(manifests)
    files = {}
    if manifests:
        files["manifests.yaml"] = yaml.safe_dump_all(manifests, sort_keys=True, default_flow_style=False, width=10_000)
    return files, version


def _router_deployment(planned, target: str, pools, launches, context) -> Deployment:
    """llm-d values files or Dynamo graphs of the pools on the target's engines, with the README saying why each
    other pool has none."""
    from planner.deploy import dynamo, llmd, readme, routers
    from planner.deploy.k8s import gpu_product

    def gpu_label_of(pool):
        return gpu_product(pool.gpu, planned.catalog)

    notes: dict[str, tuple[str, ...]] = {}
    if target == "llm-d":
        groups, documents, skipped, version = llmd.build(pools, launches, gpu_label_of)
        files = {name: routers.yaml_file(routers.llmd_header(planned, group), [documents[name]])
                 for name, group in zip(documents, groups, strict=True)}  # fmt: skip
    else:
        groups, graphs, skipped, version, notes = dynamo.build(planned, pools, launches, gpu_label_of, context)
        files = {routers.DYNAMO_FILE: routers.yaml_file(routers.dynamo_header(planned), graphs)} if graphs else {}
    made = {p.name for g in groups for p in g.pools}
    generated = tuple(p.name for p in pools if p.name in made)
    for pool in pools:
        if pool.name not in made and pool.name not in skipped:
            skipped[pool.name] = routers.engine_why(pool, target, TARGET_ENGINES[target])
    extra = routers.target_readme(planned, target, groups, launches, skipped, version)
    if target == "dynamo" and notes:
        extra = routers.with_trtllm(extra, groups, notes)
    files["README.md"] = readme.readme(planned, target, pools, launches, files, context, extra)
    return Deployment(target, dict(sorted(files.items())), pools, generated, version)
