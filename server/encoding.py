"""ffmpeg encoders: the command that encodes PCM to each compressed format, and
:class:`Encoders`, the processes started ahead of need.

Each process reads 16-bit mono PCM on stdin and writes the format on stdout; it is
started with ``posix_spawn``, never ``fork()`` (:mod:`server.child_process` says why).
The composition root (:mod:`server.state`) owns one :class:`Encoders` for the process;
the HTTP bodies (:mod:`server.http.audio`) take processes from it.
"""

from __future__ import annotations

import asyncio
import contextlib

from server.child_process import ChildProcess, spawn

__all__ = ["Encoders", "ffmpeg_args"]

#: ffmpeg's muxer and codec for each compressed format.
FFMPEG_FORMATS = {
    "mp3": ("mp3", ["-c:a", "libmp3lame", "-b:a", "64k"]),
    "opus": ("ogg", ["-c:a", "libopus", "-b:a", "32k", "-page_duration", "20000"]),
    "ogg": ("ogg", ["-c:a", "libopus", "-b:a", "32k", "-page_duration", "20000"]),
    "aac": ("adts", ["-c:a", "aac", "-b:a", "64k"]),
    "flac": ("flac", ["-c:a", "flac"]),
    "wav": ("s16le", ["-c:a", "pcm_s16le"]),  # stretched: the header is ours
    "pcm": ("s16le", ["-c:a", "pcm_s16le"]),
}


def ffmpeg_args(fmt: str, rate_hz: int) -> tuple[str, ...]:
    """The ffmpeg command that encodes 16-bit mono PCM at ``rate_hz`` to ``fmt``."""
    muxer, codec = FFMPEG_FORMATS[fmt]
    return (
        "ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin",
        # Raw input needs no probing: without these ffmpeg reads ~0.3 s of it first. Not
        # "-fflags nobuffer": it discards the packet read while probing (the first 40 ms).
        "-probesize", "32", "-analyzeduration", "0",
        "-f", "s16le", "-ar", str(rate_hz), "-ac", "1", "-i", "pipe:0",
        *codec, "-flush_packets", "1", "-f", muxer, "pipe:1",
    )  # fmt: skip


class Encoders:
    """ffmpeg processes started ahead of need: at most one spare per encoding in use.

    Starting ffmpeg costs ~100 ms (measured here: mp3's first byte 147 ms after the
    request with a fresh process, against 18 ms for raw PCM), which a streamed response
    would add to its time to first byte. A spare waits on its stdin, costing a few MB
    and no CPU.
    Every child handed out is the caller's to end (:meth:`ChildProcess.aclose`);
    :meth:`close` at shutdown kills the spares and any child still running.
    Use from one event loop.
    """

    def __init__(self, *, max_kinds: int = 8) -> None:
        self._max_kinds = max_kinds
        self._spares: dict[tuple[str, ...], asyncio.Task[ChildProcess]] = {}
        self._children: set[ChildProcess] = set()
        self._closed = False

    async def process(self, fmt: str, rate_hz: int) -> ChildProcess:
        """A started ffmpeg encoding PCM at ``rate_hz`` to ``fmt``, the caller's to end."""
        args = ffmpeg_args(fmt, rate_hz)
        spare = self._spares.pop(args, None)
        # The next spare is started before any wait, so no other caller can have put one
        # in its place meanwhile: one spare per encoding, whatever the concurrency.
        if not self._closed and len(self._spares) < self._max_kinds:
            self._spares[args] = asyncio.get_running_loop().create_task(self._spawn(args))
        process = None
        if spare is not None:
            try:
                process = await asyncio.shield(spare)
            except asyncio.CancelledError:
                spare.add_done_callback(_kill_spawned)  # the caller left: nobody will use it
                raise
            except Exception:  # that spare failed to start: start one now
                process = None
        if process is None or process.returncode is not None:
            process = await self._spawn(args)
        return process

    async def _spawn(self, args: tuple[str, ...]) -> ChildProcess:
        process = await spawn(args)
        self._children.add(process)
        process.add_exit_callback(self._children.discard)
        return process

    async def close(self) -> None:
        """Kill the spares and every child still running, and reap them all."""
        self._closed = True
        spares, self._spares = list(self._spares.values()), {}
        for spare in spares:
            with contextlib.suppress(Exception):
                await spare  # started: now in self._children
        await asyncio.gather(*(child.aclose() for child in list(self._children)))


def _kill_spawned(task: asyncio.Task[ChildProcess]) -> None:
    if not task.cancelled() and task.exception() is None:
        task.result().kill()
