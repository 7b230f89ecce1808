"""planner deploy --target llm-d | dynamo (and why not trtllm): the router targets' files checked against the plan's
pools (planner/deploy/llmd.py, dynamo.py, groups.py; docs/deploy.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from helpers import ROOT
from test_deploy import FAST_SCENARIOS, SLOW_SCENARIOS, _scenario

from planner import api
from planner.deploy import TARGET_ENGINES, build_deployment
from planner.deploy.dynamo import dynamo_schema, worker_args
from planner.deploy.dynamo_trtllm import engine_keys
from planner.deploy.engines import build_launch
from planner.deploy.k8s import kubernetes_validate_available
from planner.deploy.schema import check_args, load_schema, shipped_versions
from planner.deploy.tools.engine_args import dynamo_flags
from planner.deploy.tools.trtllm_keys import keys_of

ROUTER_TARGETS = ("llm-d", "dynamo")


def _one_prefill_one_decode(tmp: Path) -> Path:
    """Llama 3.3 70B long prompts, disaggregated on vLLM: the plan has one prefill pool (3 instances) and one decode
    pool (1 instance), so the counts tell the two apart."""
    path = tmp / "pd-vllm.yaml"
    path.write_text("""name: pd-vllm
deployment: on-prem
workloads:
  - name: summarize
    model: llama-3.3-70b
    isl_tokens: 8000
    osl_tokens: 200
    peak_rps: 4
    engines: [vllm]
    slo: {tpot_ms: 60, ttft_ms: 5000}
fleet: {disaggregated: always}
sites:
  on_prem:
    systems: [dgx-h100]
