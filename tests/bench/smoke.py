"""Running a benchmark as a user would (its smoke mode, in a fresh interpreter) and
reading the figures of its final JSON line."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_bench(script: str, *args: str, timeout_s: float = 600) -> dict[str, Any]:
    """Run ``bench/<script> <args>`` from the repository root; its final JSON line,
    parsed. The run must exit 0 and end with one JSON object."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-3000:]}"
    lines = done.stdout.strip().splitlines()
    assert lines, f"no output: {done.stderr[-3000:]}"
    report = json.loads(lines[-1])
    assert isinstance(report, dict), lines[-1]
    return report


def figure(report: Mapping[str, Any], key: str) -> float:
    """``report[key]`` (a dotted key descends: ``"a.b"`` is ``report["a"]["b"]``), which
    must be a finite number (a measured figure, not None)."""
    value: Any = report
    for part in key.split("."):
        value = value[part]
    assert isinstance(value, int | float) and not isinstance(value, bool), f"{key}: {value!r}"
    assert math.isfinite(value), f"{key}: {value!r}"
    return float(value)
