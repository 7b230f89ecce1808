"""The benchmark command of one workload against one target (the whole Service, or one instance of a pool) for
each tool: AIPerf (`aiperf profile`), GuideLLM (`guidellm run`), vLLM (`vllm bench serve`). Synthetic prompts of the
workload's lengths (a shared prefix first where the scenario states a prefix cache), Poisson arrivals at the
target's rate, the request count of loads.request_count, streaming, the served model name of the deploy scripts."""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

from planner.bench.loads import WARMUP_REQUESTS, WorkloadLoad, request_count

TOOLS = ("aiperf", "guidellm", "vllm")
PROGRAMS = {"aiperf": ("aiperf", "profile"), "guidellm": ("guidellm", "run"), "vllm": ("vllm", "bench", "serve")}
SEED = 42
ENDPOINT = "${ENDPOINT}"  # the script's variable: its default is the Service's URL or the --endpoint given


@dataclass(frozen=True)
class Target:
    """Where a benchmark sends its load: the workload's Service (every pool behind it) or one instance of a pool."""

    name: str  # 'service' or the pool's name
    rate_rps: float
    requests: int
    instances: int  # engine instances behind the endpoint
    pool: str | None = None


@dataclass(frozen=True)
class Command:
    tool: str
    program: tuple[str, ...]
    args: tuple[tuple[str, str | None], ...]
    results: str  # where the tool writes its result file(s), relative to the script's folder
    notes: tuple[str, ...] = ()


def targets(load: WorkloadLoad) -> tuple[Target, ...]:
    """The Service at the workload's busiest-period peak, then one instance of each aggregated pool at its share
    of that peak divided among the pool's instances (a disaggregated pool is reached through the Service only)."""
    found = [Target("service", load.peak_rps, request_count(load.percentile, load.peak_rps),
                    sum(p.instances for p in load.pools))]  # fmt: skip
    for share in load.pools:
        if share.pool.stage != "aggregated" or share.rps_per_instance <= 0:
            continue
        rate = round(share.rps_per_instance, 4)
        found.append(Target(share.pool.name, rate, request_count(load.percentile, rate), 1, share.pool.name))
    return tuple(found)


def _tokens(value: float) -> str:
    return str(max(1, round(value)))


def results_path(load: WorkloadLoad, target: Target, tool: str) -> str:
    """results/<workload>/<target>/<tool>/: the target's name (a pool's) in the path, where `planner check` reads it."""
    return f"results/{load.service}/{target.name}/{tool}"


def _prompt(load: WorkloadLoad) -> tuple[float, int]:
    """(random prompt tokens after the shared prefix, prefix tokens): the prompt is the prefix, then the rest."""
    prefix = load.lengths.prefix_tokens if load.lengths.prefix_tokens < load.lengths.isl_mean else 0
    return load.lengths.isl_mean - prefix, prefix


def aiperf_command(load: WorkloadLoad, target: Target) -> Command:
    lengths = load.lengths
    prompt, prefix = _prompt(load)
    args = [
        ("--model", load.model), ("--tokenizer", load.tokenizer), ("--url", ENDPOINT), ("--endpoint-type", "chat"),
        ("--streaming", None),
        ("--synthetic-input-tokens-mean", _tokens(prompt)), ("--synthetic-input-tokens-stddev", _tokens(lengths.isl_std) if lengths.isl_std else "0"),
        ("--output-tokens-mean", _tokens(lengths.osl_mean)), ("--output-tokens-stddev", _tokens(lengths.osl_std) if lengths.osl_std else "0"),
        ("--extra-inputs", "ignore_eos:true"),
    ]  # fmt: skip
    if prefix:
        args += [("--prefix-prompt-length", str(prefix)), ("--num-prefix-prompts", "1")]
    results = results_path(load, target, "aiperf")
    args += [
        ("--request-rate", f"{target.rate_rps:g}"), ("--arrival-pattern", "poisson"),
        ("--request-count", str(target.requests)), ("--warmup-request-count", str(WARMUP_REQUESTS)),
        ("--random-seed", str(SEED)), ("--artifact-dir", results), ("--ui-type", "simple"),
    ]  # fmt: skip
    return Command("aiperf", PROGRAMS["aiperf"], tuple(args), f"{results}/profile_export_aiperf.json")


