"""Capacity side by side: how many concurrent real-time streams one engine serves, for
three designs in one run on the same engine model.

- ``seed``: the seed article's design: one request, one thread-pool job, the whole
  utterance, one at a time. The client does the best it can with it: it cuts the LLM's
  text as the server would (sentences, the first clause early), POSTs each piece to
  /v1/tts as soon as it is complete and plays the answers in order.
- ``interleave``: the server before batching: segments stream chunk by chunk, earliest
  playback deadline first, one utterance per GPT step (``--max-batch 1``).
- ``batched``: continuous batching: every stream's next token in one step.

A stream is LLM-like text (``--chars`` characters in deltas of 3 every 60 ms) on its own
WebSocket; streams start spread over ``--spread-s``. A stream passes when its first
audio comes within 1 s of its first text and a real-time player that starts 200 ms
after the first frame never runs dry. Capacity = the most concurrent streams with p95
time to first audio <= 1 s and zero underruns (ramped by doubling, ``--growth``, then
bisected: ``--quick`` is coarser).

Engine models: ``--engine modelled`` (default): a GPT step of a batch of n costs
``a + b * n`` (``server.engines.modelled.ModelledEngine``), with presets ``gpu`` (the host's
cost measured by bench/host_overhead.py plus a modelled H200 device step: bound by
per-step overhead, as on a GPU) and ``cpu`` (measured on the real-dims checkpoint on
these 2 cores by bench/batch_step.py), or ``--a-ms/--b-ms``; a forward of joining
segments' prompts costs ``--prefill-ms`` (default ``a``: as overhead-bound as a step)
plus ``b`` a prompt, whether it runs one prompt or the prompts of a round together
(``--prefill-together``, the server's default: the model assumes a GPU's forward of
short prompts costs its launches, as its eager steps did on the H200 measured);
``--engine chattts``: the real ChatTTS code on the tiny checkpoint (CPU). The model's audio
is a table lookup, the chunks a step makes for all its rows in one (ChatTTS's batched
engine vocodes the rows due together on the device and copies their audio to the host
once; it still joins each row's window, which the model leaves out), and the batched
design's server, either engine, may hold twice ``--max-streams`` rows (at least 256):
how many rows fit is the GPU's memory's to say (docs/gpu.md), not what is measured here
(``--set max_batch=256`` caps them as before).

    .venv/bin/python bench/capacity.py --quick            # gpu preset, < 50 s
    .venv/bin/python bench/capacity.py --preset cpu
    .venv/bin/python bench/capacity.py --engine chattts
    .venv/bin/python bench/capacity.py --smoke            # 1 and 2 streams (a test)
    .venv/bin/python bench/capacity.py --quick --a-ms 2 --b-ms 0.02 --designs batched \
        --compare ws_direct_send=false coalesce_wakeups=false   # a change, before and after

Each trial also reports the server process's own CPU per stream (the clients share the
cores, so a capacity gained by a lighter client shows there), the share of a core
each side used over the trial (server, clients), to tell which ran out, and how late
each side's event loop ran at worst (the server's from its ``tts_event_loop_lag_seconds``,
a timer due every 100 ms; the clients' by a timer due every 10 ms): averaged over a
trial, the CPU hides the burst of new streams a trial fails in. And how many joining
segments' prompts went in each forward (the server's ``tts_engine_prefill_rows``), and
the engine's steps and forwards a second over the trial: a burst starts as many
segments a second as forwards a second times prompts a forward. And how long streams took
to open (``setup_ms_p50``, ``setup_ms_max``: from a stream's time to start to its context
started, over the streams that got that far): where both sides' loops are out of CPU in
a burst, streams open late.
``--set NAME=VALUE`` gives every server a setting; ``--compare NAME=VALUE`` measures
each design a second time with those settings ("DESIGN before"), in the same run.

The server runs in a child process (its own GIL); the clients run here. Prints a table
and a final JSON line: capacity per design and the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import multiprocessing
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from chattts_client import AudioFrame, StreamClient

from harness.bench_server import (
    cpu_seconds,
    ensure_checkpoint,
    loop_lag_buckets,
    prompts_a_forward,
    sample_value,
    settings_overrides,
    worst_loop_lag,
)
from server.config import Settings

ROOT = Path(__file__).resolve().parent.parent

# An assistant's answer: a first clause of six characters (the earliest the server cuts
# for first audio), then sentences.
TEXT = "今天天气很好，我们一起去公园散步吧。欢迎使用流式语音合成服务，有问题随时问我。"
#: A GPU's batched step, ``a + b * n`` ms: the host's cost measured by
#: bench/host_overhead.py on these 2 cores (the deep checkpoint, one thread: launching the
#: step's 833 operations eagerly plus the bookkeeping around them; the median of four
#: runs, a = 5.4 to 10.0 ms, b under 0.0012 ms) and the device's as modelled there (an
#: H200: the weights read once, 2.5 us a kernel, each row's keys and values at position
#: 512). See docs/batching.md.
GPU_HOST_MS = (7.9, 0.0003)
GPU_DEVICE_MS = (2.17, 0.0073)
PRESETS = {
    "gpu": (GPU_HOST_MS[0] + GPU_DEVICE_MS[0], GPU_HOST_MS[1] + GPU_DEVICE_MS[1]),
    # bench/batch_step.py on these 2 cores, real dims: float32 96 ms at batch 1, 191 ms
    # at 16 (docs/batching.md); "cpu-int8": the INT8 GPT, 33 ms at 1, 92 ms at 16.
    "cpu": (90.0, 6.3),
    "cpu-int8": (29.0, 3.9),
}
DESIGNS = ("seed", "interleave", "batched")
TTFA_LIMIT_S = 1.0
PREBUFFER_S = 0.2
CHARS_PER_DELTA = 3
DELTA_INTERVAL_S = 0.06


# -- the server (child process) --------------------------------------------------------


def tiny_chattts(checkpoint: str) -> Any:
    """The ChatTTS engine on the tiny checkpoint. Random weights end at random (an EOS at
    step 0 is a segment without audio): every segment is 100 steps (2.1 s of audio)."""
    from server.engines.chattts.engine import ChatTTSEngine
    from server.engines.chattts.settings import ChatTTSSettings

    options = ChatTTSSettings(device="cpu", max_new_token=100, min_new_token=100)
    return ChatTTSEngine(checkpoint, options), False, None


def serve(
    design: str,
    engine_kind: str,
    a_ms: float,
    b_ms: float,
    checkpoint: str,
    overrides: dict[str, Any],
    host_share: float,
    prefill_ms: float | None,
    port: Any,
) -> None:
    import socket

    import uvicorn

    from server.app import create_app
    from server.engines.modelled import build_modelled
    from server.lifecycle import uvicorn_config

    # Factories that pickle: --set engine_process=true builds the engine in a child.
    factory: Any
    if engine_kind == "modelled":
        mode = {"seed": "whole", "interleave": "interleave", "batched": "batched"}[design]
        factory = functools.partial(
            build_modelled,
            step_a_s=a_ms / 1000,
            step_b_s=b_ms / 1000,
            mode=mode,
            host_share=host_share,
            prefill_s=None if prefill_ms is None else prefill_ms / 1000,
        )
        engine_setting: dict[str, Any] = {"engine": "espeak"}
    else:
        factory = functools.partial(tiny_chattts, checkpoint)
        engine_setting = {"engine": "chattts", "model_dir": Path(checkpoint)}
    settings = Settings(
        **engine_setting,
        max_batch=256 if design == "batched" else 1,
        max_active_segments=1 if design == "seed" else 8,
        max_streams=100_000,  # measure capacity, do not enforce it
        max_connections=4096,
        fallback_on_synthesis_failure=False,
        log_level="warning",
    ).replace(**overrides)
    app = create_app(settings, engine=factory)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port.put(sock.getsockname()[1])
    uvicorn.Server(uvicorn_config(app, settings, log_level="warning")).run(sockets=[sock])


# -- the clients -----------------------------------------------------------------------


class Verdict:
    """Decides a trial as soon as it is lost: an underrun, or more late first audio than
    its p95 allows (then the remaining streams are cut short: they would only cost time)."""

    def __init__(self, streams: int) -> None:
        self.allowed_late = streams - 1 - round(0.95 * (streams - 1))
        self.late = 0
        self.lost = asyncio.Event()

    def underrun(self) -> None:
        self.lost.set()

    def check_first_audio(self, stats: Stream) -> None:
        if stats.ttfa_s is None:
            self.late += 1
            if self.late > self.allowed_late:
                self.lost.set()


@dataclass
class Stream:
    ttfa_s: float | None = None
    underruns: int = 0
    #: Longest stall a player would have heard.
    stall_s: float = 0.0
    audio_s: float = 0.0
    errors: list[str] = field(default_factory=list)
    #: From the stream's time to start to its context started (the clients' loop waking
    #: it, connection, handshake, ``ready``, ``start``): both sides' loops in it.
    setup_s: float | None = None


async def streamed(
    url: str, text: str, delay_s: float, seed: int, stats: Stream, verdict: Verdict
) -> None:
    due = time.perf_counter() + delay_s  # when it is to start: a late loop counts
    await asyncio.sleep(delay_s)
    async with StreamClient.connect(url) as client:
        rate = client.ready["sample_rate"]
        ctx = await client.start(seed=seed)
        began = time.perf_counter()
        stats.setup_s = began - due
        asyncio.get_running_loop().call_later(TTFA_LIMIT_S, verdict.check_first_audio, stats)

        async def feed() -> None:
            for i in range(0, len(text), CHARS_PER_DELTA):
                await client.send_text(text[i : i + CHARS_PER_DELTA], ctx)
                await asyncio.sleep(DELTA_INTERVAL_S)
            await client.end(ctx)

        feeder = asyncio.create_task(feed())
        try:
            await listen(client, ctx, rate, began, stats, verdict)
        finally:
            feeder.cancel()
            await asyncio.gather(feeder, return_exceptions=True)


async def listen(
    client: StreamClient, ctx: str, rate: int, began: float, stats: Stream, verdict: Verdict
) -> None:
    """A real-time player of the context's audio: first audio, underruns."""
    play_start = 0.0
    async for event in client.events(timeout_s=120):
        now = time.perf_counter()
        if isinstance(event, AudioFrame):
            if stats.ttfa_s is None:
                stats.ttfa_s = now - began
                play_start = now + PREBUFFER_S
            if now > play_start + stats.audio_s:  # the player ran dry before this frame
                stats.underruns += 1
                stats.stall_s = max(stats.stall_s, now - play_start - stats.audio_s)
                play_start = now - stats.audio_s  # it resumes when the frame comes
                verdict.underrun()
            stats.audio_s += event.samples / rate
        elif event.get("type") == "error":
            stats.errors.append(event["code"])
        elif event.get("type") == "done":
            break


