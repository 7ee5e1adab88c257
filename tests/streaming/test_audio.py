from __future__ import annotations

import io
import json
import math
import re
import wave

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.audio import (
    FrameChunker,
    Resampler,
    float32_json_array,
    float_to_pcm16,
    pcm16_to_float,
    sounding_seconds,
    wav_bytes,
)
from streaming.joins import CEILING

RATE_PAIRS = [(22_050, 24_000), (24_000, 16_000), (24_000, 8_000), (24_000, 48_000)]


def tone(frequency_hz: float, rate_hz: int, seconds: float = 1.0) -> np.ndarray:
    t = np.arange(round(rate_hz * seconds)) / rate_hz
    return np.sin(2 * np.pi * frequency_hz * t).astype(np.float32)


def resample_whole(resampler: Resampler, samples: np.ndarray) -> np.ndarray:
    return np.concatenate((resampler.process(samples), resampler.flush()))


def middle(samples: np.ndarray) -> np.ndarray:
    """The central half, away from the onset and end transients."""
    return samples[len(samples) // 4 : 3 * len(samples) // 4]


# --- PCM conversion -------------------------------------------------------------------


def test_pcm16_round_trip_is_exact_for_every_value() -> None:
    """Every int16 value survives PCM -> float -> PCM unchanged."""
    pcm = np.arange(-32768, 32768, dtype="<i2").tobytes()
    assert float_to_pcm16(pcm16_to_float(pcm)) == pcm


def test_float_round_trip_is_within_half_a_step() -> None:
    """Float -> PCM -> float is off by at most half a quantisation step."""
    samples = np.linspace(-1.0, 1.0 - 1 / 32768, 10_001, dtype=np.float32)
    decoded = pcm16_to_float(float_to_pcm16(samples))
    assert decoded.dtype == np.float32
    assert np.max(np.abs(decoded - samples)) <= 0.5 / 32768 + 1e-9


@pytest.mark.parametrize(
    ("sample", "expected"),
    [
        (0.5, 16384),
        (-0.5, -16384),
        (1.0, 32767),
        (-1.0, -32768),
        (2.0, 32767),
        (-2.0, -32768),
        (math.nan, 0),
        (math.inf, 32767),
        (-math.inf, -32768),
    ],
)
def test_float_to_pcm16_clips_and_scales(sample: float, expected: int) -> None:
    """Out-of-range values clip to full scale, NaN becomes silence."""
    data = float_to_pcm16(np.array([sample], dtype=np.float32))
    assert data == int(expected).to_bytes(2, "little", signed=True)


def test_pcm16_is_little_endian() -> None:
    """Bytes are little-endian int16: 0.5 encodes as 00 40."""
    assert float_to_pcm16(np.array([0.5, -1.0])) == b"\x00\x40\x00\x80"
    assert pcm16_to_float(b"\x00\x40").tolist() == [0.5]


def test_pcm16_to_float_rejects_odd_length() -> None:
    """A half sample is an error, not silently dropped."""
    with pytest.raises(ValueError, match="even"):
        pcm16_to_float(b"\x00\x01\x02")


# --- Resampler ------------------------------------------------------------------------


@pytest.mark.parametrize(("in_rate_hz", "out_rate_hz"), RATE_PAIRS)
def test_resampler_keeps_tone_frequency_and_level(in_rate_hz: int, out_rate_hz: int) -> None:
    """A 1 kHz sine stays at 1 kHz (FFT peak) and at unit amplitude."""
    out = resample_whole(Resampler(in_rate_hz, out_rate_hz), tone(1000, in_rate_hz))
    assert out.dtype == np.float32
    spectrum = np.abs(np.fft.rfft(out * np.hanning(len(out))))
    peak_hz = np.fft.rfftfreq(len(out), 1 / out_rate_hz)[np.argmax(spectrum)]
    assert abs(peak_hz - 1000) <= 2
    assert np.max(np.abs(middle(out))) == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize(("in_rate_hz", "out_rate_hz"), RATE_PAIRS)
def test_resampler_output_is_time_aligned(in_rate_hz: int, out_rate_hz: int) -> None:
    """Output sample k equals the band-limited input at time k / out_rate: no delay."""
    out = resample_whole(Resampler(in_rate_hz, out_rate_hz), tone(440, in_rate_hz))
    expected = tone(440, out_rate_hz)
    np.testing.assert_allclose(middle(out), middle(expected[: len(out)]), atol=2e-3)


def test_resampler_attenuates_aliases() -> None:
    """A 7 kHz tone taken from 24 kHz to 8 kHz is removed, not folded to 1 kHz."""
    out = resample_whole(Resampler(24_000, 8_000), tone(7000, 24_000))
    rms = float(np.sqrt(np.mean(middle(out) ** 2)))
    assert rms < 1e-3 * math.sqrt(0.5)  # at least 60 dB down


def test_resampler_passes_tones_below_cutoff() -> None:
    """A 3 kHz tone taken from 24 kHz to 8 kHz keeps its level (the filter is not too low)."""
    out = resample_whole(Resampler(24_000, 8_000), tone(3000, 24_000))
    assert np.max(np.abs(middle(out))) == pytest.approx(1.0, abs=0.02)


@settings(max_examples=60, deadline=None)
@given(
    rates=st.sampled_from([*RATE_PAIRS, (8_000, 44_100), (48_000, 44_100)]),
    length=st.integers(min_value=0, max_value=3_000),
    cuts=st.lists(st.integers(min_value=0, max_value=3_000), max_size=8),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_resampler_output_does_not_depend_on_chunking(
    rates: tuple[int, int], length: int, cuts: list[int], seed: int
) -> None:
    """Feeding a signal in arbitrary chunks gives the same samples as feeding it whole,
    within one float32 step (a phrase-cache hit, joined differently, must equal a
    synthesis; a float32 product was up to ~16 steps off)."""
    samples = np.random.default_rng(seed).uniform(-1, 1, length).astype(np.float32)
    whole = resample_whole(Resampler(*rates), samples)
    resampler = Resampler(*rates)
    pieces = [resampler.process(chunk) for chunk in np.split(samples, sorted(cuts))]
    chunked = np.concatenate([*pieces, resampler.flush()])
    assert len(chunked) == len(whole)
    np.testing.assert_array_max_ulp(chunked, whole, maxulp=1)


@pytest.mark.parametrize("rates", RATE_PAIRS)
@pytest.mark.parametrize("cut_samples", [480, 7_000, 1_234])
def test_a_stream_cut_into_frames_resamples_to_the_same_bits(
    rates: tuple[int, int], cut_samples: int
) -> None:
    """Two seconds of noise in chunks of ``cut_samples`` equal it fed whole, to the bit:
    what lets a phrase-cache hit, joined into other chunks, equal a synthesis (a float32
    product differed in thousands of samples here)."""
    samples = np.random.default_rng(3).normal(0, 0.3, 2 * rates[0]).astype(np.float32)
    whole = resample_whole(Resampler(*rates), samples)
    resampler = Resampler(*rates)
    cuts = range(cut_samples, samples.size, cut_samples)
    pieces = [resampler.process(chunk) for chunk in np.split(samples, cuts)]
    np.testing.assert_array_equal(np.concatenate([*pieces, resampler.flush()]), whole)


def test_resamplers_of_a_pair_of_rates_share_one_table() -> None:
    first, second = Resampler(24_000, 16_000), Resampler(24_000, 16_000)
    assert first._table is second._table and not first._table.flags.writeable
    assert Resampler(24_000, 8_000)._table is not first._table


@pytest.mark.parametrize(("in_rate_hz", "out_rate_hz"), [*RATE_PAIRS, (44_100, 48_000)])
@pytest.mark.parametrize("length", [0, 1, 2, 146, 147, 148, 999, 22_050])
def test_resampler_length_law(in_rate_hz: int, out_rate_hz: int, length: int) -> None:
    """After flush the output has ceil(n * out / in) samples, within 1 of the exact ratio."""
    out = resample_whole(Resampler(in_rate_hz, out_rate_hz), np.ones(length, np.float32))
    assert len(out) == math.ceil(length * out_rate_hz / in_rate_hz)
    assert abs(len(out) - round(length * out_rate_hz / in_rate_hz)) <= 1


def test_resampler_streams_before_flush() -> None:
    """Output comes out while input arrives, lagging by at most a few ms of audio."""
    resampler = Resampler(22_050, 24_000)
    out = resampler.process(np.zeros(22_050, np.float32))
    assert 24_000 - round(0.010 * 24_000) <= len(out) <= 24_000


def test_resampler_is_reset_by_flush() -> None:
    """A second stream through the same resampler gives the same output as the first."""
    resampler = Resampler(24_000, 16_000)
    samples = tone(500, 24_000, 0.1)
    first = resample_whole(resampler, samples)
    np.testing.assert_array_equal(resample_whole(resampler, samples), first)


def test_resampler_identity_when_rates_are_equal() -> None:
    """Equal rates pass samples through unchanged, with nothing held back."""
    resampler = Resampler(24_000, 24_000)
    samples = np.random.default_rng(1).uniform(-1, 1, 1000).astype(np.float32)
    np.testing.assert_array_equal(resampler.process(samples), samples)
    assert len(resampler.flush()) == 0


@pytest.mark.parametrize(("in_rate_hz", "out_rate_hz"), [(0, 24_000), (24_000, -1)])
def test_resampler_rejects_bad_rates(in_rate_hz: int, out_rate_hz: int) -> None:
    """Non-positive rates are refused at construction."""
    with pytest.raises(ValueError, match="positive"):
        Resampler(in_rate_hz, out_rate_hz)


# --- FrameChunker ---------------------------------------------------------------------


def test_frame_chunker_ramps_up_from_first_frame_size() -> None:
    """First frame is small, each next one doubles up to the frame size, flush gives the rest."""
    chunker = FrameChunker(480, first_frame_samples=120)
    frames = chunker.push(np.arange(2000, dtype=np.int16))
    assert [len(f) for f in frames] == [120, 240, 480, 480, 480]
    assert [len(f) for f in chunker.flush()] == [200]
    assert chunker.flush() == []


def test_frame_chunker_restarts_ramp_after_flush() -> None:
    """A new stream after flush starts with the small first frame again."""
    chunker = FrameChunker(400, first_frame_samples=100)
    chunker.push(np.zeros(1000, np.float32))
    chunker.flush()
    assert [len(f) for f in chunker.push(np.zeros(300, np.float32))] == [100, 200]


def test_frame_chunker_without_first_frame_uses_fixed_frames() -> None:
    """Without a first-frame size every frame has frame_samples, and dtype is kept."""
    chunker = FrameChunker(160)
    frames = [*chunker.push(np.zeros(100, np.float32)), *chunker.push(np.zeros(300, np.float32))]
    assert [len(f) for f in frames] == [160, 160]
    assert all(f.dtype == np.float32 for f in frames)


def test_frame_chunker_does_not_alias_input() -> None:
    """Changing the caller's array after push does not change frames or pending samples."""
    chunker = FrameChunker(4)
    samples = np.arange(6, dtype=np.float32)
    frames = chunker.push(samples)
    samples[:] = -1
    assert frames[0].tolist() == [0, 1, 2, 3]
    assert chunker.flush()[0].tolist() == [4, 5]


@settings(max_examples=100, deadline=None)
@given(
    frame_samples=st.integers(min_value=1, max_value=64),
    first_frame_samples=st.one_of(st.none(), st.integers(min_value=1, max_value=80)),
    push_sizes=st.lists(st.integers(min_value=0, max_value=200), max_size=12),
)
def test_frame_chunker_loses_no_sample(
    frame_samples: int, first_frame_samples: int | None, push_sizes: list[int]
) -> None:
    """Frames plus the flushed rest are exactly the input, and only the last is short."""
    chunker = FrameChunker(frame_samples, first_frame_samples)
    samples = np.arange(sum(push_sizes), dtype=np.int32)
    frames: list[np.ndarray] = []
    for piece in np.split(samples, np.cumsum(push_sizes)[:-1]) if push_sizes else []:
        frames += chunker.push(piece)
    full_frames = len(frames)
    frames += chunker.flush()
    joined = np.concatenate(frames) if frames else np.zeros(0, np.int32)
    np.testing.assert_array_equal(joined, samples)
    expected_size = min(first_frame_samples or frame_samples, frame_samples)
    for frame in frames[:full_frames]:
        assert len(frame) == expected_size
        expected_size = min(2 * expected_size, frame_samples)
    assert all(0 < len(frame) < expected_size for frame in frames[full_frames:])


# --- WAV ------------------------------------------------------------------------------


def test_wav_bytes_parses_with_stdlib_wave() -> None:
    """The header says mono, 16-bit, the given rate, and the frames are the PCM given."""
    pcm = float_to_pcm16(tone(440, 24_000, 0.05))
    data = wav_bytes(pcm, 24_000)
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"
    with wave.open(io.BytesIO(data), "rb") as reader:
        assert reader.getnchannels() == 1
        assert reader.getsampwidth() == 2
        assert reader.getframerate() == 24_000
        assert reader.getnframes() == len(pcm) // 2
        assert reader.readframes(reader.getnframes()) == pcm


def test_wav_bytes_rejects_odd_length() -> None:
    """PCM16 with a half sample is refused."""
    with pytest.raises(ValueError, match="even"):
        wav_bytes(b"\x00", 24_000)


@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), max_size=50))
def test_json_samples_read_back_as_the_same_float32(values: list[float]) -> None:
    """Each sample is the shortest decimal that reads back as the same float32: parsed,
    the array is bit-for-bit the input, and no number is longer than float32 needs."""
    samples = np.array(values, np.float32)
    text = float32_json_array(samples)
    parsed = np.array(json.loads(text), np.float32)
    assert parsed.tobytes() == samples.tobytes() or np.array_equal(parsed, samples)
    for number in re.findall(r"[-+0-9.e]+", text):
        assert len(number.lstrip("-").replace(".", "").split("e")[0].strip("0")) <= 9, number


