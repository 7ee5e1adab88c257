"""What the speech path's read-after-write check of a voice name costs with ``--voices-store``.

    .venv/bin/python bench/voice_check.py [--calls N]
    .venv/bin/python bench/voice_check.py --smoke     # does it run? (a few calls)

Before it resolves a created voice's name, a replica asks Redis whether the voice exists
now and whether its copy is current (``RedisStore.confirm``: one script, one round trip,
the record only when the copy is stale). This starts a real ``redis-server`` on a
loopback port, keeps a seed voice and a voice with a clip-sized record (~100 kB, as a
reference clip's encoding), and times, per call: a ``PING`` (the least a round trip
costs: the baseline), the check of each voice with a current copy, the check of a name
that is not there, and an ``HGET`` of the clip voice's record (what a check that read
the record every time would cost). Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import redis.asyncio as aioredis

from server.voices.redis_store import RedisStore
from server.voices.voice import Voice

ENGINE = "chattts"
CLIP_RECORD_CHARS = 100_000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_redis(directory: Path, port: int) -> subprocess.Popen[bytes]:
    server = shutil.which("redis-server")
    if server is None:
        raise SystemExit("redis-server is not installed (Debian: redis-server)")
    process = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
         "--appendonly", "yes", "--appendfsync", "always", "--save", ""],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return process
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise SystemExit("redis-server did not answer within 30 s")


async def timed(call: Callable[[], Awaitable[object]], calls: int) -> dict[str, float]:
    """p50 / p99 of ``calls`` calls, in microseconds (after 10 calls of warm-up)."""
    for _ in range(10):
        await call()
    times = []
    for _ in range(calls):
        began = time.perf_counter()
        await call()
        times.append((time.perf_counter() - began) * 1e6)
    times.sort()
    return {
        "p50_us": round(statistics.median(times), 1),
        "p99_us": round(times[min(len(times) - 1, int(0.99 * len(times)))], 1),
    }


async def measure(url: str, calls: int) -> dict[str, dict[str, float]]:
    store = RedisStore(url, timeout_s=5.0)
    await store.open()
    raw = aioredis.Redis.from_url(url)
    try:
        await store.create(Voice("seeded", ENGINE, speaker_seed=7, seed=7), limit=None)
        clip = Voice("cloned", ENGINE, reference="x" * CLIP_RECORD_CHARS, transcript="你好")
        await store.create(clip, limit=None)
        figures = {
            "ping": await timed(raw.ping, calls),
            "check_seed_voice": await timed(lambda: store.confirm(ENGINE, "seeded"), calls),
            "check_clip_voice": await timed(lambda: store.confirm(ENGINE, "cloned"), calls),
            "check_absent_name": await timed(lambda: store.confirm(ENGINE, "nobody"), calls),
            "hget_clip_record": await timed(
                lambda: raw.hget(f"chattts-stream:voices:{ENGINE}", "cloned"), calls
            ),
        }
        assert store.current and "cloned" in store.cached(ENGINE), "a check failed"
        return figures
    finally:
        await raw.aclose()
        await store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="timed calls per figure")
    parser.add_argument(
        "--smoke", action="store_true", help="a few calls: checks it runs (the suite runs it)"
    )
    args = parser.parse_args()
    calls = 50 if args.smoke else args.calls
    with tempfile.TemporaryDirectory() as directory:
        port = free_port()
        process = start_redis(Path(directory), port)
        try:
            figures = asyncio.run(measure(f"redis://127.0.0.1:{port}/0", calls))
        finally:
            process.terminate()
            process.wait(30)
    ping = figures["ping"]["p50_us"]
    print(f"{'call':<20} {'p50 us':>9} {'p99 us':>9} {'p50 / ping':>11}")
    for name, figure in figures.items():
        print(f"{name:<20} {figure['p50_us']:>9} {figure['p99_us']:>9} "
              f"{figure['p50_us'] / ping:>11.2f}")  # fmt: skip
    ratios = {name: round(figure["p50_us"] / ping, 2) for name, figure in figures.items()}
    print(json.dumps({"bench": "voice_check", "smoke": args.smoke, "calls": calls,
                      "clip_record_chars": CLIP_RECORD_CHARS, "figures": figures,
                      "p50_over_ping": ratios}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
