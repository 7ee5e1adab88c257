"""The phrase cache: first audio of a phrase said before against the same phrase
synthesised, in one run, through a real server.

One server (a child process, the phrase cache at its default size) is asked, one
request at a time, for a two-segment phrase on ``POST /v1/tts`` (streamed pcm) and over
the WebSocket (a context with its seed, the phrase in one text message, then end):

- *synthesised*: a seed not used before (a miss: the engine makes it),
- *cached*: the seed of the run before (a hit: every segment from the cache),

interleaved, ``--repeats`` times each. Reported: the server's own time to first audio
(``X-TTS-First-Audio-Ms``, from the request's arrival to its first audio frame), the
client's time to the first body byte (HTTP) and to the first audio frame (WebSocket),
medians and p95, and the cache's hits and misses of each kind of run read from
``/metrics`` (a run where a cached request missed, or a new one hit, is refused). The goal: a hit's first audio within
5 ms of server time.

    .venv/bin/python bench/phrase_cache.py                 # ChatTTS, tiny checkpoint
    .venv/bin/python bench/phrase_cache.py --checkpoint checkpoints/full --steps 40
    .venv/bin/python bench/phrase_cache.py --engine espeak
    .venv/bin/python bench/phrase_cache.py --smoke         # does it run? (2 runs, 24 steps)

ChatTTS runs on the CPU with random weights, every segment ``--steps`` GPT steps long.
Ends with one JSON line of the headline figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import numpy as np

from harness.bench_server import add_engine_arguments, ensure_checkpoint, start_server, wait_ready

TEXT = "您好，欢迎致电客服中心。请问有什么可以帮您？"
KINDS = ("synthesised", "cached")


def http_first_audio(http: Any, seed: int) -> tuple[float, float]:
    """(server ms to first audio, client ms to the first body byte) of one request."""
    body = {"text": TEXT, "seed": seed, "format": "pcm", "stream": True}
    started = time.perf_counter()
    with http.stream("POST", "/v1/tts", json=body) as response:
        response.raise_for_status()
        server_ms = float(response.headers["X-TTS-First-Audio-Ms"])
        client_ms = None
        for chunk in response.iter_raw():
            if chunk and client_ms is None:
                client_ms = (time.perf_counter() - started) * 1000
    assert client_ms is not None, "no audio"
    return server_ms, client_ms


async def ws_first_audio(url: str, seed: int) -> float:
    """Client ms from the text sent to the first audio frame of one context."""
    from chattts_client import StreamClient

    async with StreamClient.connect(url) as tts:
        ctx = await tts.open(seed=seed)
        sent = time.perf_counter()
        await tts.send_text(TEXT, ctx)
        await tts.end(ctx)
        first_ms = None
        async for event in tts.events(timeout_s=600):
            if first_ms is None and not isinstance(event, dict):
                first_ms = (time.perf_counter() - sent) * 1000
            if isinstance(event, dict) and event["type"] == "done":
                break
    assert first_ms is not None, "no audio"
    return first_ms


def counters(http: Any) -> dict[str, float]:
    found = {}
    for line in http.get("/metrics").text.splitlines():
        if line.startswith(("tts_phrase_cache_hits_total", "tts_phrase_cache_misses_total")):
            name, value = line.rsplit(" ", 1)
            found[name] = float(value)
    return found


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import httpx

    child, port = start_server(args.engine, args.checkpoint, args.steps)
    runs: dict[str, dict[str, list[float]]] = {
        kind: {"server_ms": [], "http_client_ms": [], "ws_client_ms": []} for kind in KINDS
    }
    tally = {kind: np.zeros(2) for kind in KINDS}  # (hits, misses) of each kind's runs
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as http:
            wait_ready(http, deadline_s=300)
            http_first_audio(http, seed=1)  # warm: the first request's lazy costs
            url = f"ws://127.0.0.1:{port}/v1/stream"
            for repeat in range(args.repeats):
                seed = 1000 + repeat
                for kind in KINDS:  # the same seed: first made, then said again
                    before = counters(http)
                    server_ms, client_ms = http_first_audio(http, seed)
                    ws_ms = asyncio.run(ws_first_audio(url, seed + 100_000))
                    tally[kind] += _delta(before, counters(http))
                    runs[kind]["server_ms"].append(server_ms)
                    runs[kind]["http_client_ms"].append(client_ms)
                    runs[kind]["ws_client_ms"].append(ws_ms)
    finally:
        child.terminate()
        child.join(10)
    return {"runs": runs, "tally": tally}


def _delta(before: dict[str, float], after: dict[str, float]) -> np.ndarray:
    """(hits, misses) between two readings of the counters."""
    hits = 'tts_phrase_cache_hits_total{tier="local"}'
    misses = "tts_phrase_cache_misses_total"
    return np.array([after.get(k, 0.0) - before.get(k, 0.0) for k in (hits, misses)])


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(0.95 * len(ordered)) - 1)]


def report(args: argparse.Namespace, found: dict[str, Any]) -> dict[str, Any]:
    runs, tally = found["runs"], found["tally"]
    headline: dict[str, Any] = {"bench": "phrase_cache", "smoke": args.smoke,
                                "engine": args.engine, "repeats": args.repeats}  # fmt: skip
    for kind in KINDS:
        headline[f"{kind}_hits"], headline[f"{kind}_misses"] = (int(n) for n in tally[kind])
    print(f"engine {args.engine}, a two-sentence phrase ({len(TEXT)} characters), "
          f"{args.repeats} runs each over HTTP and the WebSocket; cache hits/misses: "
          f"synthesised {tally['synthesised'][0]:.0f}/{tally['synthesised'][1]:.0f}, "
          f"cached {tally['cached'][0]:.0f}/{tally['cached'][1]:.0f}")  # fmt: skip
    print(f"{'first audio':<28} {'synthesised p50':>16} {'p95':>8} {'cached p50':>11} {'p95':>8}")
    for figure, label in (("server_ms", "server (X-TTS-First-Audio)"),
                          ("http_client_ms", "HTTP client, first byte"),
                          ("ws_client_ms", "WebSocket client, frame")):  # fmt: skip
        cells = []
        for kind in KINDS:
            values = runs[kind][figure]
            p50 = statistics.median(values)
            headline[f"{kind}_{figure.removesuffix('_ms')}_p50_ms"] = round(p50, 2)
            headline[f"{kind}_{figure.removesuffix('_ms')}_p95_ms"] = round(_p95(values), 2)
            cells.append(f"{p50:>14.1f}ms {_p95(values):>6.1f}ms")
        print(f"{label:<28} {cells[0]} {cells[1]}")
    headline["cached_server_goal_met"] = headline["cached_server_p50_ms"] <= 5.0
    return headline


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_engine_arguments(parser)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--smoke", action="store_true",
                        help="two runs of each, 24 GPT steps a segment: checks it runs (the "
                        "suite runs it)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.smoke:
        args.repeats, args.steps = 2, 24
    if args.engine == "chattts":
        ensure_checkpoint(args.checkpoint)
    found = measure(args)
    cached, synthesised = found["tally"]["cached"], found["tally"]["synthesised"]
    if cached[1] or not cached[0] or synthesised[0]:
        raise SystemExit(f"the cached runs must all hit and the others miss: {found['tally']}")
    print(json.dumps(report(args, found)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
