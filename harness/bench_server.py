"""A server in a child process for the HTTP benchmarks: ChatTTS on a checkpoint (a fixed
number of steps per segment, so every run does the same work) or the espeak voice, with
the default settings and, where asked, a phrase cache of another size."""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

__all__ = [
    "add_engine_arguments",
    "cpu_seconds",
    "ensure_checkpoint",
    "histogram_totals",
    "kernel_counts",
    "loop_lag_buckets",
    "main_thread_cpu_seconds",
    "prompts_a_forward",
    "sample_value",
    "serve",
    "settings_overrides",
    "start_server",
    "wait_ready",
    "worst_loop_lag",
]

_ROOT = Path(__file__).resolve().parent.parent
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` so far, with its child processes now running
    (a server's engine process, with engine_process on), from /proc."""
    total = 0.0
    for each in _process_tree(pid):
        try:
            total += _stat_cpu_seconds(Path(f"/proc/{each}/stat"))
        except OSError:
            continue  # it ended meanwhile
    return total


def main_thread_cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid``'s main thread (a server's event loop) so far."""
    return _stat_cpu_seconds(Path(f"/proc/{pid}/task/{pid}/stat"))


def kernel_counts(pid: int) -> dict[str, int]:
    """What process ``pid`` has asked of the kernel so far, its threads and its child
    processes now running together (from /proc; a thread that has ended takes its context
    switches with it): ``writes``, its system calls of the write family (``syscw``:
    write and writev, a socket's and a wake-up's alike, as uvloop makes them; not
    send or sendmsg); ``context_switches``, its threads' (voluntary or not: a thread that
    waits for the GIL, a lock or the next event is switched out); ``page_faults``, minor
    ones."""
    counts = dict.fromkeys(("writes", "context_switches", "page_faults"), 0)
    for each in _process_tree(pid):
        try:
            io = Path(f"/proc/{each}/io").read_text()
            stat = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended meanwhile
        for line in io.splitlines():
            name, _, value = line.partition(":")
            if name == "syscw":
                counts["writes"] += int(value)
        counts["page_faults"] += int(stat[7])  # minflt (field 10), the whole process's
        for status in Path(f"/proc/{each}/task").glob("*/status"):
            try:
                lines = status.read_text().splitlines()
            except OSError:
                continue  # that thread ended meanwhile
            for line in lines:
                name, _, value = line.partition(":")
                if name.endswith("ctxt_switches"):  # voluntary_ and nonvoluntary_
                    counts["context_switches"] += int(value)
    return counts


def _stat_cpu_seconds(stat: Path) -> float:
    """User + system CPU from a /proc ``stat`` file (a process's or a thread's)."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def loop_lag_buckets(metrics_text: str) -> dict[float, float]:
    """The server's ``tts_event_loop_lag_seconds`` from a /metrics page: cumulative tick
    counts by bucket bound (``inf`` the last)."""
    prefix = 'tts_event_loop_lag_seconds_bucket{le="'
    return {
        float(line[len(prefix) :].split('"')[0]): float(line.split()[-1])
        for line in metrics_text.splitlines()
        if line.startswith(prefix)
    }


def sample_value(metrics_text: str, name: str) -> float:
    """The value of the sample ``name`` (no labels) on a /metrics page; 0 when absent."""
    prefix = f"{name} "
    for line in metrics_text.splitlines():
        if line.startswith(prefix):
            return float(line.split()[-1])
    return 0.0


def histogram_totals(metrics_text: str, name: str) -> tuple[float, float]:
    """A histogram's ``(sum, count)`` from a /metrics page (zeros when it is absent)."""
    return sample_value(metrics_text, f"{name}_sum"), sample_value(metrics_text, f"{name}_count")


def prompts_a_forward(before: str, after: str) -> float | None:
    """Joining segments' prompts a forward between two /metrics pages (the server's
    ``tts_engine_prefill_rows``); None without a forward between them."""
    (sum_before, count_before), (sum_after, count_after) = (
        histogram_totals(page, "tts_engine_prefill_rows") for page in (before, after)
    )
    forwards = count_after - count_before
    return round((sum_after - sum_before) / forwards, 2) if forwards else None


def worst_loop_lag(before: dict[float, float], after: dict[float, float]) -> tuple[float, int]:
    """Between two readings of :func:`loop_lag_buckets`: the bound of the worst bucket a
    tick fell in (seconds; ``inf`` past the last bound, 0 without ticks) and the ticks
    later than 50 ms."""
    ticks = {bound: after[bound] - before.get(bound, 0.0) for bound in after}
    total = ticks.get(float("inf"), 0.0)
    worst = min((bound for bound, count in ticks.items() if count >= total), default=0.0)
    return (worst if total else 0.0), round(total - ticks.get(0.05, total))


def _process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants now (from /proc/PID/task/*/children)."""
    found, queue = [], [pid]
    while queue:
        each = queue.pop()
        found.append(each)
        for children in Path(f"/proc/{each}/task").glob("*/children"):
            try:
                queue.extend(int(child) for child in children.read_text().split())
            except OSError:
                continue
    return found


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """The engine a benchmark's server runs: ``--engine``, ``--checkpoint``, ``--steps``."""
    parser.add_argument("--engine", choices=("chattts", "espeak"), default="chattts")
    parser.add_argument("--checkpoint", type=Path, default=_ROOT / "checkpoints" / "tiny")
    parser.add_argument("--steps", type=int, default=60, help="GPT steps per segment (chattts)")


def ensure_checkpoint(checkpoint: Path) -> None:
    """A tiny random-weight ChatTTS checkpoint at ``checkpoint``, written when absent."""
    if not (checkpoint / "asset").is_dir():
        from server.engines.chattts.checkpoint import write_checkpoint

        print(f"writing a tiny random-weight checkpoint to {checkpoint}", file=sys.stderr)
        write_checkpoint(checkpoint, size="tiny", seed=0)


def settings_overrides(pairs: list[str], flag: str) -> dict[str, Any]:
    """``NAME=VALUE`` server settings (as their flags write them, given to a benchmark's
    ``flag``) as Settings fields; a name that is no server setting ends the run."""
    from server.config import Settings
    from server.declaration import specs

    by_name = {spec.name: spec for spec in specs(Settings)}
    values: dict[str, Any] = {}
    bundles: dict[str, dict[str, Any]] = {}  # settings of a nested bundle (Settings.heap...)
    for pair in pairs:
        name, _, raw = pair.partition("=")
        name = name.strip().lstrip("-").replace("-", "_")
        if name not in by_name:
            raise SystemExit(f"{flag}: {name!r} is not a server setting")
        spec = by_name[name]
        if len(spec.path) == 1:
            values[name] = spec.parse(raw)
        else:
            bundles.setdefault(spec.path[0], {})[spec.path[-1]] = spec.parse(raw)
    defaults = Settings()
    for bundle, changes in bundles.items():
        values[bundle] = dataclasses.replace(getattr(defaults, bundle), **changes)
    return values


def serve(
    engine: str, checkpoint: Path, steps: int, port: Any, phrase_cache_mb: int | None = None
) -> None:
    """The server in this process; its port goes into the queue ``port`` once bound."""
    import uvicorn

    from server.app import create_app
    from server.config import Settings
    from server.lifecycle import uvicorn_config
    from server.runtime.phrase_cache import PhraseCacheSettings

    factory = None
    if engine == "chattts":
        from server.engines.chattts.engine import ChatTTSEngine
        from server.engines.chattts.settings import ChatTTSSettings

        def factory() -> Any:
            options = ChatTTSSettings(device="cpu", max_new_token=steps, min_new_token=steps)
            return ChatTTSEngine(checkpoint, options), False, None

        settings = Settings(engine="chattts", model_dir=checkpoint, log_level="warning")
    else:
        settings = Settings(engine="espeak", log_level="warning")
    if phrase_cache_mb is not None:
        cache = PhraseCacheSettings(phrase_cache_mb=phrase_cache_mb)
        settings = dataclasses.replace(settings, phrase_cache=cache)
    app = create_app(settings, engine=factory)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port.put(sock.getsockname()[1])
    uvicorn.Server(uvicorn_config(app, settings, log_level="warning")).run(sockets=[sock])


def start_server(
    engine: str, checkpoint: Path, steps: int, phrase_cache_mb: int | None = None
) -> tuple[Any, int]:
    """:func:`serve` in a child process; (process, port). Terminate the process after."""
    ctx = multiprocessing.get_context("spawn")
    port_queue = ctx.Queue()
    args = (engine, checkpoint, steps, port_queue, phrase_cache_mb)
    child = ctx.Process(target=serve, args=args, daemon=True)
    child.start()
    port = port_queue.get(timeout=120)
    port_queue.close()
    return child, port


def wait_ready(http: Any, deadline_s: float) -> None:
    """Until /ready answers 200 (the socket is bound before uvicorn listens on it)."""
    import httpx

    deadline = time.monotonic() + deadline_s
    while True:
        try:
            if http.get("/ready").status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("the server did not become ready")
        time.sleep(0.2)
