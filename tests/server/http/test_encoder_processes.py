"""ffmpeg encoders under concurrent load, on a real server: the engine never wedges, the
encoder processes stay bounded and every one is reaped."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
import tomllib
from pathlib import Path

import httpx
import numpy as np
import pytest

from harness.live import TIMEOUT_S, LiveServer, child_pids, run_live_server
from server.config import Settings

TEXT = "今天天气很好，我们去公园散步吧。公园里有很多花，红的黄的都有。傍晚我们再回家做饭。"
COMPRESSED = ("mp3", "opus", "aac", "flac")
CONCURRENCY = 12
BURSTS = 5
REPO = Path(__file__).resolve().parents[3]
# All twelve admitted whatever the engine's measured capacity: the load must reach ffmpeg.
SETTINGS = Settings(engine="espeak", max_streams=CONCURRENCY)


async def _burst(live: LiveServer, formats: tuple[str, ...] = COMPRESSED) -> list[httpx.Response]:
    """CONCURRENCY concurrent /v1/audio/speech requests, formats in turn, all answered."""
    async with httpx.AsyncClient(base_url=live.base_url, timeout=TIMEOUT_S) as client:
        body = {"model": "tts-1", "voice": "alloy", "input": TEXT}
        requests = [
            client.post("/v1/audio/speech", json=body | {"response_format": fmt})
            for fmt in (formats * CONCURRENCY)[:CONCURRENCY]
        ]
        return await asyncio.wait_for(asyncio.gather(*requests), TIMEOUT_S)


def _speaks(live: LiveServer) -> None:
    """A plain request after the load still speaks."""
    body = {"model": "tts-1", "voice": "alloy", "input": "你好。", "response_format": "pcm"}
    answer = httpx.post(f"{live.base_url}/v1/audio/speech", json=body, timeout=TIMEOUT_S)
    assert answer.status_code == 200, answer.text
    audio = np.frombuffer(answer.content, "<i2")
    assert audio.size > 0.2 * 24000 and np.abs(audio).max() > 1000


@pytest.mark.live
def test_bursts_of_concurrent_compressed_requests_leave_the_engine_speaking() -> None:
    """Bursts of 12 concurrent mp3/opus/aac/flac requests all finish with audio, and a
    request after them still speaks: starting ffmpeg never wedges the engine thread."""
    with run_live_server(SETTINGS) as live:
        for _ in range(BURSTS):
            answers = asyncio.run(_burst(live))
            assert [a.status_code for a in answers] == [200] * CONCURRENCY
            assert all(len(a.content) > 1000 for a in answers)
        _speaks(live)


def _settles_at_most(limit: int, before: set[int]) -> set[int]:
    """The server's ffmpeg children once they number ``limit`` or fewer (bounded wait)."""
    deadline = time.monotonic() + TIMEOUT_S / 3
    while len(children := child_pids("ffmpeg") - before) > limit:
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return children


@pytest.mark.live
def test_ffmpeg_processes_stay_one_spare_per_format_and_are_all_reaped() -> None:
    """After bursts of concurrent requests and clients that leave mid-stream, the server
    keeps at most one idle ffmpeg per format; at shutdown none is left."""
    before = child_pids("ffmpeg")
    seen: set[int] = set()
    with run_live_server(SETTINGS) as live:
        for _ in range(3):
            asyncio.run(_burst(live))
            seen |= (spares := _settles_at_most(len(COMPRESSED), before))
            assert len(spares) <= len(COMPRESSED), f"{len(spares)} idle ffmpeg processes"
        body = {"text": TEXT * 20, "format": "mp3", "stream": True}
        for _ in range(3):  # a client that leaves after the first bytes
            with httpx.stream("POST", f"{live.base_url}/v1/tts", json=body, timeout=TIMEOUT_S) as r:
                assert r.status_code == 200 and next(r.iter_bytes())
        seen |= (left := _settles_at_most(len(COMPRESSED), before))
        assert len(left) <= len(COMPRESSED), f"{len(left)} ffmpeg processes after disconnects"
        _speaks(live)
    assert seen and not child_pids("ffmpeg") & seen, "ffmpeg processes outlived the server"


