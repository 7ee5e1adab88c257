"""Time to first audio on short openers, for values of ``--first-segment-min-chars``.

A voice agent's reply often opens with a short clause (``好的，`` ``嗯，`` ``是的。``).
The first segment of an utterance may end at a clause mark (，、：) only once it holds
``--first-segment-min-chars`` characters, the mark included; below that the server waits
for the next clause or sentence end. For each value, a real server (in this process, on
a real socket) is sent each opener as an LLM streams text (``--chars-per-delta``
characters every ``--delta-interval-ms``) and the client measures the time from its first
text message to the first audio frame (TTFA), the first segment's text, and the longest
stall a real-time player would hear after the first audio.

    .venv/bin/python bench/first_segment.py                      # espeak and ChatTTS (tiny)
    .venv/bin/python bench/first_segment.py --engine espeak --values 1 2 3 4 6
    .venv/bin/python bench/first_segment.py --engine chattts --steps 48 --repeats 5
    .venv/bin/python bench/first_segment.py --smoke              # 1 run of 2 values, seconds

ChatTTS runs on the CPU with random weights, so every segment is ``--steps`` GPT steps
long; its first audio comes after its first chunk, whatever the segment's length. Ends
with one JSON line of the headline figures (TTFA medians in ms by engine, value, opener).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chattts_client import AudioFrame, StreamClient

from harness.bench_server import ensure_checkpoint
from server.config import Settings
from server.runtime.phrase_cache import PhraseCacheSettings

ROOT = Path(__file__).resolve().parent.parent

#: (name, text): the openers measured, and a sentence with a long first clause.
OPENERS: tuple[tuple[str, str], ...] = (
    ("hmm", "嗯，让我想一想这个问题该怎么回答。"),
    ("okay", "好的，我们现在开始今天的课程。"),
    ("yes", "是的。这个方案在技术上是可行的。"),
    ("normal", "今天天气很好，我们去公园散步吧。"),
)


@dataclass(frozen=True)
class Run:
    ttfa_s: float
    first_segment: str
    max_stall_s: float


def engine_factory(engine: str, checkpoint: Path, steps: int) -> Any:
    """None for espeak; for ChatTTS a factory of a CPU engine with fixed-length segments."""
    if engine != "chattts":
        return None

    def factory() -> Any:
        from server.engines.chattts.engine import ChatTTSEngine
        from server.engines.chattts.settings import ChatTTSSettings

        options = ChatTTSSettings(device="cpu", max_new_token=steps, min_new_token=steps)
        return ChatTTSEngine(checkpoint, options), False, None

    return factory


async def speak(url: str, text: str, chars_per_delta: int, interval_s: float) -> Run:
    """Stream ``text`` as an LLM would; time the first audio frame from the first delta."""
    async with StreamClient.connect(url) as client:
        rate = client.ready["sample_rate"]
        ctx = await client.open(seed=7)

        async def feed() -> None:
            for i in range(0, len(text), chars_per_delta):
                await client.send_text(text[i : i + chars_per_delta], ctx)
                await asyncio.sleep(interval_s)
            await client.end(ctx)

        began = time.perf_counter()
        feeder = asyncio.create_task(feed())
        first_audio: float | None = None
        first_segment = ""
        audio_s = stalls_s = max_stall_s = 0.0
        try:
            async for event in client.events(timeout_s=120):
                now = time.perf_counter()
                if isinstance(event, AudioFrame):
                    first_audio = first_audio or now
                    # A real-time player reaches this frame at first_audio + audio so far
                    # (plus the stalls before it); arriving later is an audible stall.
                    stall = now - (first_audio + audio_s + stalls_s)
                    if stall > 0:
                        stalls_s += stall
                        max_stall_s = max(max_stall_s, stall)
                    audio_s += event.samples / rate
                elif event.get("type") == "segment" and not first_segment:
                    first_segment = event["text"]
                elif event.get("type") in ("done", "error"):
                    if event.get("type") == "error":
                        raise RuntimeError(f"server error: {event}")
                    break
        finally:
            feeder.cancel()
            await asyncio.gather(feeder, return_exceptions=True)
    if first_audio is None:
        raise RuntimeError(f"no audio for {text!r}")
    return Run(first_audio - began, first_segment, max_stall_s)


def measure(args: argparse.Namespace, engine: str, value: int) -> dict[str, list[Run]]:
    """Every opener ``args.repeats`` times (interleaved) on one server with ``value``."""
    from harness.live import run_live_server

    settings = Settings(
        engine=engine,
        model_dir=args.checkpoint if engine == "chattts" else None,
        first_segment_min_chars=value,
        log_level="warning",
        # Off: every opener is said again with seed 7, and this measures synthesis.
        phrase_cache=PhraseCacheSettings(phrase_cache_mb=0),
    )
    factory = engine_factory(engine, args.checkpoint, args.steps)
    interval_s = args.delta_interval_ms / 1000
    runs: dict[str, list[Run]] = {name: [] for name, _ in OPENERS}
    with run_live_server(settings, engine=factory) as server:
        warm = speak(server.ws_url, OPENERS[-1][1], len(OPENERS[-1][1]), 0.0)
        asyncio.run(warm)  # the first stream pays for caches and the first allocations
        for _ in range(args.repeats):
            for name, text in OPENERS:
                run = asyncio.run(speak(server.ws_url, text, args.chars_per_delta, interval_s))
                runs[name].append(run)
    return runs


def report(engine: str, results: dict[int, dict[str, list[Run]]]) -> dict[str, Any]:
    """Print one engine's table; return its figures for the JSON line."""
    print(f"\n{engine}: TTFA p50 ms (first segment), max stall p50 ms")
    print(f"{'value':>5}  " + "  ".join(f"{name:>24}" for name, _ in OPENERS))
    ttfa: dict[str, dict[str, float]] = {}
    stall: dict[str, dict[str, float]] = {}
    first: dict[str, dict[str, str]] = {}
    for value, runs in results.items():
        key = str(value)
        ttfa[key] = {n: round(statistics.median(r.ttfa_s for r in runs[n]) * 1000, 1) for n in runs}
        stall[key] = {
            n: round(statistics.median(r.max_stall_s for r in runs[n]) * 1000, 1) for n in runs
        }
        first[key] = {n: runs[n][0].first_segment for n in runs}
        cells = [
            f"{ttfa[key][n]:>7.0f} ({first[key][n][:6]:<6}) {stall[key][n]:>4.0f}" for n in runs
        ]
        print(f"{value:>5}  " + "  ".join(f"{cell:>24}" for cell in cells))
    return {"ttfa_ms": ttfa, "max_stall_ms": stall, "first_segment": first}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("both", "espeak", "chattts"), default="both")
    parser.add_argument("--values", type=int, nargs="+", default=[1, 2, 3, 4, 6])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chars-per-delta", type=int, default=2)
    parser.add_argument("--delta-interval-ms", type=float, default=40.0)
    parser.add_argument("--checkpoint", type=Path, default=ROOT / "checkpoints" / "tiny")
    parser.add_argument("--steps", type=int, default=48, help="GPT steps per segment (chattts)")
    parser.add_argument("--smoke", action="store_true", help="1 run of values 2 and 6, 12 steps")
    args = parser.parse_args(argv)
    if args.smoke:
        args.values, args.repeats, args.steps = [2, 6], 1, 12
    engines = ("espeak", "chattts") if args.engine == "both" else (args.engine,)
    if "chattts" in engines:
        ensure_checkpoint(args.checkpoint)
    print(
        f"text streamed {args.chars_per_delta} characters every {args.delta_interval_ms:g} ms, "
        f"{args.repeats} run(s) per opener; default --first-segment-min-chars "
        f"{Settings().first_segment_min_chars}"
    )
    headline: dict[str, Any] = {
        "bench": "first_segment",
        "default": Settings().first_segment_min_chars,
        "chars_per_delta": args.chars_per_delta,
        "delta_interval_ms": args.delta_interval_ms,
        "repeats": args.repeats,
        "openers": dict(OPENERS),
    }
    for engine in engines:
        results = {value: measure(args, engine, value) for value in args.values}
        headline[engine] = report(engine, results)
    print(json.dumps(headline, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
