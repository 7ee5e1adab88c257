"""Running a benchmark as a user would (its smoke mode, in a fresh interpreter) and
reading the figures of its final JSON line."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


#: For ``run_bench(env=...)``: torch and numpy on one thread. On a few shared cores a
#: second one mostly spins: a smoke run then costs several times the CPU of its work.
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def run_bench(
    script: str, *args: str, timeout_s: float = 600, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Run ``bench/<script> <args>`` from the repository root (``env`` added to this
    process's environment); its final JSON line, parsed. The run must exit 0 and end
    with one JSON object."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
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


def bench_module(script: str) -> ModuleType:
    """``bench/<script>`` imported as a module (to test its functions directly)."""
    spec = importlib.util.spec_from_file_location(Path(script).stem, ROOT / "bench" / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def figure(report: Mapping[str, Any], key: str) -> float:
    """``report[key]`` (a dotted key descends: ``"a.b"`` is ``report["a"]["b"]``), which
    must be a finite number (a measured figure, not None)."""
    value: Any = report
    for part in key.split("."):
        value = value[part]
    assert isinstance(value, int | float) and not isinstance(value, bool), f"{key}: {value!r}"
    assert math.isfinite(value), f"{key}: {value!r}"
    return float(value)


def assert_all_finite(report: Any, where: str = "report") -> None:
    """Every number anywhere in ``report`` is finite (json.loads reads NaN and Infinity)."""
    if isinstance(report, dict):
        for key, value in report.items():
            assert_all_finite(value, f"{where}.{key}")
    elif isinstance(report, list):
        for index, value in enumerate(report):
            assert_all_finite(value, f"{where}[{index}]")
    elif isinstance(report, float):
        assert math.isfinite(report), f"{where}: {report!r}"
