"""The garbage collector once start-up is over (server.heap): start-up's objects frozen,
the youngest generation collected less often; --gc-young-threshold 0 leaves it alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from server.heap import HeapSettings

CLI = [sys.executable, "-m", "server.cli"]


def test_settling_freezes_what_start_up_made_and_raises_the_young_threshold() -> None:
    """In a fresh interpreter (the collector is process-wide): frozen objects, the new
    young threshold, the older generations' thresholds kept; 0 does nothing."""
    script = """
import gc, json
from server.heap import HeapSettings, settle_heap
before = gc.get_threshold()
untouched = settle_heap(HeapSettings(gc_young_threshold=0), when="now")
unchanged = (gc.get_threshold() == before, gc.get_freeze_count())
done = settle_heap(HeapSettings(gc_young_threshold=12345), when="now")
print(json.dumps([before, untouched, unchanged, done, gc.get_threshold(), gc.get_freeze_count()]))
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    before, untouched, unchanged, done, after, frozen = json.loads(run.stdout)
    assert (untouched, unchanged) == (False, [True, 0])
    assert done is True
    assert after == [12345, before[1], before[2]]
    assert frozen > 10_000  # the modules, FastAPI's and the server's objects


def test_a_threshold_out_of_bounds_is_refused() -> None:
    with pytest.raises(ValueError, match="gc_young_threshold"):
        HeapSettings(gc_young_threshold=-1)


def _serve_and_read_log(args: list[str], tmp_path: Path, wait_s: float) -> str:
    """A real server (espeak) started from the command line; its log for ``wait_s``
    seconds after it says which engine serves."""
    command = [*CLI, "serve", "--engine", "espeak", "--port", "0", *args]
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path)}
    lines: list[str] = []
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env) as server:
        assert server.stderr is not None
        reader = threading.Thread(target=lambda: lines.extend(server.stderr or []), daemon=True)
        reader.start()
        deadline = time.monotonic() + 60
        try:
            while not any("serving with" in line for line in lines):
                assert time.monotonic() < deadline and server.poll() is None, "".join(lines)
                time.sleep(0.05)
            time.sleep(wait_s)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(60)
        reader.join(10)
    return "".join(lines)


@pytest.mark.live
def test_a_server_settles_its_heap_once_ready(tmp_path: Path) -> None:
    """By default the server freezes what start-up made before it serves, and once more
    after its engine and text front-end have loaded (more objects then), saying so once
    each; with --gc-young-threshold 0 it never does."""
    log = _serve_and_read_log([], tmp_path, wait_s=3.0)
    settled = [line for line in log.splitlines() if "garbage collection:" in line]
    assert len(settled) == 2, log
    assert "frozen before serving" in settled[0] and "frozen once loaded" in settled[1]
    first, then = (int(line.split("garbage collection: ")[1].split()[0]) for line in settled)
    assert 10_000 < first < then
    assert all("every 10000 new objects" in line for line in settled)
    assert log.index("frozen before serving") < log.index("Application startup complete")
    log = _serve_and_read_log(["--gc-young-threshold", "0"], tmp_path, wait_s=3.0)
    assert "garbage collection:" not in log


@pytest.mark.live
def test_every_collection_is_timed_in_the_metrics() -> None:
    """tts_gc_pause_seconds counts each collection by generation while the server runs,
    and stops when it stops (its callback removed)."""
    import gc

    import httpx

    from harness.live import run_live_server
    from server.config import Settings

    def counts(url: str) -> dict[str, float]:
        text = httpx.get(f"{url}/metrics", timeout=10).text
        return {
            line.split('generation="')[1].split('"')[0]: float(line.split()[-1])
            for line in text.splitlines()
            if line.startswith("tts_gc_pause_seconds_count")
        }

    callbacks = len(gc.callbacks)
    with run_live_server(Settings(engine="espeak")) as server:
        assert len(gc.callbacks) == callbacks + 1
        before = counts(server.base_url)
        gc.collect()  # a full collection, in this process: the server's too
        gc.collect(0)
        after = counts(server.base_url)
        assert after["2"] >= before.get("2", 0) + 1
        assert after["0"] >= before.get("0", 0) + 1
    assert len(gc.callbacks) == callbacks


def _loop_lag(url: str) -> tuple[float, dict[str, float]]:
    """tts_event_loop_lag_seconds: its count, and its cumulative bucket counts by bound."""
    import httpx

    text = httpx.get(f"{url}/metrics", timeout=10).text
    count = next(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("tts_event_loop_lag_seconds_count")
    )
    buckets = {
        line.split('le="')[1].split('"')[0]: float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("tts_event_loop_lag_seconds_bucket")
    }
    return count, buckets


@pytest.mark.live
def test_a_stalled_event_loop_shows_in_its_lag() -> None:
    """tts_event_loop_lag_seconds times the loop about ten times a second; a loop held
    for 400 ms (a burst of work that never yields) shows as one tick more than 200 ms
    late (and less than a second), and the ticks go on after it."""
    from harness.live import run_live_server
    from server.config import Settings

    with run_live_server(Settings(engine="espeak")) as server:
        time.sleep(0.5)
        count, before = _loop_lag(server.base_url)
        assert count >= 2  # ticking since start-up
        server.on_loop(lambda: time.sleep(0.4))  # holds the loop, as saturating work does
        time.sleep(0.5)
        after, buckets = _loop_lag(server.base_url)
        # One tick 0.3-0.4 s late (it fell due within the stall): over 0.2, not over 1.0.
        assert after - buckets["0.2"] >= count - before["0.2"] + 1
        assert after - buckets["1.0"] == count - before["1.0"]
        assert after >= count + 3
