"""Server overhead: our server against a bare ``websockets`` server, 1,000 streams at once.

Both servers run in a child process each (measured one after the other, in this run),
on the same wire format (no permessage-deflate: PCM does not compress), with an engine
that costs nothing (audio is ready the moment it is asked for), so what
is measured is the server itself: protocol, segmentation, text preparation, scheduling,
the speech pipeline, framing and the socket. The bare server is the yardstick: for each
stream it answers the same messages with the same JSON events and the same binary
frames (sizes copied from what our server sent in a first pass), straight from a
``websockets`` handler. Between the two, the *stack* server is what ours stands on doing
nothing of its own: uvicorn configured as ours, our route's Starlette ``WebSocket`` and
our write path (``server.ws.wire``), replaying the same messages; ours less the stack is
the CPU our own code spends (protocol core, text, engine hand-over, speech pipeline,
sessions, metrics and logs).

Reported: server CPU (user + system, from /proc) per 100 ms of audio sent, and time to
first audio (text sent -> first frame received) p50/p99 for both; the server-added
time is ours minus the bare server's at each percentile; the stack's CPU against the
bare server's (``stack_cpu_ratio_vs_bare``). Our server's CPU is also split
by thread: the event loop's (the main thread) and the others' (the engine thread, the
text front-end): what moving the engine out of the process could give the loop. All
connections are opened first (they stay open together); the streams then start spread
over ``--spread-s``.

``--baseline REF`` measures, as "before", our server as the git revision ``REF`` has it
(its ``server/`` and ``streaming/``, from ``git archive``), in the same run, alternating;
``REF`` may also be a directory holding a ``server/`` and a ``streaming/`` (one that
``bench/compiled_tree.py`` compiled, say).
``--compare NAME=VALUE ...`` measures our server a second time with those settings
("before": e.g. ``ws_direct_send=false coalesce_wakeups=false``), in the same run,
alternating with the defaults for ``--rounds`` rounds (each figure is the median over
the rounds), so that a change is judged on the same machine at the same moment.
``--set NAME=VALUE ...`` gives every run of our server a setting (``--compare``'s on top).

    .venv/bin/python bench/server_overhead.py                # 1,000 streams
    .venv/bin/python bench/server_overhead.py --streams 200
    .venv/bin/python bench/server_overhead.py --compare ws_direct_send=false --rounds 3
    .venv/bin/python bench/server_overhead.py --set engine_process=true --compare engine_process=false
    .venv/bin/python bench/server_overhead.py --baseline a52c62e --rounds 3
    .venv/bin/python bench/server_overhead.py --smoke   # does it run? (40 streams)

``--profile`` samples our server with py-spy (``pip install py-spy``; ``--nonblocking``,
250 Hz or ``--profile-rate``, every thread, ``--gil``: only a thread holding the GIL, so
each sample is CPU spent, none is waiting) while the streams run, sorts the event loop's
samples into what they were doing (:data:`PROFILE_CATEGORIES`: the first that matches a
frame of the sample's stack) and reports each as microseconds of the loop's CPU per
stream (its share of the samples times the loop's CPU per stream, from /proc);
``--profile-raw PATH`` keeps py-spy's samples (``PATH.ours``, ``PATH.before``).

Each server's requests of the kernel are counted too, per stream, from /proc: its write
system calls (a socket's, and a thread waking the event loop), its threads' context
switches and its minor page faults. ``--perf`` samples every server (ours, the stack, the
bare one) with Linux ``perf record`` (999 Hz, user and kernel code) in each round and
reports where the code each sample was in lives, as microseconds of the server's CPU per
stream, the mean over the rounds: the Python interpreter (CPython's own C modules with
it), the kernel, NumPy, uvloop, libc, the rest (:data:`CODE_PLACES`). What a compiled per-stream path could save is at most the
interpreter's share beyond the bare server's.

Ends with one JSON line of the headline figures. Goal: CPU <= 2.0x the bare server's,
added time to first audio p50 <= 100 ms, with 1,000 streams.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.bench_server import (
    cpu_seconds,
    kernel_counts,
    main_thread_cpu_seconds,
    settings_overrides,
)

ROOT = Path(__file__).resolve().parent.parent

TEXT = "你好，欢迎使用流式语音合成。"


#: What the event loop was doing in a profile sample, by the frames of its stack.
PROFILE_CATEGORIES = [
    ("socket writes", r"^Wire\.flush|^WebSocketsSansIOProtocol\.send |^Protocol\.send_|^Frame\.ser"),
    ("float to PCM16", r"^float_to_pcm16"),
    ("speech pipeline (joins, resampling, framing)", r"^SpeechPipeline\."),
    ("JSON events", r"^encode_event|^ServerMessage\.to_json"),
    ("sending a message (ASGI layers or the wire)", r"^Wire\.send_|^AsgiWire\.|^Session\.send|^Session\._send|^WebSocket\.send |sender "),
    ("engine hand-over", r"^_hand_over|^Handoff\._hand_over|^Job\.receive|^Job\.chunks"),
    ("text front-end hand-off", r"^UtteranceText\.|^TextFrontend\.submit|^wrap_future|^_chain_future|_copy_future_state|_call_set_state"),
    ("connection set-up (upgrade, handshake, accept, session objects)", r"handle_websocket_upgrade|^WebSocketsSansIOProtocol\.(handle_connect|__init__)|^WebSocket\.accept|^UtteranceTask\.__init__|^Utterance\.__init__|^Session\.__init__|^HttpToolsProtocol|connection_made|^GuardedHttp"),
    ("client messages (parse, segmenter, core)", r"^Session\._read|^WebSocketsSansIOProtocol\.data_received|^Session\._apply"),
    ("job submission", r"^EngineWorker\.submit"),
    ("session and context tasks (read loop, timers, speaker loop, teardown)", r"connection_lost|handle_close|^Session\.run|^run_websocket|^UtteranceTask\.|^Utterance\.|^UtteranceState\.|^SegmentSynthesizer|^pack_audio_header"),
    ("ASGI app entry per connection (middleware, routing)", r"Middleware|TransportTap|Router|solve_dependencies|websocket_session|get_websocket_app|RequestLog|BodyLimit|JsonBodies|FastAPI"),
]  # fmt: skip
LOOP_ITSELF = "the event loop itself (uvloop: polling, reading sockets, callbacks)"


def start_profiler(pid: int, path: Path, rate_hz: int = 250) -> subprocess.Popen[bytes]:
    """py-spy recording every thread of ``pid`` into ``path`` (raw) until SIGINT."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        raise SystemExit("--profile needs py-spy (pip install py-spy)")
    # --gil: only samples of a thread holding the GIL, so that each is CPU it spent.
    command = [spy, "record", "--nonblocking", "--threads", "--gil", "--rate", str(rate_hz)]
    command += ["--pid", str(pid)]
    command += ["--output", str(path), "--format", "raw"]
    profiler = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached
    return profiler


