"""Timestamps of a segment's units: cutting, estimating, marks, offsets, the audio span."""

from __future__ import annotations

import itertools

import pytest

from streaming.speech import SegmentSpan
from streaming.text import Piece
from streaming.timestamps import estimate, from_marks, source_offset, units


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("你好。", ["你", "好。"]),
        ("“你好”，他说。", ["“你", "好”，", "他", "说。"]),
        ("Hello, world!", ["Hello, ", "world!"]),
        ("花了2024元", ["花", "了", "2024", "元"]),
        ("it's OK。", ["it's ", "OK。"]),
        ("……", []),
        ("Éé! 50% @", ["Éé! ", "50", "% ", "@"]),
        ("π。", ["π。"]),
    ],
)
def test_units_cover_the_text(text: str, expected: list[str]) -> None:
    found = units(text)
    assert [u.text for u in found] == expected
    if found:
        assert found[0].start == 0 and found[-1].end == len(text)
        assert all(text[u.start : u.end] == u.text for u in found)
        assert all(a.end == b.start for a, b in itertools.pairwise(found))


def test_weights_follow_syllables() -> None:
    assert [u.weight for u in units("你2024 banana")] == [1.0, 4.0, 3.0]


def test_an_estimate_shares_the_span_by_weight_and_touches_both_ends() -> None:
    timed = estimate(units("你好2024"), offset=10, start_ms=1000.0, end_ms=1600.0)
    assert [(t.text, t.start_char, t.end_char) for t in timed] == [
        ("你", 10, 11), ("好", 11, 12), ("2024", 12, 16)
    ]  # fmt: skip
    assert [(t.start_ms, t.end_ms) for t in timed] == [
        (1000.0, 1100.0), (1100.0, 1200.0), (1200.0, 1600.0)
    ]  # fmt: skip


def test_marks_time_the_units_they_fall_in_and_the_rest_is_interpolated() -> None:
    found = units("一二三四")
    timed = from_marks(found, [(0, 0.0), (2, 300.0)], offset=0, start_ms=0.0, end_ms=500.0)
    assert [t.start_ms for t in timed] == [0.0, 150.0, 300.0, 400.0]
    assert timed[-1].end_ms == 500.0
    assert all(a.end_ms == b.start_ms for a, b in itertools.pairwise(timed))


def test_marks_out_of_order_or_outside_the_span_stay_monotonic_and_inside() -> None:
    found = units("一二三")
    timed = from_marks(found, [(1, 900.0), (2, 100.0)], offset=0, start_ms=50.0, end_ms=600.0)
    starts = [t.start_ms for t in timed]
    assert starts == sorted(starts) and starts[0] == 50.0 and max(starts) <= 600.0


def test_spoken_offsets_map_back_to_the_text_written() -> None:
    # "2024年" spoken as "二零二四年": inside the rewrite, its start; after it, exact.
    pieces = (Piece(0, 1, "花", "花"), Piece(1, 5, "2024", "二零二四"), Piece(5, 6, "年", "年"))
    assert [source_offset(pieces, k) for k in range(6)] == [0, 1, 1, 1, 1, 5]


def test_a_span_maps_engine_samples_past_the_trimmed_head_and_clamps() -> None:
    span = SegmentSpan(start_sample=1000, end_sample=3000, lead_trim=480, ratio=0.5)
    assert span.output_sample(480) == 1000
    assert span.output_sample(1480) == 1500
    assert span.output_sample(0) == 1000 and span.output_sample(10**6) == 3000


def test_a_segment_with_no_units_gets_no_items_even_with_marks() -> None:
    from streaming.timestamps import for_segment

    span = SegmentSpan(0, 2400, 0, 1.0)
    assert for_segment("……", 0, (), span, 24000, [(0, 0)]) == ([], False)
    assert from_marks([], [(0, 0.0)], offset=0, start_ms=0.0, end_ms=1.0) == []
