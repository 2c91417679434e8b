"""The import graph of relaxops has no cycle: no module imports one that imports it back, directly or through
others, at module level or inside a function (a function-level import only hides a cycle)."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "python" / "relaxops"


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = ("relaxops",) + path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _package(name: str, path: pathlib.Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def import_graph() -> dict[str, set[str]]:
    """module -> the relaxops modules it imports (a name imported from a package counts as the package unless it
    is a submodule; a package's parents, which Python imports first, are not edges)."""
    modules = _modules()
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        package = _package(name, path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{base}.{node.module}" if node.module else base
                else:
                    base = node.module or ""
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in modules else base)
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(u: str) -> list[str] | None:
        state[u] = 1
        path.append(u)
        for v in sorted(graph[u]):
            if state.get(v) == 1:
                return path[path.index(v) :] + [v]
            if v not in state and (cycle := visit(v)):
                return cycle
        path.pop()
        state[u] = 2
        return None

    for u in sorted(graph):
        if u not in state and (cycle := visit(u)):
            return cycle
    return None


def test_graph_sees_relative_and_function_level_imports():
    graph = import_graph()
    assert "relaxops._backend" in graph["relaxops.sortnet.functional"]  # from .. import _backend
    assert "relaxops.sortnet.ops" in graph["relaxops.sortnet.functional"]  # from . import ops
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
