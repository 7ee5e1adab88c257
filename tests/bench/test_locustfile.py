"""bench/locustfile.py runs under locust (headless, a few seconds) against a real server."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.live import run_live_server
from server.config import Settings
from tests.bench.smoke import ROOT, assert_all_finite, figure

pytestmark = pytest.mark.live


def test_a_short_headless_run_posts_and_reports_its_figures() -> None:
    """Two users for 3 s against the fallback voice: every request a WAV, the figures last."""
    with run_live_server(Settings(engine="espeak")) as live:
        done = subprocess.run(
            [sys.executable, "-m", "locust", "-f", "bench/locustfile.py", "--host",
             live.base_url, "--headless", "-u", "2", "-r", "2", "-t", "3s", "--only-summary"],
            cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert_all_finite(report)
    assert report["bench"] == "locust_tts"
    assert figure(report, "requests") >= 2 and figure(report, "failures") == 0
    assert figure(report, "qps") > 0
    assert 0 < figure(report, "p50_ms") <= figure(report, "p95_ms") <= figure(report, "p99_ms")
