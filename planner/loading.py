"""Shared helpers of the loaders: read YAML, validate with pydantic, turn failures into one clear line."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from planner.errors import PlannerInputError

ModelT = TypeVar("ModelT", bound=BaseModel)


class StrictModel(BaseModel):
    """Frozen, unknown fields rejected: a typo in a YAML key is an error, not silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


MAX_YAML_BYTES = 4 * 1024 * 1024  # scenarios and catalogs are kilobytes; a bigger file is a mistake or an attack
MAX_YAML_NODES = 200_000  # values after expanding aliases: refuses "billion laughs" documents
MAX_YAML_DEPTH = 64  # nesting; deeper documents would exhaust the stack
MAX_REPR = 80  # characters of a bad value quoted in a message


def short_repr(value: Any) -> str:
    """repr() cut to MAX_REPR characters: a message quotes what was wrong, never a megabyte of it."""
    text = repr(value)
    return text if len(text) <= MAX_REPR else text[: MAX_REPR - 3] + "..."


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """safe_load that refuses a key given twice in one mapping (the last one would silently win); on libyaml's
    parser where PyYAML has it (several times faster: the catalog is read on every command)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hashable = key in seen
            except TypeError:
                continue  # an unhashable key: construct_mapping itself says so
            if hashable:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key '{key}' (first on line {seen[key] + 1})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def _check_size(node, where: str) -> None:
    """Values after alias expansion and nesting depth of a composed document, within bounds."""
    sizes: dict[int, int] = {}

    def expanded(current, depth: int) -> int:
        if depth > MAX_YAML_DEPTH:
            raise PlannerInputError(where, "document", f"nested more than {MAX_YAML_DEPTH} levels deep")
        key = id(current)
        if key in sizes:
            return sizes[key]
        total = 1
        if isinstance(current, yaml.SequenceNode):
            total += sum(expanded(child, depth + 1) for child in current.value)
        elif isinstance(current, yaml.MappingNode):
            total += sum(expanded(k, depth + 1) + expanded(v, depth + 1) for k, v in current.value)
        sizes[key] = min(total, MAX_YAML_NODES + 1)
        if total > MAX_YAML_NODES:
            raise PlannerInputError(
                where, "document", f"more than {MAX_YAML_NODES:,} values once its aliases (*name) are expanded"
            )
        return sizes[key]

    if node is not None:
        expanded(node, 0)


def read_yaml(path: Path) -> Any:
    """Parse a YAML file; a missing, oversized, malformed or ambiguous file raises PlannerInputError naming the
    line: at most MAX_YAML_BYTES, a UTF-8 byte-order mark allowed, no duplicate keys, and no alias expansion or
    nesting beyond MAX_YAML_NODES / MAX_YAML_DEPTH."""
    path = Path(path)
    if not path.is_file():
        raise PlannerInputError(str(path), "", "file not found (expected a YAML file)")
    try:
        size = path.stat().st_size
        if size > MAX_YAML_BYTES:
            raise PlannerInputError(str(path), "", f"file is {size:,} bytes; at most {MAX_YAML_BYTES:,} are read")
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlannerInputError(str(path), "", f"cannot read file: {exc}") from exc
    loader = None
    try:
        loader = _StrictLoader(text)  # the reader already refuses control characters
        node = loader.get_single_node()
        _check_size(node, str(path))
        return loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "document"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise PlannerInputError(str(path), where, f"malformed YAML: {problem}") from exc
    except RecursionError:
        raise PlannerInputError(str(path), "document", f"nested more than {MAX_YAML_DEPTH} levels deep") from None
    finally:
        if loader is not None:
            loader.dispose()


def field_path(loc: tuple[Any, ...], data: Any) -> str:
    """('workloads', 0, 'peak_rps') -> 'workloads[0].peak_rps', naming list items by their `name`/`id`."""
    parts: list[str] = []
    node = data
    for key in loc:
        if isinstance(key, int):
            label = str(key)
            if isinstance(node, list) and 0 <= key < len(node) and isinstance(node[key], dict):
                named = node[key].get("name", node[key].get("id"))
                if isinstance(named, str):
                    label = f"{key}:{named}"
            parts.append(f"[{label}]")
            node = node[key] if isinstance(node, list) and 0 <= key < len(node) else None
        else:
            parts.append(("." if parts else "") + str(key))
            node = node.get(key) if isinstance(node, dict) else None
    return "".join(parts)


def _allowed_fields(model_cls: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names allowed at the parent of `loc`, found by walking the pydantic model tree."""
    current: Any = model_cls
    for key in loc[:-1]:
        if isinstance(key, int):
            continue
        fields = getattr(current, "model_fields", None)
        if not fields or key not in fields:
            return []
        current = _model_in_annotation(fields[key].annotation)
        if current is None:
            return []
    fields = getattr(current, "model_fields", None)
    return sorted(fields) if fields else []


def _model_in_annotation(annotation: Any) -> Any:
    """The BaseModel class inside list[X] / X | None / dict[str, X], if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in_annotation(arg)
        if found is not None:
            return found
    return None


def validate_model(model_cls: type[ModelT], data: Any, file: str, context: dict | None = None) -> ModelT:
    """Validate `data` into `model_cls`; the first error becomes a PlannerInputError (file, field, allowed)."""
    if data is None:
        raise PlannerInputError(file, "", "file is empty (expected a YAML mapping)")
    if not isinstance(data, dict):
        raise PlannerInputError(file, "", f"expected a YAML mapping at the top level, got {type(data).__name__}")
    try:
        return model_cls.model_validate(data, context=context)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = tuple(err.get("loc", ()))
        where = field_path(loc, data)
        if err["type"] == "extra_forbidden":
            allowed = _allowed_fields(model_cls, loc)
            from planner.errors import did_you_mean

            message = f"unknown field '{loc[-1]}'.{did_you_mean(str(loc[-1]), allowed)}"
            if allowed:
                message += f" Allowed fields here: {', '.join(allowed)}"
        elif err["type"] == "missing":
            message = "required field is missing"
        else:
            message = err["msg"]
            if message.startswith("Value error, "):
                message = message[len("Value error, "):]
            if err["type"] not in ("value_error", "assertion_error") and "input" in err:
                message += f" (got {short_repr(err['input'])})"
        raise PlannerInputError(file, where, message) from None
