"""A scripted engine for tests whose timing must be controlled (cancel, disconnect, queueing).

It produces a plain tone, ``chunk_ms`` at a time, sleeping ``chunk_delay_s`` between
chunks like a model generating, and records what it was asked to do. Tests that claim to
exercise ChatTTS use the real engine on a generated checkpoint instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import numpy as np

from server.engines.base import SynthesisRequest


class ScriptedEngine:
    name = "scripted"
    interleaves = True  # each synthesize() generator is independent of the others

    def __init__(
        self,
        *,
        sample_rate_hz: int = 24000,
        chunk_ms: int = 100,
        chunk_delay_s: float = 0.01,
        ms_per_char: int = 100,
        fail_on: str | None = None,
    ) -> None:
        self.sample_rate_hz = sample_rate_hz
        self.chunk_ms = chunk_ms
        self.chunk_delay_s = chunk_delay_s
        self.ms_per_char = ms_per_char
        self.fail_on = fail_on
        self.requests: list[SynthesisRequest] = []
        self.stopped_early = 0
        self.busy = threading.Event()  # set while a synthesis runs
        self.idle_releases = 0

    def warm_up(self) -> None:
        pass

    def synthesize(
        self, request: SynthesisRequest, should_stop: Callable[[], bool]
    ) -> Iterator[np.ndarray]:
        self.requests.append(request)
        if self.fail_on is not None and self.fail_on in request.text:
            raise RuntimeError("scripted failure")
        total = self.sample_rate_hz * self.ms_per_char * len(request.text) // 1000
        step = self.sample_rate_hz * self.chunk_ms // 1000
        # Frequency from the seed, so tests can tell voices apart.
        freq_hz = 200 + request.voice.seed % 300
        self.busy.set()
        try:
            for start in range(0, total, step):
                if should_stop():
                    self.stopped_early += 1
                    return
                time.sleep(self.chunk_delay_s)
                n = np.arange(start, min(start + step, total))
                yield (0.3 * np.sin(2 * np.pi * freq_hz * n / self.sample_rate_hz)).astype(
                    np.float32
                )
        except GeneratorExit:
            self.stopped_early += 1  # closed by the worker after a cancel
            raise
        finally:
            self.busy.clear()

    def check_voice(self, voice: str) -> None:
        """Every voice is accepted: the tone's pitch comes from the seed."""

    def release_idle_memory(self) -> None:
        self.idle_releases += 1

    def voice_from_clip(self, audio: np.ndarray, sample_rate_hz: int) -> str:
        raise ValueError("this voice cannot be made from a clip (ChatTTS can)")

    def batcher(self, max_batch: int) -> None:
        """It does not batch: its segments interleave a chunk at a time."""
        return None

    def close(self) -> None:
        pass
