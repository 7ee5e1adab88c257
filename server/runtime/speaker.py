"""Speaking one segment, for any caller: the WebSocket context and the HTTP routes alike.

A :class:`SegmentSpeaker` belongs to one utterance (a WebSocket context, or one HTTP
request's text) and its :class:`~streaming.speech.SpeechPipeline`. For each segment,
:meth:`SegmentSpeaker.speak` submits the normalised text to the engine worker, pushes
the engine's chunks through the pipeline and yields what happened as events:

    Started(start)   the segment begins: what of its text is removed, where its audio
                     starts; nothing more follows when it has nothing to speak
    FellBack()       the main engine failed before any audio: the fallback voice speaks
    Retried(...)     its first try made no audio, or implausibly little, and none of it
                     had left: it is made again, once, with a seed derived from its own
    Frames(frames)   audio frames at the utterance's output rate, as the engine makes them
    WithoutAudio(...) after its audio: it made none, or implausibly little, and could not
                     be retried (audio of it had left, or the retry made none either)
    Timed(fields)    the segment's timestamps, after its audio (when asked for)

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
from streaming.speech import SegmentStart, SpeechPipeline
from streaming.text import PreparedText

__all__ = ["FellBack", "Frames", "Retried", "SegmentSpeaker", "Started", "Timed", "WithoutAudio"]

logger = logging.getLogger(__name__)


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
class Retried:
    """The segment is made again: its first try (``seed``) gave ``audio_s`` of audio, at
    least ``least_s`` was expected; the retry speaks with ``retry_seed``."""

    index: int
    seed: int
    retry_seed: int
    audio_s: float
    least_s: float

    def describe(self) -> str:
        return (
            f"segment {self.index} made {_made(self.audio_s, self.least_s)} with seed "
            f"{self.seed}; it is spoken again with seed {self.retry_seed}, derived from it"
        )


@dataclass(frozen=True)
class WithoutAudio:
    """The segment ended with ``audio_s`` of audio where at least ``least_s`` was
    expected, and was not made again (``retried``: it had been, and that made too little
    as well; otherwise some of its audio had already left)."""

    index: int
    audio_s: float
    least_s: float
    retried: bool

    def describe(self) -> str:
        why = (
            "and so did its retry with another seed"
            if self.retried
            else "after some of its audio had been sent, so it was not made again"
        )
        return f"segment {self.index} made {_made(self.audio_s, self.least_s)}, {why}"


def _made(audio_s: float, least_s: float) -> str:
    if audio_s <= 0:
        return "no audio"
    return f"only {audio_s:.2f} s of audio (at least {least_s:.2f} s expected for its text)"


@dataclass
class _Tally:
    """What the tries at one segment came to so far."""

    waited_s: float = 0.0
    engine_s: float = 0.0
    #: Engine samples of the last try.
    produced: int = 0
    abandoned: bool = False
    #: Every try came from the phrase cache.
    cached: bool = True
    job: Job | CachedJob | None = None


@dataclass(frozen=True)
class Timed:
    """The segment's timestamps (the WebSocket ``timestamps`` event's fields)."""

    index: int
    start_ms: float
    end_ms: float
    estimated: bool
    items: list[dict[str, object]]


SpeakerEvent = Started | FellBack | Retried | Frames | WithoutAudio | Timed


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

    async def speak(
        self,
        segment: Segment,
        prepared: PreparedText,
        *,
        timeout_s: float,
        deadline: float | None = None,
    ) -> AsyncGenerator[SpeakerEvent]:
        """The events of one segment. ``timeout_s`` bounds the wait for its audio, a
        retry's included (not the caller's time between events); ``deadline``: when its
        listener's playback reaches it (``time.monotonic()``; None: now)."""
        start = self.pipeline.begin(segment, prepared)
        yield Started(start)
        if not start.speaks:
            return
        voice = self.voice
        tally = _Tally()
        retried: Retried | None = None
        without: WithoutAudio | None = None
        try:
            while True:
                request = SynthesisRequest(prepared.spoken, voice, fallback=self.on_fallback)
                attempt = self._attempt(request, timeout_s, deadline, tally)
                async with contextlib.aclosing(attempt):
                    async for event in attempt:
                        yield event
                if tally.abandoned or tally.job is None:
                    return  # a cancelled segment is not a synthesised one
                job = tally.job
                verdict = self._judge(segment, prepared, voice, tally, retried, timeout_s)
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
            yield Frames(frames)
            if without is not None:
                yield without
            if timed is not None:
                yield timed
        finally:
            self.waited_s += tally.waited_s
            self.pipeline.abandon()  # drops held audio unless finished
        self.metrics.observe_segment(
            engine_seconds=tally.engine_s,
            audio_seconds=tally.produced / self.worker.sample_rate_hz,
            characters=len(prepared.spoken),
            cached=tally.cached,
        )

    def _judge(
        self,
        segment: Segment,
        prepared: PreparedText,
        voice: VoiceSpec,
        tally: _Tally,
        retried: Retried | None,
        timeout_s: float,
    ) -> Retried | WithoutAudio | None:
        """What a finished try comes to: None when its audio will do, :class:`Retried`
        when the segment is made again, :class:`WithoutAudio` when it is reported."""
        assert tally.job is not None
        audio_s = tally.produced / self.worker.sample_rate_hz
        settings = self.pipeline.settings
        if tally.job.fell_back or not settings.too_little_audio(
            prepared.spoken, voice.speed, audio_s
        ):
            return None
        least_s = settings.least_audio_s(prepared.spoken, voice.speed)
        if retried is None and not self.pipeline.segment_sent and tally.waited_s < timeout_s:
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
        tally: _Tally,
    ) -> AsyncGenerator[SpeakerEvent]:
        """One try at a segment: its frames as the engine (or the phrase cache) makes
        them; what it came to goes into ``tally``."""
        key, job = await self._job(request, deadline)
        if job is None:
            tally.abandoned = True  # while the cache was asked
            return
        tally.cached = tally.cached and isinstance(job, CachedJob)
        tally.job = self.job = job
        tally.produced = 0
        kept: list[np.ndarray] | None = [] if key is not None else None
        try:
            resumed = time.perf_counter()
            async for chunk in job.chunks(timeout_s - tally.waited_s):
                tally.waited_s += time.perf_counter() - resumed
                if job.fell_back and not tally.produced:
                    yield FellBack()
                tally.produced += chunk.size
                if kept is not None:
                    kept.append(chunk)
                yield Frames(self.pipeline.push(chunk))
                resumed = time.perf_counter()
            tally.waited_s += time.perf_counter() - resumed
            tally.abandoned = job.cancelled
        finally:
            # Leaving early (cancel, disconnect, timeout, error) must not leave the
            # engine synthesising for nobody; after a whole try this is a no-op.
            job.cancel()
            self.job = None
            tally.engine_s += job.engine_seconds
        keep = kept is not None and not tally.abandoned and not job.fell_back
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
