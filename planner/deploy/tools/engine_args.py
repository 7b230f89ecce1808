"""Regenerate an engine version's argument schema (planner/deploy/schemas/<engine>-<version>.json) from its wheel.

    pip download vllm==0.12.0 --no-deps -d /tmp/x
    python -m planner.deploy.tools.engine_args /tmp/x/vllm-0.12.0-*.whl --out planner/deploy/schemas/
    pip download ai-dynamo==1.6.1 --no-deps -d /tmp/x   # dynamo.vllm-1.6.1.json and dynamo.sglang-1.6.1.json

The wheel is read as a zip, never installed nor imported: its argument definitions are parsed with `ast`.
- vLLM (`vllm serve`): every `add_argument("--flag", ...)` of vllm/engine/arg_utils.py and
  vllm/entrypoints/openai/cli_args.py, the frontend's generated `--<field>` for each field of `FrontendArgs`;
  an argument built from `**get_kwargs(SomeConfig)["field"]` takes its type from the field's annotation in
  vllm/config/*.py (vLLM's own rule: bool -> --flag/--no-flag, Literal -> choices, int, float, dict -> JSON, str).
- SGLang (`python -m sglang.launch_server`): every `add_argument` of sglang/srt/server_args.py, with its
  `type`, `choices` (a module-level list resolved by name) and `action`.
- NVIDIA Dynamo's workers (`python3 -m dynamo.vllm`, `dynamo.sglang`, `dynamo.trtllm`, wheel `ai-dynamo`): Dynamo's
  own flags, the worker's `add_argument(g, flag_name="--x", ...)` / `add_negatable_bool_argument(...)` calls of
  dynamo/common/configuration/groups/runtime_args.py, .../frontend_decoding_args.py and dynamo/<backend>/backend_args.py,
  written as dynamo.<backend>-<version>.json; the engine flags the worker passes on are checked against the engine's
  own schema. For trtllm, `choices=[NAME, *[m.value for m in SomeEnum if m != SomeEnum.X]]` is resolved from the
  module's string constants and dynamo/trtllm/constants.py's Enum classes. The TensorRT-LLM LLM-API keys a
  dynamo.trtllm worker's engine config may hold are those NVIDIA's own files in the wheel set
  (tools/trtllm_keys.py, dynamo.trtllm_engine_keys-<version>.json). The wheel also ships the DynamoGraphDeployment
  templates the dynamo target follows (dynamo/profiler/templates/dgd/<backend>/{agg,disagg}.yaml).
- TensorRT-LLM (`trtllm-serve`): not readable here. PyPI holds only wheel-stub source distributions of
  tensorrt-llm (pyproject `build-backend = "wheel_stub.buildapi"`, no source) and the wheels are on NVIDIA's own
  index, which this project cannot reach (docs/deploy.md).
Types in the schema: flag (no value), bool (vLLM's --x / --no-x, no value), int, float, str, json, choice (with
`choices`; None where the list is built at run time), list (several values).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
import zipfile
from pathlib import Path

VLLM_FILES = ("vllm/engine/arg_utils.py", "vllm/entrypoints/openai/cli_args.py")
VLLM_TYPE_FILES = ("vllm/model_executor/layers/quantization/__init__.py",)
SGLANG_FILES = ("sglang/srt/server_args.py",)
DYNAMO_COMMON_FILES = ("dynamo/common/configuration/groups/runtime_args.py",
                       "dynamo/common/configuration/groups/frontend_decoding_args.py")  # fmt: skip
DYNAMO_BACKENDS = ("vllm", "sglang", "trtllm")
# modules whose string constants and Enum classes a backend's `choices=[...]` names (read for that backend only)
DYNAMO_CHOICE_FILES = {"trtllm": "dynamo/trtllm/constants.py"}


def _literal_strings(node) -> list | None:
    """The constants of a list/tuple/set literal, or of Literal[...]; None otherwise."""
    if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("Literal"):
        node = node.slice
        items = node.elts if isinstance(node, ast.Tuple) else [node]
        return [i.value for i in items if isinstance(i, ast.Constant)]
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        values = [i.value for i in node.elts if isinstance(i, ast.Constant)]
        return values if len(values) == len(node.elts) else None
    return None


class Sources:
    """The parsed modules of a wheel: module-level constants (lists, Literal aliases) and classes' field annotations."""

    def __init__(self, wheel: zipfile.ZipFile, names: list[str]):
        self.trees = {}
        self.constants: dict[str, list] = {}
        self.fields: dict[str, dict[str, ast.AST]] = {}
        for name in names:
            tree = ast.parse(wheel.read(name).decode("utf-8"), name)
            self.trees[name] = tree
            for node in tree.body:
                target = value = None
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    target, value = node.targets[0].id, node.value
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                    target, value = node.target.id, node.value
                elif type(node).__name__ == "TypeAlias":  # Python 3.12+ `type X = ...`
                    target, value = node.name.id, node.value
                if target is not None:
                    strings = _literal_strings(value)
                    if strings is not None:
                        self.constants[target] = strings
                    elif isinstance(value, ast.BinOp | ast.Subscript | ast.Name):
                        self.constants.setdefault(target, value)  # an alias of a union, resolved on use
                if isinstance(node, ast.ClassDef):
                    self.fields[node.name] = {
                        item.target.id: item.annotation for item in node.body
                        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                    }  # fmt: skip

    def annotation_type(self, annotation, depth: int = 0) -> dict:
        """vLLM's rule (arg_utils._compute_kwargs) on an annotation: bool, Literal choices, list, int, float, json, str."""
        parts = self._union(annotation, depth)
        names = [p for p in parts if not isinstance(p, list)]
        choices = [c for p in parts if isinstance(p, list) for c in p]
        if "bool" in names:
            return {"type": "bool"}
        if choices and not ({"str"} & set(names)):
            return {"type": "choice", "choices": sorted(set(map(str, choices)))}
        if any(n in ("list", "tuple", "set") for n in names):
            return {"type": "list"}
        for name in ("int", "float"):
            if name in names:
                return {"type": name}
        if "dict" in names or any(n[:1].isupper() for n in names if n not in ("None",)) and "str" not in names:
            return {"type": "json"}
        return {"type": "str"}

    def _union(self, node, depth: int) -> list:
        if depth > 8 or node is None:
            return []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self._union(node.left, depth + 1) + self._union(node.right, depth + 1)
        strings = _literal_strings(node)
        if strings is not None:
            return [strings]
        if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a quoted annotation
            try:
                return self._union(ast.parse(node.value, mode="eval").body, depth + 1)
            except SyntaxError:
                return ["str"]
        if isinstance(node, ast.Subscript):
            head = ast.unparse(node.value).split(".")[-1]
            if head in ("Optional", "Union", "Annotated", "SkipValidation", "InitVar", "ClassVar"):
                items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
                whole = head in ("Optional", "Union")
                return [p for i in (items if whole else items[:1]) for p in self._union(i, depth + 1)]
            return [head.lower() if head in ("List", "Dict", "Tuple", "Set") else head]
        if isinstance(node, ast.Name | ast.Attribute):
            name = ast.unparse(node).split(".")[-1]
            if name in self.constants:
                value = self.constants[name]
                return [value] if isinstance(value, list) else self._union(value, depth + 1)
            return [name]
        return []


