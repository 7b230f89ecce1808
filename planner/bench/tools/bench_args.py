"""Regenerate a benchmark tool's argument list (planner/bench/schemas/<tool>-<version>.json) from its wheel.

    pip download aiperf==0.13.0 guidellm==0.8.1 --no-deps -d /tmp/x
    pip download vllm==0.15.1 --no-deps -d /tmp/x
    python -m planner.bench.tools.bench_args /tmp/x/*.whl --out planner/bench/schemas/

The wheel is read as a zip, never installed nor imported: its argument definitions are parsed with `ast` (as
planner/deploy/tools/engine_args.py reads the engines'):
- vLLM (`vllm bench serve`): every `add_argument` of vllm/benchmarks/serve.py and vllm/benchmarks/datasets.py.
- AIPerf (`aiperf profile`): every field of `CLIConfig` (aiperf/config/flags/cli_config.py) with its
  `CLIParameter(name=(...))` names and the field's type; a plugin enum's choices from aiperf/plugin/categories.yaml
  and plugins.yaml (cyclopts matches them by name).
- GuideLLM (`guidellm run`): the `click.option`s of guidellm/cli/run.py and the options generated from
  `BenchmarkArgs` (guidellm/schemas/benchmark/entrypoints.py: `--<argument_alias>`, each a comma-separated
  `key=value` string whose `kind` picks a registered class: `kinds` lists each kind's keys, its fields and those of
  the classes it derives from in the wheel).
Types as the engine schemas': flag, bool, int, float, str, json, choice, list; and `kv` (GuideLLM's key=value options).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import zipfile
from pathlib import Path

import yaml

from planner.deploy.tools.engine_args import Sources, _add, _call_flags, _explicit_type

VLLM_FILES = ("vllm/benchmarks/serve.py", "vllm/benchmarks/datasets.py")
AIPERF_FILE = "aiperf/config/flags/cli_config.py"
AIPERF_PLUGINS = ("aiperf/plugin/categories.yaml", "aiperf/plugin/plugins.yaml")
GUIDELLM_RUN = "guidellm/cli/run.py"
GUIDELLM_ARGS = "guidellm/schemas/benchmark/entrypoints.py"
COMMANDS = {"vllm": "vllm bench serve", "aiperf": "aiperf profile", "guidellm": "guidellm run"}


def vllm_bench_flags(wheel: zipfile.ZipFile) -> tuple[dict, list[str]]:
    names = [n for n in VLLM_FILES if n in wheel.namelist()]
    if len(names) != len(VLLM_FILES):
        raise SystemExit(f"{wheel.filename}: lacks {', '.join(set(VLLM_FILES) - set(names))}: no `vllm bench serve` here")
    sources = Sources(wheel, names)
    flags: dict[str, dict] = {}
    for name in names:
        for node in ast.walk(sources.trees[name]):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
                entry = _explicit_type(node, sources) or {"type": "str"}
                for flag in _call_flags(node):
                    _add(flags, flag, entry)
    return flags, names


def _aiperf_enums(wheel: zipfile.ZipFile) -> dict[str, list[str]]:
    """Plugin enum name -> its members, as aiperf's plugin registry declares them."""
    categories = yaml.safe_load(wheel.read(AIPERF_PLUGINS[0]))
    plugins = yaml.safe_load(wheel.read(AIPERF_PLUGINS[1]))
    enums = {}
    for category, spec in (categories or {}).items():
        if isinstance(spec, dict) and spec.get("enum") and isinstance(plugins.get(category), dict):
            enums[spec["enum"]] = sorted(plugins[category])
    return enums


def _aiperf_type(annotation: ast.AST, enums: dict[str, list[str]]) -> dict:
    text = ast.unparse(annotation).replace(" ", "")
    parts = [p for p in text.split("|") if p != "None"]
    if len(parts) == 1 and parts[0] in enums:
        return {"type": "choice", "choices": enums[parts[0]]}
    if parts == ["bool"]:
        return {"type": "flag"}
    if any(p.startswith(("list[", "tuple[")) for p in parts):
        inner = next(p for p in parts if p.startswith(("list[", "tuple[")))
        return {"type": "list", "item": inner[inner.index("[") + 1:-1]}
    for kind in ("int", "float"):
        if parts and parts[0] == kind:
            return {"type": kind}
    return {"type": "str"}


def aiperf_flags(wheel: zipfile.ZipFile) -> tuple[dict, list[str]]:
    tree = ast.parse(wheel.read(AIPERF_FILE).decode("utf-8"), AIPERF_FILE)
    enums = _aiperf_enums(wheel)
    config = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "CLIConfig")
    flags: dict[str, dict] = {}
    for node in config.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.annotation, ast.Subscript)
                and ast.unparse(node.annotation.value).endswith("Annotated")):  # fmt: skip
            continue
        items = node.annotation.slice.elts if isinstance(node.annotation.slice, ast.Tuple) else []
        calls = [i for i in items[1:] if isinstance(i, ast.Call) and ast.unparse(i.func).endswith("CLIParameter")]
        if not items or not calls:
            continue
        keywords = {k.arg: k.value for k in calls[0].keywords if k.arg}
        names = _name_constants(keywords.get("name"))
        if not names or ast.unparse(keywords.get("parse", ast.Constant(True))) == "False":
            continue
        entry = _aiperf_type(items[0], enums)
        negative = keywords.get("negative")
        for name in names:
            flags[name] = entry
            if entry["type"] == "flag" and negative is not None and ast.unparse(negative) not in ("False", "''", '""'):
                flags["--no-" + name[2:]] = {"type": "flag"}
    return flags, [AIPERF_FILE, *AIPERF_PLUGINS]