def test_json_samples_print_as_float32_not_its_float64_expansion() -> None:
    """0.1 as float32 prints 0.1 (not 0.10000000149011612); NaN and infinity become 0."""
    assert float32_json_array(np.array([0.1, -0.5, 0.0], np.float32)) == "[0.1,-0.5,0.0]"
    assert json.loads(float32_json_array(np.array([np.nan, np.inf], np.float32))) == [0, 0]
    assert float32_json_array(np.zeros(0, np.float32)) == "[]"


def test_sounding_seconds_counts_blocks_above_the_floor() -> None:
    """Silence and a -66 dBFS tone count nothing; 0.3 s of a -10 dBFS tone in 1 s of
    silence counts 0.3 s (20 ms blocks)."""
    rate = 16000
    t = np.arange(rate) / rate
    assert sounding_seconds(np.zeros(rate, np.float32), rate) == 0.0
    assert sounding_seconds((0.0005 * np.sin(2 * np.pi * 200 * t)).astype(np.float32), rate) == 0
    clip = np.zeros(rate, np.float32)
    clip[3200:8000] = 0.3 * np.sin(2 * np.pi * 200 * t[:4800])
    assert sounding_seconds(clip, rate) == pytest.approx(0.3)


def test_float_to_pcm16_in_range_is_the_same_bytes_without_the_check() -> None:
    """Samples that round inside 16-bit PCM encode the same with ``in_range`` (the check
    left out): the joins' ceiling, the last values below 32767.5 / 32768 either way, and
    rounding halves included; the ceiling is full scale."""
    rng = np.random.default_rng(3)
    edge = 32767.4 / 32768
    samples = np.concatenate((
        rng.uniform(-CEILING, CEILING, 50_000),
        [0.0, -0.0, CEILING, -CEILING, edge, -edge, 0.5 / 32768, -1.5 / 32768, 2.5 / 32768],
    )).astype(np.float32)  # fmt: skip
    assert float_to_pcm16(samples, in_range=True) == float_to_pcm16(samples)
    assert float_to_pcm16(samples[:0], in_range=True) == b""
    top = float_to_pcm16(np.array([CEILING, -CEILING], np.float32), in_range=True)
    assert np.frombuffer(top, "<i2").tolist() == [32767, -32767]
