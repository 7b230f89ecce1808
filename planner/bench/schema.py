"""Benchmark tools' argument lists: the flags each supported tool version accepts, read from its published wheel by
planner/bench/tools/bench_args.py and shipped as planner/bench/schemas/<tool>-<version>.json. Every flag a generated
benchmark command carries is checked against every shipped version of its tool (`check_command`)."""

from __future__ import annotations

from pathlib import Path

from planner.deploy.schema import ArgSchema, check_args, read_schema, schema_versions

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"


def tool_versions(tool: str) -> tuple[str, ...]:
    """The versions of `tool` with a shipped argument list, oldest first."""
    return schema_versions(SCHEMA_DIR, tool)


def load_tool_schema(tool: str, version: str) -> ArgSchema:
    return read_schema(SCHEMA_DIR, tool, version)


def _kv_problem(schema: ArgSchema, flag: str, entry: dict, value: str | None) -> str | None:
    """GuideLLM's `--option kind=...,key=value`: the kind registered, every key a field of its class."""
    if value is None:
        return f"{flag} needs a value ({schema.engine} {schema.version})"
    pairs = [part.split("=", 1) for part in value.split(",")]
    if any(len(p) != 2 or not p[0] for p in pairs):
        return f"{flag} {value!r}: not comma-separated key=value pairs ({schema.engine} {schema.version})"
    values = dict(pairs)
    kind = values.get("kind")
    kinds = entry.get("kinds") or {}
    if kind not in kinds:
        return f"{flag} kind={kind} is not one of {', '.join(kinds)} ({schema.engine} {schema.version})"
    unknown = sorted(set(values) - set(kinds[kind]))
    if unknown and kinds[kind]:
        return f"{flag} kind={kind} takes no {', '.join(unknown)} ({schema.engine} {schema.version})"
    return None


def check_command(schema: ArgSchema, args: list[tuple[str, str | None]]) -> list[str]:
    """What is wrong with a command's arguments (flag, value or None) under one tool version's argument list."""
    plain = [(f, v) for f, v in args if schema.flags.get(f, {}).get("type") != "kv"]
    problems = check_args(schema, plain)
    for flag, value in args:
        entry = schema.flags.get(flag)
        if entry is not None and entry.get("type") == "kv":
            problem = _kv_problem(schema, flag, entry, value)
            if problem:
                problems.append(problem)
    return problems


def check_every_version(tool: str, args: list[tuple[str, str | None]]) -> list[str]:
    """Problems of the arguments under each shipped version of `tool` (none shipped: said as a problem)."""
    versions = tool_versions(tool)
    if not versions:
        return [f"no argument list of {tool} is shipped"]
    return [p for version in versions for p in check_command(load_tool_schema(tool, version), args)]
