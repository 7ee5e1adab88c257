"""Joining overlapping decoded windows of one signal into a gap-free stream.

A windowed vocoder decodes each chunk from the new frames plus a little left context,
so consecutive windows cover some of the same samples, and a window's last samples
lack right context (the decoder and the vocoder are non-causal). :class:`WindowJoiner`
emits each sample once: it holds back the last ``holdback_samples`` of every window
(re-decoded by the next one, with right context), keeps the ``overlap_samples`` before
them as a tail, and crossfades that tail into the next window's version of the same
samples. Fade weights sum to one, so windows that agree sample for sample pass through
unchanged: the joiner never colours a signal, it only hides disagreement.

Everything here is pure numpy; times are in samples of one sample rate.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["WindowJoiner", "crossfade", "fade_curves"]


def fade_curves(length: int) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(fade_out, fade_in)``: raised-cosine float32 ramps of ``length`` samples.

    ``fade_out + fade_in == 1`` at every sample (amplitude-complementary, right for
    two renderings of the same, correlated signal), ``fade_in`` rises from just above 0
    to just below 1 (the sample centres of a half cosine period), so a crossfade of
    ``n`` samples never repeats an endpoint of either side.
    """
    if length < 0:
        raise ValueError(f"length must be >= 0, not {length}")
    t = (np.arange(length, dtype=np.float64) + 0.5) / max(length, 1)
    fade_in = np.sin(0.5 * math.pi * t) ** 2
    return (1.0 - fade_in).astype(np.float32), fade_in.astype(np.float32)


def crossfade(outgoing: np.ndarray, incoming: np.ndarray) -> np.ndarray:
    """Blend two equally long renderings of the same samples, ``outgoing`` fading out."""
    if outgoing.shape != incoming.shape or outgoing.ndim != 1:
        raise ValueError(
            f"need two 1-D arrays of one length, not {outgoing.shape} and {incoming.shape}"
        )
    fade_out, fade_in = fade_curves(outgoing.size)
    result: np.ndarray = (outgoing * fade_out + incoming * fade_in).astype(np.float32)
    return result


class WindowJoiner:
    """Turns overlapping windows of one signal into consecutive, non-overlapping chunks.

    Call :meth:`push` with each decoded window and the global index of its first sample;
    each window must start at or before :attr:`emitted_samples` (it has to re-cover the
    held tail) and the last one is pushed with ``final=True``. After the final push the
    chunks returned add up to exactly the end of the final window: no sample is lost or
    doubled. Not thread-safe; one instance per utterance (or call :meth:`reset`).
    """

    def __init__(self, *, overlap_samples: int, holdback_samples: int) -> None:
        if overlap_samples < 0 or holdback_samples < 0:
            raise ValueError("overlap_samples and holdback_samples must be >= 0")
        self.overlap_samples = overlap_samples
        self.holdback_samples = holdback_samples
        self.reset()

    def reset(self) -> None:
        """Forget the current signal; the next push starts a new one at sample 0."""
        #: Samples returned so far (the global index of the next sample to emit).
        self.emitted_samples = 0
        self._tail = np.zeros(0, dtype=np.float32)
        self.finished = False

    def push(self, window: np.ndarray, start_sample: int, *, final: bool = False) -> np.ndarray:
        """Return the samples ``window`` lets through now (possibly none), as float32.

        A non-final window releases its samples up to ``holdback_samples +
        overlap_samples`` before its end; when it is too short to do that past the
        held tail it releases nothing and changes no state.
        """
        if self.finished:
            raise RuntimeError("push after the final window; call reset() first")
        if window.ndim != 1:
            raise ValueError(f"window must be 1-D, not shape {window.shape}")
        if start_sample < 0 or start_sample > self.emitted_samples:
            raise ValueError(
                f"window starts at {start_sample}, after the {self.emitted_samples} "
                "samples already emitted: it must re-cover the held tail"
            )
        new = np.asarray(window[self.emitted_samples - start_sample :], dtype=np.float32)
        tail = self._tail
        if final:
            usable = new
        else:
            usable = new[: max(0, new.size - self.holdback_samples)]
            if usable.size < tail.size + self.overlap_samples or usable.size == 0:
                return np.zeros(0, dtype=np.float32)
        out = usable.copy()
        blend = min(tail.size, out.size)
        if blend:
            out[:blend] = crossfade(tail[:blend], out[:blend])
        if final:
            self.finished = True
            self._tail = np.zeros(0, dtype=np.float32)
            self.emitted_samples += out.size
            return out
        keep = out.size - self.overlap_samples
        # The tail is this window's own rendering, unblended: the next window fades
        # from it.
        self._tail = usable[keep:].copy()
        self.emitted_samples += keep
        return out[:keep]
