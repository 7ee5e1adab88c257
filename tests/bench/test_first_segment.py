"""bench/first_segment.py runs (its smoke mode, as a subprocess) and reports what it measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_smoke_run_reports_ttfa_for_every_opener(tiny_checkpoint: Path) -> None:
    """The smoke run measures both engines and both values; short openers cut only at 2."""
    done = subprocess.run(
        [sys.executable, "bench/first_segment.py", "--smoke", "--checkpoint", str(tiny_checkpoint)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["bench"] == "first_segment"
    openers = report["openers"]
    for engine in ("espeak", "chattts"):
        figures = report[engine]
        assert set(figures["ttfa_ms"]) == {"2", "6"}
        for value in ("2", "6"):
            assert set(figures["ttfa_ms"][value]) == set(openers)
            assert all(ms > 0 for ms in figures["ttfa_ms"][value].values())
        first = figures["first_segment"]
        assert first["2"]["hmm"] == "嗯，"
        assert first["2"]["okay"] == "好的，"
        assert first["6"]["hmm"] == openers["hmm"]  # 嗯， is too short: the whole sentence
        assert first["6"]["yes"] == first["2"]["yes"] == "是的。"
