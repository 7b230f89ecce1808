"""Shared helpers of the loaders: read files, YAML and JSON within bounds, validate with pydantic, turn failures
into one clear line.

Every input file the planner reads (scenarios, catalog YAML and CSV tables, traces, benchmark results to ingest)
goes through `open_bounded` (or `read_bounded_text`, built on it): only a regular file is opened (a FIFO would
block forever, `/dev/zero` would never end), and no more than a size bound of bytes is read, whatever the file
claims. The bounds, per kind of file:

- `MAX_YAML_BYTES` (4 MiB): scenarios, catalog YAML, sweeps: kilobytes in practice;
- `MAX_TABLE_BYTES` (256 MiB): a catalog table (`benchmarks/*.csv`, `calibration/*.csv`): kilobytes to a few MiB;
- `MAX_INGEST_BYTES` (256 MiB): a benchmark tool's result file; vLLM's `--save-detailed` runs, the largest, are
  tens of MiB;
- `MAX_TRACE_BYTES` (256 MiB, about 13 million requests of three numeric columns) for a CSV/TSV trace and
  `MAX_TRACE_JSONL_BYTES` (64 MiB) for a JSONL one: a trace is held in memory as it is analyzed or replayed,
  about 5x its size for a CSV and 10x for JSON records, so that even the largest stays within a few GiB.

JSON (`parse_json`) and YAML (`read_yaml`) are bounded in nesting depth (`MAX_JSON_DEPTH`, `MAX_YAML_DEPTH`): a
document nested 200,000 deep is refused by name, never a RecursionError.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

from planner.errors import PlannerInputError

ModelT = TypeVar("ModelT", bound=BaseModel)


def _number_from_boolean(raw, validated, where: str = "") -> str | None:
    """Where in a field's raw value a boolean became a number on validation (pydantic reads true as 1), or None."""
    if isinstance(raw, bool):
        return where if isinstance(validated, (int, float)) and not isinstance(validated, bool) else None
    if isinstance(raw, dict) and isinstance(validated, dict) and len(raw) == len(validated):
        for (key, value), (_, out) in zip(raw.items(), validated.items()):
            found = _number_from_boolean(value, out, f"{where}.{key}")
            if found is not None:
                return found
    if isinstance(raw, (list, tuple)) and isinstance(validated, (list, tuple)) and len(raw) == len(validated):
        for index, (value, out) in enumerate(zip(raw, validated)):
            found = _number_from_boolean(value, out, f"{where}[{index}]")
            if found is not None:
                return found
    return None


_NO_BOOLEAN_WITHIN = frozenset({str, int, float, type(None)})  # exact classes: bool is not one of them
_RANGE_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal", "multiple_of"})


class StrictModel(BaseModel):
    """Frozen, unknown fields rejected: a typo in a YAML key is an error, not silently ignored. Numbers are numbers:
    `true`/`false` where a number is expected is refused (pydantic would read true as 1: `network_gbit_per_s: true`
    as 1 Gb/s). Nested models check their own fields."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="wrap")
    @classmethod
    def _no_boolean_numbers(cls, value, handler, info: ValidationInfo):
        try:
            validated = handler(value)
        except ValidationError as error:  # false for a number > 0: say what is wrong with it, not its range
            if isinstance(value, bool) and all(e["type"] in _RANGE_ERRORS for e in error.errors()):
                raise ValueError("a number, not true or false (YAML booleans are not numbers)") from None
            raise
        if value.__class__ in _NO_BOOLEAN_WITHIN:  # a string or a number: no boolean hides in it (most fields)
            return validated
        where = _number_from_boolean(value, validated)
        if where is not None:
            raise ValueError("a number, not true or false (YAML booleans are not numbers)"
                             + (f"; the boolean is at {info.field_name}{where}" if where else ""))  # fmt: skip
        return validated


MAX_YAML_BYTES = 4 * 1024 * 1024  # scenarios and catalogs are kilobytes; a bigger file is a mistake or an attack
MAX_YAML_NODES = 200_000  # values after expanding aliases: refuses "billion laughs" documents
MAX_YAML_DEPTH = 64  # nesting; deeper documents would exhaust the stack
MAX_REPR = 80  # characters of a bad value quoted in a message
MAX_TABLE_BYTES = 256 * 2**20  # a catalog CSV table (benchmarks/, calibration/)
MAX_INGEST_BYTES = 256 * 2**20  # one result file of a benchmark tool (planner ingest)
MAX_TRACE_BYTES = 256 * 2**20  # a request trace as CSV/TSV
MAX_TRACE_JSONL_BYTES = 64 * 2**20  # a request trace as JSONL (records take more memory per byte than CSV cells)
MAX_JSON_DEPTH = 64  # nesting of a JSON document or of one JSONL line; the tools' own files nest under 10
_READ_CHUNK_BYTES = 2**20


def short_repr(value: Any) -> str:
    """repr() cut to MAX_REPR characters: a message quotes what was wrong, never a megabyte of it."""
    if hasattr(value, "item") and type(value).__module__ == "numpy":  # np.int64(7) reads as 7, as in the file
        value = value.item()
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


def _check_size(node, where: str, max_nodes: int = MAX_YAML_NODES) -> None:
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
        sizes[key] = min(total, max_nodes + 1)
        if total > max_nodes:
            raise PlannerInputError(where, "document", f"more than {max_nodes:,} values once its aliases (*name) are expanded")
        return sizes[key]

    if node is not None:
        expanded(node, 0)


def checked_regular_file(path: Path | str, what: str, max_bytes: int) -> int:
    """The size in bytes of `path` (symlinks followed), checked before anything opens it: a missing file, one that
    is not a regular file (a FIFO, a device such as /dev/zero, a folder, a socket) or one larger than `max_bytes`
    raises PlannerInputError naming the file and what it was taken for (`what`: 'a YAML file', 'a trace', ...)."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        raise PlannerInputError(str(path), "", f"file not found (expected {what})") from None
    except (OSError, ValueError) as exc:
        raise PlannerInputError(str(path), "", f"cannot read file: {exc}") from None
    if stat.S_ISDIR(status.st_mode):
        raise PlannerInputError(str(path), "", f"is a folder (expected {what})")
    if not stat.S_ISREG(status.st_mode):
        raise PlannerInputError(
            str(path), "", f"not a regular file (a FIFO, a device or a socket; expected {what}): only regular files are read"
        )
    if status.st_size > max_bytes:
        raise PlannerInputError(
            str(path), "", f"file is {status.st_size:,} bytes; at most {max_bytes:,} are read of {what}"
        )
    return status.st_size