def _name_constants(node) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value] if node.value.startswith("-") else []
    if isinstance(node, ast.Tuple | ast.List):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value.startswith("-")]
    return []


def _guidellm_classes(wheel: zipfile.ZipFile) -> tuple[dict, list[str]]:
    """Every class of guidellm/ in the wheel: name -> (bases, own field names, kinds it is registered under)."""
    classes: dict[str, tuple[list[str], list[str], list[str]]] = {}
    files = []
    for name in sorted(wheel.namelist()):
        if not (name.startswith("guidellm/") and name.endswith(".py")):
            continue
        tree = ast.parse(wheel.read(name).decode("utf-8"), name)
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            fields = [s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                      and not s.target.id.startswith("_")]  # fmt: skip
            kinds = []
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call) and ast.unparse(decorator.func).endswith(".register") and decorator.args:
                    arg = decorator.args[0]
                    kinds += [arg.value] if isinstance(arg, ast.Constant) else _constants(arg)
            if kinds and name not in files:
                files.append(name)
            classes[node.name] = ([ast.unparse(b).split(".")[-1] for b in node.bases], fields, kinds)
    return classes, files


def _constants(node) -> list[str]:
    if isinstance(node, ast.List | ast.Tuple):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _fields(classes: dict, name: str, seen=()) -> list[str]:
    if name not in classes or name in seen:
        return []
    bases, fields, _ = classes[name]
    inherited = [f for base in bases for f in _fields(classes, base, (*seen, name))]
    return sorted(set(inherited) | set(fields))


def _derives(classes: dict, name: str, base: str, seen=()) -> bool:
    if name == base:
        return True
    if name not in classes or name in seen:
        return False
    return any(_derives(classes, b, base, (*seen, name)) for b in classes[name][0])


def guidellm_flags(wheel: zipfile.ZipFile) -> tuple[dict, list[str]]:
    flags: dict[str, dict] = {}
    run = ast.parse(wheel.read(GUIDELLM_RUN).decode("utf-8"), GUIDELLM_RUN)
    for node in ast.walk(run):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("click.option"):
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            kind = {"type": "flag"} if "is_flag" in keywords else {"type": "str"}
            for flag in _call_flags(node):
                flags[flag] = kind
    classes, files = _guidellm_classes(wheel)
    tree = ast.parse(wheel.read(GUIDELLM_ARGS).decode("utf-8"), GUIDELLM_ARGS)
    args = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "BenchmarkArgs")
    for node in args.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(node.value, ast.Call)):
            continue
        extra = next((k.value for k in node.value.keywords if k.arg == "json_schema_extra"), None)
        if not isinstance(extra, ast.Dict):
            continue
        alias = next((v.value for k, v in zip(extra.keys, extra.values)
                      if isinstance(k, ast.Constant) and k.value == "argument_alias" and isinstance(v, ast.Constant)), None)  # fmt: skip
        if alias is None:
            continue
        annotation = ast.unparse(node.annotation).replace(" ", "")
        multiple = annotation.startswith("list[")
        base = annotation[5:-1] if multiple else annotation
        kinds = {}
        for name, (_, _, registered) in classes.items():
            if registered and _derives(classes, name, base):
                for kind in registered:
                    kinds[kind] = _fields(classes, name)
        flags[f"--{alias.replace('_', '-')}"] = {"type": "kv", "multiple": multiple, "base": base,
                                                   "kinds": dict(sorted(kinds.items()))}  # fmt: skip
    return flags, [GUIDELLM_RUN, GUIDELLM_ARGS, *files]


READERS = {"vllm": vllm_bench_flags, "aiperf": aiperf_flags, "guidellm": guidellm_flags}


def schema_of(wheel_path: Path) -> dict:
    match = re.match(r"(vllm|aiperf|guidellm)-([^-]+)-", wheel_path.name)
    if match is None:
        raise SystemExit(f"{wheel_path}: not a vllm, aiperf or guidellm wheel (name <package>-<version>-...whl)")
    tool, version = match.groups()
    with zipfile.ZipFile(wheel_path) as wheel:
        flags, files = READERS[tool](wheel)
    digest = hashlib.sha256(wheel_path.read_bytes()).hexdigest()
    return {
        "engine": tool, "version": version, "command": COMMANDS[tool],
        "source": {"package": tool, "version": version, "distribution": wheel_path.name, "sha256": digest,
                   "index": "PyPI (pip download --no-deps)", "files": files,
                   "tool": "planner/bench/tools/bench_args.py (ast, nothing imported)"},
        "flags": dict(sorted(flags.items())),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheels", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "schemas")
    args = parser.parse_args(argv)
    for wheel in args.wheels:
        schema = schema_of(wheel)
        target = args.out / f"{schema['engine']}-{schema['version']}.json"
        target.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"{target}: {len(schema['flags'])} flags from {wheel.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