#: Where the code a ``perf`` sample was in lives (its shared object), the first that
#: matches: NumPy's extension modules before CPython's own (both ``_name.cpython-...``).
CODE_PLACES = [
    ("NumPy", r"^_multiarray|^_umath|^_pocketfft|^_mt19937|^_generator|^_bounded|openblas"),
    ("the Python interpreter", r"^libpython|^python3|^_[a-z0-9_]+\.cpython-"),
    ("the kernel (system calls, sockets, scheduling, page faults)", r"^\["),
    ("uvloop (libuv)", r"^loop\.cpython"),
    ("libc (memory, strings)", r"^lib(c|m|pthread)[.-]"),
]
OTHER_PLACE = "other compiled code (orjson, httptools, the vDSO, ...)"


class PerfRecording:
    """``perf record`` sampling process ``pid`` (every thread, user and kernel code,
    999 Hz) from now until :meth:`stop`; :meth:`close` always, after."""

    def __init__(self, pid: int) -> None:
        handle, name = tempfile.mkstemp(suffix=".perf")
        os.close(handle)
        self.path = Path(name)
        command = ["perf", "record", "--quiet", "-F", "999", "-p", str(pid), "-o", name]
        self._recorder = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        time.sleep(1.0)  # attached, or gone
        if self._recorder.poll() is not None:
            self.close()
            raise SystemExit(f"--perf: perf record did not attach to {pid}: {self._said()}")

    def stop(self) -> str:
        """Stop sampling; ``perf report --sort dso``'s text of what was sampled."""
        self._recorder.send_signal(signal.SIGINT)
        self._recorder.wait(60)
        report = subprocess.run(
            ["perf", "report", "--input", str(self.path), "--sort", "dso", "--stdio"],
            capture_output=True, text=True,
        )  # fmt: skip
        if report.returncode != 0:
            raise SystemExit(f"--perf: perf report failed: {report.stderr.strip()}")
        if re.search(r"of event '[^']*:u'", report.stdout):
            print("--perf: perf sampled user code only (kernel.perf_event_paranoid): the "
                  "kernel's share is left out", file=sys.stderr)  # fmt: skip
        return report.stdout

    def close(self) -> None:
        if self._recorder.poll() is None:
            self._recorder.kill()
            self._recorder.wait()
        self.path.unlink(missing_ok=True)

    def _said(self) -> str:
        assert self._recorder.stderr is not None
        with self._recorder.stderr:
            return self._recorder.stderr.read().decode(errors="replace").strip()


