"""One utterance's speech path, the same for every interface: segments in, PCM frames out.

The WebSocket context, ``POST /v1/tts`` and any later route speak through
:class:`SpeechPipeline`. Per segment it reports what of the text is not spoken as
written (:attr:`SegmentStart.removed`, offsets in the whole utterance's text), then
turns the engine's chunks into frames at the client's rate:

    engine chunks -> TimeStretcher -> SegmentJoiner (trim, fade, loudness) -> Resampler
                  -> VolumeLimiter -> FrameChunker

The stretcher (``tempo`` other than 1: speeds beyond the engine's own rate control, see
:func:`streaming.stretch.split_speed`) changes the duration, not the pitch, of each
segment's audio on its own; everything after it, pauses and timestamps included, is in
the stretched time the listener hears. The limiter (``volume`` other than 1, see
:mod:`streaming.limiter`) scales each segment and keeps its peaks below full scale; it
holds back a few milliseconds, released at the segment's end.

and after the segment adds the pause its punctuation asks for (``streaming.joins``).
A streamed utterance gets every pause at once (its listener should not wait for it); a
whole-text utterance (``whole_text=True``) holds each pause back until the next
segment's first audio, so the audio never ends in silence.

Frames: the first frame of each segment holds ``first_frame_ms``, the next ones double
up to ``frame_ms`` (see :class:`streaming.audio.FrameChunker`); each segment's audio is
resampled on its own and flushed at its end, so segment offsets are exact at any rate.
Given its own ``frame_ms`` (a telephony client's 20 ms), every frame holds exactly that:
a segment's last frame is filled up with silence, which joins the pause after it.
Pure and synchronous; one instance per utterance; not thread-safe.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from streaming.audio import FrameChunker, Resampler
from streaming.joins import JoinSettings, SegmentJoiner
from streaming.limiter import VolumeLimiter
from streaming.segment import Segment, Segmenter, SegmenterSettings
from streaming.stretch import TimeStretcher
from streaming.text import PreparedText, Removal

__all__ = [
    "SegmentSpan",
    "SegmentStart",
    "SpeechPipeline",
    "SpeechSettings",
    "removals_in_utterance",
]

_NOTHING = np.zeros(0, np.float32)


@dataclass(frozen=True)
class SpeechSettings:
    """The speech policy shared by every interface (the server builds it from its settings)."""

    segment_max_chars: int = 80
    #: The first segment of a streamed utterance may end at a clause this early (the
    #: server's default is 3, by measurement: ``--first-segment-min-chars``).
    first_segment_min_chars: int = 6
    frame_ms: int = 100
    first_frame_ms: int = 40
    #: Frames ready at the same moment go out joined, up to this long and never longer
    #: than the audio the listener has ahead of its playback (0: never joined; frames of
    #: a client's own ``frame_ms`` never are). See ``UtteranceState.heard``.
    max_frame_ms: int = 1000
    shape_joins: bool = True
    pause_scale: float = 1.0
    #: A segment's audio shorter than this per sounding character (at speed 1; a speed
    #: of 2 halves it) is implausibly short: the engine ended it early or said nothing.
    min_audio_ms_per_char: float = 40.0

    def least_audio_s(self, spoken: str, speed: float) -> float:
        """The least audio, in seconds, a plausible reading of ``spoken`` lasts at
        ``speed``: its sounding characters (letters and digits of any script, so each
        Chinese character; no punctuation or spaces) times ``min_audio_ms_per_char``."""
        return _sounding(spoken) * self.min_audio_ms_per_char / 1000 / max(speed, 1e-9)

    def too_little_audio(self, spoken: str, speed: float, audio_s: float) -> bool:
        """Whether ``audio_s`` seconds is implausibly little audio for ``spoken`` at
        ``speed``: none at all for a text with a sounding character, or less than
        :meth:`least_audio_s`."""
        if not _sounding(spoken):
            return False
        return audio_s <= 0 or audio_s < self.least_audio_s(spoken, speed)

    def segmenter_settings(self, *, whole_text: bool) -> SegmenterSettings:
        """Streamed text cuts its first segment early; a whole text has no first-audio
        race, so every segment is a whole sentence (up to ``segment_max_chars``)."""
        first = self.segment_max_chars if whole_text else self.first_segment_min_chars
        return SegmenterSettings(max_chars=self.segment_max_chars, first_min_chars=first)

    def segmenter(self, *, whole_text: bool) -> Segmenter:
        return Segmenter(self.segmenter_settings(whole_text=whole_text))

    def segments(self, text: str) -> list[Segment]:
        """A whole text cut as one push then a flush."""
        segmenter = self.segmenter(whole_text=True)
        return [*segmenter.push(text), *segmenter.flush()]


@functools.lru_cache(maxsize=16)
def _join_settings(pause_scale: float) -> JoinSettings:
    """The joins' settings for ``pause_scale`` (one object shared by the utterances)."""
    return JoinSettings(pause_scale=pause_scale)


