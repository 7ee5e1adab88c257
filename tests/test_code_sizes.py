"""The limits the code holds itself to (docs/architecture.md): no module of server/,
streaming/ or client/ over 500 lines, no class over 20 methods, no function over 60
lines, and no circle of imports among the project's own modules (imports made only for
type checking count too: a circle of names is a circle of ideas)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("server", "streaming", "client/chattts_client")
MODULES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] == "client":
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_module_sizes(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    assert len(source.splitlines()) <= 500, "a module over 500 lines"
    tree = ast.parse(source)
    over: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            methods = [
                n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            ]
            if len(methods) > 20:
                over.append(f"class {node.name}: {len(methods)} methods")
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno:
            lines = node.end_lineno - node.lineno + 1
            if lines > 60:
                over.append(f"function {node.name}: {lines} lines")
    assert over == []


def _graph() -> dict[str, set[str]]:
    names = {_name(p): p for p in MODULES}
    graph: dict[str, set[str]] = {name: set() for name in names}
    for name, path in names.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
            for target in targets:
                while target and target not in names:
                    target = target.rpartition(".")[0]
                # A package's face (its __init__) re-exports its modules: not a circle.
                if target and target != name and not name.startswith(target + "."):
                    graph[name].add(target)
    return graph


def _circle(graph: dict[str, set[str]]) -> list[str]:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_no_import_circle() -> None:
    assert _circle(_graph()) == []


def test_a_circle_is_seen() -> None:
    """The check itself: a made-up circle is found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert _circle(graph) == ["a", "b", "c", "a"]
