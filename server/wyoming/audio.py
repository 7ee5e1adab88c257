"""One answer's audio as Wyoming events: ``audio-start``, ``audio-chunk``..., ``audio-stop``.

16-bit little-endian mono at the answer's rate (the engine's: Home Assistant converts
what it plays). ``audio-start`` goes out with the first audio (or, for an answer with
none, right before ``audio-stop``); each chunk carries its ``timestamp``, the ms of audio
before it. Writes are bounded by ``--http-stall-timeout-s``: a client that reads nothing
that long is cut.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event

from server.metrics import Metrics
from server.wyoming.framing import write_error, write_event
from streaming.audio import float_to_pcm16

__all__ = ["AudioWriter"]

_WIDTH_BYTES = 2
_CHANNELS = 1


class AudioWriter:
    """Writes one answer's events to one connection (see the module docstring)."""

    def __init__(
        self,
        writer: asyncio.StreamWriter,
        rate_hz: int,
        *,
        stall_s: float,
        metrics: Metrics,
        started: float | None = None,
    ) -> None:
        self.writer = writer
        self.rate_hz = rate_hz
        self.stall_s = stall_s
        self.metrics = metrics
        #: perf_counter() at the first text (None: not yet): time to first audio from it.
        self.first_text_at = started
        self.first_audio_s: float | None = None
        #: monotonic() at the first audio written (the listener's clock starts there).
        self.playback_started_at: float | None = None
        self.samples = 0
        self._started = False

    async def frames(self, frames: list[np.ndarray]) -> None:
        """The frames as one ``audio-chunk`` (nothing for none)."""
        pcm = b"".join(float_to_pcm16(frame) for frame in frames if frame.size)
        if not pcm:
            return
        await self._start()
        if self.playback_started_at is None:
            self.playback_started_at = time.monotonic()
            if self.first_text_at is not None:
                self.first_audio_s = time.perf_counter() - self.first_text_at
                self.metrics.ttfa.labels(route="wyoming").observe(self.first_audio_s)
        timestamp_ms = self.samples * 1000 // self.rate_hz
        self.samples += len(pcm) // _WIDTH_BYTES
        chunk = AudioChunk(
            rate=self.rate_hz,
            width=_WIDTH_BYTES,
            channels=_CHANNELS,
            audio=pcm,
            timestamp=timestamp_ms,
        )
        await self._write(chunk.event())

    async def stop(self) -> None:
        """``audio-stop`` (after an ``audio-start``, sent now if no audio came)."""
        await self._start()
        await self._write(AudioStop().event())

    async def error(self, code: str, message: str) -> None:
        await write_error(self.writer, code, message, self.stall_s)

    async def _start(self) -> None:
        if not self._started:
            self._started = True
            start = AudioStart(rate=self.rate_hz, width=_WIDTH_BYTES, channels=_CHANNELS)
            await self._write(start.event())

    async def _write(self, event: Event) -> None:
        await write_event(event, self.writer, self.stall_s)

    @property
    def audio_s(self) -> float:
        return round(self.samples / self.rate_hz, 3)
