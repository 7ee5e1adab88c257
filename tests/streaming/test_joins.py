"""Segment joins: silence trimmed (only silence), punctuation pauses, fades to exactly
zero, one loudness per context, and the same output for any chunking."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streaming.joins import PAUSE_MS, JoinSettings, SegmentJoiner, pause_ms_for, soft_limit

RATE = 24000
MS = RATE // 1000


def tone(ms: int, amplitude: float = 0.3, freq_hz: float = 220.0) -> np.ndarray:
    n = np.arange(ms * MS)
    return (amplitude * np.sin(2 * np.pi * freq_hz * n / RATE)).astype(np.float32)


def silence(ms: int, level: float = 0.0, seed: int = 0) -> np.ndarray:
    noise = np.random.default_rng(seed).standard_normal(ms * MS) * level
    return noise.astype(np.float32)


def speech_like(ms: int, amplitude: float = 0.3) -> np.ndarray:
    """A tone with syllable-rate amplitude modulation, never below -30 dBFS."""
    x = tone(ms, amplitude)
    env = 0.6 + 0.4 * np.sin(2 * np.pi * 4 * np.arange(x.size) / RATE)
    return (x * env).astype(np.float32)


def run(
    joiner: SegmentJoiner, audio: np.ndarray, text: str = "好。", cuts: list[int] | None = None
) -> tuple[np.ndarray, list[np.ndarray]]:
    """One segment through ``joiner``; returns (whole output, the pieces as returned)."""
    joiner.begin(text)
    bounds = [0, *sorted({c for c in (cuts or []) if 0 < c < audio.size}), audio.size]
    pieces = [joiner.process(audio[a:b]) for a, b in itertools.pairwise(bounds)]
    pieces.append(joiner.finish())
    return np.concatenate(pieces), pieces


@pytest.mark.parametrize(
    ("text", "pause_class"),
    [
        ("你好。", "sentence"),
        ("真的吗？", "sentence"),
        ("太好了！", "sentence"),
        ("He said so.", "sentence"),
        ("他说：“好。”", "sentence"),  # closers belong to the mark before them
        ("（见上文。）", "sentence"),
        ("然后……", "ellipsis"),
        ("第一；", "semicolon"),
        ("如下：", "semicolon"),
        ("你好，", "comma"),
        ("苹果、", "comma"),
        ("hello, ", "comma"),
        ("没有标点的片段", "cut"),
        ("一段很长的文字被长度切开", "cut"),
        ("", "cut"),
        ("第一行\n", "line"),
        ("第一段。\n\n", "paragraph"),
        ("第一段。\r\n", "line"),
    ],
)
def test_pause_table(text: str, pause_class: str) -> None:
    """The pause after a segment follows the punctuation that ends its text."""
    assert pause_ms_for(text) == PAUSE_MS[pause_class]


def test_pause_order_follows_punctuation_strength() -> None:
    """Longer breaks for stronger marks: paragraph > sentence > semicolon > comma > cut."""
    p = PAUSE_MS
    assert p["paragraph"] > p["sentence"] > p["semicolon"] > p["comma"] > p["cut"] > 0


@pytest.mark.parametrize(
    ("text", "scale"), [("你好。", 1.0), ("你好，", 1.0), ("好", 2.0), ("好。", 0.0)]
)
def test_pause_length_is_the_table_value(text: str, scale: float) -> None:
    """finish() appends exactly the table pause (times pause_scale) of digital silence."""
    joiner = SegmentJoiner(RATE, JoinSettings(pause_scale=scale))
    out, _ = run(joiner, tone(300), text)
    pause = round(pause_ms_for(text) * scale * MS)
    assert joiner.last_pause_samples == pause
    assert out.size == 300 * MS + pause
    if pause:
        assert not out[-pause:].any()


def test_leading_and_trailing_silence_are_trimmed() -> None:
    """Engine silence at both ends shrinks to lead_keep_ms / tail_keep_ms; speech stays whole."""
    s = JoinSettings()
    joiner = SegmentJoiner(RATE, s)
    speech = speech_like(500)
    audio = np.concatenate([silence(200, 1e-4), speech, silence(300, 1e-4, seed=1)])
    out, _ = run(joiner, audio, "好。")
    body = out[: out.size - joiner.last_pause_samples]
    assert body.size == (s.lead_keep_ms + 500 + s.tail_keep_ms) * MS
    lead = int(s.lead_keep_ms * MS)
    # The speech itself is untouched (the fades lie in the kept silence).
    np.testing.assert_array_equal(body[lead : lead + speech.size], speech)


def test_leading_trim_is_bounded() -> None:
    """At most max_lead_trim_ms of leading silence is dropped."""
    s = JoinSettings(max_lead_trim_ms=100)
    joiner = SegmentJoiner(RATE, s)
    out, _ = run(joiner, np.concatenate([silence(400), tone(200)]), "好")
    assert out.size - joiner.last_pause_samples == (400 - 100 + 200) * MS


def test_silence_inside_a_segment_is_kept() -> None:
    """A pause inside a segment is held back, then released unchanged when speech resumes."""
    joiner = SegmentJoiner(RATE)
    a, gap, b = speech_like(300), silence(400, 1e-4), speech_like(300)
    out, pieces = run(joiner, np.concatenate([a, gap, b]), "好", cuts=[300 * MS, 500 * MS])
    body = out[: out.size - joiner.last_pause_samples]
    assert body.size == 1000 * MS
    np.testing.assert_array_equal(
        body[5 * MS : 990 * MS], np.concatenate([a, gap, b])[5 * MS : 990 * MS]
    )
    # While the gap streamed in, it was held back: the second piece ends before it.
    assert sum(p.size for p in pieces[:2]) <= 300 * MS


def test_signal_without_silence_only_gets_fades() -> None:
    """No silence to trim: the output is the input, faded in and out at its very edges."""
    s = JoinSettings()
    joiner = SegmentJoiner(RATE, s)
    x = tone(400)
    out, _ = run(joiner, x, "好")
    body = out[: out.size - joiner.last_pause_samples]
    assert body.size == x.size
    fade_in, fade_out = int(s.fade_in_ms * MS), int(s.fade_out_ms * MS)
    np.testing.assert_array_equal(body[fade_in:-fade_out], x[fade_in:-fade_out])
    assert body[0] == 0.0 and body[-1] == 0.0


def test_every_segment_starts_and_ends_at_zero() -> None:
    """A signal cut mid-waveform still starts and ends at exactly zero, smoothly."""
    joiner = SegmentJoiner(RATE)
    for k in range(3):
        x = tone(200 + 37 * k, amplitude=0.9, freq_hz=97.0) + 0.5
        out, _ = run(joiner, np.clip(x, -1, 1), "好，")
        body = out[: out.size - joiner.last_pause_samples]
        assert body[0] == 0.0 and body[-1] == 0.0
        # No step: a 5 ms raised cosine from 0 to 1 moves at most ~pi/2 / 120 per sample.
        assert np.max(np.abs(np.diff(body))) < 0.05


def test_loudness_is_levelled_across_segments() -> None:
    """Later segments are scaled towards the first one's voiced level, within max_gain_db."""
    s = JoinSettings()
    joiner = SegmentJoiner(RATE, s)
    levels = []
    for amplitude in [0.3, 0.15, 0.6, 0.03]:
        out, _ = run(joiner, speech_like(600, amplitude), "好。")
        body = out[: out.size - joiner.last_pause_samples]
        levels.append(20 * np.log10(np.sqrt(np.mean(body[: 600 * MS] ** 2))))
    assert abs(levels[1] - levels[0]) < 0.5
    assert abs(levels[2] - levels[0]) < 0.5
    # 20 dB below the reference: only max_gain_db of it is made up.
    assert levels[3] - levels[0] == pytest.approx(-20 + s.max_gain_db, abs=0.5)


