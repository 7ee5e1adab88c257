"""The speech pipeline every interface shares: removed report, joins, resampling, frames."""

from __future__ import annotations

import numpy as np
import pytest

from streaming.joins import CEILING, pause_ms_for
from streaming.segment import Segment
from streaming.speech import SpeechPipeline, SpeechSettings
from streaming.text import PreparedText, Removal

RATE = 24_000
PLAIN = SpeechSettings(shape_joins=False)


def tone(seconds: float, rate: int = RATE) -> np.ndarray:
    n = np.arange(int(seconds * rate))
    return (0.3 * np.sin(2 * np.pi * 220 * n / rate)).astype(np.float32)


def segment(text: str, start: int = 0, index: int = 0) -> Segment:
    return Segment(index, text, start, start + len(text), "sentence")


def spoken(text: str, removed: tuple[Removal, ...] = ()) -> PreparedText:
    return PreparedText(text, removed)


def speak(
    pipeline: SpeechPipeline, seg: Segment, audio: np.ndarray, chunk: int
) -> list[np.ndarray]:
    pipeline.begin(seg, spoken(seg.text))
    frames: list[np.ndarray] = []
    for start in range(0, audio.size, chunk):
        frames += pipeline.push(audio[start : start + chunk])
    return frames + pipeline.finish()


def test_frames_ramp_up_and_carry_every_sample() -> None:
    """Without joins, at the engine rate, the frames are the audio: 40 ms first, doubling to 100."""
    audio = tone(0.5)
    frames = speak(SpeechPipeline(PLAIN, RATE, RATE), segment("你好。"), audio, 1000)
    assert [f.size for f in frames[:3]] == [960, 1920, 2400]
    assert np.array_equal(np.concatenate(frames), audio)


@pytest.mark.parametrize("output_rate", [16_000, 24_000, 48_000])
def test_output_does_not_depend_on_chunking(output_rate: int) -> None:
    """The same engine audio in chunks of any size gives the same audio, joins on."""
    audio = tone(0.6)
    outputs = [
        np.concatenate(
            speak(SpeechPipeline(SpeechSettings(), RATE, output_rate), segment("好。"), audio, size)
        )
        for size in (97, 2400, audio.size)
    ]
    for other in outputs[1:]:  # float rounding of the resampler's blocks only
        np.testing.assert_allclose(other, outputs[0], atol=1e-6)


def test_a_streamed_segment_ends_with_its_pause_and_the_next_starts_after_it() -> None:
    """Streaming: each segment's punctuation pause follows it at once; offsets count it."""
    pipeline = SpeechPipeline(SpeechSettings(), RATE, RATE)
    first = np.concatenate(speak(pipeline, segment("你好。"), tone(0.3), 2400))
    pause = round(pause_ms_for("你好。") * RATE / 1000)
    assert pause > 0 and not first[-pause:].any() and first[-pause - 200 : -pause].any()
    start = pipeline.begin(segment("再见。", start=3, index=1), spoken("再见。"))
    assert start.audio_start_sample == first.size == pipeline.samples


def test_a_whole_text_holds_each_pause_until_more_audio() -> None:
    """Whole text: the pause comes before the next segment's audio, never at the end."""
    pipeline = SpeechPipeline(SpeechSettings(), RATE, RATE, whole_text=True)
    first = np.concatenate(speak(pipeline, segment("你好。"), tone(0.3), 2400))
    assert first[-1] == 0.0 and first[-200:].any()  # faded to zero, no pause after
    second = np.concatenate(speak(pipeline, segment("再见。", 3, 1), tone(0.3), 2400))
    pause = round(pause_ms_for("你好。") * RATE / 1000)
    assert not second[:pause].any() and second[pause : pause + 500].any()


def test_removed_characters_are_reported_at_their_place_in_the_stream() -> None:
    """A segment's removals come back with offsets in the whole utterance's text."""
    pipeline = SpeechPipeline(PLAIN, RATE, RATE)
    start = pipeline.begin(
        segment("好😀。", start=10), spoken("好。", (Removal(1, "😀", "emoji"),))
    )
    assert start.removed == (Removal(11, "😀", "emoji"),) and start.speaks
    silent = pipeline.begin(segment("😀", start=13), PreparedText("", (Removal(0, "😀", "emoji"),)))
    assert not silent.speaks and silent.removed == (Removal(13, "😀", "emoji"),)


def test_an_abandoned_segment_leaves_no_held_audio_and_no_pause() -> None:
    """Abandon (cancel, failure): what the joins held is dropped; the next one starts clean."""
    pipeline = SpeechPipeline(SpeechSettings(), RATE, 16_000)
    pipeline.begin(segment("一句话，"), spoken("一句话，"))
    sent = sum(f.size for f in pipeline.push(tone(0.5)))
    pipeline.abandon()
    assert pipeline.samples == sent
    again = speak(pipeline, segment("重新开始。", 4, 1), tone(0.3), 4800)
    fresh = speak(
        SpeechPipeline(SpeechSettings(), RATE, 16_000), segment("重新开始。"), tone(0.3), 4800
    )
    assert np.array_equal(np.concatenate(again), np.concatenate(fresh))


