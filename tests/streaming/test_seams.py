"""Seam measures: a click at a join scores far above 1, a clean join near 1."""

from __future__ import annotations

import numpy as np

from harness.seams import measure_seams


def _tone(n: int) -> np.ndarray:
    t = np.arange(n) / 24_000
    return (0.3 * np.sin(2 * np.pi * 220 * t) + 0.1 * np.sin(2 * np.pi * 1330 * t)).astype(
        np.float32
    )


def test_clean_joins_score_like_inside() -> None:
    """Joins placed in continuous audio score about 1 on both measures."""
    audio = _tone(24_000)
    report = measure_seams(audio, [4000, 9000, 15000])
    assert report.joins == 3
    assert report.step_ratio_max < 3
    assert report.flux_ratio_max < 3


def test_a_click_at_a_join_scores_high() -> None:
    """A jump at a join (as from a re-decoded, sliced tail) scores far above inside-chunk audio."""
    audio = _tone(24_000)
    audio[9000:] += 0.5
    report = measure_seams(audio, [4000, 9000, 15000])
    assert report.step_ratio_max > 10
    assert report.flux_ratio_max > 2


def test_no_joins() -> None:
    """Without joins inside the audio the report says zero joins and NaN figures."""
    report = measure_seams(_tone(1000), [0, 1000])
    assert report.joins == 0
    assert np.isnan(report.step_ratio_median)