async def whole(
    base_url: str, text: str, delay_s: float, seed: int, stats: Stream, verdict: Verdict
) -> None:
    """The seed design, used as well as it can be: the client cuts the LLM's text where the
    server would (sentences, the first clause early) and POSTs each piece as soon as it is
    complete; each answer is the piece's whole audio; they play in order. (Its trials run
    to the end: a request cut short would go on on the server and delay the next one.)"""
    await asyncio.sleep(delay_s)
    segmenter = Settings().speech.segmenter(whole_text=False)  # the server's own cuts
    async with httpx.AsyncClient(base_url=base_url, timeout=300) as http:

        async def post(piece: str) -> tuple[bytes, float]:
            body = {"text": piece, "seed": seed, "format": "pcm"}
            response = await http.post("/v1/tts", json=body)
            if response.status_code != 200:
                stats.errors.append(str(response.status_code))
            return response.content, time.perf_counter()

        began = time.perf_counter()
        requests: list[asyncio.Task[tuple[bytes, float]]] = []
        for i in range(0, len(text), CHARS_PER_DELTA):
            for segment in segmenter.push(text[i : i + CHARS_PER_DELTA]):
                requests.append(asyncio.create_task(post(segment.text)))
            await asyncio.sleep(DELTA_INTERVAL_S)
        requests += [asyncio.create_task(post(s.text)) for s in segmenter.flush() if s.text.strip()]
        play_start = 0.0
        for request in requests:
            audio, arrived = await request
            if stats.ttfa_s is None:
                stats.ttfa_s = arrived - began
                play_start = arrived + PREBUFFER_S
            elif arrived > play_start + stats.audio_s:
                stats.underruns += 1
                stats.stall_s = max(stats.stall_s, arrived - play_start - stats.audio_s)
                play_start = arrived - stats.audio_s
            stats.audio_s += len(audio) / 2 / 24000


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


