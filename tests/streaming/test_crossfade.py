"""Window joining and crossfades: exact length, transparency to agreeing windows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.crossfade import WindowJoiner, crossfade, fade_curves


@pytest.mark.parametrize("length", [0, 1, 2, 7, 512])
def test_fade_curves_sum_to_one(length: int) -> None:
    """fade_out + fade_in is 1 everywhere, fade_in rises strictly inside (0, 1)."""
    fade_out, fade_in = fade_curves(length)
    assert fade_out.size == fade_in.size == length
    np.testing.assert_allclose(fade_out + fade_in, 1.0, atol=1e-6)
    assert np.all(np.diff(fade_in) > 0)
    assert np.all((fade_in > 0) & (fade_in < 1))


def test_crossfade_moves_from_outgoing_to_incoming() -> None:
    """A crossfade starts near the outgoing signal and ends near the incoming one."""
    out = crossfade(np.zeros(100, np.float32), np.ones(100, np.float32))
    assert out[0] < 0.01 and out[-1] > 0.99
    with pytest.raises(ValueError):
        crossfade(np.zeros(3), np.zeros(4))


def _windows(signal_length: int, cuts: list[int], context: int, tail: int) -> list[tuple[int, int]]:
    # Windows [start, end) ending at each cut (the last at the signal's end) with
    # `context` samples re-covered before what the previous window let through.
    ends = [*sorted({c for c in cuts if 0 < c < signal_length}), signal_length]
    windows = []
    sent = 0
    for end in ends:
        start = max(0, sent - context)
        windows.append((start, end))
        sent = max(sent, end - tail)
    return windows


@settings(max_examples=150, deadline=None)
@given(
    length=st.integers(1, 3000),
    cuts=st.lists(st.integers(1, 3000), max_size=8),
    overlap=st.integers(0, 64),
    holdback=st.integers(0, 64),
    extra_context=st.integers(0, 100),
)
def test_agreeing_windows_pass_through_exactly(
    length: int, cuts: list[int], overlap: int, holdback: int, extra_context: int
) -> None:
    """Windows cut from one signal join back into exactly that signal: no sample lost or doubled."""
    rng = np.random.default_rng(length)
    signal = rng.standard_normal(length).astype(np.float32)
    joiner = WindowJoiner(overlap_samples=overlap, holdback_samples=holdback)
    pieces = []
    windows = _windows(length, cuts, overlap + holdback + extra_context, overlap + holdback)
    for i, (start, end) in enumerate(windows):
        start = min(start, joiner.emitted_samples)
        piece = joiner.push(signal[start:end], start, final=i == len(windows) - 1)
        pieces.append(piece)
    out = np.concatenate(pieces)
    assert out.size == length
    np.testing.assert_allclose(out, signal, atol=1e-5)


def test_disagreeing_windows_are_crossfaded_not_jumped() -> None:
    """Two windows that disagree by a constant meet through a ramp, with no step at the join."""
    joiner = WindowJoiner(overlap_samples=64, holdback_samples=32)
    first = joiner.push(np.zeros(1000, np.float32), 0)
    assert first.size == 1000 - 32 - 64
    second = joiner.push(np.ones(1000, np.float32), 500, final=True)
    out = np.concatenate([first, second])
    assert out.size == 1500
    assert np.abs(np.diff(out)).max() < 0.05  # a 64-sample ramp, not a 0 -> 1 step
    assert out[0] == 0 and out[-1] == 1


def test_short_window_releases_nothing_and_keeps_state() -> None:
    """A non-final window too short to pass the held tail returns nothing and changes nothing."""
    joiner = WindowJoiner(overlap_samples=64, holdback_samples=32)
    joiner.push(np.zeros(500, np.float32), 0)
    sent = joiner.emitted_samples
    assert joiner.push(np.zeros(sent + 50 - 400, np.float32), 400).size == 0
    assert joiner.emitted_samples == sent


def test_window_starting_after_emitted_audio_is_rejected() -> None:
    """A window that leaves a gap after the emitted samples raises ValueError; so does a push after final."""
    joiner = WindowJoiner(overlap_samples=8, holdback_samples=8)
    joiner.push(np.zeros(100, np.float32), 0)
    with pytest.raises(ValueError):
        joiner.push(np.zeros(100, np.float32), joiner.emitted_samples + 1)
    joiner.push(np.zeros(100, np.float32), 50, final=True)
    with pytest.raises(RuntimeError):
        joiner.push(np.zeros(10, np.float32), 0)