def _sounding(text: str) -> int:
    return sum(1 for char in text if char.isalnum())


def removals_in_utterance(segment: Segment, prepared: PreparedText) -> tuple[Removal, ...]:
    """The segment's removals with offsets in the whole utterance's text."""
    return tuple(Removal(segment.start + r.start, r.chars, r.reason) for r in prepared.removed)


@dataclass(frozen=True)
class SegmentSpan:
    """Where a finished segment's audio lies in the utterance's output (its pause not
    included), and how the engine's own samples map onto it."""

    start_sample: int
    end_sample: int
    #: Engine samples cut from the segment's head (silence), before the first sent.
    lead_trim: int
    #: Output samples per engine sample.
    ratio: float

    def output_sample(self, engine_sample: float) -> float:
        """Where engine sample ``engine_sample`` of the segment was sent (clamped to it)."""
        at = self.start_sample + (engine_sample - self.lead_trim) * self.ratio
        return min(max(at, self.start_sample), self.end_sample)


@dataclass(frozen=True)
class SegmentStart:
    """What is known of a segment before its audio."""

    #: Characters not spoken as written, offsets in the utterance's text.
    removed: tuple[Removal, ...]
    #: Where the segment's audio starts in the utterance's audio (output samples).
    audio_start_sample: int
    #: False when nothing of the segment can be spoken: no audio will follow.
    speaks: bool


