"""The interpreter lock's switch interval (server.gil): set before the server serves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from server.config import Settings
from server.gil import GilSettings
from tests.server.test_heap import _serve_and_read_log


def test_the_switch_interval_follows_the_setting() -> None:
    """In a fresh interpreter (the interval is process-wide): Python's 5 ms before, the
    setting's after; 0 leaves it as it is."""
    script = """
import json, sys
from server.gil import GilSettings, set_switch_interval
before = sys.getswitchinterval()
untouched = set_switch_interval(GilSettings(gil_switch_interval_ms=0))
kept = sys.getswitchinterval()
done = set_switch_interval(GilSettings(gil_switch_interval_ms=2.5))
print(json.dumps([before, untouched, kept, done, sys.getswitchinterval()]))
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    before, untouched, kept, done, after = json.loads(run.stdout)
    assert before == pytest.approx(0.005)
    assert (untouched, kept) == (False, before)
    assert (done, after) == (True, pytest.approx(0.0025))
    assert Settings().gil.gil_switch_interval_ms == 1.0
    assert GilSettings(gil_switch_interval_ms=0.1).gil_switch_interval_ms == 0.1  # the least


@pytest.mark.parametrize("ms", [-1.0, 101.0, 0.05, 1e-9])
def test_an_interval_out_of_bounds_is_refused(ms: float) -> None:
    with pytest.raises(ValueError, match="gil_switch_interval_ms"):
        GilSettings(gil_switch_interval_ms=ms)


@pytest.mark.live
def test_a_server_sets_it_before_serving(tmp_path: Path) -> None:
    """A server started from the command line says the interval it set, before uvicorn
    says it serves; --gil-switch-interval-ms is its flag."""
    log = _serve_and_read_log(["--gil-switch-interval-ms", "2"], tmp_path, wait_s=0.5)
    said = "threads hand over the interpreter lock every 2 ms"
    assert said in log, log
    assert log.index(said) < log.index("Application startup complete")
