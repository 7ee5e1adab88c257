"""What happens to one utterance, without I/O: its segments' events and its tally.

An utterance is everything one WebSocket context (or one HTTP request's text) says. Its
segments are spoken one at a time (``server/runtime/synthesizer.py``), and each
segment's speech comes as events, in this order:

    SegmentStarted(start)  the segment begins: what of its text is removed, where its
                           audio starts; nothing more follows when it has nothing to speak
    FellBack()             the main engine failed before any audio: the fallback voice speaks
    Retried(...)           its first try made no audio, or implausibly little, and none of
                           it had left: it is made again, once, with a seed derived from its own
    Frames(frames)         audio frames at the utterance's output rate, as the engine makes them
    WithoutAudio(...)      after its audio: it made none, or implausibly little, and could
                           not be retried (audio of it had left, or the retry made none either)
    Timed(fields)          the segment's timestamps, after its audio (when asked for)

:class:`UtteranceTally` counts them (every interface reports the same counts: the
WebSocket's ``done`` and the HTTP headers, each summary log line).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field

import numpy as np

from streaming import encodings
from streaming import protocol as p
from streaming.audio import join_frames
from streaming.segment import Segment, Segmenter
from streaming.speech import SegmentStart
from streaming.text import Lexicon

__all__ = [
    "AudioOut",
    "FellBack",
    "Frames",
    "Retried",
    "SegmentStarted",
    "SpeechEvent",
    "Timed",
    "UtteranceState",
    "UtteranceTally",
    "UtteranceVoice",
    "WithoutAudio",
]


@dataclass(frozen=True)
class SegmentStarted:
    start: SegmentStart


@dataclass(frozen=True)
class FellBack:
    pass


@dataclass(frozen=True)
class Frames:
    frames: list[np.ndarray]
    #: Every sample finite and within ``streaming.joins.CEILING``: encoded without a
    #: check (the joins' output, neither resampled nor scaled after:
    #: ``SpeechPipeline.in_range``).
    in_range: bool = False


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


@dataclass(frozen=True)
class Timed:
    """The segment's timestamps (the WebSocket ``timestamps`` event's fields)."""

    index: int
    start_ms: float
    end_ms: float
    estimated: bool
    items: list[dict[str, object]]


SpeechEvent = SegmentStarted | FellBack | Retried | Frames | WithoutAudio | Timed

#: A binary audio frame as it is sent: its header (:func:`streaming.protocol.pack_audio_header`)
#: and its PCM (16-bit little-endian), kept apart so the sender need not join them.
AudioOut = tuple[bytes, bytes]


@dataclass
class UtteranceTally:
    """What one utterance has said so far, as every interface reports it."""

    #: Characters of text received to be spoken (cut into segments, or the whole text).
    characters: int = 0
    #: Characters not spoken as written (removed by the text front-end).
    removed_chars: int = 0
    #: Segments begun (each announced with its ``segment`` event).
    segments: int = 0
    #: Output samples delivered to the client.
    samples: int = 0
    #: Segments that failed (each reported as an error).
    failures: int = 0
    #: Segments the fallback voice spoke because the main engine failed on them.
    fallback_segments: int = 0
    #: Segments made again (their first try made too little audio): (index, retry seed).
    retried: list[tuple[int, int]] = field(default_factory=list)
    #: Segments that ended with too little audio (reported): their indexes.
    without_audio: list[int] = field(default_factory=list)

    def count(self, event: SpeechEvent, *, removals: bool = True) -> int:
        """Count one segment event (``removals``: count its removed characters too, for
        an utterance that did not count them up front); return the characters it
        removed (counted or not)."""
        if isinstance(event, SegmentStarted):
            self.segments += 1
            removed = sum(len(r.chars) for r in event.start.removed)
            if removals:
                self.removed_chars += removed
            return removed
        if isinstance(event, FellBack):
            self.fallback_segments += 1
        elif isinstance(event, Retried):
            self.retried.append((event.index, event.retry_seed))
        elif isinstance(event, WithoutAudio):
            self.without_audio.append(event.index)
        return 0

    def audio_ms(self, sample_rate_hz: int) -> float:
        return round(self.samples * 1000 / sample_rate_hz, 1)


@dataclass(frozen=True)
class UtteranceVoice:
    """What fixes how an utterance sounds, for all of its segments."""

    voice: str | None
    seed: int
    speed: float
    sample_rate_hz: int
    #: Spoken by the fallback voice: admitted while the engine was at capacity.
    fallback: bool = False
    #: The client's own seed (False: the voice's, or one picked for it).
    seed_given: bool = True
    #: Loudness factor (streaming.limiter).
    volume: float = 1.0
    #: How its audio frames are encoded (streaming.encodings).
    encoding: str = encodings.DEFAULT_ENCODING
    #: Every frame exactly this long (None: the server's frames, shorter first).
    frame_ms: int | None = None


class UtteranceState:
    """One utterance on a connection, as the core keeps it: its text rules (its
    segmenter, what it may still receive) and what its client has heard of it."""

    def __init__(
        self,
        context_id: str,
        stream: int,
        voice: UtteranceVoice,
        segmenter: Segmenter,
        *,
        timestamps: bool = False,
        lexicon: Lexicon | None = None,
        max_frame_ms: int = 0,
    ):
        #: The client's name for it (the wire's ``context_id``).
        self.id = context_id
        #: The utterance's own lexicon entries (``start``'s ``lexicon``), checked.
        self.lexicon = lexicon
        #: Send a ``timestamps`` event after each segment (``start`` asked for them).
        self.timestamps = timestamps
        #: Frames ready together are joined up to this long (streaming.speech, 0: never).
        self.max_frame_ms = max_frame_ms
        #: Its number on the connection (audio frame headers, ``stream`` fields).
        self.stream = stream
        self.voice = voice
        #: float frames → the bytes of its encoding (streaming.encodings): any frames,
        #: and frames known to be in range.
        self._encoders = (
            encodings.encoder(voice.encoding),
            encodings.encoder(voice.encoding, in_range=True),
        )
        self.segmenter = segmenter
        self.queued_chars = 0  # cut into segments, not yet finished speaking
        self.received_chars = 0  # every character of text accepted
        self.closing = False  # after end or cancel: no more text
        self.drained = False  # ended by the server's drain, not by its client
        self.cancelled = False
        self.has_text = False  # received words (not only blanks)
        #: What it has said (the speaking side counts its events into it too).
        self.tally = UtteranceTally()
        #: Audio frames sent (the next frame's sequence number).
        self.sequence = 0
        #: How it ended, for its summary: ``disconnected`` until its ``done`` is written.
        self.outcome = "disconnected"

    @property
    def buffered_chars(self) -> int:
        """Unspoken characters: pending in the segmenter and queued in segments."""
        return len(self.segmenter.pending_text) + self.queued_chars

    def heard(
        self, segment: Segment, spoken: str, event: SpeechEvent, *, lead_s: float = 0.0
    ) -> Iterable[p.ServerMessage | AudioOut]:
        """What the client is sent of one event of ``segment`` (``spoken``: its text as
        the engine says it), in order: messages, and audio frames (header, PCM). Frames
        are made as they are taken, each counted then; none after a cancel.

        ``lead_s``: the audio the listener has ahead of its playback before this event's.
        Frames the event holds are then joined up to ``max_frame_ms`` and at most
        ``lead_s`` each (:func:`streaming.audio.join_frames`): a link that carries the
        stream in real time delivers each before the listener needs its first sample,
        and the server sends a frame, not ten, when the engine runs ahead. A context
        with its own ``frame_ms`` keeps exact frames."""
        if isinstance(event, Frames):
            if not event.frames:
                return ()
            frames = self._joined(event.frames, lead_s)
            return self._frames(segment.index, frames, event.in_range)
        if isinstance(event, SegmentStarted):
            return self._started(segment, spoken, event.start)
        if isinstance(event, FellBack):
            warning = p.WarningEvent(
                context_id=self.id,
                code="fallback_voice",
                message=f"segment {segment.index}: the main engine failed on it; "
                "it is spoken with the fallback voice",
            )
            return (warning,)
        if isinstance(event, Timed):
            return (p.TimestampsEvent(context_id=self.id, stream=self.stream, **asdict(event)),)
        code = "segment_retried" if isinstance(event, Retried) else "segment_without_audio"
        return (
            p.SegmentWarningEvent(
                context_id=self.id, code=code, message=event.describe(), segment=event.index
            ),
        )

    def _started(
        self, segment: Segment, spoken: str, start: SegmentStart
    ) -> tuple[p.ServerMessage, ...]:
        rate = self.voice.sample_rate_hz
        announced = p.SegmentEvent(
            context_id=self.id,
            stream=self.stream,
            index=segment.index,
            text=segment.text,
            spoken=spoken,
            start_char=segment.start,
            end_char=segment.end,
            audio_start_sample=start.audio_start_sample,
            audio_start_ms=round(start.audio_start_sample * 1000 / rate, 1),
        )
        if start.removed:
            return (p.removed_warning(self.id, start.removed), announced)
        return (announced,)

    def _joined(self, frames: list[np.ndarray], lead_s: float) -> list[np.ndarray]:
        if lead_s <= 0 or not self.max_frame_ms or self.voice.frame_ms is not None:
            return frames
        longest_ms = min(lead_s * 1000, self.max_frame_ms)
        return join_frames(frames, int(longest_ms * self.voice.sample_rate_hz / 1000))

    def _frames(
        self, segment_index: int, frames: list[np.ndarray], in_range: bool
    ) -> Iterator[AudioOut]:
        encode = self._encoders[in_range]
        for frame in frames:
            if self.cancelled or not frame.size:
                continue
            header = p.pack_audio_header(self.stream, segment_index, self.sequence)
            self.sequence += 1
            self.tally.samples += int(frame.size)
            yield header, encode(frame)

    def failed(self, segment: Segment, code: str, message: str) -> p.ErrorEvent:
        """The ``error`` that reports ``segment``'s failure (``message``: what the client
        may know of it); counted, and the utterance goes on."""
        self.tally.failures += 1
        what = f"segment {segment.index}"
        said = f"{what} could not be spoken" if code == "internal_error" else f"{what}: {message}"
        return p.ErrorEvent(context_id=self.id, code=code, message=said)

    def done(self) -> p.Done:
        """The utterance's ``done``: all it said (or, cancelled, said before the cancel)."""
        tally = self.tally
        if self.cancelled:
            self.outcome = "cancelled"
        else:
            self.outcome = "done_with_errors" if tally.failures else "done"
        return p.Done(
            context_id=self.id,
            stream=self.stream,
            segments=tally.segments,
            audio_samples=tally.samples,
            audio_ms=tally.audio_ms(self.voice.sample_rate_hz),
            cancelled=self.cancelled,
        )
