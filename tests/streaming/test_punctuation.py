"""The one punctuation table: segmentation, text preparation and joins agree on every mark."""

from __future__ import annotations

import pytest

from streaming.joins import pause_class_for
from streaming.punctuation import (
    CLOSERS,
    MARKS,
    PAIRS,
    PAUSE_SYMBOLS,
    STRAIGHT_QUOTES,
    Cut,
    Said,
    said_as,
)
from streaming.segment import Segmenter
from streaming.text import REASON_PAUSE, prepare_text

ALL_PAIRS = [*PAIRS.items(), *((q, q) for q in sorted(STRAIGHT_QUOTES))]


def cut(text: str) -> list[str]:
    segmenter = Segmenter()
    return [s.text for s in [*segmenter.push(text), *segmenter.flush()]]


@pytest.mark.parametrize(("opener", "closer"), ALL_PAIRS, ids=[o + c for o, c in ALL_PAIRS])
def test_a_sentence_end_inside_a_pair_is_cut_after_its_closer(opener: str, closer: str) -> None:
    """「…。」 and every other pair: the sentence ends after the closer, which stays with it."""
    first = f"{opener}完。{closer}"
    assert cut(first + "下一句") == [first, "下一句"]
    assert pause_class_for(first) == "sentence"


@pytest.mark.parametrize(("opener", "closer"), ALL_PAIRS, ids=[o + c for o, c in ALL_PAIRS])
def test_no_cut_inside_a_pair(opener: str, closer: str) -> None:
    """A sentence end inside an open pair is not a cut while the pair is open."""
    assert cut(f"他说{opener}好。走{closer}然后") == [f"他说{opener}好。走{closer}然后"]


@pytest.mark.parametrize(("opener", "closer"), list(PAIRS.items()), ids=list(PAIRS))
def test_both_sides_of_a_pair_are_said_alike(opener: str, closer: str) -> None:
    """An opener and its closer are said the same way: both a pause, or both dropped."""
    assert said_as(opener) == said_as(closer) != Said.STOP
    prepared = prepare_text(f"甲{opener}乙{closer}丙")
    if said_as(opener) is Said.COMMA:
        assert prepared.spoken == "甲，乙，丙" and prepared.removed == ()
    else:
        assert prepared.spoken == "甲乙丙"
        assert [r.chars for r in prepared.removed] == [opener, closer]


@pytest.mark.parametrize("mark", sorted(MARKS), ids=sorted(MARKS))
def test_every_sentence_or_clause_mark_has_a_join_pause(mark: str) -> None:
    """A mark the segmenter may cut after decides the pause after the segment it ends."""
    row = MARKS[mark]
    if row.cut is not Cut.NONE:
        assert pause_class_for(f"好{mark}") != "cut"
    if row.cut in (Cut.SENTENCE, Cut.ASCII_SENTENCE):
        assert row.said in (Said.STOP, Said.COMMA)


@pytest.mark.parametrize("symbol", sorted(PAUSE_SYMBOLS), ids=sorted(PAUSE_SYMBOLS))
def test_pause_symbols_are_said_as_a_pause_and_reported(symbol: str) -> None:
    """``<`` ``|`` and their full-width forms: a pause is said, the symbol is reported."""
    prepared = prepare_text(f"甲{symbol}乙")
    assert prepared.spoken == "甲，乙"
    assert [(r.start, r.chars, r.reason) for r in prepared.removed] == [(1, symbol, REASON_PAUSE)]


def test_closers_are_the_pairs_closers() -> None:
    """Every pair's closer is a closer (the table the segmenter and the joins share)."""
    assert set(PAIRS.values()) <= CLOSERS
