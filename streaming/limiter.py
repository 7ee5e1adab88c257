"""Volume with a look-ahead peak limiter: louder speech that never clips.

:class:`VolumeLimiter` multiplies a stream by ``volume`` and then by a gain ``s[n] <= 1``
chosen so that no output sample exceeds ``ceiling`` (below full scale, so the int16
conversion never clips). The gain is smooth, never a hard clip:

    g[n] = min(1, ceiling / |volume * x[n]|)        the gain each sample needs
    m[k] = min(g[k - L + 1 .. k])                   held for the look-ahead window
    r[k] = min(m[k], 1 - (1 - r[k - 1]) * q)        released towards 1 (q: ``release_ms``)
    s[n] = mean(r[n .. n + L - 1])                  a ramp of L samples into each peak

Every ``r[j]`` in ``s[n]``'s window is at most ``m[j] <= g[n]``, so ``|s[n] * volume *
x[n]| <= ceiling`` exactly; the box mean turns each step of ``r`` into a linear ramp of
``L`` samples (``lookahead_ms``), so the gain moves by at most ``1 / L`` a sample. The
output lags the input by ``L - 1`` samples: :meth:`VolumeLimiter.process` returns what
is final, :meth:`VolumeLimiter.flush` the rest (the stream taken as silent after it).
The state carries across calls, so chunk seams are invisible: any chunking gives the
same output as one call (to floating-point rounding of the release). Pure numpy; one
instance per stream; not thread-safe.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from streaming.errors import ClientError

__all__ = ["MAX_VOLUME", "MIN_VOLUME", "VolumeLimiter", "check_volume", "volume_in_body"]

#: The volume factors every route takes (1: as the engine made it).
MIN_VOLUME, MAX_VOLUME = 0.0, 4.0
_EMPTY = np.zeros(0, np.float32)
# The release recursion is solved in closed form over blocks this long (q**-block stays
# far inside float64's range for any release of 1 ms or more).
_BLOCK = 2048


def check_volume(value: object, *, context_id: str | None = None) -> float:
    """``value`` as a volume factor, or the one refusal every route gives (400
    ``invalid_field``)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not MIN_VOLUME <= value <= MAX_VOLUME
    ):
        raise ClientError(
            f"field 'volume' must be a number in [{MIN_VOLUME:g}, {MAX_VOLUME:g}]",
            code="invalid_field",
            context_id=context_id,
            param="volume",
        )
    return float(value)


def volume_in_body(data: Any) -> Any:
    """An HTTP body with its ``volume`` checked as the WebSocket's is (see
    :func:`streaming.protocol.speed_in_body`)."""
    if isinstance(data, dict) and "volume" in data:
        volume = data["volume"]
        data = {**data, "volume": 1.0 if volume is None else check_volume(volume)}
    return data


class VolumeLimiter:
    """Scales a stream by ``volume`` and limits its peaks to ``ceiling`` (see the module
    docstring)."""

    def __init__(
        self,
        rate_hz: int,
        volume: float,
        *,
        ceiling: float = 0.97,
        lookahead_ms: float = 5.0,
        release_ms: float = 80.0,
    ) -> None:
        if not (math.isfinite(volume) and MIN_VOLUME <= volume <= MAX_VOLUME):
            raise ValueError(f"volume must be in [{MIN_VOLUME}, {MAX_VOLUME}], not {volume!r}")
        if not 0 < ceiling <= 1:
            raise ValueError("ceiling must be in (0, 1]")
        if release_ms < 1:
            raise ValueError("release_ms must be at least 1")
        self.volume = volume
        self.ceiling = ceiling
        self.window = max(1, round(rate_hz * lookahead_ms / 1000))  # L
        self._q = math.exp(-1000.0 / (release_ms * rate_hz))
        held = self.window - 1
        self._box = np.full(self.window, 1.0 / self.window)
        self._needs = np.ones(held)  # g of the last L - 1 input samples
        self._gains = np.ones(0)  # r of the samples not yet output
        self._pending = _EMPTY  # scaled samples not yet output
        self._depth = 0.0  # 1 - r of the last sample

    @property
    def delay_samples(self) -> int:
        """How far the output lags the input."""
        return self.window - 1

    def process(self, chunk: np.ndarray) -> np.ndarray:
        """Take ``chunk`` (float32 mono); return the output samples that are final now."""
        scaled = np.asarray(chunk, dtype=np.float32).reshape(-1) * np.float32(self.volume)
        if not scaled.size:
            return _EMPTY
        peak = np.abs(scaled.astype(np.float64))
        needs = np.minimum(1.0, self.ceiling / np.maximum(peak, 1e-12))
        return self._advance(scaled, needs)

    def flush(self) -> np.ndarray:
        """The samples still held, as if silence followed; the stream may go on after."""
        if not self._pending.size:
            return _EMPTY
        held = self.window - 1
        out = self._advance(np.zeros(held, np.float32), np.ones(held), virtual=held)
        self.reset()  # the silence is not the stream's: nothing of it is held
        return out

    def reset(self) -> None:
        """Drop what is held (a segment abandoned); the gain's state stays."""
        self._needs = np.ones(self.window - 1)
        self._gains = np.ones(0)
        self._pending = _EMPTY

    def _advance(self, scaled: np.ndarray, needs: np.ndarray, virtual: int = 0) -> np.ndarray:
        window = self.window
        history = np.concatenate((self._needs, needs))
        held = _window_min(history, window)
        gains = np.concatenate((self._gains, self._released(held)))
        samples = np.concatenate((self._pending, scaled))
        ready = gains.size - (window - 1)
        if virtual:  # flushing: the silence itself is never output
            ready = samples.size - virtual
        if ready > 0:
            smooth = np.convolve(gains[: ready + window - 1], self._box, "valid")
            out = (samples[:ready] * smooth).astype(np.float32)
        else:
            ready, out = 0, _EMPTY
        self._needs = history[history.size - (window - 1) :]
        self._gains = gains[ready:]
        self._pending = samples[ready:]
        return out

    def _released(self, held: np.ndarray) -> np.ndarray:
        """``r`` for ``held`` (``m``): depth d = 1 - r obeys d[k] = max(1 - m[k], q d[k-1])."""
        out = np.empty_like(held)
        q = self._q
        for start in range(0, held.size, _BLOCK):
            depth = 1.0 - held[start : start + _BLOCK]
            powers = q ** np.arange(depth.size)
            # d[k] = q^k * max(q * d[-1], max_{j<=k} depth[j] / q^j)
            best = np.maximum.accumulate(np.maximum(depth / powers, 0.0))
            d = powers * np.maximum(best, q * self._depth)
            out[start : start + depth.size] = 1.0 - d
            self._depth = float(d[-1])
        return out


def _window_min(values: np.ndarray, window: int) -> np.ndarray:
    """The minimum of every ``window`` consecutive values (van Herk / Gil-Werman: a
    running minimum forwards and backwards within blocks of ``window``, O(n))."""
    count = values.size - window + 1
    if window == 1:
        return values.copy()
    blocks = -(-values.size // window)
    padded = np.full(blocks * window, np.inf)
    padded[: values.size] = values
    shaped = padded.reshape(blocks, window)
    forward = np.minimum.accumulate(shaped, axis=1).reshape(-1)
    backward = np.minimum.accumulate(shaped[:, ::-1], axis=1)[:, ::-1].reshape(-1)
    return np.minimum(backward[:count], forward[window - 1 : window - 1 + count])
