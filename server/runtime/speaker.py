"""Speaking one segment, for any caller: the WebSocket context and the HTTP routes alike.

A :class:`SegmentSpeaker` belongs to one utterance (a WebSocket context, or one HTTP
request's text) and its :class:`~streaming.speech.SpeechPipeline`. For each segment,
:meth:`SegmentSpeaker.speak` submits the normalised text to the engine worker, pushes
the engine's chunks through the pipeline and yields what happened as events:

    Started(start)   the segment begins: what of its text is removed, where its audio
                     starts; nothing more follows when it has nothing to speak
    FellBack()       the main engine failed before any audio: the fallback voice speaks
    Frames(frames)   audio frames at the utterance's output rate, as the engine makes them
    Timed(fields)    the segment's timestamps, after its audio (when asked for)

Failures are raised (:class:`~streaming.errors.SynthesisTimeout`, the engine's errors);
the caller decides what they mean to its client. Leaving the iteration early (a cancel,
a client gone) cancels the engine's work for it; iterate with :func:`contextlib.aclosing`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass

import numpy as np

from server.engines.base import SynthesisRequest, VoiceSpec
from server.metrics import Metrics
from server.runtime.worker import EngineWorker, Job
from streaming import timestamps
from streaming.segment import Segment
from streaming.speech import SegmentStart, SpeechPipeline
from streaming.text import PreparedText

__all__ = ["FellBack", "Frames", "SegmentSpeaker", "Started", "Timed"]


@dataclass(frozen=True)
class Started:
    start: SegmentStart


@dataclass(frozen=True)
class FellBack:
    pass


@dataclass(frozen=True)
class Frames:
    frames: list[np.ndarray]


@dataclass(frozen=True)
class Timed:
    """The segment's timestamps (the WebSocket ``timestamps`` event's fields)."""

    index: int
    start_ms: float
    end_ms: float
    estimated: bool
    items: list[dict[str, object]]


SpeakerEvent = Started | FellBack | Frames | Timed


class SegmentSpeaker:
    """Speaks the segments of one utterance in order (see the module docstring)."""

    def __init__(
        self,
        worker: EngineWorker,
        metrics: Metrics,
        pipeline: SpeechPipeline,
        voice: VoiceSpec,
        *,
        output_rate_hz: int,
        on_fallback: bool = False,
        timestamps: bool = False,
    ) -> None:
        self.worker = worker
        self.metrics = metrics
        self.pipeline = pipeline
        self.voice = voice
        self.output_rate_hz = output_rate_hz
        #: Admitted on the fallback voice (the server was busy): every segment speaks there.
        self.on_fallback = on_fallback
        self.timestamps = timestamps
        #: The job of the segment speaking now, if any.
        self.job: Job | None = None
        #: Seconds spent waiting for the engine's audio, over every segment so far.
        self.waited_s = 0.0

    def abandon(self) -> None:
        """Drop the segment speaking now (call on the event loop): its iteration ends."""
        if self.job is not None:
            self.job.abandon()

    async def speak(
        self,
        segment: Segment,
        prepared: PreparedText,
        *,
        timeout_s: float,
        deadline: float | None = None,
    ) -> AsyncGenerator[SpeakerEvent]:
        """The events of one segment. ``timeout_s`` bounds the wait for its audio (not the
        caller's time between events); ``deadline``: when its listener's playback reaches
        it (``time.monotonic()``; None: now)."""
        start = self.pipeline.begin(segment, prepared)
        yield Started(start)
        if not start.speaks:
            return
        request = SynthesisRequest(prepared.spoken, self.voice, fallback=self.on_fallback)
        job = self.worker.submit(request, deadline=deadline)
        self.job = job
        produced = 0
        try:
            resumed = time.perf_counter()
            async for chunk in job.chunks(timeout_s):
                self.waited_s += time.perf_counter() - resumed
                if job.fell_back and not produced:
                    yield FellBack()
                produced += chunk.size
                yield Frames(self.pipeline.push(chunk))
                resumed = time.perf_counter()
            self.waited_s += time.perf_counter() - resumed
            if job.cancelled:
                return  # abandoned: a cancelled segment is not a synthesised one
            frames = self.pipeline.finish()
            timed = self._timed(segment, prepared, job) if self.timestamps else None
            yield Frames(frames)
            if timed is not None:
                yield timed
        finally:
            # Leaving early (cancel, disconnect, timeout, error) must not leave the engine
            # synthesising for nobody; after a complete segment this is a no-op.
            job.cancel()
            self.job = None
            self.pipeline.abandon()  # drops held audio unless finished
        self.metrics.observe_segment(
            engine_seconds=job.engine_seconds,
            audio_seconds=produced / self.worker.sample_rate_hz,
            characters=len(prepared.spoken),
        )

    def _timed(self, segment: Segment, prepared: PreparedText, job: Job) -> Timed | None:
        span = self.pipeline.last_span
        if span is None:
            return None
        rate = self.output_rate_hz
        marks = job.marks.marks if job.marks is not None else None
        items, estimated = timestamps.for_segment(
            segment.text, segment.start, prepared.pieces, span, rate, marks
        )
        return Timed(
            index=segment.index,
            start_ms=round(span.start_sample * 1000 / rate, 1),
            end_ms=round(span.end_sample * 1000 / rate, 1),
            estimated=estimated,
            items=[item.to_json() for item in items],
        )
