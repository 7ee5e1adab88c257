"""Speaking one segment of an utterance, for any interface: the WebSocket and HTTP alike.

A :class:`SegmentSynthesizer` belongs to one utterance (``server/runtime/utterance.py``)
and its :class:`~streaming.speech.SpeechPipeline`. For each segment,
:meth:`SegmentSynthesizer.synthesize` submits the normalised text to the engine worker,
pushes the engine's chunks through the pipeline and yields what happened as the events
of :mod:`streaming.utterance` (``SegmentStarted``, ``FellBack``, ``Retried``, ``Frames``,
``WithoutAudio``, ``Timed``).

"Implausibly little" is less than :meth:`streaming.speech.SpeechSettings.least_audio_s`
(``--min-audio-ms-per-char`` per sounding character, at the segment's speed): real
ChatTTS ends early on some short inputs and seeds, and a random-weight model ends at
random. Each retry and each report is logged and counted
(``tts_segments_without_audio_total{outcome}``); what the client is told is the caller's.

Failures are raised (:class:`~streaming.errors.SynthesisTimeout`, the engine's errors);
the caller decides what they mean to its client. Leaving the iteration early (a cancel,
a client gone) cancels the engine's work for it; iterate with :func:`contextlib.aclosing`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from server.engines.base import SynthesisRequest, VoiceSpec
from server.metrics import Metrics
from server.runtime.worker import EngineWorker, Job
from streaming import timestamps
from streaming.segment import Segment
from streaming.speech import SpeechPipeline
from streaming.text import PreparedText
from streaming.utterance import (
    FellBack,
    Frames,
    Retried,
    SegmentStarted,
    SpeechEvent,
    Timed,
    WithoutAudio,
)

__all__ = ["SegmentSynthesizer"]

logger = logging.getLogger(__name__)


@dataclass
class _Tries:
    """One segment's engine tries so far."""

    #: Seconds spent waiting for the engine's audio, every try included.
    waited_s: float = 0.0
    #: Engine seconds, every try included.
    engine_s: float = 0.0
    #: Engine samples the last try made.
    produced: int = 0
    #: The last try's job (None before the first).
    job: Job | None = None
    #: The last try was abandoned (cancelled by its caller).
    abandoned: bool = False


class SegmentSynthesizer:
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

    async def synthesize(
        self,
        segment: Segment,
        prepared: PreparedText,
        *,
        timeout_s: float,
        deadline: float | None = None,
    ) -> AsyncGenerator[SpeechEvent]:
        """The events of one segment. ``timeout_s`` bounds the wait for its audio, a
        retry's included (not the caller's time between events); ``deadline``: when its
        listener's playback reaches it (``time.monotonic()``; None: now)."""
        start = self.pipeline.begin(segment, prepared)
        yield SegmentStarted(start)
        if not start.speaks:
            return
        voice = self.voice
        tries = _Tries()
        retried: Retried | None = None
        without: WithoutAudio | None = None
        try:
            while True:
                async with contextlib.aclosing(
                    self._try(prepared, voice, tries, timeout_s - tries.waited_s, deadline)
                ) as events:
                    async for event in events:
                        yield event
                if tries.abandoned:
                    return  # a cancelled segment is not a synthesised one
                if not self._too_little(prepared, voice, tries):
                    break
                if (
                    retried is None
                    and not self.pipeline.segment_sent
                    and tries.waited_s < timeout_s
                ):
                    retried = self._retry(segment, prepared, voice, tries)
                    voice = voice.retry()
                    yield retried
                    continue
                without = self._without_audio(segment, prepared, voice, tries, retried)
                break
            frames = self.pipeline.finish()
            timed = self._timed(segment, prepared, tries.job) if self.timestamps else None
            yield Frames(frames)
            if without is not None:
                yield without
            if timed is not None:
                yield timed
        finally:
            self.waited_s += tries.waited_s
            self.pipeline.abandon()  # drops held audio unless finished
        self.metrics.observe_segment(
            engine_seconds=tries.engine_s,
            audio_seconds=tries.produced / self.worker.sample_rate_hz,
            characters=len(prepared.spoken),
        )

    async def _try(
        self,
        prepared: PreparedText,
        voice: VoiceSpec,
        tries: _Tries,
        budget_s: float,
        deadline: float | None,
    ) -> AsyncGenerator[FellBack | Frames]:
        """One engine try of the segment with ``voice``, within ``budget_s`` of waiting."""
        request = SynthesisRequest(prepared.spoken, voice, fallback=self.on_fallback)
        job = self.worker.submit(request, deadline=deadline)
        self.job = tries.job = job
        tries.produced = 0
        try:
            resumed = time.perf_counter()
            async for chunk in job.chunks(budget_s):
                tries.waited_s += time.perf_counter() - resumed
                if job.fell_back and not tries.produced:
                    yield FellBack()
                tries.produced += chunk.size
                yield Frames(self.pipeline.push(chunk))
                resumed = time.perf_counter()
            tries.waited_s += time.perf_counter() - resumed
            tries.abandoned = job.cancelled
        finally:
            # Leaving early (cancel, disconnect, timeout, error) must not leave the
            # engine synthesising for nobody; after a whole try this is a no-op.
            job.cancel()
            self.job = None
            tries.engine_s += job.engine_seconds

    def _too_little(self, prepared: PreparedText, voice: VoiceSpec, tries: _Tries) -> bool:
        """The last try made implausibly little audio (the fallback voice is not judged)."""
        assert tries.job is not None
        audio_s = tries.produced / self.worker.sample_rate_hz
        return not tries.job.fell_back and self.pipeline.settings.too_little_audio(
            prepared.spoken, voice.speed, audio_s
        )

    def _retry(
        self, segment: Segment, prepared: PreparedText, voice: VoiceSpec, tries: _Tries
    ) -> Retried:
        audio_s = tries.produced / self.worker.sample_rate_hz
        least_s = self.pipeline.settings.least_audio_s(prepared.spoken, self.voice.speed)
        retried = Retried(segment.index, voice.seed, voice.retry().seed,
                          round(audio_s, 3), round(least_s, 3))  # fmt: skip
        logger.info("%s", retried.describe())
        self.metrics.segments_without_audio.labels(outcome="retried").inc()
        self.pipeline.restart()
        return retried

    def _without_audio(
        self,
        segment: Segment,
        prepared: PreparedText,
        voice: VoiceSpec,
        tries: _Tries,
        retried: Retried | None,
    ) -> WithoutAudio:
        audio_s = tries.produced / self.worker.sample_rate_hz
        least_s = self.pipeline.settings.least_audio_s(prepared.spoken, self.voice.speed)
        without = WithoutAudio(
            segment.index, round(audio_s, 3), round(least_s, 3), retried is not None
        )
        logger.warning("%s", without.describe())
        self.metrics.segments_without_audio.labels(outcome="reported").inc()
        return without

    def _timed(self, segment: Segment, prepared: PreparedText, job: Job | None) -> Timed | None:
        span = self.pipeline.last_span
        if span is None:
            return None
        rate = self.output_rate_hz
        marks = job.marks.marks if job is not None and job.marks is not None else None
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
