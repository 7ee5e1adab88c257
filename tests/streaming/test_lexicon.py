"""The pronunciation lexicon (streaming.text.lexicon): its file format, its checks, how
it matches, and that it comes before every other rule."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.text import Lexicon, LexiconError, LexiconSettings, prepare_text
from tests.streaming.test_text import check_accounting

LIMITS = LexiconSettings(max_entries=5, max_written_chars=8, max_spoken_chars=12)


def rules_only(text: str) -> str:
    """A normaliser that changes nothing: the front-end's own rules read numbers."""
    return text


def test_file_format() -> None:
    """Tab or "=" separates; comments, blank lines and blanks around the forms are skipped."""
    lexicon = Lexicon.parse(
        "# a comment\n\n行长\t航长\n  AI = 人工智能  \na=b\t甲\n", source="f.tsv", limits=LIMITS
    )
    assert [(e.written, e.spoken, e.origin) for e in lexicon.entries] == [
        ("行长", "航长", "f.tsv:3"),
        ("AI", "人工智能", "f.tsv:4"),
        ("a=b", "甲", "f.tsv:5"),  # a tab wins over "=": "=" may be written
    ]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("好=很好\n坏的一行\n", "f.tsv line 2: no separator"),
        ("=空\n", "f.tsv line 1: the written form is empty"),
        ("好=\n", "f.tsv line 1: the spoken form is empty"),
        ("好=很好\n好=不好\n", "f.tsv line 2: '好' is already given (at f.tsv:1)"),
        ("长长长长长长长长长=长\n", "f.tsv line 1: the written form is longer than 8"),
        ("好=" + "很" * 13 + "\n", "f.tsv line 1: the spoken form is longer than 12"),
        ("".join(f"词{k}=字\n" for k in range(6)), "f.tsv line 6: more than 5 entries"),
        ("笑=😀\n", "f.tsv line 1: the spoken form '😀' has nothing to say"),
        ("好=很好😀\n", "cannot be said: '😀'"),
    ],
)
def test_a_bad_line_is_named(text: str, says: str) -> None:
    """Each problem is refused with the file and the line that has it."""
    with pytest.raises(LexiconError) as refused:
        Lexicon.parse(text, source="f.tsv", limits=LIMITS)
    assert says in str(refused.value)


def test_spoken_forms_are_read_by_the_rules() -> None:
    """A spoken form with digits is said as the rules say it (G 7 is G 七)."""
    lexicon = Lexicon.from_mapping({"G7": "G 7", "天": "2天"}, origin="request", limits=LIMITS)
    assert [e.spoken for e in lexicon.entries] == ["G 七", "两天"]


def test_latin_entries_match_whole_and_longest_first() -> None:
    """AI does not touch MAIL; the longest written form at a place wins; Chinese anywhere."""
    lexicon = Lexicon.from_mapping(
        {"AI": "人工智能", "AIGC": "生成式内容", "行长": "航长"}, origin="request", limits=LIMITS
    )
    prepared = prepare_text("AI、AIGC和MAIL，银行行长", normalizer=rules_only, lexicon=lexicon)
    assert prepared.spoken == "人工智能、生成式内容和M A I L，银行航长"
    check_accounting("AI、AIGC和MAIL，银行行长", prepared)


def test_entries_come_before_every_rule() -> None:
    """An entry wins over the number rules (12306 as the user says it) and the preview's
    piece names it; without a library the entry still applies."""
    lexicon = Lexicon.from_mapping({"12306": "铁路一二三零六"}, origin="context", limits=LIMITS)
    prepared = prepare_text("上12306买票", normalizer=rules_only, lexicon=lexicon)
    assert prepared.spoken == "上铁路一二三零六买票"
    assert [(p.source, p.rule, p.origin) for p in prepared.rewrites] == [
        ("12306", "lexicon", "context")
    ]
    assert prepare_text("上12306买票", lexicon=lexicon).spoken == "上铁路一二三零六买票"


def test_a_context_wins_over_the_file() -> None:
    """Merged, the second lexicon's entry replaces the first's for the same written form."""
    file = Lexicon.from_mapping({"行长": "航长", "AI": "人工智能"}, origin="f:1", limits=LIMITS)
    own = Lexicon.from_mapping({"行长": "杭长"}, origin="context", limits=LIMITS)
    merged = file.merged(own)
    assert {e.written: (e.spoken, e.origin) for e in merged.entries} == {
        "行长": ("杭长", "context"),
        "AI": ("人工智能", "f:1"),
    }
    assert file.merged(None) is file


LEXICON = Lexicon.from_mapping(
    {"行长": "航长", "AI": "人工智能", "12306": "铁路一二三零六", "G7": "G 7"},
    origin="request",
    limits=LexiconSettings(),
)
PIECES = ["行长", "AI", "MAIL", "12306", "G7", "G77", "银行", "说", "，", "。", " ", "3", "😀",
          "**", "-", "A", "I", "行", "长", "123", "06"]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(text=st.lists(st.sampled_from(PIECES), max_size=20).map("".join))
def test_every_character_accounted_for_with_a_lexicon(text: str) -> None:
    """Whatever the text around the entries, each character is spoken or reported once."""
    check_accounting(text, prepare_text(text, normalizer=rules_only, lexicon=LEXICON))