def test_first_segment_is_not_held_back_for_loudness() -> None:
    """The reference segment streams at once (time to first audio); later ones wait for
    their loudness window, then hold one gain for the whole segment."""
    joiner = SegmentJoiner(RATE)
    _, first = run(joiner, speech_like(600), "好。", cuts=[50 * MS])
    assert first[0].size > 0
    joiner.begin("好。")
    assert joiner.process(speech_like(100, 0.1)).size == 0
    assert joiner.process(speech_like(500, 0.1)).size > 0


def test_soft_limit_stays_inside_full_scale() -> None:
    """The limiter is the identity below the knee and never reaches +-1."""
    x = np.linspace(-20, 20, 4001).astype(np.float32)
    y = soft_limit(x, 0.9)
    assert np.all(np.abs(y) < 1.0)
    inside = np.abs(x) <= 0.9
    np.testing.assert_array_equal(y[inside], x[inside])
    assert np.all(np.diff(y) >= 0)


def test_empty_segment_gives_nothing_and_nan_is_silence() -> None:
    """No audio: no pause. NaN and inf from a misbehaving engine come out finite."""
    joiner = SegmentJoiner(RATE)
    joiner.begin("好。")
    assert joiner.finish().size == 0
    bad = tone(200)
    bad[100] = np.nan
    bad[200] = np.inf
    out, _ = run(joiner, bad)
    assert np.all(np.isfinite(out)) and np.all(np.abs(out) < 1.0)


