"""A fleet's capacity and what a crash costs it: one replica alone and three behind the
shipped HAProxy configuration, in one run, then the audio gap a SIGKILL resumption adds.

Each replica is its own process (bench/replica.py: the real server and lifecycle, the
modelled engine: a GPT step of a batch of n costs ``a + b * n``, slept, so that three
fit on a small machine the way three GPUs would). Capacity is bench/capacity.py's:
LLM-like streams (deltas of 3 characters every 60 ms, started over ``--spread-s``); a
level passes when p95 time to first audio <= 1 s and no real-time player (starting
200 ms after its first frame) runs dry; capacity is the most streams that pass
(doubling, then bisection). "Alone" is replica 0 addressed directly while the others
idle; "three" is the balancer's address.

Resumption: ``--resume-load`` of the fleet's capacity streams through the balancer, each
speaking ``--resume-chars``; once all speak, the replica holding the most is SIGKILLed.
Its streams continue elsewhere (the client's resume). A stream's audio gap is the
longest silence its real-time player hears (capacity's player: it starts 200 ms after
the first frame and waits when it runs dry); the figure is the p95 of the affected
streams' gaps less the p95 of the others' (what the resumption added), with every
stream's text checked heard completely. Also reported: the time from the kill to each
affected stream's first frame from its new replica.

    .venv/bin/python bench/fleet.py               # a few minutes
    .venv/bin/python bench/fleet.py --smoke       # two streams at most (a test)

Needs Debian's haproxy. Prints the trials and a final JSON line: ``ratio`` (three / one,
goal >= 2.7) and ``resume.added_gap_p95_ms`` (goal <= 1000).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from chattts_client import AudioFrame, StreamClient

from bench import capacity
from harness.fleet import Balancer, free_port

ROOT = Path(__file__).resolve().parent.parent

#: The modelled step: one replica keeps about 16 streams in real time ((21.3 - a) / b).
A_MS, B_MS = 10.0, 0.7


@dataclass
class Replica:
    """One bench/replica.py process on a loopback port."""

    index: int
    args: argparse.Namespace
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, log: Path) -> None:
        command = [sys.executable, str(ROOT / "bench" / "replica.py"), "--port", str(self.port),
                   "--a-ms", str(self.args.a_ms), "--b-ms", str(self.args.b_ms)]  # fmt: skip
        with log.open("ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process is not None and self.process.poll() is None, "replica exited"
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(self.url + "/ready", timeout=5).status_code == 200:
                    return
            time.sleep(0.1)
        raise TimeoutError(f"replica {self.index} not ready")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)


@contextlib.contextmanager
def fleet(args: argparse.Namespace, directory: Path) -> Iterator[tuple[list[Replica], Balancer]]:
    """Three replicas (started together) and HAProxy in front; all stopped on exit."""
    replicas = [Replica(i, args) for i in range(3)]
    balancer = Balancer(directory, replicas)  # type: ignore[arg-type]
    try:
        for replica in replicas:
            replica.start(directory / f"replica-{replica.index}.log")
        for replica in replicas:
            replica.wait_ready()
        balancer.start()
        balancer.wait_states({r.index: "UP" for r in replicas})
        yield replicas, balancer
    finally:
        balancer.stop()
        for replica in replicas:
            replica.stop()


# -- capacity ----------------------------------------------------------------------------


async def settle(replicas: list[Replica]) -> None:
    """Until every replica has let go of the streams of the last trial."""
    deadline = time.monotonic() + 30
    async with httpx.AsyncClient() as http:
        while time.monotonic() < deadline:
            texts = []
            for replica in replicas:
                if replica.process is not None and replica.process.poll() is None:
                    texts.append((await http.get(replica.url + "/metrics")).text)
            if all("tts_active_streams 0.0" in t and "tts_engine_queue_depth 0.0" in t
                   for t in texts):  # fmt: skip
                return
            await asyncio.sleep(0.05)


async def measure(
    what: str, port: int, replicas: list[Replica], args: argparse.Namespace
) -> tuple[int, list[dict[str, Any]]]:
    """Capacity at ``port``: doubling until a level fails, then bisection."""
    text = capacity.TEXT[: args.chars]
    log: list[dict[str, Any]] = []

    async def passes(n: int) -> bool:
        began = time.perf_counter()
        result = await capacity.trial("batched", port, n, text, args.spread_s)
        await settle(replicas)
        result.update(fleet=what, seconds=round(time.perf_counter() - began, 1))
        log.append(result)
        print(f"  {what:5} {n:4d} streams: TTFA p95 {result['ttfa_p95_ms']} ms, underruns "
              f"{result['underruns']}, errors {result['errors']} -> "
              f"{'pass' if result['passed'] else 'FAIL'} ({result['seconds']} s)", flush=True)  # fmt: skip
        return bool(result["passed"])

    best, n = 0, 1
    while n <= args.max_streams and await passes(n):
        best, n = n, n * 2
    low, high = best, min(n, args.max_streams + 1)
    for _ in range(args.bisect):
        if high - low <= max(1, low // 16):
            break
        middle = (low + high) // 2
        low, high = (middle, high) if await passes(middle) else (low, middle)
    return low, log


# -- resumption --------------------------------------------------------------------------


@dataclass
class Heard:
    """What a real-time player of one stream heard."""

    resumed: list[dict[str, Any]] = field(default_factory=list)
    #: perf_counter() of the first frame after a ``resumed`` event.
    back_at: float | None = None
    complete: bool = False
    errors: list[str] = field(default_factory=list)
    #: The longest time its player ran dry (it waits for the next frame, then goes on).
    gap_s: float = 0.0
    _play_start: float | None = None
    _audio_s: float = 0.0

    def frame(self, now: float, seconds: float) -> None:
        if self._play_start is None:
            self._play_start = now + capacity.PREBUFFER_S
        elif now > self._play_start + self._audio_s:  # ran dry before this frame
            self.gap_s = max(self.gap_s, now - self._play_start - self._audio_s)
            self._play_start = now - self._audio_s
        self._audio_s += seconds
        if self.resumed and self.back_at is None:
            self.back_at = now


async def heard(url: str, text: str, seed: int, speaking: asyncio.Event, out: Heard) -> None:
    """One LLM-like stream through the balancer, recording when its audio arrives."""
    async with StreamClient.connect(url) as client:
        ctx = await client.start(seed=seed)

        async def feed() -> None:
            for i in range(0, len(text), capacity.CHARS_PER_DELTA):
                await client.send_text(text[i : i + capacity.CHARS_PER_DELTA], ctx)
                await asyncio.sleep(capacity.DELTA_INTERVAL_S)
            await client.end(ctx)

        feeder = asyncio.create_task(feed())
        segments: dict[int, str] = {}
        rate = client.ready["sample_rate"]
        async for event in client.events(timeout_s=120):
            if isinstance(event, AudioFrame):
                out.frame(time.perf_counter(), event.samples / rate)
                speaking.set()
            elif event["type"] == "segment":
                segments[event["index"]] = event["text"]
            elif event["type"] == "resumed":
                out.resumed.append(event)
            elif event["type"] == "error":
                out.errors.append(event["code"])
            elif event["type"] == "done":
                break
        await feeder
        out.complete = "".join(segments[i] for i in sorted(segments)) == text


async def resumption(
    replicas: list[Replica], balancer: Balancer, streams: int, args: argparse.Namespace
) -> dict[str, Any]:
    """``streams`` streams through the balancer; the busiest replica SIGKILLed mid-way."""
    text = (capacity.TEXT * 4)[: args.resume_chars]
    results = [Heard() for _ in range(streams)]
    speaking = [asyncio.Event() for _ in range(streams)]
    tasks = [
        asyncio.create_task(heard(balancer.ws_url, text, i, speaking[i], results[i]))
        for i in range(streams)
    ]
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in speaking)), 60)
    await asyncio.sleep(0.5)
    async with httpx.AsyncClient() as http:
        counts = []
        for replica in replicas:
            body = (await http.get(replica.url + "/metrics")).text
            line = next(x for x in body.splitlines() if x.startswith("tts_active_streams "))
            counts.append(float(line.split()[1]))
    victim = counts.index(max(counts))
    replicas[victim].stop(signal.SIGKILL)
    killed_at = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*tasks), 120)
    affected = [r for r in results if r.resumed]
    others = [r for r in results if not r.resumed]
    gap = capacity.p95([r.gap_s for r in affected]) if affected else None
    base = capacity.p95([r.gap_s for r in others]) if others else 0.0
    return {
        "streams": streams,
        "killed_replica": victim,
        "killed_holding": int(max(counts)),
        "affected": len(affected),
        "complete": sum(r.complete for r in results),
        "repeated_segments": sum(bool(e["repeated"]) for r in affected for e in r.resumed),
        "errors": sum(len(r.errors) for r in results),
        "gap_p95_ms": None if gap is None else round(gap * 1000),
        "baseline_gap_p95_ms": round(base * 1000),
        "added_gap_p95_ms": None if gap is None else round((gap - base) * 1000),
        "back_after_p95_ms": None
        if not affected
        else round(capacity.p95([(r.back_at or killed_at) - killed_at for r in affected]) * 1000),
    }


# -- the run -----------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a-ms", type=float, default=A_MS, help="fixed cost of a step")
    parser.add_argument("--b-ms", type=float, default=B_MS, help="cost per utterance in a step")
    parser.add_argument("--chars", type=int, default=31, help="characters each stream speaks")
    parser.add_argument("--spread-s", type=float, default=2.0, help="streams start over this")
    parser.add_argument("--max-streams", type=int, default=256)
    parser.add_argument("--bisect", type=int, default=5, help="bisection steps after the ramp")
    parser.add_argument(
        "--resume-load", type=float, default=0.5, help="resumption: this share of capacity"
    )
    parser.add_argument("--resume-chars", type=int, default=62, help="resumption: per stream")
    parser.add_argument("--smoke", action="store_true", help="at most 2 streams (a test)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.chars, args.spread_s, args.max_streams, args.bisect = 6, 0.2, 2, 0
        args.resume_chars = 31
    return args


async def run(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    with fleet(args, directory) as (replicas, balancer):
        print(f"fleet: 3 replicas ready, HAProxy on {balancer.port}", flush=True)
        alone, log_one = await measure("one", replicas[0].port, replicas, args)
        three, log_three = await measure("three", balancer.port, replicas, args)
        streams = max(3, round(args.resume_load * three)) if not args.smoke else 3
        print(f"  resumption: {streams} streams, the busiest replica killed", flush=True)
        resumed = await resumption(replicas, balancer, streams, args)
    return {"one": alone, "three": three, "trials": log_one + log_three, "resume": resumed}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.perf_counter()
    print(f"fleet: modelled engine (a = {args.a_ms} ms, b = {args.b_ms} ms), "
          f"{args.chars} characters per stream", flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as directory:
        figures = asyncio.run(run(args, Path(directory)))
    ratio = round(figures["three"] / figures["one"], 2) if figures["one"] else None
    resume = figures["resume"]
    print()
    print(f"capacity: one replica {figures['one']} streams, three behind HAProxy "
          f"{figures['three']} (x{ratio}; goal >= 2.7)")  # fmt: skip
    print(f"SIGKILL of replica {resume['killed_replica']} holding {resume['killed_holding']}: "
          f"{resume['affected']} streams resumed, {resume['complete']}/{resume['streams']} "
          f"heard complete; audio gap p95 {resume['gap_p95_ms']} ms vs "
          f"{resume['baseline_gap_p95_ms']} ms unaffected: +{resume['added_gap_p95_ms']} ms "
          f"(goal <= 1000)")  # fmt: skip
    print(f"({time.perf_counter() - began:.0f} s)")
    report = {
        "bench": "fleet",
        "smoke": args.smoke,
        "a_ms": args.a_ms,
        "b_ms": args.b_ms,
        "chars": args.chars,
        "capacity": {"one": figures["one"], "three": figures["three"]},
        "ratio": ratio,
        "resume": resume,
        "seconds": round(time.perf_counter() - began, 1),
        "trials": figures["trials"],
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