def _call_flags(call: ast.Call) -> list[str]:
    return [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--")]


def _explicit_type(call: ast.Call, sources: Sources) -> dict | None:
    """The type an add_argument call states itself (type=, choices=, action=, nargs=); None when it states none."""
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    action = keywords.get("action")
    if action is not None:
        text = ast.unparse(action)
        if "store_true" in text or "store_false" in text or "store_const" in text:
            return {"type": "flag"}
        if "BooleanOptionalAction" in text:
            return {"type": "bool"}
    choices = keywords.get("choices")
    if choices is not None:
        values = _literal_strings(choices)
        if values is None and isinstance(choices, ast.Name):
            values = sources.constants.get(choices.id) if isinstance(sources.constants.get(choices.id), list) else None
        return {"type": "choice", "choices": None if values is None else sorted(set(map(str, values)))}
    if "nargs" in keywords and ast.unparse(keywords["nargs"]) not in ("'?'", '"?"'):
        return {"type": "list"}
    kind = keywords.get("type")
    if kind is not None:
        text = ast.unparse(kind)
        for name in ("int", "float"):
            if text == name:
                return {"type": name}
        return {"type": "json" if "json" in text else "str"}
    return None


def _kwargs_classes(tree: ast.AST) -> dict[str, str]:
    """`model_kwargs = get_kwargs(ModelConfig)` -> {'model_kwargs': 'ModelConfig'}."""
    found = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call) and ast.unparse(node.value.func).endswith("get_kwargs")
                and node.value.args):  # fmt: skip
            found[node.targets[0].id] = ast.unparse(node.value.args[0]).split(".")[-1]
    return found