_wild_sample = st.sampled_from([np.nan, np.inf, -np.inf, 9.0, -20.0, 1e30, 7.9, -8.0])
_WILD_SIZE = 300 * MS + 100  # a partial block last


@settings(max_examples=60, deadline=None)
@given(
    wild=st.lists(st.tuples(st.integers(0, _WILD_SIZE - 1), _wild_sample), max_size=6),
    loud=st.booleans(),
    cuts=st.lists(st.integers(1, _WILD_SIZE - 1), max_size=8),
)
@example(wild=[(_WILD_SIZE - 1, np.nan)], loud=False, cuts=[])  # in the last partial block
@example(wild=[(2000, -20.0)], loud=False, cuts=[])  # finite, past +-8
def test_wild_samples_are_tamed_alike_however_chunked(
    wild: list[tuple[int, float]], loud: bool, cuts: list[int]
) -> None:
    """NaN, infinities and samples beyond +-8 anywhere (the partial last block included)
    come out as if silenced and clipped to +-8 before the joins (which measure the
    segment's loudness on them), for any chunking; loud speech inside +-8 is not clipped
    (its blocks' squares pass 64)."""
    audio = np.concatenate((speech_like(300), speech_like(300, amplitude=7.5 if loud else 0.3)))
    audio = audio[:_WILD_SIZE].copy()
    for at, value in wild:
        audio[at] = value
    tamed = np.clip(np.nan_to_num(audio, nan=0.0), -8.0, 8.0)
    # Every block's level counts towards the second segment's gain, which no bound
    # clamps: a sample tamed otherwise changes the output (the limiter alone would not
    # tell 8 from 9, or from inf).
    settings = JoinSettings(loudness_window_ms=1000, max_gain_db=60)
    outputs = []
    for second, chunks in ((tamed, []), (audio, cuts)):
        joiner = SegmentJoiner(RATE, settings)
        run(joiner, speech_like(300))  # the reference: the second segment's gain is measured
        outputs.append(run(joiner, second, cuts=chunks)[0])
    np.testing.assert_array_equal(outputs[1], outputs[0])
    assert np.all(np.isfinite(outputs[1])) and np.all(np.abs(outputs[1]) < 1.0)


def test_contract_errors() -> None:
    """process/finish outside a segment and bad settings are refused."""
    joiner = SegmentJoiner(RATE)
    with pytest.raises(RuntimeError):
        joiner.process(tone(10))
    with pytest.raises(RuntimeError):
        joiner.finish()
    with pytest.raises(ValueError):
        JoinSettings(pause_scale=-1)
    with pytest.raises(ValueError):
        SegmentJoiner(0)


