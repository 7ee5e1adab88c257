"""A soak of mixed traffic against the real CLI server: a few hundred HTTP requests in
every format and WebSocket contexts, some cancelled, some dropped mid-stream; after it
the server's child processes, file descriptors and memory are back to their level."""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect

from harness.live import TIMEOUT_S
from streaming import protocol as p

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
REQUESTS = 240
CONCURRENCY = 12
TEXT = "今天的天气很好，我们一起去公园散步吧。"
FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = _free_port()
    command = [
        sys.executable, "-m", "server", "serve", "--engine", "espeak",
        "--port", str(port), "--max-connections", "256", "--log-level", "warning",
        # Leaks are the question here, not capacity: a fixed limit above the concurrency.
        "--max-streams", "64",
    ]  # fmt: skip
    process = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + TIMEOUT_S * 4
    while True:
        try:
            if httpx.get(base + "/ready", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, "server did not start"
        time.sleep(0.1)
    try:
        yield process, base
    finally:
        process.terminate()
        process.wait(TIMEOUT_S)


def _usage(pid: int) -> tuple[int, int, int]:
    """(child processes, open file descriptors, resident kB) of process ``pid``."""
    children = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                children += 1
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kb = int(next(line for line in status.splitlines() if line.startswith("VmRSS")).split()[1])
    return children, fds, rss_kb


async def _http(client: httpx.AsyncClient, rng: random.Random) -> None:
    fmt = rng.choice(FORMATS)
    if rng.random() < 0.5:
        body = {"model": "tts-1", "input": TEXT, "voice": "alloy", "response_format": fmt}
        route = "/v1/audio/speech"
    else:
        body = {"text": TEXT, "format": "ogg" if fmt == "opus" else fmt, "stream": True}
        route = "/v1/tts"
    drop = rng.random() < 0.25  # the client leaves after the first bytes
    async with client.stream("POST", route, json=body) as response:
        if response.status_code != 200:
            await response.aread()
        assert response.status_code == 200, (route, body, response.status_code, response.text)
        async for _chunk in response.aiter_bytes():
            if drop:
                break


async def _websocket(url: str, rng: random.Random) -> None:
    """One context on its own connection (the raw protocol: the client library would
    resume a dropped socket), completed, cancelled, or dropped mid-stream."""
    ending = rng.choice(("done", "cancel", "drop"))
    async with connect(url, subprotocols=[p.SUBPROTOCOL]) as ws:  # type: ignore[list-item]
        await ws.send(json.dumps({"type": "start", "context_id": "c"}))
        for piece in (TEXT[:6], TEXT[6:12], TEXT[12:]):
            await ws.send(json.dumps({"type": "text", "context_id": "c", "text": piece}))
        await ws.send(json.dumps({"type": "end", "context_id": "c"}))
        audio = 0
        async with asyncio.timeout(TIMEOUT_S):
            while True:
                message = await ws.recv()
                if isinstance(message, bytes):
                    audio += 1
                    if ending == "drop":
                        ws.transport.abort()  # the socket just dies
                        return
                    if ending == "cancel":
                        await ws.send(json.dumps({"type": "cancel", "context_id": "c"}))
                        ending = "cancelled"
                elif json.loads(message)["type"] == "done":
                    assert audio > 0
                    return


async def _soak(base: str, requests: int) -> None:
    url = base.replace("http", "ws", 1) + "/v1/stream"
    gate = asyncio.Semaphore(CONCURRENCY)
    async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT_S) as client:

        async def one(i: int) -> None:
            rng = random.Random(i)
            async with gate:
                if rng.random() < 0.5:
                    await _http(client, rng)
                else:
                    await _websocket(url, rng)

        await asyncio.gather(*(one(i) for i in range(requests)))


def _settled(pid: int, before: tuple[int, int, int]) -> tuple[int, int, int]:
    """The usage once it stops falling (idle processes and sockets take a moment)."""
    deadline = time.monotonic() + TIMEOUT_S
    usage = _usage(pid)
    while time.monotonic() < deadline and (usage[0] > before[0] or usage[1] > before[1]):
        time.sleep(0.5)
        usage = _usage(pid)
    return usage


def test_processes_descriptors_and_memory_return_after_a_soak(
    server: tuple[subprocess.Popen[bytes], str],
) -> None:
    """After hundreds of mixed requests (every format, cancels, drops), the server holds
    no more child processes or descriptors than before, and its memory grew little."""
    process, base = server
    asyncio.run(_soak(base, 36))  # warm: spare encoders, the fallback voice's helper
    before = _settled(process.pid, _usage(process.pid))
    asyncio.run(_soak(base, REQUESTS))
    after = _settled(process.pid, before)
    children, fds, rss_kb = after
    assert children <= before[0], f"child processes {before[0]} -> {children}"
    assert fds <= before[1], f"file descriptors {before[1]} -> {fds}"
    assert rss_kb - before[2] < 40_000, f"resident memory {before[2]} -> {rss_kb} kB"
    health = httpx.get(base + "/health", timeout=TIMEOUT_S)
    assert health.status_code == 200
