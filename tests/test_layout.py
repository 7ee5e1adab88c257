"""The test tree as pytest sees it: packages that mirror the source, and the ``live``
marker on every test that starts a server."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.live import run_live_server
from server.config import Settings

ROOT = Path(__file__).resolve().parents[1]


def test_every_test_folder_is_a_package() -> None:
    """Each folder holding tests has an ``__init__.py``: modules of the same name in two
    folders (tests/streaming/test_joins.py, tests/server/ws/test_joins.py) stay apart."""
    folders = {p.parent for p in (ROOT / "tests").rglob("test_*.py")}
    missing = sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").exists())
    assert not missing, f"no __init__.py in {missing}"


def test_an_unmarked_test_cannot_start_a_live_server() -> None:
    """Outside a test marked ``live``, starting a server fails at once and says which
    marker is missing (so ``-m "not live"`` never starts one unnoticed)."""
    with (
        pytest.raises(AssertionError, match=r"mark it @pytest\.mark\.live"),
        run_live_server(Settings(engine="espeak")),
    ):
        pass