class _BoundedRaw(io.RawIOBase):
    """A read-only file descriptor that refuses to yield more than `max_bytes`: a regular file that grows while read,
    or claims a size it does not have (/proc), still ends in a clear error, not an exhausted memory."""

    def __init__(self, descriptor: int, path: str, what: str, max_bytes: int):
        super().__init__()
        self._descriptor, self._path, self._what, self._max_bytes = descriptor, path, what, max_bytes
        self._read_bytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        if not len(view):
            return 0
        data = os.read(self._descriptor, min(len(view), self._max_bytes + 1 - self._read_bytes))
        self._read_bytes += len(data)
        if self._read_bytes > self._max_bytes:
            raise PlannerInputError(self._path, "", f"more than {self._max_bytes:,} bytes; at most {self._max_bytes:,} are read of {self._what}")
        view[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            os.close(self._descriptor)
        super().close()


@contextlib.contextmanager
def open_bounded(path: Path | str, what: str, max_bytes: int, encoding: str | None = "utf-8-sig",
                 newline: str | None = None) -> Iterator[IO]:  # fmt: skip
    """Open an input file for reading, the one way every loader opens one: only a regular file (checked by stat
    before it is opened, then on the open descriptor, which O_NONBLOCK keeps a FIFO from blocking), of at most
    `max_bytes` (checked before and while reading). Text (UTF-8, a byte-order mark skipped) unless `encoding` is
    None (bytes). Any problem raises PlannerInputError naming the file."""
    checked_regular_file(path, what, max_bytes)
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise PlannerInputError(str(path), "", f"cannot read file: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):  # replaced between the stat and the open
            raise PlannerInputError(str(path), "", f"not a regular file (expected {what}): only regular files are read")
    except BaseException:
        os.close(descriptor)
        raise
    raw = _BoundedRaw(descriptor, str(path), what, max_bytes)
    stream: IO = io.BufferedReader(raw, _READ_CHUNK_BYTES)
    if encoding is not None:
        stream = io.TextIOWrapper(stream, encoding=encoding, newline=newline)
    with stream:
        yield stream


def read_bounded_text(path: Path | str, what: str, max_bytes: int, encoding: str = "utf-8-sig") -> str:
    """The whole text of an input file (`open_bounded`'s checks); a file that is not UTF-8 raises PlannerInputError."""
    try:
        with open_bounded(path, what, max_bytes, encoding=encoding) as handle:
            return handle.read()
    except UnicodeDecodeError as exc:
        raise PlannerInputError(str(path), "", f"not UTF-8 text (byte {exc.start:,}; expected {what})") from None
    except OSError as exc:
        raise PlannerInputError(str(path), "", f"cannot read file: {exc.strerror or exc}") from None


def _json_depth_exceeds(document: Any, max_depth: int) -> bool:
    """Whether a parsed JSON value nests lists/objects deeper than `max_depth` (iterative: no recursion to exhaust)."""
    pending = [(document, 1)]
    while pending:
        node, depth = pending.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > max_depth:
            return True
        pending.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def parse_json(text: str, file: str, where: str = "", max_depth: int = MAX_JSON_DEPTH) -> Any:
    """json.loads bounded in nesting: a document (or JSONL line) nested deeper than `max_depth` raises
    PlannerInputError naming the file and `where` (a line), never a RecursionError. A malformed document raises
    json.JSONDecodeError, for the caller to say what the file was taken for."""
    try:
        document = json.loads(text)
    except RecursionError:
        raise PlannerInputError(file, where or "document", f"nested more than {max_depth} levels deep") from None
    # a value can nest no deeper than it has brackets: the tree is walked only when that many are there
    if text.count("[") + text.count("{") > max_depth and _json_depth_exceeds(document, max_depth):
        raise PlannerInputError(file, where or "document", f"nested more than {max_depth} levels deep")
    return document


def read_yaml(path: Path, max_bytes: int = MAX_YAML_BYTES, max_nodes: int = MAX_YAML_NODES) -> Any:
    """Parse a YAML file; a missing, oversized, malformed or ambiguous file raises PlannerInputError naming the
    line: a regular file of at most `max_bytes` (MAX_YAML_BYTES), a UTF-8 byte-order mark allowed, no duplicate
    keys, and no alias expansion or nesting beyond `max_nodes` (MAX_YAML_NODES) / MAX_YAML_DEPTH."""
    path = Path(path)
    text = read_bounded_text(path, "a YAML file", max_bytes)
    loader = None
    try:
        loader = _StrictLoader(text)  # the reader already refuses control characters
        node = loader.get_single_node()
        _check_size(node, str(path), max_nodes)
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
