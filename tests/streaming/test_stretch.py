"""The pitch-keeping time-stretch (WSOLA) for speeds beyond an engine's own rate."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.stretch import TimeStretcher, split_speed

RATE = 24_000
TEMPOS = [0.25, 0.5, 0.8, 1.25, 2.0, 4.0]


def voiced(seconds: float, pitch_hz: float = 180.0, rate: int = RATE) -> np.ndarray:
    """A voice-like signal: a pitch with three harmonics, a syllable-rate envelope."""
    t = np.arange(int(seconds * rate)) / rate
    wave = sum(np.sin(2 * np.pi * pitch_hz * h * t) / h for h in (1, 2, 3))
    return (0.3 * wave * (0.6 + 0.4 * np.sin(2 * np.pi * 4 * t))).astype(np.float32)


def stretched(audio: np.ndarray, tempo: float, chunk: int, rate: int = RATE) -> np.ndarray:
    stretcher = TimeStretcher(rate, tempo)
    out = [stretcher.process(audio[i : i + chunk]) for i in range(0, audio.size, chunk)]
    return np.concatenate([*out, stretcher.flush()])


def dominant_hz(audio: np.ndarray, rate: int = RATE) -> float:
    spectrum = np.abs(np.fft.rfft(audio * np.hanning(audio.size)))
    return float(np.argmax(spectrum) * rate / audio.size)


@pytest.mark.parametrize("tempo", TEMPOS)
def test_the_duration_is_the_input_over_the_tempo_exactly(tempo: float) -> None:
    """round(len / tempo) samples out, for tempos from 0.25 (4x longer) to 4 (4x shorter)."""
    audio = voiced(1.3)
    assert stretched(audio, tempo, 1000).size == round(audio.size / tempo)


@pytest.mark.parametrize("tempo", TEMPOS)
@pytest.mark.parametrize("pitch_hz", [110.0, 180.0, 260.0])
def test_the_pitch_is_kept(tempo: float, pitch_hz: float) -> None:
    """The dominant frequency of a voiced signal (a low, a middle and a high voice) is the
    same after the stretch, within the spectrum's resolution, and the second harmonic
    keeps its place and weight."""
    audio = voiced(2.0, pitch_hz)
    out = stretched(audio, tempo, 2400)
    resolution = RATE / out.size
    assert abs(dominant_hz(out) - pitch_hz) <= 2 * resolution + 1
    spectrum = np.abs(np.fft.rfft(out * np.hanning(out.size)))
    harmonic = spectrum[round(2 * pitch_hz / resolution) - 2 : round(2 * pitch_hz / resolution) + 3]
    assert 0.3 < harmonic.max() / spectrum.max() < 0.7  # 1/2 in the input


@pytest.mark.parametrize("tempo", [0.25, 4.0])
def test_the_output_is_continuous(tempo: float) -> None:
    """No click at any splice: a sine's sample-to-sample steps stay within what the sine
    itself takes (its steps are at most 2*pi*f/rate of its amplitude)."""
    t = np.arange(RATE) / RATE
    audio = (0.5 * np.sin(2 * np.pi * 200 * t)).astype(np.float32)
    out = stretched(audio, tempo, 960)
    largest_step = 0.5 * 2 * np.pi * 200 / RATE
    assert np.abs(np.diff(out[: -RATE // 50])).max() <= 1.2 * largest_step
    assert np.abs(out).max() <= 0.5 * 1.02  # no overlap-add gain


@settings(max_examples=25, deadline=None)
@given(
    tempo=st.sampled_from(TEMPOS),
    chunks=st.lists(st.integers(min_value=1, max_value=5000), min_size=1, max_size=12),
)
def test_the_output_does_not_depend_on_chunking(tempo: float, chunks: list[int]) -> None:
    """Fed in chunks of any sizes, the stretcher gives the very samples of one push."""
    audio = voiced(0.7)
    whole = stretched(audio, tempo, audio.size)
    stretcher = TimeStretcher(RATE, tempo)
    out, at = [], 0
    for size in chunks:
        out.append(stretcher.process(audio[at : at + size]))
        at += size
    out += [stretcher.process(audio[at:]), stretcher.flush()]
    assert np.array_equal(np.concatenate(out), whole)


def test_a_flushed_stretcher_starts_over() -> None:
    """After flush (or reset), the next stream comes out as from a new stretcher; an empty
    stream gives nothing."""
    audio = voiced(0.5)
    stretcher = TimeStretcher(RATE, 2.0)
    first = np.concatenate([stretcher.process(audio), stretcher.flush()])
    stretcher.process(audio[:3000])
    stretcher.reset()
    again = np.concatenate([stretcher.process(audio), stretcher.flush()])
    assert np.array_equal(first, again)
    assert stretcher.flush().size == 0


@pytest.mark.parametrize("tempo", [0.0, -1.0, float("nan"), float("inf")])
def test_a_tempo_that_is_no_factor_is_refused(tempo: float) -> None:
    with pytest.raises(ValueError, match="tempo"):
        TimeStretcher(RATE, tempo)


@pytest.mark.parametrize(
    ("speed", "native", "split"),
    [(1.0, (0.5, 2.0), (1.0, 1.0)), (4.0, (0.5, 2.0), (2.0, 2.0)),
     (0.25, (0.5, 2.0), (0.5, 0.5)), (3.0, (0.4, 2.5), (2.5, 1.2))],
)  # fmt: skip
def test_the_engine_takes_its_range_and_the_stretch_the_rest(
    speed: float, native: tuple[float, float], split: tuple[float, float]
) -> None:
    """split_speed: the engine's speed clamped to its range, the tempo the remainder."""
    engine, tempo = split_speed(speed, native)
    assert (engine, tempo) == pytest.approx(split)
    assert engine * tempo == pytest.approx(speed)


@pytest.mark.parametrize("tempo", [0.5, 1.5])
def test_samples_not_finite_or_past_float32_pass_without_warnings(tempo: float) -> None:
    """An engine's wildest output (NaN, infinities, float64 past float32's range) is
    stretched to its length like any other, without NumPy's warnings (errors here), and
    what comes after it is finite again (the joins after the stretcher tame the rest)."""
    audio = voiced(1.0).astype(np.float64)
    audio[[100, 2_000, 4_000, 6_000]] = [np.nan, np.inf, -np.inf, 1e300]
    out = stretched(audio, tempo, 997)  # type: ignore[arg-type]
    assert out.dtype == np.float32 and out.size == round(audio.size / tempo)
    assert not np.isfinite(out).all()
    assert np.isfinite(out[-round(12_000 / tempo) :]).all()
