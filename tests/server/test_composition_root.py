"""Settings stop at the composition root: the modules that read the settings object are
the root and the settings' own modules; every other part is handed plain values or a
finished object, and the root imports no route."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: The composition root, and the modules that declare, build, check and document Settings.
READS_SETTINGS = {
    "server/launch.py", "server/cli.py", "server/lifecycle.py", "server/app.py",
    "server/state.py", "server/config.py", "server/config_input.py",
    "server/config_checks.py", "server/config_reference.py",
}  # fmt: skip


def _imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (TYPE_CHECKING and functions too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_only_the_root_imports_the_settings_object() -> None:
    """No module of server/, streaming/ or client/ below the root imports server.config."""
    importers = sorted(
        str(path.relative_to(REPO))
        for folder in ("server", "streaming", "client")
        for path in (REPO / folder).rglob("*.py")
        if "server.config" in _imported_modules(path)
    )
    assert importers, "the scan found nothing: the layout moved"
    assert set(importers) <= READS_SETTINGS, sorted(set(importers) - READS_SETTINGS)


def test_the_root_imports_no_route() -> None:
    """state.py builds what the routes share and imports nothing of server/http or
    server/ws (the routes import it)."""
    imported = _imported_modules(REPO / "server" / "state.py")
    assert not [m for m in imported if m.startswith(("server.http", "server.ws"))], imported
