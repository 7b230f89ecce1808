"""The house in layers (docs/architecture.md): no module of planner/ imports another that imports it back, directly
or around a loop, at the level of files and at the level of packages (a package importing a package that imports it
is an import up a layer); and no module is past 600 lines. Every import counts: at the top, inside a function, or
under TYPE_CHECKING."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from helpers import ROOT

PLANNER = ROOT / "planner"
MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in PLANNER.rglob("*.py")}


def _imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The planner modules a file imports (`from planner.x import y` names y where y is a module of its own)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            if name in known:
                found.add(name)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each a loop of imports."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def _file_graph() -> dict[str, set[str]]:
    known = _modules()
    graph = {}
    for name, path in known.items():
        # a package's own __init__ is its face: a submodule importing its package's face is not a loop of files
        graph[name] = {target for target in _imports(path, known) if target != name and not name.startswith(target + ".")}
    return graph


def _unit(module: str) -> str:
    """The room a module belongs to: planner/x.py, or the package planner/x/."""
    return ".".join(module.split(".")[:2])


def test_no_file_of_planner_imports_one_that_imports_it_back():
    assert _cycles(_file_graph()) == []


def test_no_package_imports_a_package_that_imports_it_back():
    units: dict[str, set[str]] = defaultdict(set)
    for source, targets in _file_graph().items():
        units[_unit(source)] |= {_unit(t) for t in targets if _unit(t) != _unit(source)}
    assert _cycles(units) == []


def test_the_import_checks_see_a_loop_when_there_is_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_planner_is_past_600_lines():
    long = {str(path.relative_to(ROOT)): n for path in PLANNER.rglob("*.py")
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}  # fmt: skip
    assert long == {}
