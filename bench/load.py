"""Load test: concurrent WebSocket streams and POST /v1/tts against a server.

Reports, per concurrency level, time to first audio (P50/P95/P99), stream real-time
factor, streams refused at capacity (``busy``; ``--ramp`` doubles the concurrency until
they start), streams with an underrun, playback continuity (the longest stall a real-time player would hear: audio that
arrived after its playback deadline), HTTP QPS and latency percentiles, and errors. Each
stream's text arrives as an LLM would send it (small deltas at a fixed token rate).

    .venv/bin/python bench/load.py                      # starts its own server (espeak)
    .venv/bin/python bench/load.py --model-dir checkpoints/tiny
    .venv/bin/python bench/load.py --model-dir checkpoints/tiny --ramp --max-new-token 240
    .venv/bin/python bench/load.py --url ws://HOST:8000/v1/stream --token T
    .venv/bin/python bench/load.py --smoke              # does it run? (1 and 2 streams)

Prints a table and a final JSON line. Loopback only unless --url names your own server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chattts_client import AudioFrame, StreamClient

from server.config import Settings
from server.engines.chattts.settings import ChatTTSSettings
from server.runtime.phrase_cache import PhraseCacheSettings

TEXT = (
    "各位用户大家好，欢迎使用流式语音合成服务。这段文字模拟大模型逐字输出的场景，"
    "服务端会在标点处切分句子，并且一边合成一边推送音频。我们关心首包延迟和播放是否连续。"
)


@dataclass
class StreamStats:
    ttfa_s: float | None = None
    total_s: float = 0.0
    audio_s: float = 0.0
    max_stall_s: float = 0.0
    errors: list[str] = field(default_factory=list)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


async def one_stream(
    url: str, token: str | None, chars_per_delta: int, delta_interval_s: float
) -> StreamStats:
    stats = StreamStats()
    async with StreamClient.connect(url, token=token) as client:
        rate = client.ready["sample_rate"]
        ctx = await client.start(seed=7)
        began = time.perf_counter()

        async def feed() -> None:
            for i in range(0, len(TEXT), chars_per_delta):
                await client.send_text(TEXT[i : i + chars_per_delta], ctx)
                await asyncio.sleep(delta_interval_s)
            await client.end(ctx)

        feeder = asyncio.create_task(feed())
        play_start: float | None = None
        played_until_s = 0.0  # playback clock position (s of audio) when the last frame arrived
        async for event in client.events(timeout_s=120):
            now = time.perf_counter()
            if isinstance(event, AudioFrame):
                if stats.ttfa_s is None:
                    stats.ttfa_s = now - began
                    play_start = now
                assert play_start is not None
                # A real-time player would reach this frame's start at play_start + audio_s
                # (plus earlier stalls); arriving later than that is an audible stall.
                deadline = play_start + stats.audio_s + played_until_s
                if now > deadline:
                    stall = now - deadline
                    stats.max_stall_s = max(stats.max_stall_s, stall)
                    played_until_s += stall
                stats.audio_s += event.samples / rate
            elif event.get("type") == "error":
                stats.errors.append(event["code"])
                if event["code"] == "busy":  # refused at capacity: no done will come
                    break
            elif event.get("type") == "done":
                break
        feeder.cancel()
        await asyncio.gather(feeder, return_exceptions=True)
        stats.total_s = time.perf_counter() - began
    return stats


async def http_requests(
    base_url: str, token: str | None, count: int, concurrency: int
) -> dict[str, object]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    latencies: list[float] = []
    errors = 0
    semaphore = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=300) as http:

        async def one() -> None:
            nonlocal errors
            async with semaphore:
                started = time.perf_counter()
                response = await http.post("/v1/tts", json={"text": TEXT[:40], "seed": 1})
                latencies.append(time.perf_counter() - started)
                errors += response.status_code != 200

        began = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(count)))
        elapsed = time.perf_counter() - began
    return {
        "requests": count,
        "concurrency": concurrency,
        "qps": round(count / elapsed, 2),
        "p50_ms": _ms(percentile(latencies, 50)),
        "p95_ms": _ms(percentile(latencies, 95)),
        "p99_ms": _ms(percentile(latencies, 99)),
        "errors": errors,
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


async def run_level(
    url: str, token: str | None, concurrency: int, args: argparse.Namespace
) -> dict[str, object]:
    results = await asyncio.gather(
        *(
            one_stream(url, token, args.chars_per_delta, args.delta_interval_ms / 1000)
            for _ in range(concurrency)
        ),
        return_exceptions=True,
    )
    stats = [r for r in results if isinstance(r, StreamStats)]
    failures = [repr(r) for r in results if not isinstance(r, StreamStats)]
    ttfa = [s.ttfa_s for s in stats if s.ttfa_s is not None]
    rtf = [s.total_s / s.audio_s for s in stats if s.audio_s]
    return {
        "concurrency": concurrency,
        "streams_ok": len(stats) - sum(bool(s.errors) for s in stats),
        "ttfa_p50_ms": _ms(percentile(ttfa, 50)),
        "ttfa_p95_ms": _ms(percentile(ttfa, 95)),
        "ttfa_p99_ms": _ms(percentile(ttfa, 99)),
        "wall_rtf_median": round(statistics.median(rtf), 3) if rtf else None,
        "max_stall_ms": _ms(max((s.max_stall_s for s in stats), default=0.0)),
        "audio_s_per_stream": round(statistics.median([s.audio_s for s in stats]), 2)
        if stats
        else None,
        "refused": sum("busy" in s.errors for s in stats),
        "underruns": sum(s.max_stall_s > 0 for s in stats),
        "errors": sorted({e for s in stats for e in s.errors} - {"busy"}) + failures,
    }


@contextlib.contextmanager
def own_server(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    from tests.live import run_live_server

    settings = Settings(
        engine="chattts" if args.model_dir else "espeak",
        model_dir=Path(args.model_dir) if args.model_dir else None,
        chattts=ChatTTSSettings(device=args.device, max_new_token=args.max_new_token),
        max_connections=max(64, max(args.concurrency) * 2, args.max_concurrency * 2),
        max_active_segments=args.max_active_segments,
        max_batch=args.max_batch,
        # Off: every stream says the same seeded text, and this measures synthesis.
        phrase_cache=PhraseCacheSettings(phrase_cache_mb=0),
    )
    with run_live_server(settings) as server:
        yield server.ws_url, server.base_url


def ramp(limit: int) -> Iterator[int]:
    level = 1
    while level <= limit:
        yield level
        level *= 2


async def main_async(args: argparse.Namespace, ws_url: str, base_url: str) -> dict[str, object]:
    levels = []
    concurrencies = iter(args.concurrency) if not args.ramp else ramp(args.max_concurrency)
    for concurrency in concurrencies:
        level = await run_level(ws_url, args.token, concurrency, args)
        levels.append(level)
        print(
            f"ws  c={concurrency:<3} ttfa p50/p95/p99 = {level['ttfa_p50_ms']}/{level['ttfa_p95_ms']}/"
            f"{level['ttfa_p99_ms']} ms  rtf={level['wall_rtf_median']}  max stall={level['max_stall_ms']} ms"
            f"  underruns={level['underruns']}  refused={level['refused']}"
            f"  ok={level['streams_ok']}/{concurrency}  errors={level['errors']}",
            flush=True,
        )
        if args.ramp and level["refused"]:
            break  # admission control has started refusing: the server is at capacity
    http = await http_requests(base_url, args.token, args.http_requests, args.http_concurrency)
    print(
        f"http n={http['requests']} c={http['concurrency']} qps={http['qps']} "
        f"p50/p95/p99 = {http['p50_ms']}/{http['p95_ms']}/{http['p99_ms']} ms errors={http['errors']}",
        flush=True,
    )
    return {"bench": "load", "smoke": args.smoke, "websocket": levels, "http": http}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--url", help="ws://HOST:PORT/v1/stream of a running server (default: start one)"
    )
    parser.add_argument("--token")
    parser.add_argument(
        "--model-dir", help="when starting a server: a ChatTTS model dir (default: espeak)"
    )
    parser.add_argument("--device", default="auto")
    parser.add_argument(
        "--max-new-token",
        type=int,
        default=ChatTTSSettings().max_new_token,
        help="when starting a server: GPT steps per segment at most (random-weight checkpoints "
        "rarely stop by themselves: ~12 steps per Chinese character is speech-like)",
    )
    parser.add_argument(
        "--max-active-segments",
        type=int,
        default=Settings().max_active_segments,
        help="when starting a server: segments interleaved at once (1: one segment at a time)",
    )
    parser.add_argument(
        "--max-batch",
        type=int,
        default=Settings().max_batch,
        help="when starting a server: segments per batched step (1: no batching)",
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument(
        "--ramp",
        action="store_true",
        help="double the concurrency from 1 until the server refuses streams (busy)",
    )
    parser.add_argument("--max-concurrency", type=int, default=256, help="with --ramp")
    parser.add_argument("--chars-per-delta", type=int, default=2)
    parser.add_argument("--delta-interval-ms", type=float, default=40.0)
    parser.add_argument("--http-requests", type=int, default=20)
    parser.add_argument("--http-concurrency", type=int, default=4)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="1 and 2 streams fed fast, 2 HTTP requests: checks it runs (the suite runs it)",
    )
    return parser


def main() -> int:
    args = _parser().parse_args()
    if args.smoke:
        args.concurrency, args.ramp = [1, 2], False
        args.chars_per_delta, args.delta_interval_ms = 8, 10.0
        args.http_requests = args.http_concurrency = 2
    if args.url:
        base_url = (
            args.url.replace("ws://", "http://").replace("wss://", "https://").rsplit("/v1/", 1)[0]
        )
        report = asyncio.run(main_async(args, args.url, base_url))
    else:
        with own_server(args) as (ws_url, base_url):
            report = asyncio.run(main_async(args, ws_url, base_url))
    print(json.dumps(report, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