""")
    return path


@pytest.fixture(scope="module")
def shipped():
    return {name: api.plan_in_context(ROOT / "scenarios" / f"{name}.yaml") for name in FAST_SCENARIOS}


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    folder = tmp_path_factory.mktemp("routers")
    return {
        "pd": api.plan_in_context(_one_prefill_one_decode(folder)),
        "pdd": api.plan_in_context(_scenario(folder, "disagg-vllm", "vllm", "llama-3.1-70b", "fleet: {disaggregated: always}\n")),
        "r1-vllm": api.plan_in_context(_scenario(folder, "r1-vllm", "vllm")),
        "r1-sglang": api.plan_in_context(_scenario(folder, "r1-sglang", "sglang")),
    }  # fmt: skip


def _not_generated(deployment) -> str:
    return deployment.files["README.md"].split("## Not generated")[1]


def _flags(words: list[str]) -> list[tuple[str, str | None]]:
    out, i = [], 0
    while i < len(words):
        if words[i].startswith("--"):
            value = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else None
            out.append((words[i], value))
            i += 2 if value is not None else 1
        else:
            i += 1
    return out


def _graphs(deployment) -> list[dict]:
    return [d for d in yaml.safe_load_all(deployment.files["dynamo.yaml"]) if d and d["kind"] == "DynamoGraphDeployment"]


def _config_maps(deployment) -> dict[str, dict]:
    documents = yaml.safe_load_all(deployment.files["dynamo.yaml"])
    return {d["metadata"]["name"]: d for d in documents if d and d["kind"] == "ConfigMap"}


def _workers(graph: dict) -> dict[str, dict]:
    return {c["name"]: c for c in graph["spec"]["components"] if c["type"] != "frontend"}


@pytest.mark.parametrize("target", ROUTER_TARGETS)
def test_every_fast_shipped_scenario_deploys_to_every_router_target(shipped, target):
    for name, planned in shipped.items():
        deployment = build_deployment(planned, target)
        skipped = _not_generated(deployment)
        for pool in deployment.pools:
            if pool.name in deployment.generated:
                assert pool.engine in TARGET_ENGINES[target], (name, pool.name)
            else:
                assert f"- {pool.name}: " in skipped, (name, pool.name)
                if pool.engine not in TARGET_ENGINES[target]:
                    assert "planned on" in skipped.split(f"- {pool.name}: ")[1].split("\n")[0], (name, pool.name)
        if target == "dynamo" and deployment.generated:
            workers = [w for g in _graphs(deployment) for w in _workers(g)]
            assert sorted(workers) == sorted(deployment.generated), name


@pytest.mark.skipif(
    not os.environ.get("PLANNER_DEPLOY_ALL_SCENARIOS"), reason="slow plans: PLANNER_DEPLOY_ALL_SCENARIOS=1"
)
@pytest.mark.parametrize("name", SLOW_SCENARIOS)
def test_slow_shipped_scenarios_deploy_to_every_router_target(name):
    planned = api.plan_in_context(ROOT / "scenarios" / f"{name}.yaml")
    for target in ROUTER_TARGETS:
        deployment = build_deployment(planned, target)
        skipped = _not_generated(deployment)
        assert all(p.name in deployment.generated or f"- {p.name}: " in skipped for p in deployment.pools), target


def test_trtllm_pools_say_why_they_are_not_llmd_releases(shipped):
    deployment = build_deployment(shipped["disaggregated-serving"], "llm-d")  # planned on TensorRT-LLM
    trtllm = [p for p in deployment.pools if p.engine == "trtllm"]
    assert trtllm and not deployment.generated
    for pool in trtllm:
        assert "wheel-stub" in _not_generated(deployment).split(f"- {pool.name}: ")[1].split("\n")[0]


@pytest.mark.parametrize("name", ["contact-center", "disaggregated-serving", "daily-hybrid"])
def test_trtllm_pools_are_dynamo_trtllm_workers_as_planned(shipped, name):
    deployment = build_deployment(shipped[name], "dynamo")
    trtllm = [p for p in deployment.pools if p.engine == "trtllm"]
    assert trtllm and sorted(deployment.generated) == sorted(p.name for p in trtllm)
    workers = {n: w for g in _graphs(deployment) for n, w in _workers(g).items()}
    maps, keys = _config_maps(deployment), engine_keys("1.6.1")
    readme = deployment.files["README.md"]
    assert "--free-gpu-memory-fraction" in readme and "not passed on" in readme
    for pool in trtllm:
        worker = workers[pool.name]  # one component per pool
        assert worker["type"] == ("worker" if pool.stage == "aggregated" else pool.stage)
        assert worker["replicas"] == pool.peak_instances
        spec = worker["podTemplate"]["spec"]
        (container,) = spec["containers"]
        assert container["command"] == ["python3", "-m", "dynamo.trtllm"]
        assert container["image"].startswith("nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:")
        assert container["resources"]["limits"]["nvidia.com/gpu"] == str(pool.gpus_per_pod)
        flags = _flags(container["args"])
        assert check_args(dynamo_schema("trtllm"), flags) == []
        values = dict(flags)
        assert values["--served-model-name"] == pool.model
        assert int(values["--tensor-parallel-size"]) * int(values.get("--pipeline-parallel-size", 1)) == pool.gpus_per_instance
        assert values["--max-seq-len"] == str(pool.engine_isl + pool.engine_osl)
        assert values.get("--max-batch-size") == (str(pool.max_batch) if pool.max_batch else None)
        assert values.get("--disaggregation-mode") == (None if pool.stage == "aggregated" else pool.stage)
        (volume,) = spec["volumes"]
        (mount,) = container["volumeMounts"]
        assert values["--extra-engine-args"].startswith(mount["mountPath"] + "/")
        config_map = maps[volume["configMap"]["name"]]
        (text,) = config_map["data"].values()
        config = yaml.safe_load(text)
        assert keys.problems(config) == [] and config["enable_chunked_prefill"] is True
        assert ("cache_transceiver_config" in config) == (pool.stage != "aggregated")
        notes = readme.split("## Notes per pool")[1].split("## Not generated")[0]
        if pool.precision == "fp8":  # the plan sized an fp8 KV cache: no key of the wheel writes it
            assert f"- {pool.name}: fp8 KV cache" in notes and "not passed on" in notes
        if not pool.max_batch:
            assert f"- {pool.name}: the plan's row states no batch cap" in notes
    assert not [p for p in deployment.pools if p.name not in deployment.generated]


def test_disaggregated_trtllm_plan_gives_dynamo_prefill_and_decode_workers(shipped):
    deployment = build_deployment(shipped["disaggregated-serving"], "dynamo")
    staged = [p for p in deployment.pools if p.stage in ("prefill", "decode")]
    (graph,) = [g for g in _graphs(deployment) if set(_workers(g)) == {p.name for p in staged}]
    workers = _workers(graph)
    assert {w["type"] for w in workers.values()} == {"prefill", "decode"}
    for pool in staged:
        assert workers[pool.name]["type"] == pool.stage and workers[pool.name]["replicas"] == pool.peak_instances
    assert len({p.peak_instances for p in staged}) > 1  # so a swap of counts would show


def test_trtllm_engine_config_takes_only_keys_nvidias_files_set():
    keys = engine_keys("1.6.1")
    assert keys.problems({"enable_chunked_prefill": True, "cache_transceiver_config": {"backend": "DEFAULT"}}) == []
    assert keys.problems({"kv_cache_config": {"dtype": "fp8"}})  # no file of the wheel sets it
    assert keys.problems({"cache_transceiver_config": {"backend": "NIXL"}})  # a value no file sets
    document = json.loads((ROOT / "planner/deploy/schemas/dynamo.trtllm_engine_keys-1.6.1.json").read_text())
    assert document["source"]["package"] == "ai-dynamo" and len(document["source"]["sha256"]) == 64
    assert "dynamo/trtllm/workers/llm_worker.py" in document["source"]["files"]
    assert all(set(entry["files"]) <= set(document["source"]["files"]) for entry in document["keys"].values())


def test_trtllm_keys_reads_dicts_and_assignments():
    keys: dict = {}
    keys_of('arg_map = {"max_batch_size": n, "kv_cache_config": {"enable_block_reuse": False}}\n'
            'arg_map["load_format"] = "auto"\n'
            '_merge_overrides_into_args(args, {"kv_cache_config.tokens_per_block": 32})\n'
            'kv_cache_config = KvCacheConfig(free_gpu_memory_fraction=f)\n', "x.py", keys)  # fmt: skip
    assert sorted(keys) == ["kv_cache_config.enable_block_reuse", "kv_cache_config.free_gpu_memory_fraction",
                            "kv_cache_config.tokens_per_block", "load_format", "max_batch_size"]  # fmt: skip
    assert keys["kv_cache_config.enable_block_reuse"]["values"] == [False] and keys["max_batch_size"]["computed"]


def test_trtllm_target_is_refused_with_the_reason_and_writes_nothing(tmp_path):
    out = tmp_path / "d"
    result = subprocess.run([sys.executable, "-m", "planner", "deploy", "scenarios/agent-prefix-cache.yaml", "--target",
                             "trtllm", "--out", str(out)], check=False, capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--target" in lines[0] and "wheel-stub" in lines[0] and "llm-d, dynamo" in lines[0]
    assert "--target dynamo" in lines[0]
    assert not out.exists()


def test_disaggregated_plan_gives_llmd_prefill_and_decode_sections(plans):
    deployment = build_deployment(plans["pd"], "llm-d")
    pools = {p.stage: p for p in deployment.pools}
    assert set(pools) == {"prefill", "decode"} and len(deployment.pools) == 2
    assert pools["prefill"].peak_instances != pools["decode"].peak_instances  # so a swap would show
    (name,) = [n for n in deployment.files if n.startswith("values-")]
    values = yaml.safe_load(deployment.files[name])
    schema = load_schema("vllm", pools["decode"].engine_version)
    for stage, port in (("prefill", "8000"), ("decode", "8200")):
        section, pool = values[stage], pools[stage]
        assert section["create"] is True and section["replicas"] == pool.peak_instances
        assert section["parallelism"] == {"tensor": pool.layout.tp, "data": pool.layout.dp}
        (container,) = section["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == pool.gpus_per_pod
        assert container["command"] == ["vllm", "serve"] and container["args"][0] == values["modelArtifacts"]["name"]
        flags = _flags(container["args"][1:])
        assert check_args(schema, flags) == []
        assert ("--port", port) in flags and dict(flags)["--kv-transfer-config"]
    assert values["modelArtifacts"]["uri"] == "hf://" + values["modelArtifacts"]["name"]
    assert values["routing"]["modelName"] == pools["decode"].model
    assert set(deployment.generated) == {p.name for p in deployment.pools}


def test_aggregated_pools_give_decode_only_llmd_values(shipped):
    deployment = build_deployment(shipped["agent-prefix-cache"], "llm-d")
    served = [p for p in deployment.pools if p.name in deployment.generated]
    assert served and all(p.stage == "aggregated" for p in served)
    for pool in served:
        values = yaml.safe_load(deployment.files[f"values-{pool.name}.yaml"])
        assert values["prefill"] == {"create": False}
        assert values["decode"]["replicas"] == pool.peak_instances
        assert ("--enable-prefix-caching", None) in _flags(values["decode"]["containers"][0]["args"])


@pytest.mark.parametrize("plan", ["pd", "pdd"])
def test_disaggregated_plan_gives_dynamo_prefill_and_decode_workers(plans, plan):
    deployment = build_deployment(plans[plan], "dynamo")
    (graph,) = _graphs(deployment)
    assert graph["apiVersion"] == "nvidia.com/v1beta1" and graph["kind"] == "DynamoGraphDeployment"
    frontends = [c for c in graph["spec"]["components"] if c["type"] == "frontend"]
    assert len(frontends) == 1 and frontends[0]["replicas"] == 1
    workers = _workers(graph)
    assert sorted(workers) == sorted(p.name for p in deployment.pools)
    for pool in deployment.pools:
        worker = workers[pool.name]
        assert worker["type"] == pool.stage and worker["replicas"] == pool.peak_instances
        (container,) = worker["podTemplate"]["spec"]["containers"]
        assert container["command"] == ["python3", "-m", "dynamo.vllm"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == str(pool.gpus_per_pod)
        flags = _flags(container["args"])
        assert ("--disaggregation-mode", pool.stage) in flags
        engine = [f for f in flags if f[0] != "--disaggregation-mode"]
        assert check_args(load_schema("vllm", pool.engine_version), engine) == []
        assert not {"--host", "--port"} & {f for f, _ in flags}
    stages = [p.stage for p in deployment.pools]
    assert stages.count("prefill") >= 1 and stages.count("decode") >= 1


def test_several_decode_pools_of_one_prefill_pool_are_not_an_llmd_release(plans):
    deployment = build_deployment(plans["pdd"], "llm-d")
    decodes = [p for p in deployment.pools if p.stage == "decode"]
    assert len(decodes) > 1 and not deployment.generated
    assert not [n for n in deployment.files if n.startswith("values-")]
    assert "--target dynamo" in _not_generated(deployment)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_multi_node_pool_gives_a_dynamo_multinode_worker(plans, engine):
    deployment = build_deployment(plans[f"r1-{engine}"], "dynamo")
    (pool,) = deployment.pools
    assert pool.nodes_per_instance > 1
    worker = _workers(_graphs(deployment)[0])[pool.name]
    assert worker["multinode"] == {"nodeCount": pool.nodes_per_instance}
    assert worker["replicas"] == pool.peak_instances
    (container,) = worker["podTemplate"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == str(pool.gpus_per_pod)
    flags = dict(_flags(container["args"]))
    assert flags["--pipeline-parallel-size" if engine == "vllm" else "--pp-size"] == str(pool.layout.pp)
    assert not {"--nnodes", "--node-rank", "--headless", "--master-addr", "--dist-init-addr"} & set(flags)


def test_multi_node_pool_is_not_an_llmd_release_and_says_why(plans):
    deployment = build_deployment(plans["r1-vllm"], "llm-d")
    (pool,) = deployment.pools
    assert not deployment.generated
    assert f"spans {pool.nodes_per_instance} nodes" in _not_generated(deployment)


def test_sglang_pools_are_dynamo_workers_but_not_llmd(plans):
    planned = plans["r1-sglang"]
    assert build_deployment(planned, "dynamo").generated
    deployment = build_deployment(planned, "llm-d")
    assert not deployment.generated and "llm-d is generated for pools planned on vLLM" in _not_generated(deployment)


@pytest.mark.parametrize("target", ROUTER_TARGETS)
def test_same_plan_gives_the_same_bytes(plans, target):
    assert build_deployment(plans["pd"], target).files == build_deployment(plans["pd"], target).files


def test_dynamo_worker_flags_are_checked_against_the_wheels_schema(plans):
    from planner.deploy import serving_context

    planned = plans["pd"]
    pool = next(p for p in build_deployment(planned, "dynamo").pools if p.stage == "prefill")
    launch = build_launch(pool, serving_context(planned))
    engine_args, dynamo_args = worker_args(pool, launch)
    assert dynamo_args == [("--disaggregation-mode", "prefill")]
    assert check_args(dynamo_schema("vllm"), dynamo_args) == []
    assert check_args(dynamo_schema("vllm"), [("--tensor-parallel-size", "2")])  # vLLM's, not Dynamo's
    assert check_args(dynamo_schema("sglang"), [("--disaggregation-mode", "prefill")])  # SGLang's own flag there
    assert check_args(dynamo_schema("trtllm"), [("--disaggregation-mode", "prefill")]) == []
    assert check_args(dynamo_schema("trtllm"), [("--disaggregation-mode", "prefill_and_decode")])  # refused by 1.6.1
    assert engine_args[0] == ("--model", launch.program[2])


def test_dynamo_schemas_name_their_source():
    for backend in ("vllm", "sglang", "trtllm"):
        (version,) = shipped_versions(f"dynamo.{backend}")
        document = json.loads((ROOT / "planner/deploy/schemas" / f"dynamo.{backend}-{version}.json").read_text())
        assert document["source"]["package"] == "ai-dynamo" and document["source"]["version"] == version
        assert len(document["source"]["sha256"]) == 64
        assert f"dynamo/{backend}/backend_args.py" in document["source"]["files"]
        assert "--namespace" in document["flags"]


def test_engine_args_reads_dynamos_argument_helpers(tmp_path):
    wheel = tmp_path / "ai_dynamo-9.9.9-py3-none-any.whl"
    files = {
        "dynamo/common/configuration/groups/runtime_args.py":
            'add_argument(g, flag_name="--namespace", env_var="X", default=None, help="")\n'
            'add_negatable_bool_argument(g, flag_name="--fpm-trace", env_var="Y", default=False, help="")\n',
        "dynamo/common/configuration/groups/frontend_decoding_args.py":
            'add_argument(g, flag_name="--workers", env_var="Z", default=1, help="", arg_type=int)\n',
        "dynamo/vllm/backend_args.py":
            'add_argument(g, flag_name="--mode", env_var="M", default=None, help="", choices=["agg", "prefill"])\n'
            'parser.add_argument("--version", action="store_true")\n',
    }  # fmt: skip
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    with zipfile.ZipFile(wheel) as archive:
        flags, read = dynamo_flags(archive, "vllm")
    assert flags == {"--namespace": {"type": "str"}, "--fpm-trace": {"type": "bool"}, "--no-fpm-trace": {"type": "bool"},
                     "--workers": {"type": "int"}, "--mode": {"type": "choice", "choices": ["agg", "prefill"]},
                     "--version": {"type": "flag"}}  # fmt: skip
    assert read == list(files)


@pytest.mark.skipif(not kubernetes_validate_available(), reason="kubernetes-validate not installed (the deploy extra)")
def test_router_pods_pass_kubernetes_validate(plans):
    for plan in ("pd", "r1-vllm", "r1-sglang"):
        for target in ROUTER_TARGETS:
            deployment = build_deployment(plans[plan], target)
            assert deployment.kubernetes_version, (plan, target)


def test_cli_writes_the_dynamo_graph_and_its_readme(tmp_path):
    out = tmp_path / "dyn"
    result = subprocess.run([sys.executable, "-m", "planner", "deploy", "scenarios/agent-prefix-cache.yaml", "--target",
                             "dynamo", "--out", str(out), "--progress", "none"], check=False, capture_output=True,
                            text=True, cwd=ROOT)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["README.md", "dynamo.yaml"]
    assert "DynamoGraphDeployment" in (out / "dynamo.yaml").read_text()
