"""scripts/setup.sh installs once: which runs reinstall the project and which do not.

The script runs for real in a copy of the project's install files, with a venv whose
``python`` and ``pip`` only record how they were called (no network, seconds).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!/usr/bin/env bash
# Every check the script makes passes (torch, torchaudio and ChatTTS "import").
[[ "${1:-}" == "-" ]] && cat >/dev/null
exit 0
"""
FAKE_PIP = """#!/usr/bin/env bash
echo "$*" >> "$(dirname "$0")/../pip.log"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of what setup.sh reads, with a recording venv."""
    for name in ("scripts/setup.sh", "pyproject.toml", "client/pyproject.toml", "constraints.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, text in (("python", FAKE_PYTHON), ("pip", FAKE_PIP)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return tmp_path


def setup(project: Path, *args: str) -> list[str]:
    """Run setup.sh with ``args``; the project installs (``pip install -e .``) it made."""
    log = project / ".venv" / "pip.log"
    before = log.read_text().splitlines() if log.exists() else []
    done = subprocess.run(
        ["bash", "scripts/setup.sh", *args],
        cwd=project,
        env={**os.environ, "TTS_SKIP_APT": "1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    after = log.read_text().splitlines() if log.exists() else []
    return [line for line in after[len(before) :] if "-e ." in line]


def test_serve_after_a_test_install_installs_nothing(project: Path) -> None:
    """A --test install (the superset) satisfies a plain setup: `make serve` after `make test`."""
    assert any(".[test]" in line for line in setup(project, "--test"))
    assert setup(project) == []
    assert setup(project, "--test") == []


def test_a_test_install_after_a_plain_one_adds_the_test_tools(project: Path) -> None:
    """A plain install does not satisfy --test; once --test ran, neither reinstalls."""
    first = setup(project)
    assert first and not any(".[test]" in line for line in first)
    assert any(".[test]" in line for line in setup(project, "--test"))
    assert setup(project, "--test") == []
    assert setup(project) == []


def test_a_changed_dependency_list_reinstalls_with_the_extras_installed(project: Path) -> None:
    """Editing constraints.txt invalidates the stamp; a plain run then keeps the test tools."""
    setup(project, "--test")
    with (project / "constraints.txt").open("a") as constraints:
        constraints.write("# changed\n")
    assert any(".[test]" in line for line in setup(project))
    assert setup(project, "--test") == []
