"""The text front-end's home (streaming/text/): one module a stage, each small enough
to read, every function short, and pure (stdlib only: no asyncio, torch or server)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "streaming" / "text"
MODULES = sorted(PACKAGE.glob("*.py"))
ALLOWED_IMPORTS = {
    "__future__", "collections", "dataclasses", "decimal", "difflib", "enum", "functools",
    "re", "typing", "unicodedata", "streaming",
}  # fmt: skip


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_module_is_at_most_500_lines(path: Path) -> None:
    """No module of the front-end is over 500 lines."""
    assert len(path.read_text(encoding="utf-8").splitlines()) <= 500


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_functions_are_at_most_60_lines(path: Path) -> None:
    """No function or method of the front-end is over 60 lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    long = [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > 60
    ]
    assert long == []


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_module_is_pure(path: Path) -> None:
    """The front-end imports only the standard library's pure parts and streaming/."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported <= ALLOWED_IMPORTS, imported - ALLOWED_IMPORTS
