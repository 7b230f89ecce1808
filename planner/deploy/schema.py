"""Engine argument schemas: the flags each supported engine version accepts, read from its published source by
planner/deploy/tools/engine_args.py and shipped as planner/deploy/schemas/<engine>-<version>.json. Every flag a
launch command carries is checked against the schema of the version it launches (`check_args`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from planner.perf.serving import release_line, version_key

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
TRTLLM_NOT_BUILT = ("TensorRT-LLM's argument list could not be read from its published source: PyPI holds only "
                    "wheel-stub source distributions of tensorrt-llm (no source inside: they fetch the wheel from "
                    "NVIDIA's own index, which this project cannot reach), so trtllm-serve flags cannot be checked "
                    "against a shipped schema (docs/deploy.md)")  # fmt: skip


@dataclass(frozen=True)
class ArgSchema:
    engine: str
    version: str
    flags: dict  # flag -> {"type": ..., "choices": [...]}
    source: dict

    def describe_source(self) -> str:
        files = ", ".join(self.source.get("files", ())[:2])
        return f"{self.source.get('distribution', '?')} from {self.source.get('index', 'PyPI')} ({files}{', ...' if len(self.source.get('files', ())) > 2 else ''})"


@cache
def schema_versions(directory: Path, name: str) -> tuple[str, ...]:
    """The versions of `name` (an engine, a benchmark tool) with an argument list shipped in `directory` (files
    `<name>-<version>.json`), oldest first."""
    names = (p.stem.partition("-")[2] for p in directory.glob(f"{name}-*.json"))
    return tuple(sorted(names, key=version_key))


@cache
def read_schema(directory: Path, name: str, version: str) -> ArgSchema:
    """The argument list of `name` at `version` shipped in `directory`."""
    document = json.loads((directory / f"{name}-{version}.json").read_text(encoding="utf-8"))
    return ArgSchema(document["engine"], document["version"], document["flags"], document["source"])


def shipped_versions(engine: str) -> tuple[str, ...]:
    """The versions of `engine` with a shipped schema, oldest first."""
    return schema_versions(SCHEMA_DIR, engine)


def load_schema(engine: str, version: str) -> ArgSchema:
    return read_schema(SCHEMA_DIR, engine, version)


def schema_for(engine: str, version: str) -> tuple[ArgSchema | None, str]:
    """The schema a launch for `engine` at the plan's `version` is checked against, and how it was chosen: the
    version itself; else the newest shipped one of its release line; else the newest shipped (a plan whose version
    is not stated, or a line none is shipped for), said in the note. None where no version of the engine is shipped."""
    versions = shipped_versions(engine)
    if not versions:
        return None, f"no argument schema of {engine} is shipped"
    if version in versions:
        return load_schema(engine, version), ""
    line = release_line(engine, version)
    same_line = [v for v in versions if line is not None and release_line(engine, v) == line]
    chosen = same_line[-1] if same_line else versions[-1]
    why = (f"the plan's {engine} version {version} has no shipped schema; flags are those of {chosen}, the newest "
           f"shipped of its release line {line}") if same_line else (
           f"the plan's {engine} version is {version or 'not stated'}; no schema of that release line is shipped, so "
           f"flags are those of {chosen}, the newest shipped (shipped: {', '.join(versions)})")  # fmt: skip
    return load_schema(engine, chosen), why


def _value_problem(entry: dict, value: str | None) -> str | None:
    kind = entry.get("type", "str")
    if kind in ("flag", "bool"):
        return None if value is None else "takes no value"
    if value is None:
        return "needs a value"
    if "$" in value:  # filled in at launch (a node rank, an address): checked by the engine
        return None
    try:
        if kind == "int":
            int(value)
        elif kind == "float":
            float(value)
        elif kind == "json":
            json.loads(value)
    except ValueError:
        return f"needs {kind}, got {value!r}"
    choices = entry.get("choices")
    if kind == "choice" and choices is not None and value not in choices:
        return f"{value!r} is not one of {', '.join(choices)}"
    return None


def check_args(schema: ArgSchema, args: list[tuple[str, str | None]]) -> list[str]:
    """What is wrong with launch arguments (flag, value or None) under the schema: unknown flags, values of the
    wrong type or outside the choices. Empty when every one is right."""
    problems = []
    for flag, value in args:
        entry = schema.flags.get(flag)
        if entry is None:
            problems.append(f"{flag} is not an argument of {schema.engine} {schema.version}")
            continue
        problem = _value_problem(entry, value)
        if problem:
            problems.append(f"{flag} {problem} ({schema.engine} {schema.version})")
    return problems