_segment = st.tuples(
    st.integers(0, 300),  # leading silence, ms
    st.one_of(st.just(0), st.integers(20, 600)),  # sound, ms
    st.integers(0, 400),  # trailing silence, ms
    st.floats(0.05, 2.0),  # amplitude (above 1: the limiter)
    st.sampled_from(["好。", "好，", "好", "好：\n"]),
)


@settings(max_examples=40, deadline=None)
@given(
    segments=st.lists(_segment, min_size=1, max_size=3),
    cut_fractions=st.lists(st.floats(0, 1), max_size=6),
)
def test_properties_over_any_chunking(
    segments: list[tuple[int, int, int, float, str]], cut_fractions: list[float]
) -> None:
    """Any chunking gives the same output as one push; output is finite and inside
    (-1, 1); each segment starts and ends at exactly zero; the pause is the table value."""
    whole = SegmentJoiner(RATE)
    chunked = SegmentJoiner(RATE)
    for k, (lead_ms, sound_ms, trail_ms, amplitude, text) in enumerate(segments):
        audio = np.concatenate(
            [silence(lead_ms, 1e-4, k), speech_like(sound_ms, amplitude), silence(trail_ms)]
        )
        one, _ = run(whole, audio, text)
        cuts = [int(f * audio.size) for f in cut_fractions]
        many, _ = run(chunked, audio, text, cuts)
        np.testing.assert_array_equal(one, many)
        assert np.all(np.isfinite(one)) and np.all(np.abs(one) < 1.0)
        pause = whole.last_pause_samples
        assert pause == (round(pause_ms_for(text) * MS) if audio.size else 0)
        assert not one[one.size - pause :].any()
        body = one[: one.size - pause]
        if body.size:
            assert body[0] == 0.0 and body[-1] == 0.0
        # Only silence is removed: the sound is all there.
        assert body.size >= sound_ms * MS


class BlockByBlock(SegmentJoiner):
    """The joiner taking every block on its own (as it did before blocks after the lead
    were taken together): the reference the joiner must match to the last bit."""

    def _take_blocks(self, blocks: np.ndarray, powers: np.ndarray) -> None:
        for block, power in zip(blocks, powers.tolist(), strict=True):
            self._take_block(block, power)


_voiced_part = st.tuples(
    st.integers(0, 700),  # ms
    st.sampled_from([0.0, 0.004, 0.009, 0.012, 0.05, 0.3, 1.5]),  # silent, quiet (between
    # the silence and voiced levels), voiced, over full scale
)


@settings(max_examples=60, deadline=None)
# Voice starting right where the quiet sound's hold ends (600 ms) decides the gain there.
@example(segments=[[(300, 0.3)], [(590, 0.009), (300, 0.3)]], chunk_ms=1500)
@example(segments=[[(300, 0.3)], [(600, 0.009), (300, 0.3)]], chunk_ms=1500)
@example(segments=[[(300, 0.3)], [(100, 0.0), (580, 0.009), (300, 0.3)]], chunk_ms=250)
@given(
    segments=st.lists(st.lists(_voiced_part, min_size=1, max_size=5), min_size=1, max_size=4),
    chunk_ms=st.sampled_from([1, 7, 10, 33, 100, 250, 1500]),
)
def test_blocks_taken_together_match_block_by_block(
    segments: list[list[tuple[int, float]]], chunk_ms: int
) -> None:
    """Output, gains and the loudness reference equal the block-by-block joiner's for any
    mix of silence, quiet sound (held for the loudness window), voice and overload."""
    together, reference = SegmentJoiner(RATE), BlockByBlock(RATE)
    for parts in segments:
        audio = np.concatenate([tone(ms, level) if level else silence(ms) for ms, level in parts])
        cuts = list(range(chunk_ms * MS, audio.size, chunk_ms * MS))
        ours, _ = run(together, audio, "好。", cuts)
        theirs, _ = run(reference, audio, "好。", cuts)
        np.testing.assert_array_equal(ours, theirs)
        assert (together._ref_energy, together._ref_samples) == (
            reference._ref_energy,
            reference._ref_samples,
        )
