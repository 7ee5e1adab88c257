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

A segment spoken before (the phrase cache, :mod:`server.runtime.phrase_cache`, when the
caller gives a :class:`~server.runtime.phrase_cache.PhraseScope`) comes from the cache:
the same events, its engine chunks at once, no engine work and no batch row.

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

import numpy as np

from server.engines.base import SynthesisRequest, VoiceSpec
from server.metrics import Metrics
from server.runtime.phrase_cache import CachedJob, CachedPhrase, PhraseScope
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
    """What the tries at one segment came to so far."""

    waited_s: float = 0.0
    engine_s: float = 0.0
    #: Engine samples of the last try.
    produced: int = 0
    abandoned: bool = False
    #: Every try came from the phrase cache.
    cached: bool = True
    job: Job | CachedJob | None = None


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
        phrases: PhraseScope | None = None,
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
        self.job: Job | CachedJob | None = None
        #: Seconds spent waiting for the engine's audio, over every segment so far.
        self.waited_s = 0.0
        #: The phrase cache as this utterance may use it (None: not at all).
        self.phrases = phrases
        self._looking_up = self._dropped = False

    def abandon(self) -> None:
        """Drop the segment speaking now (call on the event loop): its iteration ends."""
        if self.job is not None:
            self.job.abandon()
        elif self._looking_up:
            self._dropped = True

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
                request = SynthesisRequest(prepared.spoken, voice, fallback=self.on_fallback)
                attempt = self._attempt(request, timeout_s, deadline, tries)
                async with contextlib.aclosing(attempt):
                    async for event in attempt:
                        yield event
                if tries.abandoned or tries.job is None:
                    return  # a cancelled segment is not a synthesised one
                job = tries.job
                verdict = self._judge(segment, prepared, voice, tries, retried, timeout_s)
                if isinstance(verdict, Retried):
                    retried = verdict
                    self.pipeline.restart()
                    voice = voice.retry()
                    yield verdict
                    continue
                without = verdict
                break
            frames = self.pipeline.finish()
            timed = self._timed(segment, prepared, job) if self.timestamps else None
            yield Frames(frames, self.pipeline.in_range)
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
            cached=tries.cached,
        )

    def _judge(
        self,
        segment: Segment,
        prepared: PreparedText,
        voice: VoiceSpec,
        tries: _Tries,
        retried: Retried | None,
        timeout_s: float,
    ) -> Retried | WithoutAudio | None:
        """What a finished try comes to: None when its audio will do, :class:`Retried`
        when the segment is made again, :class:`WithoutAudio` when it is reported."""
        assert tries.job is not None
        audio_s = tries.produced / self.worker.sample_rate_hz
        settings = self.pipeline.settings
        if tries.job.fell_back or not settings.too_little_audio(
            prepared.spoken, voice.speed, audio_s
        ):
            return None
        least_s = settings.least_audio_s(prepared.spoken, voice.speed)
        if retried is None and not self.pipeline.segment_sent and tries.waited_s < timeout_s:
            again = Retried(segment.index, voice.seed, voice.retry().seed,
                            round(audio_s, 3), round(least_s, 3))  # fmt: skip
            logger.info("%s", again.describe())
            self.metrics.segments_without_audio.labels(outcome="retried").inc()
            return again
        without = WithoutAudio(
            segment.index, round(audio_s, 3), round(least_s, 3), retried is not None
        )
        logger.warning("%s", without.describe())
        self.metrics.segments_without_audio.labels(outcome="reported").inc()
        return without

    async def _attempt(
        self,
        request: SynthesisRequest,
        timeout_s: float,
        deadline: float | None,
        tries: _Tries,
    ) -> AsyncGenerator[SpeechEvent]:
        """One try at a segment: its frames as the engine (or the phrase cache) makes
        them; what it came to goes into ``tries``."""
        key, job = await self._job(request, deadline)
        if job is None:
            tries.abandoned = True  # while the cache was asked
            return
        tries.cached = tries.cached and isinstance(job, CachedJob)
        tries.job = self.job = job
        tries.produced = 0
        kept: list[np.ndarray] | None = [] if key is not None else None
        # Chunks handed over together go down the speech path as one, up to a longest
        # frame's worth (the path's output does not depend on how its input is cut).
        join = self.worker.sample_rate_hz * self.pipeline.settings.max_frame_ms // 1000
        try:
            resumed = time.perf_counter()
            async for chunk in job.chunks(timeout_s - tries.waited_s, join_samples=join):
                tries.waited_s += time.perf_counter() - resumed
                if job.fell_back and not tries.produced:
                    yield FellBack()
                tries.produced += chunk.size
                if kept is not None:
                    kept.append(chunk)
                yield Frames(self.pipeline.push(chunk), self.pipeline.in_range)
                resumed = time.perf_counter()
            tries.waited_s += time.perf_counter() - resumed
            tries.abandoned = job.cancelled
        finally:
            # Leaving early (cancel, disconnect, timeout, error) must not leave the
            # engine synthesising for nobody; after a whole try this is a no-op.
            job.cancel()
            self.job = None
            tries.engine_s += job.engine_seconds
        keep = kept is not None and not tries.abandoned and not job.fell_back
        if keep and key is not None and self.phrases is not None:
            self.phrases.cache.keep(key, CachedPhrase(tuple(kept or ()), job.marks))

    async def _job(
        self, request: SynthesisRequest, deadline: float | None
    ) -> tuple[str | None, Job | CachedJob | None]:
        """The segment's job: a hit of the phrase cache, else the engine's (then the key
        to keep its audio under, when it may be kept); None when abandoned meanwhile."""
        if self.phrases is None:
            return None, self.worker.submit(request, deadline=deadline)
        key = self.phrases.key(request)
        self._looking_up = True
        try:
            found = await self.phrases.cache.find(key)
        finally:
            self._looking_up = False
        if self._dropped:
            self._dropped = False
            return None, None
        if found is not None:
            return None, CachedJob(found)
        return key, self.worker.submit(request, deadline=deadline)

    def _timed(
        self, segment: Segment, prepared: PreparedText, job: Job | CachedJob
    ) -> Timed | None:
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