class SpeechPipeline:
    """The audio path of one utterance; see the module docstring.

    Calling contract, per segment: :meth:`begin`; when it ``speaks``, :meth:`push` each
    engine chunk (returns the frames ready now) and then :meth:`finish` (the rest and the
    pause), or :meth:`abandon` when the segment will not finish (cancel, engine error,
    timeout: its held audio is dropped, and no pause follows it). While none of its
    audio has left as frames (:attr:`segment_sent` False), :meth:`restart` starts the
    segment's audio over, for the engine to make it again.
    """

    def __init__(
        self,
        settings: SpeechSettings,
        engine_rate_hz: int,
        output_rate_hz: int,
        *,
        whole_text: bool = False,
        tempo: float = 1.0,
        volume: float = 1.0,
        frame_ms: int | None = None,
    ) -> None:
        self.settings = settings
        self.engine_rate_hz = engine_rate_hz
        self.output_rate_hz = output_rate_hz
        self.whole_text = whole_text
        self.tempo = tempo
        self._stretcher = TimeStretcher(engine_rate_hz, tempo) if tempo != 1.0 else None
        self._joiner = (
            SegmentJoiner(engine_rate_hz, _join_settings(settings.pause_scale))
            if settings.shape_joins
            else None
        )
        self._resampler = (
            Resampler(engine_rate_hz, output_rate_hz) if engine_rate_hz != output_rate_hz else None
        )
        self._limiter = VolumeLimiter(output_rate_hz, volume) if volume != 1.0 else None
        #: Every sample of its frames finite and within the joins' ``CEILING``, so encoded
        #: without a check: the joins' soft limiter is the last to touch them (no
        #: resampling or volume after it; pauses and fills are zeros).
        self.in_range = (
            self._joiner is not None and self._resampler is None and self._limiter is None
        )
        #: Every frame exactly ``frame_ms`` (a telephony client's own frame duration).
        self.exact_frames = frame_ms is not None
        frame_samples = output_rate_hz * (frame_ms or settings.frame_ms) // 1000
        self._chunker = FrameChunker(
            frame_samples,
            first_frame_samples=(
                frame_samples if frame_ms else output_rate_hz * settings.first_frame_ms // 1000
            ),
        )
        #: Output samples framed so far (pauses included once released).
        self.samples = 0
        self._segment: Segment | None = None
        self._segment_samples = 0  # engine samples received for the current segment
        self._held_pause = 0  # whole_text: the last segment's pause, until more audio
        self._segment_start = 0  # output sample where the current segment's audio starts
        self._segment_out = 0  # output samples of the current segment's audio so far
        # At the current segment's begin(): samples framed, and the pause held then.
        self._begun_at = (0, 0)
        #: The span of the last segment finished (None before the first).
        self.last_span: SegmentSpan | None = None

    def begin(self, segment: Segment, prepared: PreparedText) -> SegmentStart:
        """Start ``segment`` (prepared for the engine as ``prepared``)."""
        if self._segment is not None:
            self.abandon()
        start = SegmentStart(
            removals_in_utterance(segment, prepared), self.samples, bool(prepared.spoken)
        )
        if start.speaks:
            self._segment = segment
            self._segment_samples = 0
            self._segment_start = self.samples + self._held_pause
            self._segment_out = 0
            self._begun_at = (self.samples, self._held_pause)
            if self._joiner is not None:
                self._joiner.begin(segment.text)
        return start

    @property
    def segment_sent(self) -> bool:
        """Whether any of the current segment's audio has left as frames."""
        return self._segment is not None and self.samples > self._begun_at[0]

    def restart(self) -> None:
        """Start the current segment's audio over: what is held of it is dropped, as if
        :meth:`begin` had just been called (RuntimeError once some of it has left)."""
        segment = self._segment
        if segment is None or self.segment_sent:
            raise RuntimeError("restart() needs a segment none of whose audio has left")
        if self._stretcher is not None:
            self._stretcher.reset()
        if self._resampler is not None:
            self._resampler.flush()
        if self._limiter is not None:
            self._limiter.reset()
        self._chunker.flush()
        self._segment_samples = self._segment_out = 0
        self._held_pause = self._begun_at[1]
        if self._joiner is not None:
            self._joiner.begin(segment.text)

    def push(self, chunk: np.ndarray) -> list[np.ndarray]:
        """One engine chunk (float32 at the engine rate) in; the frames ready now out."""
        if self._segment is None:
            raise RuntimeError("push() outside a segment: call begin() first")
        self._segment_samples += int(chunk.size)
        if self._stretcher is not None:
            chunk = self._stretcher.process(chunk)
        shaped = self._joiner.process(chunk) if self._joiner is not None else chunk
        body = self._resample(shaped)
        self._segment_out += int(body.size)
        return self._frames(body)

    def finish(self) -> list[np.ndarray]:
        """End the segment: its held audio, faded to zero, then its pause (or held)."""
        segment = self._segment
        if segment is None:
            raise RuntimeError("finish() outside a segment: call begin() first")
        self._segment = None
        stretched = self._stretcher.flush() if self._stretcher is not None else _NOTHING
        if self._joiner is not None:
            # The stretcher's rest first (none without one: process() would release nothing).
            held = self._joiner.process(stretched) if stretched.size else _NOTHING
            rest = self._joiner.finish(pause=False)
            if held.size:
                rest = np.concatenate((held, rest))
        else:
            rest = stretched
        body = self._resample(rest)
        if self._resampler is not None:
            body = np.concatenate((body, self._limit(self._resampler.flush())))
        if self._limiter is not None:
            body = np.concatenate((body, self._limiter.flush()))
        self._segment_out += int(body.size)
        # The joiner trims stretched samples: in the engine's, that is tempo times more.
        lead_trim = self._joiner.last_lead_dropped if self._joiner is not None else 0
        self.last_span = SegmentSpan(
            self._segment_start,
            self._segment_start + self._segment_out,
            round(lead_trim * self.tempo),
            self.output_rate_hz / self.engine_rate_hz / self.tempo,
        )
        pause = self._pause_samples() if self._segment_samples else 0
        if self.whole_text:
            frames = self._frames(body)
            self._held_pause = pause
        else:
            frames = self._frames(np.concatenate((body, np.zeros(pause, np.float32))))
        frames += self._flush()
        return frames

    def abandon(self) -> None:
        """Drop the current segment's held audio; no pause follows it."""
        if self._segment is None:
            return  # finished, or never speaking: nothing is held
        self._segment = None
        if self._stretcher is not None:
            self._stretcher.reset()
        if self._joiner is not None:
            self._joiner.abandon()
        # Resetting them drops what they hold of the abandoned segment.
        if self._resampler is not None:
            self._resampler.flush()
        if self._limiter is not None:
            self._limiter.reset()
        self._chunker.flush()

    def _pause_samples(self) -> int:
        """The pause after the segment just finished (its text's, from the joiner)."""
        if self._joiner is None:
            return 0
        return max(0, round(self._joiner.pause_ms * self.output_rate_hz / 1000))

    def _resample(self, samples: np.ndarray) -> np.ndarray:
        resampled = self._resampler.process(samples) if self._resampler is not None else samples
        return self._limit(resampled)

    def _limit(self, samples: np.ndarray) -> np.ndarray:
        return self._limiter.process(samples) if self._limiter is not None else samples

    def _frames(self, samples: np.ndarray) -> list[np.ndarray]:
        if samples.size and self._held_pause:
            samples = np.concatenate((np.zeros(self._held_pause, np.float32), samples))
            self._held_pause = 0
        frames = self._chunker.push(samples)
        self.samples += sum(map(len, frames))  # 1-D: a frame's len is its size
        return frames

    def _flush(self) -> list[np.ndarray]:
        frames = self._chunker.flush()
        if self.exact_frames and frames:
            # The segment's last frame is filled up with silence (its pause, or a held
            # pause made that much shorter): the next segment starts on a whole frame.
            short = self._chunker.frame_samples - int(frames[-1].size)
            frames[-1] = np.concatenate((frames[-1], np.zeros(short, frames[-1].dtype)))
            self._held_pause = max(0, self._held_pause - short)
        self.samples += sum(map(len, frames))  # 1-D: a frame's len is its size
        return frames
