"""Volume with a look-ahead limiter: louder, never past full scale, no seams."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.errors import ClientError
from streaming.limiter import VolumeLimiter, check_volume, volume_in_body
from streaming.segment import Segment
from streaming.speech import SpeechPipeline, SpeechSettings
from streaming.text import PreparedText

RATE = 24_000


def loud_speechlike(seconds: float = 2.0, seed: int = 0) -> np.ndarray:
    """A voiced tone with syllable-like bursts up to 0.9 of full scale, and noise."""
    n = np.arange(int(seconds * RATE))
    rng = np.random.default_rng(seed)
    envelope = 0.2 + 0.7 * (np.sin(2 * np.pi * 3 * n / RATE) > 0)
    voiced = np.sin(2 * np.pi * 180 * n / RATE) + 0.3 * np.sin(2 * np.pi * 2300 * n / RATE)
    audio = envelope * voiced / 1.3 + 0.02 * rng.standard_normal(n.size)
    return np.clip(audio, -0.9, 0.9).astype(np.float32)


def run(limiter: VolumeLimiter, audio: np.ndarray, sizes: list[int]) -> np.ndarray:
    out, at, i = [], 0, 0
    while at < audio.size:
        size = sizes[i % len(sizes)]
        out.append(limiter.process(audio[at : at + size]))
        at += size
        i += 1
    out.append(limiter.flush())
    return np.concatenate(out)


def test_a_loud_input_at_volume_4_never_exceeds_the_ceiling() -> None:
    """Volume 4 on audio peaking at 0.9 stays at or below the ceiling, keeps every sample,
    and is louder than the input where the input is quiet."""
    audio = loud_speechlike()
    assert (np.abs(audio) * 4.0).max() > 3.0  # far past full scale: the limiter holds it
    limiter = VolumeLimiter(RATE, 4.0)
    out = run(limiter, audio, [2400])
    assert out.size == audio.size
    assert np.abs(out).max() <= limiter.ceiling + 1e-6
    assert np.abs(out).max() > 0.9 * limiter.ceiling  # the peaks are brought up to it
    quiet = np.abs(audio) < 0.1
    assert np.sqrt(np.mean(out[quiet] ** 2)) > 2.5 * np.sqrt(np.mean(audio[quiet] ** 2))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 5000), min_size=1, max_size=6), st.integers(0, 1000))
def test_any_chunking_gives_the_output_of_one_call(sizes: list[int], seed: int) -> None:
    """The limiter's state carries across chunk seams: chunked output equals one call's."""
    audio = loud_speechlike(0.7, seed)
    whole = run(VolumeLimiter(RATE, 3.0), audio, [audio.size])
    chunked = run(VolumeLimiter(RATE, 3.0), audio, sizes)
    np.testing.assert_allclose(chunked, whole, atol=1e-6)


def test_the_gain_moves_smoothly_with_no_step_at_seams() -> None:
    """The gain applied (output / scaled input) changes by at most 1/L a sample (the
    look-ahead window): a ramp into each peak, never a jump, whatever the chunking."""
    audio = loud_speechlike()
    limiter = VolumeLimiter(RATE, 4.0)
    out = run(limiter, audio, [333, 2400, 17])
    scaled = audio.astype(np.float64) * 4.0
    loud = np.abs(scaled) > 0.05  # where the ratio is well defined
    gain = out[loud] / scaled[loud]
    steps = np.abs(np.diff(gain))
    gaps = np.diff(np.flatnonzero(loud))
    assert (steps / gaps).max() <= 1.0 / limiter.window + 1e-6
    # and the waveform itself jumps no more than the scaled input's own largest step
    assert np.abs(np.diff(out)).max() <= np.abs(np.diff(scaled)).max()


def test_volume_1_passes_through_the_pipeline_unchanged() -> None:
    """A pipeline at volume 1 has no limiter: its frames are exactly those without it."""
    audio = loud_speechlike(0.5)
    seg = Segment(0, "你好。", 0, 3, "sentence")
    outputs = []
    for volume in (None, 1.0):
        kwargs = {} if volume is None else {"volume": volume}
        pipeline = SpeechPipeline(SpeechSettings(), RATE, 16_000, **kwargs)
        pipeline.begin(seg, PreparedText("你好。", ()))
        frames = [f for s in range(0, audio.size, 2400) for f in pipeline.push(audio[s : s + 2400])]
        outputs.append(np.concatenate(frames + pipeline.finish()))
    np.testing.assert_array_equal(outputs[0], outputs[1])


def test_the_pipeline_limits_every_segment_and_keeps_the_segment_length() -> None:
    """At volume 4 each segment's frames stay under the ceiling, and hold as many samples
    as at volume 1 (the look-ahead is released at the segment's end)."""
    audio = loud_speechlike(1.0)
    totals = {}
    for volume in (1.0, 4.0):
        pipeline = SpeechPipeline(SpeechSettings(), RATE, RATE, volume=volume)
        out = []
        for index, text in enumerate(("你好。", "再见。")):
            seg = Segment(index, text, 3 * index, 3 * index + 3, "sentence")
            pipeline.begin(seg, PreparedText(text, ()))
            for start in range(0, audio.size, 1000):
                out += pipeline.push(audio[start : start + 1000])
            out += pipeline.finish()
        joined = np.concatenate(out)
        totals[volume] = joined.size
        if volume == 4.0:
            assert np.abs(joined).max() <= 0.97 + 1e-6
    assert totals[1.0] == totals[4.0]


@pytest.mark.parametrize("bad", [-0.1, 4.01, float("nan"), "2", True, None])
def test_bad_volumes_are_refused(bad: object) -> None:
    """Anything but a number in [0, 4] is refused as invalid_field, naming the field."""
    if bad is None:
        assert volume_in_body({"volume": None}) == {"volume": 1.0}
        return
    with pytest.raises(ClientError) as caught:
        check_volume(bad)
    assert caught.value.code == "invalid_field"
    assert "volume" in caught.value.message
