"""PCM sample helpers: conversion, streaming resampling, fixed-size framing, WAV wrapping.

Everything here is pure and synchronous: numpy arrays and bytes in, arrays and bytes out.
Float audio is mono float32 nominally in [-1, 1]; PCM is mono signed 16-bit little-endian.
"""

from __future__ import annotations

import io
import math
import wave
from typing import ClassVar

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

__all__ = [
    "FrameChunker",
    "Resampler",
    "float32_json_array",
    "float_to_pcm16",
    "join_frames",
    "pcm16_to_float",
    "sounding_seconds",
    "wav_bytes",
]

# Full scale of 16-bit PCM. The same factor both ways makes PCM -> float -> PCM exact;
# +1.0 maps to 32768 and is clipped to 32767.
_PCM16_SCALE = 32768.0
# Below this magnitude a scaled sample rounds inside int16 (32767.5 would round to 32768).
_PCM16_MAX = 32767.0
_PEAK = np.maximum.reduce
_FLOOR = np.minimum.reduce
_SCALE32 = np.float32(_PCM16_SCALE)


def float_to_pcm16(samples: np.ndarray, *, in_range: bool = False) -> bytes:
    """Encode float samples as 16-bit little-endian PCM, clipping to [-1, 1].

    NaN becomes silence and infinities full scale, so a misbehaving model cannot turn
    into an exception in the audio path. ``in_range``: the caller knows every sample is
    finite and rounds inside 16-bit PCM once scaled (its magnitude below 32767.5 / 32768;
    the joins' output, within ±0.99997: streaming.speech), and the check, two of the
    conversion's five passes over the samples, is left out; a sample past that would
    wrap around, not clip.
    """
    x = np.asarray(samples, dtype=np.float32)
    if in_range:
        scaled = x * _SCALE32
        np.rint(scaled, out=scaled)
        return scaled.astype("<i2").tobytes()
    # Finite and in range, told from the largest and the smallest sample (NaN fails the
    # test too) without an array of magnitudes: scaling by a positive factor keeps the
    # order (rounding included), so the scaled extremes are these two scaled. What the
    # joins' limiter sends is always inside, so the clip is seldom needed.
    if x.size and not (_PEAK(x) * _SCALE32 < _PCM16_MAX and _FLOOR(x) * _SCALE32 > -_PCM16_MAX):
        if not np.isfinite(x).all():
            x = np.nan_to_num(x, nan=0.0, posinf=1.0, neginf=-1.0)
        scaled = np.clip(x * _SCALE32, -32768.0, 32767.0)
    else:
        scaled = x * _SCALE32
    np.rint(scaled, out=scaled)
    return scaled.astype("<i2").tobytes()


def float32_json_array(samples: np.ndarray) -> str:
    """``samples`` as a JSON array of numbers, each the shortest decimal that reads back
    as the same float32 (``0.1``, not the float64 expansion ``0.10000000149011612``).
    Non-finite samples, which JSON cannot hold, become 0."""
    x = np.asarray(samples, dtype=np.float32)
    if not np.isfinite(x).all():
        x = np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
    return "[" + ",".join(x.astype(str).tolist()) + "]"


def sounding_seconds(
    samples: np.ndarray, rate_hz: int, *, floor_db: float = -45.0, block_ms: float = 20.0
) -> float:
    """Seconds of ``samples`` that are sound: the blocks of ``block_ms`` whose RMS is above
    ``floor_db`` dBFS (quiet speech is around -30; a silent room, -60 and below)."""
    block = max(1, round(rate_hz * block_ms / 1000))
    whole = samples.size - samples.size % block
    if not whole:
        return 0.0
    blocks = np.asarray(samples[:whole], dtype=np.float64).reshape(-1, block)
    power = np.mean(np.square(blocks), axis=1)
    loud = int(np.count_nonzero(power > 10.0 ** (floor_db / 10.0)))
    return loud * block / rate_hz


def pcm16_to_float(data: bytes) -> np.ndarray:
    """Decode 16-bit little-endian PCM into float32 samples in [-1, 1).

    Raises :class:`ValueError` when ``data`` has an odd length.
    """
    if len(data) % 2:
        raise ValueError(f"PCM16 data must have an even length, got {len(data)} bytes")
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / np.float32(_PCM16_SCALE)


