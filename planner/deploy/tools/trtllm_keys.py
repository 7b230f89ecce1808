"""The TensorRT-LLM LLM-API keys NVIDIA's own files in the ai-dynamo wheel set, shipped as
planner/deploy/schemas/dynamo.trtllm_engine_keys-<version>.json: the check of the engine config a dynamo.trtllm
worker is given (`--extra-engine-args`).

    pip download ai-dynamo==1.6.1 --no-deps -d /tmp/x
    python -m planner.deploy.tools.trtllm_keys /tmp/x/ai_dynamo-1.6.1-*.whl --out planner/deploy/schemas/

TensorRT-LLM's own argument list (tensorrt_llm/llmapi/llm_args.py) cannot be read (PyPI holds wheel stubs only,
schema.TRTLLM_NOT_BUILT), and the engine-config YAML files Dynamo's templates point to
(examples/backends/trtllm/engine_configs/...) are not in the wheel. So the keys are those the wheel's Python sets,
read with `ast` (nothing imported) from FILES: dict literals assigned to `arg_map` or passed to
`_merge_overrides_into_args` / `json.dumps` (nested dicts flattened to dotted keys, `a.b`), subscript assignments
`arg_map["k"] = ...` / `override["k"] = ...`, and `KvCacheConfig(k=...)` / `kv_cache_config.k = ...` as
`kv_cache_config.k`. Each key keeps the files that set it and the constant values they set; `computed` where a file
sets it from an expression.
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

FILES = {
    "dynamo/trtllm/workers/llm_worker.py":
        "the worker's engine arguments (arg_map), over which --extra-engine-args and --override-engine-args merge",
    "dynamo/profiler/utils/config_modifiers/trtllm.py":
        "the profiler's overrides of generated TensorRT-LLM workers (--override-engine-args / --trtllm.<key>)",
    "dynamo/profiler/tests/unit/test_trtllm_override_merge.py":
        "the profiler's unit test of those overrides: a disaggregated worker's engine config",
}  # fmt: skip
_DICT_TARGETS = ("arg_map",)
_DICT_CALLS = ("_merge_overrides_into_args", "dumps")
_SUBSCRIPT_TARGETS = ("arg_map", "override")
_KV_CLASS, _KV_NAME = "KvCacheConfig", "kv_cache_config"


def _record(keys: dict, key: str, value, name: str) -> None:
    entry = keys.setdefault(key, {"files": [], "values": [], "computed": False})
    if name not in entry["files"]:
        entry["files"].append(name)
    if isinstance(value, ast.Constant) and isinstance(value.value, bool | int | float | str | type(None)):
        if value.value not in entry["values"] or type(value.value) not in {type(v) for v in entry["values"]}:
            entry["values"].append(value.value)
    else:
        entry["computed"] = True


def _flatten(node: ast.Dict, prefix: str, keys: dict, name: str) -> None:
    for key, value in zip(node.keys, node.values, strict=True):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            continue
        path = f"{prefix}{key.value}"
        if isinstance(value, ast.Dict) and value.keys:
            _flatten(value, path + ".", keys, name)
        else:
            _record(keys, path, value, name)


def _string_keyed(node) -> bool:
    return isinstance(node, ast.Dict) and bool(node.keys) and all(
        isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.keys)  # fmt: skip


def keys_of(source: str, name: str, keys: dict) -> None:
    """Add the LLM-API keys `source` (the file `name`) sets to `keys`."""
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id in _DICT_TARGETS and _string_keyed(node.value):
                _flatten(node.value, "", keys, name)
            elif (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
                  and isinstance(target.slice, ast.Constant) and isinstance(target.slice.value, str)):  # fmt: skip
                if target.value.id in _SUBSCRIPT_TARGETS:
                    _record(keys, target.slice.value, node.value, name)
            elif (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                  and target.value.id == _KV_NAME):  # fmt: skip
                _record(keys, f"{_KV_NAME}.{target.attr}", node.value, name)
        elif isinstance(node, ast.Call):
            function = ast.unparse(node.func).split(".")[-1]
            if function in _DICT_CALLS:
                for argument in node.args:
                    if _string_keyed(argument):
                        _flatten(argument, "", keys, name)
            elif function == _KV_CLASS:
                for keyword in node.keywords:
                    if keyword.arg:
                        _record(keys, f"{_KV_NAME}.{keyword.arg}", keyword.value, name)


def engine_keys(wheel_path: Path) -> dict:
    match = re.match(r"ai_dynamo-([^-]+)-", wheel_path.name)
    if match is None:
        raise SystemExit(f"{wheel_path}: not an ai_dynamo wheel (name ai_dynamo-<version>-...whl)")
    keys: dict[str, dict] = {}
    with zipfile.ZipFile(wheel_path) as wheel:
        for name in FILES:
            keys_of(wheel.read(name).decode("utf-8"), name, keys)
    for entry in keys.values():
        entry["values"] = sorted(entry["values"], key=lambda v: (type(v).__name__, str(v)))
    return {
        "engine": "dynamo.trtllm engine config (TensorRT-LLM LLM-API keys)", "version": match.group(1),
        "source": {"package": "ai-dynamo", "version": match.group(1), "distribution": wheel_path.name,
                   "sha256": hashlib.sha256(wheel_path.read_bytes()).hexdigest(),
                   "index": "PyPI (pip download --no-deps)", "files": dict(FILES),
                   "not_in_wheel": "the engine-config YAML files of Dynamo's templates "
                                   "(examples/backends/trtllm/engine_configs/...)",
                   "tool": "planner/deploy/tools/trtllm_keys.py (ast, nothing imported)"},
        "keys": dict(sorted(keys.items())),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheel", type=Path)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "schemas")
    args = parser.parse_args(argv)
    document = engine_keys(args.wheel)
    target = args.out / f"dynamo.trtllm_engine_keys-{document['version']}.json"
    target.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{target}: {len(document['keys'])} keys", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