_FORK_WHILE_COMPUTING = """
import os, sys, threading, time
import numpy as np
{setup}
products = starts = 0
def compute():
    global products
    a = np.ones((64, 600), np.float32)
    b = np.ones((600, 160), np.float32)  # the resampler's block product, a few times over
    while True:
        a @ b
        products += 1
def watch():  # a stranded product fails within 5 s (a fork that hangs holds the GIL)
    last = (-1, -1)
    while True:
        time.sleep(5)
        if (products, starts) == last or products == last[0]:
            print(f"stuck after {{starts}} process starts, {{products}} products"); os._exit(1)
        last = (products, starts)
threading.Thread(target=compute, daemon=True).start()
threading.Thread(target=watch, daemon=True).start()
for starts in range(1, {starts} + 1):
    {start}
    seen = products
    while products == seen:
        time.sleep(0.0005)
print("ok"); os._exit(0)
"""


def _fork_while_computing(setup: str, start: str, starts: int = 300) -> None:
    """Run ``start`` ``starts`` times in a fresh interpreter after ``setup`` while a
    thread multiplies matrices with a 2-thread OpenBLAS pool; both must keep going."""
    script = _FORK_WHILE_COMPUTING.format(setup=textwrap.dedent(setup), start=start, starts=starts)
    # A pool of 2 whatever this machine has: the hazard needs one to exist.
    env = os.environ | {"OPENBLAS_NUM_THREADS": "2"}
    try:
        result = subprocess.run(
            [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
            timeout=TIMEOUT_S * 2,
        )  # fmt: skip
    except subprocess.TimeoutExpired:  # a fork blocked holding the GIL: no thread runs
        pytest.fail("a process start hung (a fork handler waiting on the BLAS pool)")
    assert result.stdout.strip() == "ok", result.stdout + result.stderr[-2000:]


def test_encoders_start_ffmpeg_without_running_fork_handlers() -> None:
    """Encoders started from the server's event loop (uvloop) while another thread is
    inside a multi-threaded numpy product never strand that product."""
    _fork_while_computing(
        """
        import asyncio, uvloop
        from server.http import audio
        async def encode_once():
            async def frames():
                yield np.zeros(2400, np.float32)
            return b"".join([c async for c in audio.encode(frames(), "flac", 24000)])
        loop = uvloop.new_event_loop()
        """,
        "assert loop.run_until_complete(encode_once())[:4] == b'fLaC'",
        starts=30,
    )


def test_a_fork_after_the_app_is_built_cannot_strand_numpy() -> None:
    """Once the app is built, numpy's BLAS computes on the calling thread, so even a plain
    fork() (by any library) while another thread multiplies matrices cannot strand it."""
    _fork_while_computing(
        """
        from server.app import create_app
        from server.config import Settings
        create_app(Settings(engine="espeak"))
        """,
        "pid = os.fork()\n    if pid == 0: os._exit(0)\n    os.waitpid(pid, 0)",
    )


def test_the_command_line_starts_numpy_without_a_blas_pool() -> None:
    """The entry point sets OpenBLAS to one thread before numpy loads, so the server
    process never holds a BLAS pool a fork could tear down."""
    entry = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    script = (
        "import contextlib, importlib\n"
        f"module, _, name = {entry['chattts-stream']!r}.partition(':')\n"
        "with contextlib.suppress(SystemExit):\n"
        "    getattr(importlib.import_module(module), name)(['--version'])\n"
        "import numpy, threadpoolctl\n"
        "print([p['num_threads'] for p in threadpoolctl.threadpool_info()"
        " if p['user_api'] == 'blas'])\n"
    )
    env = os.environ | {"OPENBLAS_NUM_THREADS": "2"}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=TIMEOUT_S,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[1]"  # after the version line
