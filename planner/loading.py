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


def read_yaml(path: Path) -> Any:
    """Parse a YAML file; a missing or malformed file raises PlannerInputError naming the line."""
    path = Path(path)
    if not path.is_file():
        raise PlannerInputError(str(path), "", "file not found (expected a YAML file)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlannerInputError(str(path), "", f"cannot read file: {exc}") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "document"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise PlannerInputError(str(path), where, f"malformed YAML: {problem}") from exc


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
                message += f" (got {err['input']!r})"
        raise PlannerInputError(file, where, message) from None