async def trial(design: str, port: int, streams: int, text: str, spread_s: float) -> dict[str, Any]:
    delays = [spread_s * i / max(1, streams - 1) for i in range(streams)] if streams > 1 else [0.0]
    stats = [Stream() for _ in delays]
    verdict = Verdict(streams)
    if design == "seed":
        base = f"http://127.0.0.1:{port}"
        runs = [whole(base, text, d, i, stats[i], verdict) for i, d in enumerate(delays)]
    else:
        url = f"ws://127.0.0.1:{port}/v1/stream"
        runs = [streamed(url, text, d, i, stats[i], verdict) for i, d in enumerate(delays)]
    tasks = [asyncio.create_task(run) for run in runs]
    lost = asyncio.create_task(verdict.lost.wait())
    pending: set[asyncio.Task[Any]] = set(tasks)
    while pending and not (design != "seed" and verdict.lost.is_set()):
        _, pending = await asyncio.wait({*pending, lost}, return_when=asyncio.FIRST_COMPLETED)
        pending.discard(lost)
    aborted = bool(pending)
    for task in [*pending, lost]:
        task.cancel()
    await asyncio.gather(*tasks, lost, return_exceptions=True)
    if aborted:
        await settle(port)
    ttfas = [r.ttfa_s for r in stats if r.ttfa_s is not None]
    errors = sum(len(r.errors) for r in stats) + (
        0 if aborted else sum(r.ttfa_s is None for r in stats)
    )
    underruns = sum(r.underruns for r in stats)
    ttfa_p95 = p95(ttfas) if ttfas and not verdict.late else float("inf")
    setups = [r.setup_s for r in stats if r.setup_s is not None]
    return {
        "streams": streams,
        "ttfa_p50_ms": round(statistics.median(ttfas) * 1000) if ttfas else None,
        "ttfa_p95_ms": round(ttfa_p95 * 1000) if ttfa_p95 != float("inf") else None,
        "late_first_audio": verdict.late,
        "underruns": underruns,
        "max_stall_ms": round(max(r.stall_s for r in stats) * 1000),
        "errors": errors,
        "cut_short": aborted,
        # How long streams took to open (the WebSocket designs): a burst the two sides'
        # loops cannot keep up with shows here before first audio does.
        "setup_ms_p50": round(statistics.median(setups) * 1000, 1) if setups else None,
        "setup_ms_max": round(max(setups) * 1000, 1) if setups else None,
        "passed": not aborted and errors == 0 and underruns == 0 and ttfa_p95 <= TTFA_LIMIT_S,
    }