def vllm_flags(wheel: zipfile.ZipFile) -> tuple[dict, list[str]]:
    names = wheel.namelist()
    configs = sorted(n for n in names if re.fullmatch(r"vllm/config/[a-z_]+\.py", n))
    files = [*VLLM_FILES, *configs, *(n for n in VLLM_TYPE_FILES if n in names)]
    sources = Sources(wheel, files)
    flags: dict[str, dict] = {}
    for name in VLLM_FILES:
        tree = sources.trees[name]
        classes = _kwargs_classes(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"):
                continue
            entry = _explicit_type(node, sources)
            if entry is None:
                splats = [k.value for k in node.keywords if k.arg is None]
                for value in splats:  # **{**scheduler_kwargs["max_num_seqs"], ...}
                    if isinstance(value, ast.Dict):
                        splats += [v for k, v in zip(value.keys, value.values, strict=True) if k is None]
                for value in splats:  # **model_kwargs["max_model_len"]
                    if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name):
                        cls = classes.get(value.value.id)
                        field = value.slice.value if isinstance(value.slice, ast.Constant) else None
                        annotation = sources.fields.get(cls, {}).get(field)
                        if annotation is None:  # an EngineArgs field (get_kwargs(EngineArgs))
                            annotation = sources.fields.get("EngineArgs", {}).get(field)
                        entry = sources.annotation_type(annotation) if annotation is not None else {"type": "str"}
            entry = entry or {"type": "str"}
            for flag in _call_flags(node):
                _add(flags, flag, entry)
    for field, annotation in sources.fields.get("FrontendArgs", {}).items():  # the frontend's loop over its fields
        entry = sources.annotation_type(annotation)
        if field in ("allowed_origins", "allowed_methods", "allowed_headers"):
            entry = {"type": "json"}
        if field == "middleware":
            entry = {"type": "str"}
        _add(flags, "--" + field.replace("_", "-"), entry)
    return flags, files


def sglang_flags(wheel: zipfile.ZipFile) -> tuple[dict, list[str]]:
    sources = Sources(wheel, list(SGLANG_FILES))
    flags: dict[str, dict] = {}
    for node in ast.walk(sources.trees[SGLANG_FILES[0]]):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            entry = _explicit_type(node, sources) or {"type": "str"}
            for flag in _call_flags(node):
                _add(flags, flag, entry)
    return flags, list(SGLANG_FILES)


def _dynamo_entry(call: ast.Call, sources: Sources) -> dict:
    """The type of Dynamo's `add_argument(g, flag_name=..., arg_type=..., choices=...)` (str by default, as its
    `arg_type=str`); `add_negatable_bool_argument` gives --x / --no-x."""
    if ast.unparse(call.func).endswith("add_negatable_bool_argument"):
        return {"type": "bool"}
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    explicit = _explicit_type(ast.Call(call.func, [], [k for k in call.keywords if k.arg != "type"]), sources)
    if explicit is not None:
        return explicit
    kind = keywords.get("arg_type")
    text = ast.unparse(kind) if kind is not None else "str"
    if text == "None":
        return {"type": "flag"}
    return {"type": text} if text in ("int", "float") else {"type": "json" if "json" in text else "str"}


def _module_strings_and_enums(trees) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """Module-level `NAME = "text"` constants and `class X(Enum): MEMBER = "value"` classes of parsed modules."""
    strings: dict[str, str] = {}
    enums: dict[str, dict[str, str]] = {}
    for tree in trees:
        for node in tree.body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):  # fmt: skip
                strings[node.targets[0].id] = node.value.value
            if isinstance(node, ast.ClassDef) and any(ast.unparse(b).endswith("Enum") for b in node.bases):
                enums[node.name] = {
                    item.targets[0].id: item.value.value for item in node.body
                    if isinstance(item, ast.Assign) and len(item.targets) == 1 and isinstance(item.targets[0], ast.Name)
                    and isinstance(item.value, ast.Constant) and isinstance(item.value.value, str)
                }  # fmt: skip
    return strings, enums


def _enum_values(node: ast.ListComp, enums: dict[str, dict[str, str]]) -> list[str] | None:
    """`[m.value for m in SomeEnum]`, optionally `if m != SomeEnum.MEMBER`: the enum's values; None otherwise."""
    if len(node.generators) != 1 or not isinstance(node.generators[0].iter, ast.Name):
        return None
    generator = node.generators[0]
    members = enums.get(generator.iter.id)
    variable = generator.target.id if isinstance(generator.target, ast.Name) else None
    if members is None or ast.unparse(node.elt) != f"{variable}.value":
        return None
    excluded = set()
    for condition in generator.ifs:
        text = ast.unparse(condition)
        prefix = f"{variable} != {generator.iter.id}."
        if not text.startswith(prefix) or text[len(prefix):] not in members:
            return None
        excluded.add(text[len(prefix):])
    return [value for member, value in members.items() if member not in excluded]


