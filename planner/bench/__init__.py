"""`planner bench` and `planner check`: the benchmark that checks a deployed plan, and its results read back.

- loads.py: per workload the lengths, the busiest period's rates (Service and one instance per pool), the request
  count, the plan's figures per pool with their expected-error bands;
- commands.py: each tool's command (AIPerf, GuideLLM, `vllm bench serve`); schema.py + schemas/: every flag
  checked against the tool versions' own argument lists (tools/bench_args.py);
- documents.py: scripts, expected.json and README; output.py: the folder written whole, never over an input;
- check.py, calibrate.py: results matched to pools, judged against the model at their load, and a calibration
  catalog of what was measured (docs/deploy.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import PlannerInputError

TOOLS = ("aiperf", "guidellm", "vllm")


@dataclass(frozen=True)
class BenchSet:
    tool: str
    files: dict[str, str]  # file name -> text
    loads: tuple  # planner.bench.loads.WorkloadLoad per workload
    expected: dict  # expected.json's document


def check_tool(tool: str) -> str:
    if tool not in TOOLS:
        raise PlannerInputError("--tool", "tool", f"unknown '{str(tool)[:40]}'; allowed: {', '.join(TOOLS)}")
    return tool


def check_endpoint(endpoint: str | None) -> str | None:
    """A base URL (http:// or https://, no spaces or shell characters), or None."""
    import re

    if endpoint is None:
        return None
    if not re.fullmatch(r"https?://[A-Za-z0-9._~:/\[\]@%+-]{1,200}", endpoint):
        raise PlannerInputError("--endpoint", "endpoint", f"'{str(endpoint)[:60]}' is not a base URL: give "
                                "http(s)://host[:port], e.g. http://agent:8000")  # fmt: skip
    return endpoint.rstrip("/")


def build_bench(planned, tool: str, endpoint: str | None = None) -> BenchSet:
    """The files of `planner bench` for a planned scenario (planner.api.PlannedScenario); nothing is written here.
    Every generated command is checked against each shipped version of its tool's argument list."""
    from planner.bench.commands import ENDPOINT, command_for, targets
    from planner.bench.documents import expected_document, expected_json, readme, script
    from planner.bench.loads import workload_loads
    from planner.bench.schema import (
        check_every_version,
        load_tool_schema,
        tool_versions,
    )

    check_tool(tool)
    endpoint = check_endpoint(endpoint)
    scenario = planned.scenario.name
    loads = workload_loads(planned.plan, planned.scenario, planned.catalog)
    versions = tool_versions(tool)
    sources = "; ".join(f"{tool} {v} ({load_tool_schema(tool, v).describe_source()})" for v in versions)
    files: dict[str, str] = {}
    by_workload = {}
    for load in loads:
        found = targets(load)
        by_workload[load.name] = found
        commands = []
        for target in found:
            command = command_for(tool, load, target)
            checked = [(f, None if v is None else v.replace(ENDPOINT, "http://localhost:8000")) for f, v in command.args]
            problems = check_every_version(tool, checked)
            if problems:  # a flag the tool does not take: a defect of the planner, said as such
                raise RuntimeError(f"planner defect: {tool} command of {load.name} ({target.name}): {'; '.join(problems)}")
            commands.append((target, command))
        default = endpoint or f"http://{load.service}:8000"
        files[f"bench-{load.service}-{tool}.sh"] = script(load, tool, commands, default, scenario, sources)
    document = expected_document(loads, tool, scenario, by_workload)
    files["expected.json"] = expected_json(document)
    files["README.md"] = readme(loads, tool, scenario, sorted([*files, "README.md"]), sources,
                                endpoint or "http://<workload>:8000")  # fmt: skip
    return BenchSet(tool, dict(sorted(files.items())), loads, document)