async def server_metrics(port: int) -> str:
    """The server's /metrics page now."""
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        return (await http.get("/metrics")).text


class ClientLoopLag:
    """While entered, how late this process's event loop (the clients') runs a timer due
    every 10 ms: the worst, in ``worst_s``."""

    PERIOD_S = 0.01

    def __init__(self) -> None:
        self.worst_s = 0.0
        #: Timers run so far.
        self.ticks = 0
        self._task: asyncio.Task[None] | None = None

    def __enter__(self) -> ClientLoopLag:
        from server.app import time_the_loop  # the server's own timer (its lag metric)

        self._task = asyncio.get_running_loop().create_task(
            time_the_loop(self._observe, self.PERIOD_S)
        )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()

    def _observe(self, late_s: float) -> None:
        self.worst_s = max(self.worst_s, late_s)
        self.ticks += 1


async def settle(port: int) -> None:
    """Wait until the server has let go of every stream of a trial cut short."""
    deadline = time.monotonic() + 30
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        while time.monotonic() < deadline:
            text = (await http.get("/metrics")).text
            if "tts_active_streams 0.0" in text and "tts_engine_queue_depth 0.0" in text:
                return
            await asyncio.sleep(0.05)


async def capacity(
    design: str, server: multiprocessing.Process, port: int, args: argparse.Namespace, label: str
) -> tuple[int, list[dict[str, Any]]]:
    """Doubling until a level fails, then bisection between the last pass and that."""
    text = TEXT[: args.chars]
    log: list[dict[str, Any]] = []
    assert server.pid is not None
    pid = server.pid

    async def run(n: int) -> bool:
        metrics_before = await server_metrics(port)
        clients_lag = ClientLoopLag()
        started = time.perf_counter()
        cpu_before, clients_before = cpu_seconds(pid), time.process_time()
        with clients_lag:
            result = await trial(design, port, n, text, args.spread_s)
        wall_s = time.perf_counter() - started
        server_s, clients_s = cpu_seconds(pid) - cpu_before, time.process_time() - clients_before
        # How late each side's event loop ran at worst: the burst a trial fails in, which
        # the CPU averaged over the trial hides.
        metrics_after = await server_metrics(port)
        worst_s, late_ticks = worst_loop_lag(
            loop_lag_buckets(metrics_before), loop_lag_buckets(metrics_after)
        )
        # How many joining segments' prompts each forward took (prefill_together).
        result["prompts_a_forward"] = prompts_a_forward(metrics_before, metrics_after)
        # And the engine's rounds: steps and forwards a second, over the trial.
        for key, name in (
            ("steps", "tts_engine_steps_total"),
            ("forwards", "tts_engine_prefill_rows_count"),
        ):
            done = sample_value(metrics_after, name) - sample_value(metrics_before, name)
            result[f"engine_{key}_a_second"] = round(done / wall_s, 1)
        result["server_loop_lag_max_ms"] = round(worst_s * 1000) if worst_s < 1e9 else None
        result["server_loop_ticks_over_50ms"] = late_ticks
        result["client_loop_lag_max_ms"] = round(clients_lag.worst_s * 1000)
        result["client_loop_ticks"] = clients_lag.ticks
        server_lag = (
            "over 5 s" if result["server_loop_lag_max_ms"] is None
            else f"<= {result['server_loop_lag_max_ms']} ms"
        )  # fmt: skip
        # The server's own CPU (the clients share the cores): per stream of the trial; and
        # the clients' (this process), to tell which side ran out of core.
        result["server_cpu_ms_per_stream"] = round(server_s * 1000 / n, 2)
        result["client_cpu_ms_per_stream"] = round(clients_s * 1000 / n, 2)
        result["server_cores"] = round(server_s / wall_s, 2)
        result["client_cores"] = round(clients_s / wall_s, 2)
        result["seconds"] = round(wall_s, 1)
        result["design"] = label
        log.append(result)
        print(
            f"  {label:10} {n:5d} streams: TTFA p50 {result['ttfa_p50_ms']} ms, p95 "
            f"{result['ttfa_p95_ms']} ms ({result['late_first_audio']} late), opened in p50 "
            f"{result['setup_ms_p50']} ms (at most {result['setup_ms_max']}), underruns "
            f"{result['underruns']} (longest "
            f"{result['max_stall_ms']} ms), errors "
            f"{result['errors']} -> {'pass' if result['passed'] else 'FAIL'}"
            f"{' (cut short)' if result['cut_short'] else ''} ({result['seconds']} s; server "
            f"CPU {result['server_cpu_ms_per_stream']} ms a stream, {result['server_cores']} "
            f"of a core; clients {result['client_cpu_ms_per_stream']} ms, "
            f"{result['client_cores']}; event loop late at worst: server {server_lag}, "
            f"{late_ticks} ticks over 50 ms; clients {result['client_loop_lag_max_ms']} ms; "
            f"prompts a forward {result['prompts_a_forward']}, engine steps a second "
            f"{result['engine_steps_a_second']}, forwards {result['engine_forwards_a_second']})",
            flush=True,
        )
        return bool(result["passed"])

    # Ramp up to --max-streams itself (a ramp past it tries it rather than stopping
    # short), then bisect between the last level that passed and the first that failed.
    best, n = 0, 1
    while await run(n):
        best = n
        if n >= args.max_streams:
            print(f"  {label}: {n} streams passed, the most tried (--max-streams)", flush=True)
            return best, log
        n = min(n * args.growth, args.max_streams)
    low, high = best, n
    for _ in range(args.bisect):
        if high - low <= max(1, low // 8):
            break
        middle = (low + high) // 2
        if await run(middle):
            low = middle
        else:
            high = middle
    return low, log


def start_server(
    design: str, args: argparse.Namespace, overrides: dict[str, Any] | None = None
) -> tuple[multiprocessing.Process, int]:
    overrides = settings_overrides(args.set, "--set") if overrides is None else overrides
    if design == "batched":
        # The engine's rows are not what is measured: room for every stream's current and
        # next segment (a GPU's memory sets its own --max-batch: docs/gpu.md).
        overrides = {"max_batch": max(256, 2 * args.max_streams), **overrides}
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(
        target=serve,
        args=(
            design,
            args.engine,
            args.a_ms,
            args.b_ms,
            str(args.checkpoint),
            overrides,
            args.host_share,
            args.prefill_ms,
            queue,
        ),
        # Not a daemon: with engine_process on, it starts the engine's process. The
        # callers end it (terminate: uvicorn shuts down and closes the engine).
        daemon=False,
    )
    process.start()
    try:
        port = int(queue.get(timeout=120))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=5).status_code == 200:
                    return process, port
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"the {design} server did not become ready")
    except BaseException:
        process.terminate()
        raise


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line, with the preset's step costs and the run's size resolved."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("modelled", "chattts"), default="modelled")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="gpu")
    parser.add_argument("--a-ms", type=float, help="fixed cost of a step (overrides the preset)")
    parser.add_argument("--b-ms", type=float, help="cost per utterance in a step")
    parser.add_argument(
        "--host-share",
        type=float,
        default=0.0,
        help="share of each modelled step spent holding the GIL (the host's work), the rest "
        "asleep (the device's); the gpu preset's host share is 0.78",
    )
    parser.add_argument(
        "--prefill-ms",
        type=float,
        help="cost of a forward of joining segments' prompts, plus b a prompt (default: a, "
        "as overhead-bound as a step); one prompt a forward with --set prefill_together=false",
    )
    parser.add_argument("--chars", type=int, default=31, help="characters each stream speaks")
    parser.add_argument(
        "--spread-s", type=float, default=2.0, help="streams start spread over this"
    )
    parser.add_argument("--max-streams", type=int, default=512)
    parser.add_argument("--growth", type=int, default=2, help="ramp factor between levels")
    parser.add_argument("--bisect", type=int, default=4, help="bisection steps after the ramp")
    parser.add_argument("--checkpoint", type=Path, default=ROOT / "checkpoints" / "tiny")
    parser.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="NAME=VALUE",
        help="server settings for every design (as flags: prefills_per_step=4)",
    )
    parser.add_argument(
        "--compare",
        nargs="*",
        default=[],
        metavar="NAME=VALUE",
        help="also measure each design with these settings ('DESIGN before'), in the same run",
    )
    parser.add_argument(
        "--designs", nargs="+", choices=DESIGNS, default=list(DESIGNS), help="designs to measure"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="17 characters a stream, 1 s spread, levels x4 then 2 bisection steps (< 50 s)",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="6 characters, at most 2 streams (a test)"
    )
    args = parser.parse_args(argv)
    preset_a, preset_b = PRESETS[args.preset]
    args.a_ms = preset_a if args.a_ms is None else args.a_ms
    args.b_ms = preset_b if args.b_ms is None else args.b_ms
    if args.quick:
        args.chars, args.spread_s, args.growth, args.bisect = 17, 1.0, 4, 2
    if args.smoke:
        args.chars, args.spread_s, args.max_streams, args.bisect = 6, 0.2, 2, 0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.engine == "chattts":
        ensure_checkpoint(args.checkpoint)
    began = time.perf_counter()
    model = (
        f"a = {args.a_ms} ms, b = {args.b_ms} ms" if args.engine == "modelled" else "ChatTTS tiny"
    )
    print(f"capacity: {args.engine} engine ({model}), {args.chars} characters per stream")
    capacities: dict[str, int] = {}
    trials: list[dict[str, Any]] = []
    variants = {"": settings_overrides(args.set, "--set")}
    if args.compare:
        # One list, --compare's pairs last: a setting of a bundle (prefill, heap, ...)
        # given to each keeps the other's, where merging the bundles would not.
        variants[" before"] = settings_overrides([*args.set, *args.compare], "--compare")
    for design in args.designs:
        for suffix, overrides in variants.items():
            label = design + suffix
            starting = time.perf_counter()
            process, port = start_server(design, args, overrides)
            print(f"  {label} server ready in {time.perf_counter() - starting:.1f} s", flush=True)
            try:
                capacities[label], log = asyncio.run(capacity(design, process, port, args, label))
                trials += log
            finally:
                process.terminate()
                process.join(10)
    elapsed = time.perf_counter() - began

    def ratio(base: str) -> float | None:
        if capacities.get(base) and "batched" in capacities:
            return round(capacities["batched"] / capacities[base], 2)
        return None

    def cpu_per_stream(label: str) -> float | None:
        """The server's CPU per stream in the largest trial that passed."""
        passed = [t for t in trials if t["design"] == label and t["passed"]]
        best = max(passed, key=lambda t: t["streams"], default=None)
        return None if best is None else best["server_cpu_ms_per_stream"]

    print()
    print(f"{'design':16} {'capacity (streams)':>18} {'server CPU ms a stream':>24}")
    for label, streams in capacities.items():
        print(f"{label:16} {streams:>18} {cpu_per_stream(label)!s:>24}")
    if args.compare:
        print(f"before: {' '.join(args.compare)}")
    print(f"batched / seed: {ratio('seed')}, batched / interleave: {ratio('interleave')}")
    print(f"({elapsed:.0f} s)")
    print(
        json.dumps(
            {
                "bench": "capacity",
                "smoke": args.smoke,
                "engine": args.engine,
                "a_ms": args.a_ms if args.engine == "modelled" else None,
                "b_ms": args.b_ms if args.engine == "modelled" else None,
                "host_share": args.host_share,
                "prefill_ms": args.prefill_ms,
                "chars": args.chars,
                "capacity": capacities,
                "server_cpu_ms_per_stream": {label: cpu_per_stream(label) for label in capacities},
                "settings": args.set,
                "compare": args.compare,
                "ratio_vs_seed": ratio("seed"),
                "ratio_vs_interleave": ratio("interleave"),
                "seconds": round(elapsed, 1),
                "trials": trials,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