def _resolved_choices(node, strings: dict[str, str], enums: dict[str, dict[str, str]]) -> list[str] | None:
    """A `choices=` list of constants, module string constants and enum comprehensions; None if any part is not."""
    if isinstance(node, ast.ListComp):
        return _enum_values(node, enums)
    if not isinstance(node, ast.List | ast.Tuple):
        return None
    values: list[str] = []
    for item in node.elts:
        part = None
        if isinstance(item, ast.Constant) and isinstance(item.value, str):
            part = [item.value]
        elif isinstance(item, ast.Name) and item.id in strings:
            part = [strings[item.id]]
        elif isinstance(item, ast.Starred) and isinstance(item.value, ast.ListComp):
            part = _enum_values(item.value, enums)
        if part is None:
            return None
        values += part
    return values


def dynamo_flags(wheel: zipfile.ZipFile, backend: str) -> tuple[dict, list[str]]:
    files = [*DYNAMO_COMMON_FILES, f"dynamo/{backend}/backend_args.py"]
    choice_file = DYNAMO_CHOICE_FILES.get(backend)
    if choice_file is not None:
        files.append(choice_file)
    sources = Sources(wheel, files)
    strings, enums = _module_strings_and_enums(sources.trees.values()) if choice_file else ({}, {})
    flags: dict[str, dict] = {}
    for name in files:
        for node in ast.walk(sources.trees[name]):
            if not isinstance(node, ast.Call):
                continue
            function = ast.unparse(node.func).split(".")[-1]
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            if function in ("add_argument", "add_negatable_bool_argument") and "flag_name" in keywords:
                entry = _dynamo_entry(node, sources)
                if choice_file and entry.get("type") == "choice" and entry.get("choices") is None:
                    values = _resolved_choices(keywords["choices"], strings, enums)
                    entry = {"type": "choice", "choices": None if values is None else sorted(set(values))}
                names = [keywords["flag_name"], keywords.get("obsolete_flag")]
                for flag in (n.value for n in names if isinstance(n, ast.Constant) and isinstance(n.value, str)):
                    _add(flags, flag, entry)
            elif function == "add_argument" and isinstance(node.func, ast.Attribute):  # parser.add_argument("--x")
                entry = _explicit_type(node, sources) or {"type": "str"}
                for flag in _call_flags(node):
                    _add(flags, flag, entry)
    return flags, files


def _add(flags: dict, flag: str, entry: dict) -> None:
    flags[flag] = entry
    if entry["type"] == "bool" and not flag.startswith("--no-"):
        flags["--no-" + flag[2:]] = {"type": "bool"}


def schema_of(wheel_path: Path, backend: str | None = None) -> dict:
    match = re.match(r"(vllm|sglang|ai_dynamo)-([^-]+)-", wheel_path.name)
    if match is None:
        raise SystemExit(f"{wheel_path}: not a vllm, sglang or ai_dynamo wheel (name <package>-<version>-...whl)")
    engine, version = match.groups()
    if engine == "ai_dynamo":
        return _dynamo_schema(wheel_path, version, backend or "vllm")
    with zipfile.ZipFile(wheel_path) as wheel:
        flags, files = (vllm_flags if engine == "vllm" else sglang_flags)(wheel)
    digest = hashlib.sha256(wheel_path.read_bytes()).hexdigest()
    command = "vllm serve MODEL" if engine == "vllm" else "python -m sglang.launch_server --model-path MODEL"
    return {
        "engine": engine, "version": version, "command": command,
        "source": {"package": engine, "version": version, "distribution": wheel_path.name, "sha256": digest,
                   "index": "PyPI (pip download --no-deps)", "files": files,
                   "tool": "planner/deploy/tools/engine_args.py (ast, nothing imported)"},
        "flags": dict(sorted(flags.items())),
    }  # fmt: skip


def _dynamo_schema(wheel_path: Path, version: str, backend: str) -> dict:
    with zipfile.ZipFile(wheel_path) as wheel:
        flags, files = dynamo_flags(wheel, backend)
    digest = hashlib.sha256(wheel_path.read_bytes()).hexdigest()
    return {
        "engine": f"dynamo.{backend}", "version": version,
        "command": f"python3 -m dynamo.{backend} (Dynamo's own flags; the {backend} flags it passes on are in the {backend} schema)",
        "source": {"package": "ai-dynamo", "version": version, "distribution": wheel_path.name, "sha256": digest,
                   "index": "PyPI (pip download --no-deps)", "files": files,
                   "tool": "planner/deploy/tools/engine_args.py (ast, nothing imported)"},
        "flags": dict(sorted(flags.items())),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheels", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "schemas")
    args = parser.parse_args(argv)
    for wheel in args.wheels:
        backends = DYNAMO_BACKENDS if wheel.name.startswith("ai_dynamo-") else (None,)
        for backend in backends:
            schema = schema_of(wheel, backend)
            target = args.out / f"{schema['engine']}-{schema['version']}.json"
            target.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n", encoding="utf-8")
            print(f"{target}: {len(schema['flags'])} flags", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