class Resampler:
    """Streaming band-limited sample-rate converter (Kaiser-windowed sinc, polyphase).

    Feed float samples with :meth:`process` in chunks of any size, then call :meth:`flush`
    once at the end of the stream. The concatenated output does not depend on how the
    input was chunked (the products are in float64, whose differences between one cut and
    another stay below float32's rounding: within one float32 step, the same in
    practice), and is time-aligned with the input (the kernel is symmetric: no
    delay). After :meth:`flush` the output holds ``ceil(n_in * out_rate_hz / in_rate_hz)``
    samples, and the resampler is reset, ready for a new stream.

    The anti-aliasing cut-off sits at ``ROLLOFF`` times the lower of the two Nyquist
    frequencies. Output lags input by at most one block of input plus the kernel
    half-width: ~8 ms for 22,050 -> 24,000 Hz, ~11 ms for 24,000 -> 8,000 Hz.

    Raises :class:`ValueError` for non-positive rates or a ratio whose reduced form
    needs an unreasonably large coefficient table (e.g. 44,100 -> 47,999 Hz).
    """

    #: Zero crossings of the sinc on each side of the centre. With ``KAISER_BETA`` this
    #: gives ~80 dB stop-band attenuation and a transition band of ~±10% around the
    #: cut-off, so the stop band starts at the Nyquist frequency with ``ROLLOFF``.
    ZERO_CROSSINGS = 24
    KAISER_BETA = 8.0
    ROLLOFF = 0.9
    #: Fewest output samples per block (see ``__init__``).
    MIN_BLOCK_OUTPUTS = 64
    #: Upper bound on the polyphase block matrix (float64 entries, i.e. 32 MiB).
    MAX_TABLE_ENTRIES = 1 << 22
    #: The block products' type (see :meth:`_run_blocks`); float32 is measured against it
    #: by bench/resampler.py.
    PRODUCT_DTYPE: type[np.floating] = np.float64
    #: The block matrices made so far, by (input rate, output rate, product type).
    _tables: ClassVar[dict[tuple[int, int, type], np.ndarray]] = {}

    def __init__(self, in_rate_hz: int, out_rate_hz: int) -> None:
        if in_rate_hz <= 0 or out_rate_hz <= 0:
            raise ValueError(f"sample rates must be positive: {in_rate_hz} -> {out_rate_hz}")
        self.in_rate_hz = in_rate_hz
        self.out_rate_hz = out_rate_hz
        common = math.gcd(in_rate_hz, out_rate_hz)
        self._identity = in_rate_hz == out_rate_hz
        # Every block of _up output samples consumes exactly _down input samples. Blocks
        # span at least MIN_BLOCK_OUTPUTS so each matmul row does enough work (measured
        # 5-9x faster for 1:2 and 3:1 than one-output blocks), for a few ms more lag.
        blocks_per_row = -(-self.MIN_BLOCK_OUTPUTS // (out_rate_hz // common))
        self._up = out_rate_hz // common * blocks_per_row
        self._down = in_rate_hz // common * blocks_per_row
        # Cut-off in cycles per input sample; widening the kernel when downsampling keeps
        # the number of zero crossings (hence the attenuation) the same.
        cutoff = self.ROLLOFF * 0.5 * min(1.0, self._up / self._down)
        self._half_width = self.ZERO_CROSSINGS / (2.0 * cutoff)
        self._taps_each_side = math.ceil(self._half_width)
        # Block q reads inputs [q*down - (K-1), q*down - (K-1) + window).
        self._window = (self._up - 1) * self._down // self._up + 2 * self._taps_each_side
        if self._up * self._window > self.MAX_TABLE_ENTRIES:
            raise ValueError(
                f"unsupported resampling ratio {in_rate_hz} -> {out_rate_hz}: "
                f"{self._up}/{self._down} needs a {self._up}x{self._window} table"
            )
        self._table = np.zeros((0, 0))
        if not self._identity:
            # One table per pair of rates, shared by every stream's resampler (read-only).
            key = (in_rate_hz, out_rate_hz, self.PRODUCT_DTYPE)
            table = Resampler._tables.get(key)
            if table is None:
                table = self._build_table(cutoff)
                table.flags.writeable = False
                Resampler._tables[key] = table
            self._table = table
        self._reset()

    def _build_table(self, cutoff: float) -> np.ndarray:
        """Return the (window, up) matrix mapping one block's input window to its outputs."""
        k = self._taps_each_side
        phases = np.arange(self._up, dtype=np.float64)[:, None] * self._down / self._up
        # Distance from each output instant to each input sample of the block's window.
        t = phases - (np.arange(self._window, dtype=np.float64)[None, :] - (k - 1))
        u = t / self._half_width
        inside = np.abs(u) < 1.0
        window = np.where(
            inside, np.i0(self.KAISER_BETA * np.sqrt(np.clip(1.0 - u * u, 0.0, None))), 0.0
        ) / np.i0(self.KAISER_BETA)
        kernel = 2.0 * cutoff * np.sinc(2.0 * cutoff * t) * window
        # Exact unity gain at DC for every phase (the windowed sum is off by ~1e-4).
        kernel /= kernel.sum(axis=1, keepdims=True)
        return np.ascontiguousarray(kernel.T, dtype=self.PRODUCT_DTYPE)

    def _reset(self) -> None:
        k = self._taps_each_side
        # Inputs from absolute index _buffer_start on; the k-1 leading zeros stand for
        # the silence before the stream, so the first outputs see a full kernel.
        self._buffer = np.zeros(max(k - 1, 0), dtype=np.float32)
        self._buffer_start = -(k - 1)
        self._blocks_done = 0
        self._in_samples = 0

    def process(self, chunk: np.ndarray) -> np.ndarray:
        """Consume ``chunk`` and return the float32 output samples now computable."""
        samples = np.asarray(chunk, dtype=np.float32).reshape(-1)
        if self._identity:
            return samples.copy()
        self._in_samples += len(samples)
        self._buffer = np.concatenate((self._buffer, samples))
        return self._run_blocks()

    def flush(self) -> np.ndarray:
        """Return the remaining output (treating the input as followed by silence); reset."""
        if self._identity:
            return np.zeros(0, dtype=np.float32)
        total_out = -(-self._in_samples * self._up // self._down)
        last_block = (total_out - 1) // self._up
        needed_end = last_block * self._down - (self._taps_each_side - 1) + self._window
        have_end = self._buffer_start + len(self._buffer)
        if needed_end > have_end:
            pad = np.zeros(needed_end - have_end, dtype=np.float32)
            self._buffer = np.concatenate((self._buffer, pad))
        tail = self._run_blocks()
        keep = total_out - (self._blocks_done * self._up - len(tail))
        self._reset()
        return tail[: max(keep, 0)]

    def _run_blocks(self) -> np.ndarray:
        blocks = (len(self._buffer) - self._window) // self._down + 1
        if blocks <= 0:
            return np.zeros(0, dtype=np.float32)
        # Rows are strided views into the buffer; one matmul does all phases. In float64:
        # a float32 BLAS product's rows differ in their last bits with the number of rows
        # (its kernels block them), so a chunk's output would depend on how the stream was
        # cut by up to ~16 float32 steps; float64's differences are far below float32's
        # rounding (they cross it about once in 10^8 samples: one step then).
        buffer = self._buffer.astype(self.PRODUCT_DTYPE, copy=False)
        windows = sliding_window_view(buffer, self._window)[:: self._down][:blocks]
        out = (windows @ self._table).astype(np.float32, copy=False).reshape(-1)
        consumed = blocks * self._down
        self._buffer = self._buffer[consumed:].copy()
        self._buffer_start += consumed
        self._blocks_done += blocks
        return out


class FrameChunker:
    """Cuts a stream of samples into frames of ``frame_samples``, the first ones smaller.

    With ``first_frame_samples`` set, the first frame of a stream holds that many samples
    and each next one twice as many as the one before, up to ``frame_samples``: the
    listener hears audio after a short first frame, and the frame rate quickly settles.
    :meth:`flush` returns the partial last frame and starts a new stream (the ramp
    starts over). Frames keep the input dtype and never alias the caller's arrays.
    """

    def __init__(self, frame_samples: int, first_frame_samples: int | None = None) -> None:
        if frame_samples <= 0:
            raise ValueError(f"frame_samples must be positive, got {frame_samples}")
        if first_frame_samples is not None and first_frame_samples <= 0:
            raise ValueError(f"first_frame_samples must be positive, got {first_frame_samples}")
        self.frame_samples = frame_samples
        self.first_frame_samples = min(first_frame_samples or frame_samples, frame_samples)
        self._pending: np.ndarray | None = None
        self._next_frame_samples = self.first_frame_samples

    def push(self, samples: np.ndarray) -> list[np.ndarray]:
        """Add ``samples`` (1-D) and return every frame that is now complete."""
        samples = np.asarray(samples).reshape(-1)
        if self._pending is not None and len(self._pending):
            incoming = np.concatenate((self._pending, samples))  # a new array
        else:
            incoming = samples.copy()  # frames never alias the caller's array
        frames: list[np.ndarray] = []
        start = 0
        while len(incoming) - start >= self._next_frame_samples:
            end = start + self._next_frame_samples
            frames.append(incoming[start:end])
            start = end
            self._next_frame_samples = min(2 * self._next_frame_samples, self.frame_samples)
        self._pending = incoming[start:]
        return frames

    def flush(self) -> list[np.ndarray]:
        """Return the buffered partial frame (if any) and reset for a new stream."""
        pending = self._pending
        self._pending = None
        self._next_frame_samples = self.first_frame_samples
        if pending is None or not len(pending):
            return []
        return [pending]


def join_frames(frames: list[np.ndarray], max_samples: int) -> list[np.ndarray]:
    """``frames`` (ready at the same moment, in order) joined into as few as hold at most
    ``max_samples`` each: consecutive frames are joined while they fit; a frame longer
    than ``max_samples`` goes on its own, never split. The same samples in the same
    order; ``frames`` itself is returned when nothing joins."""
    if len(frames) < 2 or max_samples <= 0:
        return frames
    joined: list[np.ndarray] = []
    group: list[np.ndarray] = []
    size = 0
    for frame in frames:
        if group and size + frame.size > max_samples:
            joined.append(group[0] if len(group) == 1 else np.concatenate(group))
            group, size = [], 0
        group.append(frame)
        size += frame.size
    joined.append(group[0] if len(group) == 1 else np.concatenate(group))
    return joined if len(joined) < len(frames) else frames


def wav_bytes(samples_pcm16: bytes, sample_rate_hz: int) -> bytes:
    """Wrap mono 16-bit little-endian PCM in a RIFF/WAVE container."""
    if len(samples_pcm16) % 2:
        raise ValueError(f"PCM16 data must have an even length, got {len(samples_pcm16)} bytes")
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(sample_rate_hz)
        writer.writeframes(samples_pcm16)
    return out.getvalue()
