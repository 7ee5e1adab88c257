"""Time-stretch that keeps pitch, for speeds beyond an engine's own rate control: WSOLA.

Waveform-similarity overlap-add (Verhelst and Roelands, 1993): the output is built from
frames of ``frame_ms`` of the input, overlapped by half and cross-faded with a Hann
window. Frame ``k`` is laid at output sample ``k * hop`` and taken from the input near
``k * hop * tempo``, at the offset within ``search_ms`` whose start best matches (highest
normalised cross-correlation) the input that naturally followed the previous frame.
Every splice is therefore made where the waveforms agree, at the same phase of the
voice's period: pitch and timbre stay, only the duration changes, by ``1 / tempo``.

:class:`TimeStretcher` works as the audio streams: :meth:`TimeStretcher.process` takes
chunks of any size and returns the output samples that are final, :meth:`flush` the
rest. Each frame's choice depends only on the input's samples, never on how they were
chunked, so the output is the same for any chunking; its length is exactly
``round(len(input) / tempo)``. The first frame starts at the input's first sample
without a fade-in; past the input's end the signal is taken as silence. Pure numpy; one
instance per segment; not thread-safe.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["TimeStretcher", "split_speed"]

_EMPTY = np.zeros(0, np.float32)


def _quiet() -> np.errstate:
    """NumPy's warnings off for samples that are not finite or overflow float32."""
    return np.errstate(invalid="ignore", over="ignore")


def split_speed(speed: float, native: tuple[float, float]) -> tuple[float, float]:
    """``(engine speed, tempo)`` for ``speed``: the engine's own rate control over its
    ``native`` range, a time-stretch (tempo = speed / engine speed) for the rest."""
    low, high = native
    engine = min(max(speed, low), high)
    return engine, speed / engine


class TimeStretcher:
    """Changes the duration of one stream of mono audio by ``1 / tempo``, keeping its
    pitch (see the module docstring)."""

    def __init__(
        self,
        rate_hz: int,
        tempo: float,
        *,
        frame_ms: float = 30.0,
        search_ms: float = 10.0,
    ) -> None:
        if not (math.isfinite(tempo) and tempo > 0):
            raise ValueError(f"tempo must be a positive number, not {tempo!r}")
        self.tempo = tempo
        self._hop = max(1, round(rate_hz * frame_ms / 2000))  # output hop: half a frame
        self._frame = 2 * self._hop
        self._search = max(1, round(rate_hz * search_ms / 1000))
        n = np.arange(self._frame)
        self._window = (0.5 - 0.5 * np.cos(2 * np.pi * n / self._frame)).astype(np.float32)
        self._first_window = self._window.copy()
        self._first_window[: self._hop] = 1.0  # no fade-in at the very start
        self._input = _EMPTY  # input samples from absolute index _base on
        self._base = self._received = 0
        self._out = np.zeros(self._frame, np.float32)  # overlap-add from _out_base on
        self._out_base = 0
        self._sent = 0  # output samples returned so far
        self._k = 0  # next frame
        self._previous = 0  # input position of the last frame laid

    def process(self, chunk: np.ndarray) -> np.ndarray:
        """Take ``chunk``; return the output samples that are final now.

        Samples that are not finite or far past full scale pass through as they come
        (the joins after the stretcher make them silent or clip them), without NumPy's
        warnings about them."""
        with _quiet():
            samples = np.asarray(chunk, dtype=np.float32).reshape(-1)
            if samples.size:
                self._input = np.concatenate((self._input, samples))
                self._received += samples.size
            laid = False
            while self._needs(self._k) <= self._received:
                self._lay(self._k)
                laid = True
        # Final: before the next frame's start, and within the least the total can be.
        upto = min(self._k * self._hop, int(self._received / self.tempo))
        return self._release(upto) if laid else _EMPTY

    def flush(self) -> np.ndarray:
        """The rest of the output, up to ``round(input length / tempo)`` samples in all;
        the stretcher is then ready for a new stream."""
        total = round(self._received / self.tempo)
        with _quiet():
            while self._k * self._hop < total:
                self._lay(self._k)
        out = self._release(total)
        self.reset()
        return out

    def reset(self) -> None:
        """Drop what is held: ready for a new stream."""
        self._input, self._base, self._received = _EMPTY, 0, 0
        self._out = np.zeros(self._frame, np.float32)
        self._out_base = self._sent = self._k = self._previous = 0

    # -- internals -----------------------------------------------------------------

    def _nominal(self, k: int) -> int:
        return round(k * self._hop * self.tempo)

    def _needs(self, k: int) -> int:
        """Input samples frame ``k`` reads (its search span and its natural follower)."""
        if k == 0:
            return self._frame
        return max(self._nominal(k) + self._search, self._previous + self._hop) + self._frame

    def _take(self, start: int, length: int) -> np.ndarray:
        """Input samples [start, start + length), silence past the end received."""
        begin = start - self._base
        part = self._input[max(begin, 0) : begin + length]
        if part.size == length:
            return part
        return np.concatenate((part, np.zeros(length - part.size, np.float32)))

    def _lay(self, k: int) -> None:
        if k == 0:
            position, window = 0, self._first_window
        else:
            position, window = self._best(k), self._window
        frame = self._take(position, self._frame) * window
        at = k * self._hop - self._out_base
        end = at + self._frame
        if end > self._out.size:
            self._out = np.concatenate((self._out, np.zeros(end - self._out.size, np.float32)))
        self._out[at:end] += frame
        self._previous = position
        self._k = k + 1
        # Keep only what later frames can read: their searches and natural followers.
        keep_from = min(self._nominal(k + 1) - self._search, position + self._hop)
        drop = max(0, keep_from - self._base)
        if drop:
            self._input = self._input[drop:]
            self._base += drop

    def _best(self, k: int) -> int:
        """The start near frame ``k``'s nominal position that continues the previous
        frame best: the highest normalised correlation with its natural follower."""
        low = max(0, self._nominal(k) - self._search)
        high = self._nominal(k) + self._search
        target = self._take(self._previous + self._hop, self._hop).astype(np.float64)
        span = self._take(low, high - low + self._hop).astype(np.float64)
        scores = np.correlate(span, target, mode="valid")
        energy = np.cumsum(np.concatenate(([0.0], span * span)))
        norms = np.sqrt(energy[self._hop :] - energy[: -self._hop]) + 1e-9
        return low + int(np.argmax(scores / norms))

    def _release(self, upto: int) -> np.ndarray:
        """Output samples [sent, upto) (final once no later frame reaches them)."""
        count = upto - self._sent
        if count <= 0:
            return _EMPTY
        start = self._sent - self._out_base
        have = self._out[start : start + count]
        if have.size < count:
            have = np.concatenate((have, np.zeros(count - have.size, np.float32)))
        out = have.copy()
        self._sent = upto
        # Drop what is sent and that no frame still to come overlaps.
        drop = min(self._sent, self._k * self._hop) - self._out_base
        if drop > 0:
            self._out = self._out[drop:]
            self._out_base += drop
        return out