@pytest.mark.parametrize("whole_text", [False, True])
@pytest.mark.parametrize("output_rate", [16_000, 24_000])
def test_a_restarted_segment_sounds_as_if_its_first_try_never_was(
    whole_text: bool, output_rate: int
) -> None:
    """A second segment whose first try left nothing as frames (20 ms of it, under the
    first frame), restarted and made again, gives the very frames of a pipeline that
    only ever saw the second try; the held pause of a whole text is kept."""
    first, retry = tone(0.4), tone(0.3) * 0.5
    pipelines = [
        SpeechPipeline(SpeechSettings(), RATE, output_rate, whole_text=whole_text) for _ in "ab"
    ]
    outputs = [speak(pipeline, segment("好。"), first, 2400) for pipeline in pipelines]
    tried, clean = pipelines
    tried.begin(segment("你好。", 2, 1), spoken("你好。"))
    assert tried.push(tone(0.02)) == [] and not tried.segment_sent
    tried.restart()
    for pipeline, output in zip(pipelines, outputs, strict=True):
        if pipeline is clean:
            pipeline.begin(segment("你好。", 2, 1), spoken("你好。"))
        for start in range(0, retry.size, 2400):
            output += pipeline.push(retry[start : start + 2400])
        output += pipeline.finish()
    np.testing.assert_array_equal(np.concatenate(outputs[0]), np.concatenate(outputs[1]))
    assert tried.samples == clean.samples


def test_a_segment_cannot_restart_once_some_of_it_has_left() -> None:
    """restart() refuses once a frame of the segment has been returned, and outside one."""
    pipeline = SpeechPipeline(PLAIN, RATE, RATE)
    with pytest.raises(RuntimeError):
        pipeline.restart()
    pipeline.begin(segment("你好。"), spoken("你好。"))
    assert pipeline.push(tone(0.1)) and pipeline.segment_sent
    with pytest.raises(RuntimeError):
        pipeline.restart()


@pytest.mark.parametrize(
    ("tempo", "volume", "output_rate"),
    [(1.0, 2.5, 24_000), (1.0, 0.5, 8_000), (1.6, 1.0, 24_000), (0.7, 3.0, 16_000)],
)
def test_output_does_not_depend_on_chunking_with_tempo_or_volume(
    tempo: float, volume: float, output_rate: int
) -> None:
    """Chunks handed over together reach the pipeline joined (server.runtime.jobs): the
    stretcher and the limiter, like the joins and the resampler, give the same audio for
    the engine's 100 ms chunks and for them joined in fours."""
    rng = np.random.default_rng(3)
    audio = tone(1.2) * rng.uniform(0.2, 1.0, size=int(1.2 * RATE)).astype(np.float32)
    outputs = []
    for size in (2400, 9600):
        pipeline = SpeechPipeline(SpeechSettings(), RATE, output_rate, tempo=tempo, volume=volume)
        outputs.append(np.concatenate(speak(pipeline, segment("好。"), audio, size)))
    assert outputs[0].size == outputs[1].size
    np.testing.assert_allclose(outputs[1], outputs[0], atol=1e-6)


@pytest.mark.parametrize(
    ("settings", "output_rate", "volume", "in_range"),
    [
        (SpeechSettings(), RATE, 1.0, True),  # the joins' limiter last
        (SpeechSettings(), 16_000, 1.0, False),  # a resampler after it can overshoot
        (SpeechSettings(), RATE, 2.0, False),  # volume after it
        (PLAIN, RATE, 1.0, False),  # the engine's samples as they come
    ],
)
def test_frames_are_said_in_range_only_when_the_joins_limit_them_last(
    settings: SpeechSettings, output_rate: int, volume: float, in_range: bool
) -> None:
    assert SpeechPipeline(settings, RATE, output_rate, volume=volume).in_range is in_range


@pytest.mark.parametrize("seed", range(6))
def test_frames_said_in_range_are_finite_and_inside_full_scale_whatever_comes_in(
    seed: int,
) -> None:
    """What lets their encoding skip its check: an engine's wildest output (NaN, inf,
    samples far past full scale, at a whisper's level or a shout's) comes out of a
    pipeline whose frames are said in range finite and within the joins' ceiling, and
    encodes to the same bytes with and without the check; streamed and whole texts, a
    tempo too."""
    from streaming.audio import float_to_pcm16

    rng = np.random.default_rng(seed)
    audio = tone(1.2) * rng.choice([0.01, 1.0, 5.0, 1e6])
    wild = rng.choice(audio.size, size=20, replace=False)
    # The time-stretcher (before the joins) takes them too, without NumPy's warnings
    # (which the suite makes errors).
    tempo = 1.5 if seed % 3 == 0 else 1.0
    audio[wild] = rng.choice([np.nan, np.inf, -np.inf, 40.0, -1e30], size=20)
    pipeline = SpeechPipeline(SpeechSettings(), RATE, RATE, tempo=tempo, whole_text=seed % 2 == 0)
    assert pipeline.in_range
    frames = []
    for index in range(2):
        frames += speak(
            pipeline, segment("你好，世界。", index=index), audio, int(rng.integers(97, 5000))
        )
    samples = np.concatenate(frames)
    assert samples.size and np.isfinite(samples).all() and np.abs(samples).max() <= CEILING
    for frame in frames:
        assert float_to_pcm16(frame, in_range=True) == float_to_pcm16(frame)