def code_places(report: str, cpu_us_per_stream: float) -> dict[str, float]:
    """``perf report --sort dso`` output (``  60.63%  libpython3.11.so.1.0`` lines) as
    microseconds of CPU per stream by :data:`CODE_PLACES`, the most first."""
    shares: dict[str, float] = {}
    for line in report.splitlines():
        found = re.match(r"\s*([\d.]+)%\s+(\S+)", line)
        if found is None:
            continue
        dso = found.group(2)
        place = next((n for n, pattern in CODE_PLACES if re.search(pattern, dso)), OTHER_PLACE)
        shares[place] = shares.get(place, 0.0) + float(found.group(1))
    total = sum(shares.values()) or 1.0
    ranked = sorted(shares.items(), key=lambda item: -item[1])
    return {k: round(v * cpu_us_per_stream / total) for k, v in ranked}


def _category(names: list[str]) -> str:
    for category, pattern in PROFILE_CATEGORIES:
        if any(re.search(pattern, name) for name in names):
            return category
    return LOOP_ITSELF if names and names[-1].startswith("Runner.run") else "other"


def loop_profile(path: Path, loop_us_per_stream: float) -> dict[str, float]:
    """The main thread's samples in ``path`` by category, as microseconds per stream."""
    counts: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not frames or not frames[0].endswith("MainThread"):
            continue
        names = [frame.split(" (", 1)[0] + " " for frame in frames[1:]]
        counts[_category(names)] += int(count)
    total = sum(counts.values()) or 1
    return {k: round(n * loop_us_per_stream / total) for k, n in counts.most_common()}


def hottest(path: Path, loop_us_per_stream: float, count: int = 20) -> list[tuple[str, float]]:
    """The functions the event loop's samples in ``path`` were in (their own code, not
    what they called), as microseconds per stream, the most first."""
    own: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        frames = stack.split(";")
        if len(frames) > 1 and frames[0].endswith("MainThread"):
            own[frames[-1]] += int(samples)
    total = sum(own.values()) or 1
    return [(name, n * loop_us_per_stream / total) for name, n in own.most_common(count)]


# -- the two servers (child processes) --------------------------------------------------


class InstantEngine:
    """Audio ready the moment it is asked for: slices of one tone made in advance."""

    name = "instant"
    sample_rate_hz = 24_000
    interleaves = True

    def __init__(self, ms_per_char: int = 120, chunk_ms: int = 100) -> None:
        import numpy as np

        n = np.arange(24_000 * 10)
        self._tone = (0.3 * np.sin(2 * np.pi * 220 * n / 24_000)).astype(np.float32)
        self._ms_per_char = ms_per_char
        self._chunk = 24 * chunk_ms

    def warm_up(self) -> None:
        pass

    def synthesize(self, request: Any, should_stop: Any) -> Any:
        total = 24 * self._ms_per_char * len(request.text)
        for start in range(0, total, self._chunk):
            yield self._tone[start : min(start + self._chunk, total)]

    def check_voice(self, voice: str) -> None:
        pass

    def release_idle_memory(self) -> None:
        pass

    def voice_from_clip(self, audio: Any, sample_rate_hz: int) -> str:
        raise ValueError("no clips")

    def batcher(self, max_batch: int) -> None:
        return None

    def close(self) -> None:
        pass


#: Tells a child started by :func:`start_baseline` that it is one, and where its code is.
_BASELINE_CHILD = "--serve-baseline"


class _PrintedPort:
    """A baseline child's port, written to its stdout for :func:`start_baseline`."""

    def put(self, port: int) -> None:
        print(port, flush=True)


def instant_engine() -> tuple[InstantEngine, bool, None]:
    """The engine factory (it pickles: ``--compare engine_process=...``)."""
    return InstantEngine(), False, None