def guidellm_command(load: WorkloadLoad, target: Target) -> Command:
    lengths = load.lengths
    prompt, prefix = _prompt(load)
    data = [("kind", "synthetic_text"), ("prompt_tokens", _tokens(prompt)), ("output_tokens", _tokens(lengths.osl_mean))]
    if lengths.isl_std:
        data.append(("prompt_tokens_stdev", _tokens(lengths.isl_std)))
    if lengths.osl_std:
        data.append(("output_tokens_stdev", _tokens(lengths.osl_std)))
    if prefix:
        data += [("prefix_tokens", str(prefix)), ("prefix_count", "1")]
    results = results_path(load, target, "guidellm")
    args = [
        ("--backend", f"kind=openai_http,target={ENDPOINT},model={load.model}"),
        ("--tokenizer", f"kind=huggingface_auto,model={load.tokenizer}"),
        ("--profile", f"kind=poisson,rate={target.rate_rps:g}"),
        ("--data", ",".join(f"{k}={v}" for k, v in data)),
        ("--constraint", f"kind=max_requests,count={target.requests}"),
        ("--seed", f"kind=static,value={SEED}"),
        ("--output", f"kind=json,path={results}/benchmarks.json"),
        ("--disable-console-interactive", None),
    ]  # fmt: skip
    note = ("GuideLLM asks for each request's output length as max_tokens; a model that stops early answers shorter "
            "(`planner check` reads the lengths the run measured)")  # fmt: skip
    return Command("guidellm", PROGRAMS["guidellm"], tuple(args), f"{results}/benchmarks.json", (note,))


def vllm_range_ratio(load: WorkloadLoad) -> float:
    """`--random-range-ratio` r: lengths uniform on [L(1 - r), L(1 + r)] have standard deviation L r / sqrt(3); one
    ratio serves both lengths, so the larger relative spread is kept (at most 0.99)."""
    lengths = load.lengths
    spread = max(lengths.isl_std / lengths.isl_mean if lengths.isl_mean else 0.0,
                 lengths.osl_std / lengths.osl_mean if lengths.osl_mean else 0.0)  # fmt: skip
    return round(min(0.99, math.sqrt(3.0) * spread), 4)


def vllm_command(load: WorkloadLoad, target: Target) -> Command:
    lengths = load.lengths
    prompt, prefix = _prompt(load)
    results = results_path(load, target, "vllm")
    args = [
        ("--base-url", ENDPOINT), ("--endpoint", "/v1/completions"), ("--model", load.tokenizer),
        ("--served-model-name", load.model), ("--tokenizer", load.tokenizer),
        ("--dataset-name", "random"), ("--random-input-len", _tokens(prompt)),
        ("--random-output-len", _tokens(lengths.osl_mean)), ("--random-range-ratio", f"{vllm_range_ratio(load):g}"),
    ]  # fmt: skip
    if prefix:
        args.append(("--random-prefix-len", str(prefix)))
    args += [
        ("--ignore-eos", None), ("--num-prompts", str(target.requests)), ("--request-rate", f"{target.rate_rps:g}"),
        ("--burstiness", "1.0"), ("--num-warmups", str(WARMUP_REQUESTS)), ("--seed", str(SEED)),
        ("--percentile-metrics", "ttft,tpot,itl,e2el"), ("--metric-percentiles", _percentiles(load.percentile)),
        ("--save-result", None), ("--result-dir", results), ("--result-filename", f"{load.service}-{target.name}.json"),
    ]  # fmt: skip
    return Command("vllm", PROGRAMS["vllm"], tuple(args), f"{results}/{load.service}-{target.name}.json")


def _percentiles(percentile: float) -> str:
    values = sorted({50.0, 90.0, 95.0, 99.0, float(percentile)})
    return ",".join(f"{v:g}" for v in values)


BUILDERS = {"aiperf": aiperf_command, "guidellm": guidellm_command, "vllm": vllm_command}


def command_for(tool: str, load: WorkloadLoad, target: Target) -> Command:
    return BUILDERS[tool](load, target)


def _word(value: str) -> str:
    return f'"{value}"' if "$" in value else shlex.quote(value)


def command_text(command: Command, indent: str = "") -> str:
    lines = [" ".join(command.program)]
    for flag, value in command.args:
        lines.append(flag if value is None else f"{flag} {_word(value)}")
    return indent + (" \\\n" + indent + "    ").join(lines)
