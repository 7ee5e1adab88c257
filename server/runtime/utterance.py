"""One utterance being spoken, whatever interface asked for it.

A WebSocket context and an HTTP request's text are both an :class:`Utterance`: it holds
the utterance's :class:`~streaming.speech.SpeechPipeline` and its
:class:`~server.runtime.synthesizer.SegmentSynthesizer`, counts what it says in a
:class:`~streaming.utterance.UtteranceTally`, measures its first audio, writes the fields
of its summary log line, and gives its admission slot back once it ends. The interfaces
around it only decide what their client is told (``server/ws/session.py``,
``server/http/speech.py``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from server.engines.base import VoiceSpec
from server.metrics import Metrics
from server.runtime.admission import Admission
from server.runtime.phrase_cache import PhraseScope
from server.runtime.synthesizer import SegmentSynthesizer
from server.runtime.worker import EngineWorker
from streaming.policy import playback_deadline
from streaming.segment import Segment
from streaming.speech import SpeechPipeline, SpeechSettings
from streaming.text import PreparedText
from streaming.utterance import Frames, SpeechEvent, UtteranceTally

__all__ = ["Utterance"]


class Utterance:
    """One utterance (see the module docstring).

    ``route`` labels its metrics (``ws``, ``http``); ``fallback``: admitted on the
    fallback voice (the main engine was busy), so it holds no admission slot;
    ``tally``: the tally to count into (the WebSocket core's own, which also counts the
    samples it frames); ``removals_counted``: the interface counted the removed
    characters up front (HTTP, for its headers); ``volume``: its loudness factor
    (streaming.limiter); ``phrases``: how it may use the phrase cache (None: not at all).
    """

    def __init__(
        self,
        worker: EngineWorker,
        metrics: Metrics,
        admission: Admission,
        speech: SpeechSettings,
        voice: VoiceSpec,
        *,
        route: str,
        output_rate_hz: int,
        tempo: float = 1.0,
        fallback: bool = False,
        whole_text: bool = False,
        timestamps: bool = False,
        tally: UtteranceTally | None = None,
        removals_counted: bool = False,
        volume: float = 1.0,
        frame_ms: int | None = None,
        phrases: PhraseScope | None = None,
    ) -> None:
        self.worker = worker
        self.metrics = metrics
        self.route = route
        self.output_rate_hz = output_rate_hz
        self.fallback = fallback
        self.pipeline = SpeechPipeline(
            speech,
            worker.sample_rate_hz,
            output_rate_hz,
            whole_text=whole_text,
            tempo=tempo,
            volume=volume,
            frame_ms=frame_ms,
        )
        self.synthesizer = SegmentSynthesizer(
            worker,
            metrics,
            self.pipeline,
            voice,
            output_rate_hz=output_rate_hz,
            on_fallback=fallback,
            timestamps=timestamps,
            phrases=phrases,
        )
        self.tally = tally if tally is not None else UtteranceTally()
        self._removals_counted = removals_counted
        #: perf_counter at its first text (the WebSocket) or its request (HTTP).
        self.first_text_at: float | None = None
        #: From the first text to the first audio (None: no audio yet).
        self.first_audio_s: float | None = None
        #: monotonic, at its first audio (None: no audio yet).
        self.playback_started_at: float | None = None
        self._admission: Admission | None = None if fallback else admission

    @property
    def voice(self) -> VoiceSpec:
        return self.synthesizer.voice

    @property
    def waited_s(self) -> float:
        """Seconds spent waiting for the engine's audio, over every segment so far."""
        return self.synthesizer.waited_s

    async def speak(
        self,
        segment: Segment,
        prepared: PreparedText,
        *,
        timeout_s: float,
        deadline: float | None = None,
    ) -> AsyncGenerator[SpeechEvent]:
        """The events of one segment (:meth:`SegmentSynthesizer.synthesize`), counted."""
        events = self.synthesizer.synthesize(
            segment, prepared, timeout_s=timeout_s, deadline=deadline
        )
        async with contextlib.aclosing(events):
            async for event in events:
                removed = self.tally.count(event, removals=not self._removals_counted)
                if removed and not self._removals_counted:
                    self.metrics.removed_characters.inc(removed)
                if isinstance(event, Frames) and self.first_audio_s is None:
                    self._first_audio(event)
                yield event

    def _first_audio(self, event: Frames) -> None:
        if not any(frame.size for frame in event.frames):
            return
        self.playback_started_at = time.monotonic()
        if self.first_text_at is not None:
            self.first_audio_s = time.perf_counter() - self.first_text_at
            self.metrics.ttfa.labels(route=self.route).observe(self.first_audio_s)

    def count_removed(self, chars: int) -> None:
        """Characters the interface found removed before speaking (``removals_counted``)."""
        self.tally.removed_chars += chars
        if chars:
            self.metrics.removed_characters.inc(chars)

    def abandon(self) -> None:
        """Drop the segment speaking now (on the event loop): its events end."""
        self.synthesizer.abandon()

    def playback_deadline(self) -> float:
        """When the listener's playback reaches the audio not made yet (monotonic)."""
        return playback_deadline(
            time.monotonic(), self.playback_started_at, self.tally.samples, self.output_rate_hz
        )

    def lead_s(self) -> float:
        """Seconds of audio the listener has ahead of its playback (0 before the first)."""
        return self.playback_deadline() - time.monotonic()

    def summary(
        self,
        outcome: str,
        *,
        segments: int,
        failures: bool = False,
        after: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """The fields of the utterance's summary log line (server.logs): ``fields`` are
        the interface's own, first (an ``engine`` there names it instead), ``after`` its
        own after the audio's; ``failures``: it reports failed segments (the WebSocket)."""
        tally = self.tally
        summary: dict[str, Any] = {
            "engine": "espeak" if self.fallback else self.worker.status.engine,
            **fields,
            "removed": tally.removed_chars,
            "segments": segments,
        }
        if failures:
            summary["failed_segments"] = tally.failures or None
        ttfa_ms = None if self.first_audio_s is None else round(self.first_audio_s * 1000, 1)
        summary["ttfa_ms"] = ttfa_ms
        summary["audio_s"] = round(tally.samples / self.output_rate_hz, 3)
        summary.update(after or {})
        summary["retried_segments"] = len(tally.retried) or None
        summary["segments_without_audio"] = len(tally.without_audio) or None
        summary["outcome"] = outcome
        return summary

    def finish(self) -> None:
        """The utterance ended: its admission slot (if it holds one) is given back, once."""
        admission, self._admission = self._admission, None
        if admission is not None:
            admission.finish()