def serve_ours(
    port_queue: Any, overrides: dict[str, Any] | None = None, root: str | None = None
) -> None:
    """Our server; ``root``: the checkout whose ``server`` it must be running (a
    ``--baseline``, whose child has it first on its PYTHONPATH)."""
    import socket

    import uvicorn

    import server
    from server.app import create_app
    from server.config import Settings
    from server.lifecycle import uvicorn_config

    if root is not None and not server.__file__.startswith(root):  # not the baseline's
        raise SystemExit(f"the baseline server came from {server.__file__}, not {root}")

    settings = Settings(
        engine="espeak",
        max_connections=100_000,
        max_streams=100_000,
        fallback_on_synthesis_failure=False,
        log_level="warning",
    ).replace(**(overrides or {}))
    app = create_app(settings, engine=instant_engine)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port_queue.put(sock.getsockname()[1])
    uvicorn.Server(uvicorn_config(app, settings)).run(sockets=[sock])


def serve_bare(port_queue: Any, script: list[Any]) -> None:
    """Replays ``script`` (the messages our server sent a stream) for every stream."""
    import uvloop
    from websockets.asyncio.server import serve

    async def handler(ws: Any) -> None:
        await ws.send(script[0])  # ready
        async for message in ws:
            if '"end"' in message:
                for item in script[1:]:
                    await ws.send(item)
                return

    async def main() -> None:
        # No compression, as our server (PCM does not compress).
        async with serve(
            handler, "127.0.0.1", 0, max_size=None, backlog=4096, compression=None
        ) as server:
            port_queue.put(server.sockets[0].getsockname()[1])
            await asyncio.Future()

    uvloop.run(main())


def serve_stack(port_queue: Any, script: list[Any]) -> None:
    """The stack our server stands on, doing nothing of its own: uvicorn configured as
    ours (``server.lifecycle.uvicorn_config``: httptools behind our connection guard,
    websockets-sansio with our keepalive, uvloop), our server's route to the streaming
    WebSocket (Starlette's ``WebSocket``, accepted; client messages read through ASGI)
    and our write path (``server.ws.wire.Wire``: frames written straight to the
    protocol, one write a round; the send buffer bounded as ours bounds it), replaying
    ``script`` as the bare server does. What any server on this stack pays for the same
    messages: the floor under ours. A floor on the low side: it sends everything after
    ``end`` in one round of the loop (few writes), where ours sends as the text is read
    and the audio made, over several rounds."""
    import socket

    import uvicorn
    from starlette.websockets import WebSocket

    from server.config import Settings
    from server.lifecycle import uvicorn_config
    from server.transport import SCOPE_KEY, bound_send_buffer, tap
    from server.ws.wire import Wire, frame_header

    settings = Settings(engine="espeak", log_level="warning")

    class ReplayWire(Wire):
        async def replay(self, message: str | bytes) -> None:
            """One recorded message as it was sent: a text or a binary frame."""
            await self._ready()
            payload = message.encode() if isinstance(message, str) else message
            opcode = 0x1 if isinstance(message, str) else 0x2
            self._parts += (frame_header(opcode, len(payload)), payload)
            self._queued()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] == "http":  # /ready, for wait_ready
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        tap(scope, send)
        websocket = WebSocket(scope, receive, send)
        await websocket.accept(subprotocol="tts.v1")
        # As ours does for each connection (--ws-send-buffer-bytes, on by default).
        bound_send_buffer(scope.get(SCOPE_KEY), settings.ws_send_buffer_bytes)
        wire = ReplayWire.attach(scope)
        assert wire is not None, "uvicorn's websockets-sansio protocol, as our server's"
        await wire.replay(script[0])  # ready
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            if '"end"' in (message.get("text") or ""):
                for item in script[1:]:
                    await wire.replay(item)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port_queue.put(sock.getsockname()[1])
    uvicorn.Server(uvicorn_config(app, settings)).run(sockets=[sock])


