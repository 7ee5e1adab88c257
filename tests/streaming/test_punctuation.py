"""The one punctuation table: segmentation, text preparation and joins agree on every mark."""

from __future__ import annotations

import unicodedata

import pytest

from streaming.joins import pause_class_for
from streaming.punctuation import (
    CLOSER_ALIASES,
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

# Unicode blocks Chinese text draws its brackets from: ASCII, the angle brackets of
# Miscellaneous Technical, CJK Symbols and Punctuation, Vertical Forms, CJK
# Compatibility Forms, Small Form Variants, Halfwidth and Fullwidth Forms.
BRACKET_BLOCKS = [
    (0x0020, 0x0080), (0x2329, 0x232B), (0x3000, 0x3040), (0xFE10, 0xFE20),
    (0xFE30, 0xFE50), (0xFE50, 0xFE70), (0xFF00, 0xFFF0),
]  # fmt: skip


def closing_partner(code: int) -> str:
    """The closing bracket (Pe) of an opening one: the next Pe in Unicode ("[" -> "]")."""
    while unicodedata.category(chr(code)) != "Pe":
        code += 1
    return chr(code)


UNICODE_PAIRS = [
    (chr(code), closing_partner(code))
    for low, high in BRACKET_BLOCKS
    for code in range(low, high)
    if unicodedata.category(chr(code)) == "Ps"
]
ALL_PAIRS = sorted(
    {
        *PAIRS.items(),
        *UNICODE_PAIRS,
        *((opener, alias) for alias, closer in CLOSER_ALIASES.items() for opener in PAIRS
          if PAIRS[opener] == closer),
        *((q, q) for q in STRAIGHT_QUOTES),
    }
)  # fmt: skip
PAIR_IDS = [f"U+{ord(o):04X}{o}{c}" for o, c in ALL_PAIRS]


def cut(text: str, chunk_chars: int = 0) -> list[str]:
    """Segments of ``text`` pushed whole (0) or in chunks of ``chunk_chars``, then flushed."""
    segmenter = Segmenter()
    step = chunk_chars or len(text) or 1
    segments = [s for k in range(0, len(text), step) for s in segmenter.push(text[k : k + step])]
    return [s.text for s in [*segments, *segmenter.flush()]]


def test_every_bracket_of_chinese_text_is_a_pair() -> None:
    """Every opening bracket of the blocks Chinese text uses is in the table with its closer."""
    assert len(UNICODE_PAIRS) > 30
    missing = [(o, c) for o, c in UNICODE_PAIRS if PAIRS.get(o) != c]
    assert missing == []
    assert {c for _, c in UNICODE_PAIRS} <= CLOSERS


@pytest.mark.parametrize("chunk_chars", [0, 1, 2, 4])
@pytest.mark.parametrize(("opener", "closer"), ALL_PAIRS, ids=PAIR_IDS)
def test_a_closer_stays_with_its_sentence_when_streamed(
    opener: str, closer: str, chunk_chars: int
) -> None:
    """他说〖…完成了。〗明天…: the closer ends the sentence's segment, pushed whole or in chunks."""
    first = f"他说{opener}任务完成了。{closer}"
    assert cut(first + "明天再说。", chunk_chars) == [first, "明天再说。"]
    opening = f"{opener}好的，{closer}我们开始。"
    assert cut(opening + "然后呢", chunk_chars) == [opening, "然后呢"]


@pytest.mark.parametrize(("opener", "closer"), ALL_PAIRS, ids=PAIR_IDS)
def test_a_sentence_end_inside_a_pair_is_cut_after_its_closer(opener: str, closer: str) -> None:
    """「…。」 and every other pair: the sentence ends after the closer, which stays with it."""
    first = f"{opener}完。{closer}"
    assert cut(first + "下一句") == [first, "下一句"]
    assert pause_class_for(first) == "sentence"


@pytest.mark.parametrize(("opener", "closer"), ALL_PAIRS, ids=PAIR_IDS)
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
