"""Joins between the segments of one utterance: trimmed silence, punctuation pauses,
fades to zero and one loudness for the whole context.

A TTS engine speaks each segment as a separate utterance: it opens and closes it with
its own silence (ChatTTS: tens to hundreds of ms, espeak ~30 ms before and ~150 ms
after), starts and stops wherever the waveform happens to be, and picks a level per
utterance. Played back to back, the pauses between segments then follow the engine,
not the text, joins can click, and the voice gets louder and softer per sentence.
:class:`SegmentJoiner` reshapes each segment *while it streams*:

- leading silence: blocks below ``silence_db`` at the start of a segment are dropped
  (at most ``max_lead_trim_ms``), keeping ``lead_keep_ms`` before the first sound,
  which then fades in over ``fade_in_ms`` from exactly zero;
- trailing silence: low blocks are held back (up to ``max_hold_ms``) instead of sent;
  sound after them releases them unchanged, so only silence is ever removed; at
  :meth:`SegmentJoiner.finish` the held silence is dropped except ``tail_keep_ms``,
  and the segment fades out over ``fade_out_ms`` to exactly zero;
- pause: :meth:`SegmentJoiner.finish` then appends digital silence whose length
  depends on how the segment's text ends (:data:`PAUSE_MS`, :func:`pause_ms_for`);
- loudness: the level of a segment is the RMS of its voiced blocks (above
  ``voiced_db``) over its first ``loudness_window_ms`` of voice; the first segment is
  sent as it is and sets the reference; each later one is held back until its window
  is measured (ChatTTS's first chunk is 1.5 s, so in practice nothing waits), then
  scaled by one gain for the whole segment, within ``±max_gain_db``. The gain changes
  only between segments, where the signal is exactly zero: no gain step is audible.
  A soft limiter keeps every sample within ±:data:`CEILING`, inside (-1, 1) and
  inside 16-bit PCM once scaled by 32768 and rounded.

Every decision is made on fixed blocks of ``block_ms`` counted from the start of a
segment, so the output does not depend on how the input was chunked; the joiner holds
back at most one block plus the held silence (and, for later segments, the loudness
window). Pure numpy; one sample rate; not thread-safe; one instance per context.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from streaming.punctuation import CLOSERS, STRAIGHT_QUOTES, join_pause_class

__all__ = [
    "CEILING",
    "PAUSE_MS",
    "JoinSettings",
    "SegmentJoiner",
    "pause_ms_for",
]

#: Pause after a segment, by how its text ends (settings-ready; scaled by
#: ``JoinSettings.pause_scale``). Chosen from read-speech norms for Mandarin: sentence
#: breaks ~300 ms, semicolons and colons ~200 ms, commas ~150 ms; a cut that is not at a
#: punctuation mark (a length or flush cut, mid-sentence) gets a breath-length gap only,
#: since the engine already closes each segment with a falling intonation.
PAUSE_MS: dict[str, int] = {
    "paragraph": 500,  # the text ends with a blank line
    "line": 400,  # the text ends with a newline
    "ellipsis": 400,  # … ……
    "sentence": 300,  # 。！？ . ! ?
    "semicolon": 200,  # ；： ; :
    "comma": 150,  # ，、 ,
    "cut": 60,  # no punctuation: a length or flush cut
}

# Closing quotes and brackets after a mark belong to it: "他说：“好。”" ends a sentence.
_CLOSERS = "".join(CLOSERS | STRAIGHT_QUOTES)


def pause_class_for(text: str) -> str:
    """Return the :data:`PAUSE_MS` key for a segment whose text is ``text``."""
    stripped = text.rstrip()
    trailing = text[len(stripped) :]
    newlines = sum(trailing.count(ch) for ch in "\n\r\u2028\u2029") - trailing.count("\r\n")
    if newlines >= 2:
        return "paragraph"
    if newlines == 1:
        return "line"
    core = stripped.rstrip(_CLOSERS).rstrip()
    if not core:
        return "cut"
    return join_pause_class(core[-1])


def pause_ms_for(text: str) -> int:
    """Pause in ms (unscaled) after a segment whose text is ``text``; see :data:`PAUSE_MS`."""
    return PAUSE_MS[pause_class_for(text)]


@dataclass(frozen=True)
class JoinSettings:
    """How segments are joined; levels in dBFS (RMS of a block), times in ms."""

    block_ms: float = 10.0
    silence_db: float = -45.0
    voiced_db: float = -40.0
    max_lead_trim_ms: float = 600.0
    lead_keep_ms: float = 20.0
    fade_in_ms: float = 5.0
    max_hold_ms: float = 1000.0
    tail_keep_ms: float = 40.0
    fade_out_ms: float = 10.0
    pause_scale: float = 1.0
    # 250 ms left ~3.4 dB of spread between espeak sentences, 400 ms ~2 dB, 600 ms ~3.6.
    loudness_window_ms: float = 400.0
    # A segment with less voice than this is not measured: gain 1, no reference update.
    min_loudness_ms: float = 60.0
    # Most audio held back waiting for the loudness window (a mostly silent segment).
    max_loudness_hold_ms: float = 600.0
    max_gain_db: float = 9.0
    normalize_loudness: bool = True
    # The soft limiter is linear below this magnitude and saturates smoothly towards 1.
    limiter_knee: float = 0.9

    def __post_init__(self) -> None:
        if self.block_ms <= 0:
            raise ValueError("block_ms must be positive")
        if self.pause_scale < 0:
            raise ValueError("pause_scale must not be negative")
        if not 0 < self.limiter_knee < 1:
            raise ValueError("limiter_knee must be in (0, 1)")
        if self.max_gain_db < 0:
            raise ValueError("max_gain_db must not be negative")


def _samples(ms: float, rate_hz: int) -> int:
    return max(0, round(ms * rate_hz / 1000))


def _db_to_power(db: float) -> float:
    return 10.0 ** (db / 10.0)


#: The largest magnitude of a sample the joins send (float32): scaled by 32768 it rounds
#: to 32767 at the most, so 16-bit PCM holds every sample without a clip.
CEILING = np.float32(0.99997)

#: An empty segment state (read-only: every array the joiner writes into is its own).
_EMPTY = np.zeros(0, dtype=np.float32)
_EMPTY.flags.writeable = False

#: The largest and smallest value of an array (NaN if it holds one): ufunc methods, no
#: Python wrapper, and no array made (``abs`` first would make one the chunk's size).
_PEAK = np.maximum.reduce
_FLOOR = np.minimum.reduce


def within(x: np.ndarray, bound: float) -> bool:
    """Every sample of ``x`` (non-empty) finite and inside ``[-bound, bound]``."""
    return bool(_PEAK(x) <= bound and _FLOOR(x) >= -bound)


def block_squares(blocks: np.ndarray) -> np.ndarray:
    """The sum of squares of each row of ``blocks`` (float32): each row's dot product
    with itself, in one call (squared and summed in float32: the levels compared here
    are tens of dB apart, far beyond its 1e-7)."""
    rows, size = blocks.shape
    with np.errstate(over="ignore"):  # a sample past 1.8e19 squares to inf: tamed after
        squares = np.matmul(blocks.reshape(rows, 1, size), blocks.reshape(rows, size, 1))
    return squares.reshape(rows)


# A sample beyond +-8 squares to more than 64; a margin for the sum's rounding.
_SQUARES_BOUND = np.float32(63.9)


def _sanitized(x: np.ndarray) -> np.ndarray:
    """``x`` finite and inside +-8 (NaN silenced): ``x`` itself when it already is."""
    if not x.size or within(x, 8.0):
        return x
    return np.clip(np.nan_to_num(x, nan=0.0), -8.0, 8.0)


@functools.lru_cache(maxsize=64)
def _ramp(n: int, rising: bool) -> np.ndarray:
    """A raised-cosine ramp of ``n`` samples (float32, read-only): rising, sample ``i`` is
    ``(1 - cos(pi i / n)) / 2`` from 0; falling, ``(1 + cos(pi (i + 1) / n)) / 2``,
    ending at exactly 0."""
    i = np.arange(n) if rising else np.arange(1, n + 1)
    ramp = 0.5 * ((1.0 - np.cos(np.pi * i / n)) if rising else (1.0 + np.cos(np.pi * i / n)))
    ramp = ramp.astype(np.float32)
    ramp.flags.writeable = False
    return ramp


def soft_limit(x: np.ndarray, knee: float) -> np.ndarray:
    """Identity below ``knee``, a tanh curve above it: the result stays within
    ±:data:`CEILING`."""
    if not x.size or within(x, knee):  # the common case: two reads, no copy
        return x
    magnitude = np.abs(x)
    over = magnitude > knee
    out = x.copy()
    headroom = 1.0 - knee
    limited = knee + headroom * np.tanh((magnitude[over] - knee) / headroom)
    out[over] = np.sign(x[over]) * np.minimum(limited, CEILING)
    return out


class SegmentJoiner:
    """Shapes the segments of one context as they stream; see the module docstring.

    Calling contract, per segment: :meth:`begin`, then :meth:`process` with each chunk
    as it comes (returns what may be sent now), then :meth:`finish` (returns the held
    rest, the fade-out and the pause). The concatenated output of one segment starts
    and ends with a sample of exactly 0.0 (unless the segment is empty), is finite and
    within ±:data:`CEILING`, and does not depend on how the input was chunked. :meth:`abandon`
    drops a segment that will not finish (cancel, engine error).
    """

    def __init__(self, sample_rate_hz: int, settings: JoinSettings | None = None) -> None:
        if sample_rate_hz <= 0:
            raise ValueError(f"sample_rate_hz must be positive, got {sample_rate_hz}")
        self.sample_rate_hz = sample_rate_hz
        self.settings = s = settings if settings is not None else JoinSettings()
        rate = sample_rate_hz
        self._block = max(1, _samples(s.block_ms, rate))
        self._silence_power = _db_to_power(s.silence_db)
        self._voiced_power = _db_to_power(s.voiced_db)
        self._max_lead_trim = _samples(s.max_lead_trim_ms, rate)
        self._lead_keep = _samples(s.lead_keep_ms, rate)
        self._fade_in = _samples(s.fade_in_ms, rate)
        self._max_hold = _samples(s.max_hold_ms, rate)
        self._tail_keep = _samples(s.tail_keep_ms, rate)
        self._fade_out = max(1, _samples(s.fade_out_ms, rate))
        self._loudness_window = max(1, _samples(s.loudness_window_ms, rate))
        self._min_loudness = _samples(s.min_loudness_ms, rate)
        self._max_loudness_hold = _samples(s.max_loudness_hold_ms, rate)
        self._max_gain = 10.0 ** (s.max_gain_db / 20.0)
        # Context reference: voiced power sum and sample count, of the output.
        self._ref_energy = 0.0
        self._ref_samples = 0
        #: Pause (samples) appended by the last :meth:`finish`.
        self.last_pause_samples = 0
        self.last_lead_dropped = 0
        #: The pause after the segment begun last, in ms (its text's, scaled).
        self.pause_ms = 0.0
        self._reset_segment()

    # --- per segment ------------------------------------------------------------------

    def _reset_segment(self) -> None:
        self._active = False
        self._pending = _EMPTY  # less than one block
        self._received = 0
        self._leading = True
        self._preroll = _EMPTY  # silent blocks before the first sound
        self._lead_dropped = 0
        self._queue = _EMPTY  # accepted, not yet sent
        self._tail: list[np.ndarray] = []  # accepted blocks not yet joined to _queue
        self._silent_run = 0  # samples of silent blocks at the end of _queue
        self._sent = 0  # samples of this segment sent (for the fade-in)
        self._voiced_energy = 0.0
        self._voiced_samples = 0
        self._accepted = 0  # samples accepted after the lead trim
        self._gain: float | None = None

    def begin(self, text: str = "") -> None:
        """Start a segment whose text is ``text`` (it sets the pause after it)."""
        if self._active:
            self.abandon()
        self._reset_segment()
        self._active = True
        self.pause_ms = pause_ms_for(text) * self.settings.pause_scale
        if self._ref_samples == 0 or not self.settings.normalize_loudness:
            self._gain = 1.0  # the reference segment is sent as it comes

    def abandon(self) -> None:
        """Drop the current segment's held audio (cancel, engine failure)."""
        self._reset_segment()

    def process(self, chunk: np.ndarray) -> np.ndarray:
        """Consume ``chunk`` (1-D float) and return the samples that may be sent now."""
        if not self._active:
            raise RuntimeError("process() outside a segment: call begin() first")
        x = np.asarray(chunk, dtype=np.float32).reshape(-1)
        self._received += x.size
        data = np.concatenate((self._pending, x)) if self._pending.size else x
        whole = data.size - data.size % self._block
        if whole:
            blocks = data[:whole].reshape(-1, self._block)
            squares = block_squares(blocks)
            # Every sample is finite and inside +-8 (no overflow when squared) where no
            # block's sum of squares reaches 64: told without a pass of its own. Else
            # (NaN and infinities fail the test too) the samples are looked at.
            if not _PEAK(squares) < _SQUARES_BOUND:
                clean = _sanitized(data)
                if clean is not data:  # not only loud
                    data = clean
                    blocks = data[:whole].reshape(-1, self._block)
                    squares = block_squares(blocks)
            # In float64, as _take_block compares its one block's power.
            self._take_blocks(blocks, squares.astype(np.float64) / self._block)
        # Looked at with the blocks it completes.
        self._pending = data[whole:].copy() if whole < data.size else _EMPTY
        return self._release(final=False)

    def finish(self, *, pause: bool = True) -> np.ndarray:
        """End the segment: the rest of its audio faded out to zero, then the pause.

        ``pause=False`` leaves the pause out (the last segment of a whole-text
        request). A segment that produced no samples returns nothing.
        """
        if not self._active:
            raise RuntimeError("finish() outside a segment: call begin() first")
        if self._pending.size:
            rest = _sanitized(self._pending)
            self._take_block(rest, float(block_squares(rest[None])[0]) / rest.size)
            self._pending = _EMPTY
        self._collect()
        if self._leading:
            # Nothing but silence: drop it all.
            self._queue = _EMPTY
            self._silent_run = 0
        # Drop the held trailing silence except a short natural tail.
        # The fade-out needs samples not yet sent: keep at least its length.
        held_silence = min(self._silent_run, self._queue.size)
        drop = max(0, min(held_silence - self._tail_keep, self._queue.size - self._fade_out))
        self._queue = self._queue[: self._queue.size - drop]
        body = self._release(final=True)
        n = min(self._fade_out, body.size)
        if n:
            # cos^2 from just below 1 to exactly 0 at the last sample.
            body[-n:] *= _ramp(n, rising=False)
            body[-1] = 0.0
        had_audio = self._received > 0
        #: Silence cut from the head of the segment just finished (samples): its audio
        #: starts that much later in the engine's output than in what was sent.
        self.last_lead_dropped = self._lead_dropped
        self._reset_segment()
        self.last_pause_samples = (
            _samples(self.pause_ms, self.sample_rate_hz) if pause and had_audio else 0
        )
        if not self.last_pause_samples:
            return body
        return np.concatenate((body, np.zeros(self.last_pause_samples, dtype=np.float32)))

    # --- internals --------------------------------------------------------------------

    def _collect(self) -> None:
        """Join the blocks accepted since into ``_queue`` (one copy per call, not per block)."""
        if self._tail:
            self._queue = np.concatenate((self._queue, *self._tail))
            self._tail = []

    def _take_blocks(self, blocks: np.ndarray, powers: np.ndarray) -> None:
        """Whole blocks (rows of ``blocks``) and their mean powers, in order: the same as
        :meth:`_take_block` on each, with the blocks after the lead taken together."""
        listed = powers.tolist()
        i = 0
        while i < len(listed) and self._leading:
            self._take_block(blocks[i], listed[i])
            i += 1
        if i < len(listed):
            self._accept_blocks(blocks[i:], powers[i:], listed[i:])

    def _accept_blocks(self, blocks: np.ndarray, powers: np.ndarray, listed: list[float]) -> None:
        """Whole blocks after the lead, at once (a chunk of 100 ms is 10 blocks): their
        samples join the tail as one array, the silent run, the loudness window and the
        gain decision come out as :meth:`_take_block` block by block would leave them
        (the voiced energy is added in the same order, so to the same last bit)."""
        size = self._block
        count = len(listed)
        self._tail.append(blocks.reshape(-1))
        accepted = self._accepted
        self._accepted += count * size
        sounding = (powers >= self._silence_power).nonzero()[0]
        if sounding.size:
            self._silent_run = (count - 1 - int(sounding[-1])) * size
        else:
            self._silent_run += count * size
        room = self._loudness_window - self._voiced_samples
        if room <= 0 and self._gain is not None:
            return  # the window is measured and the gain decided: nothing more to count
        voiced = (
            (powers >= self._voiced_power).nonzero()[0][: -(-room // size)].tolist()
            if room > 0
            else []
        )
        decide_at = count  # the block after which the gain is decided (none here)
        if self._gain is None:
            fills = room > 0 and len(voiced) * size >= room
            by_voice = voiced[-1] if fills else count
            by_hold = max(0, -(-(self._max_loudness_hold - accepted) // size) - 1)
            decide_at = min(by_voice, by_hold)
        for index in voiced:
            if index > decide_at:
                self._decide_gain()
                decide_at = count
            self._voiced_energy += listed[index] * size
            self._voiced_samples += size
        if decide_at < count:
            self._decide_gain()

    def _take_block(self, block: np.ndarray, power: float) -> None:
        """One block (of ``block_ms``, or the last partial one) and its mean power."""
        silent = power < self._silence_power
        if self._leading:
            would_drop = max(0, self._preroll.size + block.size - self._lead_keep)
            if silent and self._lead_dropped + would_drop <= self._max_lead_trim:
                self._preroll = np.concatenate((self._preroll, block))
                excess = self._preroll.size - self._lead_keep
                if excess > 0:
                    self._lead_dropped += excess
                    self._preroll = self._preroll[excess:]
                return
            self._leading = False
            self._queue = self._preroll
            self._accepted = self._preroll.size
            self._preroll = _EMPTY
        self._tail.append(block)
        self._accepted += block.size
        self._silent_run = self._silent_run + block.size if silent else 0
        if power >= self._voiced_power and self._voiced_samples < self._loudness_window:
            self._voiced_energy += power * block.size
            self._voiced_samples += block.size
        if self._gain is None and (
            self._voiced_samples >= self._loudness_window
            or self._accepted >= self._max_loudness_hold
        ):
            self._decide_gain()

    def _decide_gain(self) -> None:
        gain = 1.0
        if self._voiced_samples >= max(self._min_loudness, 1) and self._ref_samples:
            level = self._voiced_energy / self._voiced_samples
            reference = self._ref_energy / self._ref_samples
            if level > 0:
                gain = min(max(math.sqrt(reference / level), 1 / self._max_gain), self._max_gain)
        self._gain = gain

    def _release(self, *, final: bool) -> np.ndarray:
        self._collect()
        if final and self._gain is None:
            self._decide_gain()
        if self._gain is None:
            return np.zeros(0, dtype=np.float32)
        # Hold the trailing silence (bounded) and always the last fade-out's worth.
        keep = 0 if final else max(min(self._silent_run, self._max_hold), self._fade_out)
        n = max(0, self._queue.size - keep)
        if final and self._voiced_samples >= max(self._min_loudness, 1):
            self._ref_energy += self._voiced_energy * self._gain**2
            self._ref_samples += self._voiced_samples
        if n == 0:
            return np.zeros(0, dtype=np.float32)
        # The queue is the joiner's own copy (joined by _collect): scaled in place.
        out = self._queue[:n]
        if self._gain != 1.0:
            out *= np.float32(self._gain)
        self._queue = self._queue[n:]
        self._silent_run = min(self._silent_run, self._queue.size)
        out = soft_limit(out, self.settings.limiter_knee)
        if self._sent < self._fade_in:
            m = min(self._fade_in - self._sent, n)
            out[:m] *= _ramp(self._fade_in, rising=True)[self._sent : self._sent + m]
        self._sent += n
        return out.astype(np.float32, copy=False)
