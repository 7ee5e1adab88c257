"""HTTP streaming: time to first byte against total time, streamed and buffered, one run.

One server (a child process) speaks the same three-segment text through:

- ``POST /v1/tts`` buffered (the baseline: the whole file once the text is spoken),
- ``POST /v1/tts`` with ``"stream": true`` (wav),
- ``POST /v1/audio/speech`` (OpenAI's API), pcm, mp3 and ulaw (G.711 at 8 kHz, for
  telephony; always streamed),

one request at a time, ``--repeats`` times each, interleaved. Reported per route: time
to first body byte and total time (medians, and the TTFB p95), TTFB as a share of the
total, and each streamed route's TTFB against the buffered one's.

    .venv/bin/python bench/http_streaming.py                    # ChatTTS, tiny checkpoint
    .venv/bin/python bench/http_streaming.py --engine espeak
    .venv/bin/python bench/http_streaming.py --checkpoint checkpoints/full --steps 40
    .venv/bin/python bench/http_streaming.py --smoke      # does it run? (one run, 12 steps)

ChatTTS runs on the CPU with random weights, so every segment is ``--steps`` GPT steps
long (random weights end at random). Ends with one JSON line of the headline figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from harness.bench_server import add_engine_arguments, ensure_checkpoint, start_server, wait_ready

TEXT = "今天天气很好，我们去公园散步吧。公园里有很多花，红的黄的都有。傍晚我们再回家做饭。"
ROUTES: dict[str, tuple[str, dict[str, Any]]] = {
    "tts_buffered": ("/v1/tts", {"text": TEXT, "format": "wav"}),
    "tts_streamed": ("/v1/tts", {"text": TEXT, "format": "wav", "stream": True}),
    "speech_pcm": ("/v1/audio/speech",
                   {"model": "tts-1", "voice": "alloy", "input": TEXT, "response_format": "pcm"}),
    "speech_mp3": ("/v1/audio/speech",
                   {"model": "tts-1", "voice": "alloy", "input": TEXT, "response_format": "mp3"}),
    "speech_ulaw": ("/v1/audio/speech",
                    {"model": "tts-1", "voice": "alloy", "input": TEXT, "response_format": "ulaw"}),
}  # fmt: skip


def timed(http: Any, path: str, body: dict[str, Any]) -> tuple[float, float, int]:
    """(seconds to the first body byte, seconds to the last, bytes)."""
    started = time.perf_counter()
    first = None
    size = 0
    with http.stream("POST", path, json=body) as response:
        response.raise_for_status()
        for chunk in response.iter_raw():
            if first is None and chunk:
                first = time.perf_counter() - started
            size += len(chunk)
    return first or 0.0, time.perf_counter() - started, size


def measure(
    engine: str, checkpoint: Path, steps: int, repeats: int, warm_up: bool = True
) -> dict[str, list[Any]]:
    """Start the server in a child process; (TTFB, total, bytes) of each route's runs."""
    import httpx

    # The phrase cache off: OpenAI's route speaks the preset alloy (its own seed), so the
    # repeats would be hits; this measures synthesis.
    child, port = start_server(engine, checkpoint, steps, phrase_cache_mb=0)
    results: dict[str, list[Any]] = {name: [] for name in ROUTES}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as http:
            wait_ready(http, deadline_s=300)
            for path, body in ROUTES.values() if warm_up else ():
                timed(http, path, body)  # warm: ffmpeg, caches, the first requests
            for _ in range(repeats):
                for name, (path, body) in ROUTES.items():
                    results[name].append(timed(http, path, body))
    finally:
        child.terminate()
        child.join(10)
    return results


def report(args: argparse.Namespace, results: dict[str, list[Any]]) -> dict[str, Any]:
    """Print the table; the headline figures."""
    headline: dict[str, Any] = {"bench": "http_streaming", "smoke": args.smoke,
                                "engine": args.engine, "repeats": args.repeats}  # fmt: skip
    base_ttfb = statistics.median(r[0] for r in results["tts_buffered"])
    print(f"engine {args.engine}, three segments ({len(TEXT)} characters), {args.repeats} runs")
    print(f"{'route':<14} {'TTFB p50':>9} {'TTFB p95':>9} {'total p50':>10} {'TTFB/total':>11}"
          f" {'TTFB vs buffered':>17}")  # fmt: skip
    for name, runs in results.items():
        ttfb = statistics.median(r[0] for r in runs)
        ttfb95 = sorted(r[0] for r in runs)[max(0, round(0.95 * len(runs)) - 1)]
        total = statistics.median(r[1] for r in runs)
        print(f"{name:<14} {ttfb * 1000:>7.0f}ms {ttfb95 * 1000:>7.0f}ms {total * 1000:>8.0f}ms"
              f" {ttfb / total:>11.2f} {ttfb / base_ttfb:>16.2f}x")  # fmt: skip
        headline[f"{name}_ttfb_ms"] = round(ttfb * 1000, 1)
        headline[f"{name}_total_ms"] = round(total * 1000, 1)
    headline["streamed_ttfb_vs_buffered"] = round(
        headline["tts_streamed_ttfb_ms"] / headline["tts_buffered_ttfb_ms"], 3
    )
    return headline


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_engine_arguments(parser)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--smoke", action="store_true",
                        help="one run of each route, 12 GPT steps a segment, no warm-up: checks "
                        "it runs (the suite runs it)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.smoke:
        args.repeats, args.steps = 1, 12
    if args.engine == "chattts":
        ensure_checkpoint(args.checkpoint)
    results = measure(args.engine, args.checkpoint, args.steps, args.repeats, not args.smoke)
    print(json.dumps(report(args, results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