def wait_ready(port: int, deadline_s: float = 120) -> None:
    """Until the server's /ready answers 200 (ours: listening, engine and text front-end
    loaded; the stack's: listening)."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + deadline_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=5) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):  # not listening yet, or 503 not ready
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"the server on port {port} did not become ready")
        time.sleep(0.1)


def start(target: Any, *args: Any) -> tuple[multiprocessing.Process, int]:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    # Not a daemon: with engine_process on, our server starts the engine's process.
    process = context.Process(target=target, args=(queue, *args), daemon=False)
    process.start()
    try:
        return process, int(queue.get(timeout=120))
    except BaseException:  # no port: the run ends, not waiting on the child at exit
        process.kill()
        raise


def start_baseline(root: str) -> tuple[subprocess.Popen[str], int]:
    """Our server from the checkout ``root`` (``--baseline``): this script in a child
    whose PYTHONPATH puts the checkout's ``server`` and ``streaming`` first."""
    paths = (root, os.environ.get("PYTHONPATH"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths))}
    child = subprocess.Popen(
        [sys.executable, __file__, _BASELINE_CHILD, root], cwd=root, env=env,
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdout is not None
    line = child.stdout.readline()
    if not line.strip().isdigit():
        child.kill()
        raise SystemExit(f"the baseline server in {root} did not start")
    return child, int(line)


def stop(process: multiprocessing.Process | subprocess.Popen[str]) -> None:
    """SIGTERM (a graceful shutdown), then SIGKILL after 10 s."""
    process.terminate()
    if isinstance(process, subprocess.Popen):
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    else:
        process.join(10)
        if process.is_alive():
            process.kill()
            process.join()


# -- the clients ------------------------------------------------------------------------


async def open_connection(url: str) -> Any:
    from websockets.asyncio.client import connect

    ws = await connect(
        url,
        max_size=None,
        open_timeout=300,
        subprotocols=["tts.v1"],
        compression=None,  # type: ignore[list-item]
    )
    return ws


async def connect_all(url: str, streams: int) -> list[Any]:
    """Open ``streams`` connections (64 handshakes at a time) and read each ``ready``."""
    gate = asyncio.Semaphore(64)

    async def one() -> Any:
        async with gate:
            ws = await open_connection(url)
            await ws.recv()
            return ws

    return list(await asyncio.gather(*(one() for _ in range(streams))))


async def one_stream(
    ws: Any, delay_s: float, received: list[Any] | None = None
) -> tuple[float, int]:
    """On an open connection: start, text, end; (time to first audio, audio bytes)."""
    await asyncio.sleep(delay_s)
    await ws.send(json.dumps({"type": "start", "context_id": "a", "seed": 1}))
    sent = time.perf_counter()
    await ws.send(json.dumps({"type": "text", "context_id": "a", "text": TEXT}))
    await ws.send(json.dumps({"type": "end", "context_id": "a"}))
    first: float | None = None
    audio = 0
    async for message in ws:
        if received is not None:
            received.append(message)
        if isinstance(message, bytes):
            if first is None:
                first = time.perf_counter() - sent
            audio += len(message) - 12
        elif '"done"' in message:
            break
    assert first is not None
    return first, audio


async def record_script(url: str) -> list[Any]:
    """What our server sends one stream: ``ready``, then everything after ``end``."""
    ws = await open_connection(url)
    received = [await ws.recv()]
    await one_stream(ws, 0.0, received)
    await ws.close()
    return received


async def run_streams(url: str, streams: int, spread_s: float) -> tuple[list[float], int]:
    """All connections open first; the streams then start spread over ``spread_s``."""
    sockets = await connect_all(url, streams)
    results = await asyncio.gather(
        *(one_stream(ws, spread_s * i / streams) for i, ws in enumerate(sockets))
    )
    await asyncio.gather(*(ws.close() for ws in sockets))
    return [r[0] for r in results], sum(r[1] for r in results)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def measure(
    process: multiprocessing.Process | subprocess.Popen[str],
    url: str,
    streams: int,
    spread_s: float,
    profiles: dict[str, float] | None = None,
    keep: Path | None = None,
    rate_hz: int = 250,
    places: dict[str, float] | None = None,
) -> dict[str, float]:
    """Server CPU and requests of the kernel over the streams (their connections'
    handshakes included); with ``profiles`` (a dict to fill), where the event loop's CPU
    went (py-spy's samples copied to ``keep``, when given); with ``places`` (a dict to
    fill), where the code the server's CPU ran lives (``perf``)."""
    import uvloop

    assert process.pid is not None
    uvloop.run(run_streams(url, min(streams, 20), 0.1))  # warm: caches, first connections
    handle, name = tempfile.mkstemp(suffix=".txt")
    os.close(handle)
    raw = Path(name)
    recording = PerfRecording(process.pid) if places is not None else None
    try:
        profiler = start_profiler(process.pid, raw, rate_hz) if profiles is not None else None
        before, loop_before = cpu_seconds(process.pid), main_thread_cpu_seconds(process.pid)
        counts_before = kernel_counts(process.pid)
        collected = gc_collections(url)
        ttfas, audio_bytes = uvloop.run(run_streams(url, streams, spread_s))
        cpu = cpu_seconds(process.pid) - before
        loop_cpu = main_thread_cpu_seconds(process.pid) - loop_before
        counts = kernel_counts(process.pid)
        if recording is not None and places is not None:
            places.update(code_places(recording.stop(), cpu * 1e6 / streams))
    finally:
        if recording is not None:
            recording.close()
    per_stream = {k: (v - counts_before[k]) / streams for k, v in counts.items()}
    gc_figures = {k: v - collected[k] for k, v in gc_collections(url).items()} if collected else {}
    if profiler is not None and profiles is not None:
        profiler.send_signal(signal.SIGINT)
        profiler.wait(60)
        profiles.update(loop_profile(raw, loop_cpu * 1e6 / streams))
        print("event loop CPU per stream by function (its own code), us:")
        for name, us in hottest(raw, loop_cpu * 1e6 / streams):
            print(f"  {us:6.1f}  {name}")
    if profiler is not None and keep is not None:
        shutil.copy(raw, keep)
    raw.unlink(missing_ok=True)
    audio_s = audio_bytes / 2 / 24000
    return {
        "cpu_s": cpu,
        "loop_cpu_s": loop_cpu,
        "other_threads_cpu_s": cpu - loop_cpu,
        "audio_s": audio_s,
        "cpu_ms_per_100ms_audio": cpu * 1000 / (audio_s / 0.1),
        "ttfa_p50_ms": percentile(ttfas, 50) * 1000,
        "ttfa_p99_ms": percentile(ttfas, 99) * 1000,
        **{f"{name}_per_stream": count for name, count in per_stream.items()},
        **gc_figures,
    }


def gc_collections(url: str) -> dict[str, float]:
    """Our server's garbage collections so far (its ``tts_gc_pause_seconds``): seconds in
    all, full collections, pauses over 10 ms; {} for a server without the metric (the
    bare one, an older baseline)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    metrics_url = url.replace("ws://", "http://").replace("/v1/stream", "/metrics")
    try:
        with urllib.request.urlopen(metrics_url, timeout=10) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    found = {"gc_s": 0.0, "gc_full": 0.0, "gc_over_10ms": 0.0}
    seen = False
    for family in text_string_to_metric_families(text):
        if family.name != "tts_gc_pause_seconds":
            continue
        seen = True
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if name.endswith("_sum"):
                found["gc_s"] += value
            elif name.endswith("_count"):  # pauses over 10 ms: all, less those under
                found["gc_over_10ms"] += value
                found["gc_full"] += value if labels["generation"] == "2" else 0
            elif name.endswith("_bucket") and labels["le"] == "0.01":
                found["gc_over_10ms"] -= value
    return found if seen else {}


def against_bare(figures: dict[str, dict[str, float]], name: str) -> dict[str, float]:
    """``name``'s CPU as a multiple of the bare server's, and its added time to first audio."""
    ours, bare = figures[name], figures["bare"]
    return {
        "cpu_ratio": ours["cpu_ms_per_100ms_audio"] / bare["cpu_ms_per_100ms_audio"],
        "p50": ours["ttfa_p50_ms"] - bare["ttfa_p50_ms"],
        "p99": ours["ttfa_p99_ms"] - bare["ttfa_p99_ms"],
    }


def report(args: argparse.Namespace, figures: dict[str, dict[str, float]], messages: int) -> None:
    """Print the figures and the final JSON line."""
    compared = {name: against_bare(figures, name) for name in figures if name != "bare"}
    ratio, added = compared["ours"]["cpu_ratio"], compared["ours"]
    print(f"{args.streams} concurrent streams, {messages} messages each")
    if args.set:
        print(f"ours (and before): our server with {' '.join(args.set)}")
    if args.compare:
        print(f"before: our server with {' '.join(args.compare)}; median of {args.rounds} round(s)")
    if args.baseline:
        print(f"before: our server as {args.baseline} has it; median of {args.rounds} round(s)")
    for name, row in figures.items():
        threads = (
            f"; event loop {row['loop_cpu_s']:.2f} s, other threads "
            f"{row['other_threads_cpu_s']:.2f} s"
            if "loop_cpu_s" in row
            else ""
        )
        print(
            f"{name:6}: {row['cpu_ms_per_100ms_audio']:.3f} ms CPU per 100 ms of audio "
            f"({row['cpu_s']:.2f} s for {row['audio_s']:.0f} s of audio{threads}); time to "
            f"first audio p50 {row['ttfa_p50_ms']:.1f} ms, p99 {row['ttfa_p99_ms']:.1f} ms"
        )
    for name, row in figures.items():
        print(
            f"{name:6}: per stream {row['writes_per_stream']:.1f} write system calls, "
            f"{row['context_switches_per_stream']:.1f} context switches, "
            f"{row['page_faults_per_stream']:.1f} page faults"
        )
    for name, row in figures.items():
        if "gc_s" in row:
            print(
                f"{name:6}: garbage collection {row['gc_s'] * 1000:.0f} ms in all, "
                f"{row['gc_full']:.0f} full, {row['gc_over_10ms']:.0f} pauses over 10 ms"
            )
    for name, row in compared.items():
        print(
            f"{name}: CPU {row['cpu_ratio']:.2f}x the bare server; added time to first audio "
            f"p50 {row['p50']:.1f} ms, p99 {row['p99']:.1f} ms"
        )
    if "before" in figures:
        change = figures["ours"]["cpu_s"] / figures["before"]["cpu_s"]
        print(f"CPU, ours / before: {change:.2f}")
    stack = compared["stack"]["cpu_ratio"]
    print(
        f"the stack alone: {stack:.2f}x the bare server; ours beyond it: {ratio - stack:.2f}x "
        f"the bare server's CPU (the goal's 2.0x leaves {2.0 - stack:.2f}x for it)"
    )
    print(
        json.dumps(
            {
                "bench": "server_overhead",
                "smoke": args.smoke,
                "streams": args.streams,
                "settings": args.set,
                "compare": args.compare,
                "baseline": args.baseline,
                "rounds": args.rounds,
                "cpu_ratio_vs_bare": round(ratio, 2),
                "added_ttfa_ms": {q: round(added[q], 1) for q in ("p50", "p99")},
                "stack_cpu_ratio_vs_bare": round(stack, 2),
                "before": (
                    {
                        "cpu_ratio_vs_bare": round(compared["before"]["cpu_ratio"], 2),
                        "added_ttfa_ms": {
                            q: round(compared["before"][q], 1) for q in ("p50", "p99")
                        },
                    }
                    if "before" in compared
                    else None
                ),
                "figures": {
                    name: {k: round(v, 3) for k, v in row.items()} for name, row in figures.items()
                },
                "ttfa_median_both_ms": round(  # the stack's replay left out
                    statistics.median([figures[n]["ttfa_p50_ms"] for n in figures if n != "stack"]),
                    1,
                ),
            }
        )
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [_BASELINE_CHILD]:
        serve_ours(_PrintedPort(), root=argv[1])
        return 0

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument(
        "--spread-s", type=float, default=5.0, help="the streams start spread over this"
    )
    parser.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE",
                        help="settings for every run of our server")  # fmt: skip
    parser.add_argument("--compare", nargs="*", default=[], metavar="NAME=VALUE",
                        help="also measure our server with these settings (before)")  # fmt: skip
    parser.add_argument("--baseline", metavar="REF",
                        help="before: our server as git REF has it (e.g. a commit), or a "
                        "directory holding its server/ and streaming/")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1,
                        help="measurements of each server, alternating; medians reported")  # fmt: skip
    parser.add_argument("--profile", action="store_true",
                        help="where our server's event loop spends its CPU (py-spy)")  # fmt: skip
    parser.add_argument("--profile-rate", type=int, default=250, metavar="HZ",
                        help="with --profile: samples a second (more: finer, and a heavier "
                        "load on the server)")  # fmt: skip
    parser.add_argument("--profile-raw", metavar="PATH",
                        help="with --profile: keep py-spy's raw samples of each server's last round "
                        "as PATH.ours (PATH.before)")  # fmt: skip
    parser.add_argument("--perf", action="store_true",
                        help="where each server's CPU ran: the Python interpreter, the kernel, "
                        "NumPy, ... (Linux perf)")  # fmt: skip
    parser.add_argument("--smoke", action="store_true",
                        help="40 streams over 0.5 s: checks it runs (the suite runs it)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.smoke:
        # Enough streams that the bare server's CPU spans several clock ticks (10 ms).
        args.streams, args.spread_s = 40, 0.5
    if args.perf and shutil.which("perf") is None:
        parser.error("--perf needs Linux perf (Debian: apt install linux-perf)")
    if args.compare and args.baseline:
        parser.error("--compare and --baseline both name the before: give one")
    if args.set and args.baseline:
        parser.error("--set applies to this checkout's server, not --baseline's")
    variants: dict[str, dict[str, Any]] = {"ours": settings_overrides(args.set, "--set")}
    if args.compare:
        variants["before"] = settings_overrides([*args.set, *args.compare], "--compare")
    with contextlib.ExitStack() as stack:
        roots: dict[str, str | None] = dict.fromkeys(variants)
        if args.baseline:
            variants["before"] = {}
            roots["before"] = stack.enter_context(checkout(args.baseline))
        return measure_all(args, variants, roots)


@contextlib.contextmanager
def checkout(ref: str) -> Iterator[str]:
    """``server`` and ``streaming`` as git ``ref`` has them, in a temporary directory; or
    ``ref`` itself, a directory holding them (e.g. one bench/compiled_tree.py made)."""
    if Path(ref, "server").is_dir() and Path(ref, "streaming").is_dir():
        yield str(Path(ref).resolve())
        return
    with tempfile.TemporaryDirectory() as root:
        write_tree(ref, root)
        yield root


def write_tree(ref: str, directory: str | Path, flag: str = "--baseline") -> None:
    """``server`` and ``streaming`` as git ``ref`` has them, into ``directory``
    (SystemExit naming ``flag`` when git has no such revision)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "server", "streaming"], capture_output=True
    )
    if archive.returncode != 0:
        raise SystemExit(f"{flag} {ref}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive.stdout, check=True)


def measure_all(
    args: argparse.Namespace, variants: dict[str, dict[str, Any]], roots: dict[str, str | None]
) -> int:
    """Each variant of our server and the bare server, ``--rounds`` times, alternating."""
    import uvloop

    script: list[Any] = []
    profiles: dict[str, dict[str, float]] = {}
    places: dict[str, list[dict[str, float]]] = {}  # --perf: each server's rounds
    rows: dict[str, list[dict[str, float]]] = {n: [] for n in [*variants, "stack", "bare"]}
    for _ in range(args.rounds):
        for name, overrides in variants.items():
            root = roots[name]
            server, port = start_baseline(root) if root else start(serve_ours, overrides)
            try:
                url = f"ws://127.0.0.1:{port}/v1/stream"
                wait_ready(port)
                if not script:
                    script = uvloop.run(record_script(url))
                profile: dict[str, float] | None = {} if args.profile else None
                keep = Path(f"{args.profile_raw}.{name}") if args.profile_raw else None
                place: dict[str, float] | None = {} if args.perf else None
                rate = args.profile_rate
                rows[name].append(
                    measure(server, url, args.streams, args.spread_s, profile, keep, rate, place)
                )
                if place is not None:
                    places.setdefault(name, []).append(place)
                if profile is not None:
                    profiles[name] = profile  # the last round's
            finally:  # a failure ends the run, not waiting on a server left running
                stop(server)
        for name, serve in (("stack", serve_stack), ("bare", serve_bare)):
            other, port = start(serve, script)
            try:
                if name == "stack":
                    wait_ready(port)
                url = f"ws://127.0.0.1:{port}"
                place = {} if args.perf else None
                rows[name].append(measure(other, url, args.streams, args.spread_s, places=place))
                if place is not None:
                    places.setdefault(name, []).append(place)
            finally:
                stop(other)
    if args.rounds > 1:  # the spread between rounds: what a difference must beat
        spread = "; ".join(
            name + " " + ", ".join(f"{r['cpu_s']:.2f}" for r in runs) for name, runs in rows.items()
        )
        print(f"server CPU by round, s: {spread}")
    figures = {
        name: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for name, runs in rows.items()
    }
    report(args, figures, len(script) - 1)
    if profiles:
        print_per_stream("event loop CPU per stream", profiles, "server_overhead_profile")
    if places:
        print_per_stream(
            "server CPU per stream by where its code lives (the mean over the rounds)",
            {name: mean_places(rounds) for name, rounds in places.items()},
            "server_overhead_perf",
        )
    return 0


def mean_places(rounds: list[dict[str, float]]) -> dict[str, float]:
    """Microseconds a stream by place, the mean over ``rounds`` (a place a round did not
    see counts 0 there), the most first."""
    names = dict.fromkeys(k for each in rounds for k in each)
    means = {k: sum(each.get(k, 0.0) for each in rounds) / len(rounds) for k in names}
    return {k: round(v) for k, v in sorted(means.items(), key=lambda item: -item[1])}


def print_per_stream(title: str, tables: dict[str, dict[str, float]], bench: str) -> None:
    """Each server's microseconds a stream by category (``tables``), side by side with
    their totals, under ``title``; then the JSON line of them, as ``bench``."""
    names = list(tables)
    print(f"{title}, us ({', '.join(names)}):")
    for category in dict.fromkeys(k for table in tables.values() for k in table):
        values = " | ".join(str(tables[n].get(category, 0)) for n in names)
        print(f"| {category} | {values} |")
    totals = " | ".join(str(round(sum(tables[n].values()))) for n in names)
    print(f"| total | {totals} |")
    print(json.dumps({"bench": bench, "us_per_stream": tables}))


if __name__ == "__main__":
    sys.exit(main())
