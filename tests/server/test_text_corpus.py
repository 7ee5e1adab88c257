"""The corpus of assistant and service-bot sentences (tests/streaming/corpus), read by the
real front-end (our rules and WeTextProcessing), each as a listener expects."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from server.textnorm import TextFrontend
from streaming.segment import Segmenter, SegmenterSettings
from tests.streaming.corpus import Row, heard, is_heard_right, load
from tests.streaming.test_text import check_accounting

ROWS = load("assistants")


@pytest.fixture(scope="module")
def frontend() -> TextFrontend:
    front = TextFrontend()
    front.load()
    return front


def test_corpus_is_large_and_covers_every_category() -> None:
    """At least 400 sentences, at least 20 in each category, no sentence twice."""
    assert len(ROWS) >= 400
    counts = Counter(row.category for row in ROWS)
    assert min(counts.values()) >= 20, counts
    assert len({row.text for row in ROWS}) == len(ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.category}-{r.line}" for r in ROWS])
def test_sentence_is_read_as_a_listener_expects(frontend: TextFrontend, row: Row) -> None:
    """The sentence, cut as the WebSocket cuts it (a first clause of 3 characters: "验证码："
    alone), is heard as one of its expected forms, and every character is spoken or
    reported."""
    segmenter = Segmenter(SegmenterSettings(max_chars=80, first_min_chars=3))
    segments = [*segmenter.push(row.text), *segmenter.flush()]
    stream = frontend.for_utterance()  # as a context prepares its segments, in order
    spoken = ""
    for segment in segments:
        prepared = stream.prepare(segment.text)
        check_accounting(segment.text, prepared)
        spoken += prepared.spoken
    assert is_heard_right(spoken, row), f"heard {heard(spoken)!r}, expected {row.expected}"


# Where LLMs put blanks: between Chinese and digits ("下午 3 点", "拨打 12315 热线").
_CHINESE_DIGIT = re.compile(r"(?<=[\u4e00-\u9fff])(?=[0-9])|(?<=[0-9])(?=[\u4e00-\u9fff])")


def test_blanks_around_numbers_change_nothing(frontend: TextFrontend) -> None:
    """Every corpus sentence with a blank put between its Chinese and its digits is spoken
    exactly as written without them: the same reading, and no blank or pause added."""
    rows = [row for row in ROWS if _CHINESE_DIGIT.search(row.text)]
    assert len(rows) >= 300
    changed = [
        (row.text, spaced, frontend.prepare(spaced).spoken)
        for row in rows
        if frontend.prepare(spaced := _CHINESE_DIGIT.sub(" ", row.text)).spoken
        != frontend.prepare(row.text).spoken
    ]
    assert changed == []
