"""Short cuts for prose. Prose (CJK characters, blanks and Chinese prose's marks) skips
the rules that need a digit, a letter or a symbol: each skipped rule is tried on prose
made of every CJK word the front-end's modules know, and claims none of it; every
character outside prose takes every rule. A run of ideographs no rule claimed is one
token: read the same as a token a character."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

import streaming.text.prepare as prepare_module
from streaming.punctuation import MARKS, PAIRS
from streaming.text import PreparedText, prepare_text
from streaming.text.lexicon import Lexicon, LexiconSettings
from streaming.text.prepare import (
    _BARE_PROSE_RULES,
    _BARE_RULES,
    _IDEOGRAPHS,
    _PROSE_RULES,
    _SPAN_RULES,
    _folded,
    _rules,
)
from streaming.text.spans import Spans
from streaming.text.tokens import Token, classify, word

_TEXT_MODULES = Path(prepare_module.__file__).parent


def _known_words() -> list[str]:
    """Every run of CJK characters written in the front-end's modules: cue words,
    measure words, units, named days, Chinese numerals."""
    words: set[str] = set()
    for source in _TEXT_MODULES.glob("*.py"):
        words.update(re.findall(r"[\u4e00-\u9fff]+", source.read_text(encoding="utf-8")))
    return sorted(words)


_WORDS = _known_words()
#: Prose, as the docs say it: ideographs U+4E00-U+9FFF, blanks, and these marks.
_PROSE_MARK_SET = frozenset("。！？…；，、：“”‘’（）「」『』《》【】—")
_BLANKS = [" ", "\n", "\t", "\r\n", "\u3000", "\xa0", "\u2028", "\x1c"]
_PROSE_MARKS = sorted(_PROSE_MARK_SET) + _BLANKS
# What is not prose: digits, letters and symbols, ASCII and full-width, every mark and
# bracket, and characters that look like ideographs but are not in U+4E00-U+9FFF.
_NEAR_IDEOGRAPHS = [
    "\u3007",
    "々",
    "〆",
    "㈠",
    "㊀",
    "\u3400",
    "\u4dbf",
    "\uf900",
    "\ufa0e",
    "\U00020000",
]
_OTHERS = (
    list("0123456789abcxyzABCXYZ.,:;!?#*-+/%$@&_~=<>|^'\"`[](){}")
    + list("０１２９ＡＺａｚ．：／－～＃＊％＋")
    + list("℃°×÷±·•①②⑩¥€£")
    + list(MARKS)
    + list(PAIRS)
    + list(PAIRS.values())
    + _NEAR_IDEOGRAPHS
    + ["[uv_break]", "# ", "\n- ", "\n1. ", "~~", "826491", "双11", "3·15", "GPU", "#3"]
)


def _is_prose_character(ch: str) -> bool:
    return "\u4e00" <= ch <= "\u9fff" or ch.isspace() or ch in _PROSE_MARK_SET


def _texts(seed: int, count: int, other_share: float) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        pieces = []
        for _ in range(rng.randrange(1, 14)):
            roll = rng.random()
            if roll < other_share:
                pieces.append(rng.choice(_OTHERS))
            elif roll < 0.7:
                pieces.append(rng.choice(_WORDS))
            elif roll < 0.8:
                pieces.append(chr(rng.randrange(0x4E00, 0xA000)))
            else:
                pieces.append(rng.choice(_PROSE_MARKS))
        texts.append("".join(pieces))
    return texts


def _spans(text: str, before: str, normalizer: object, lexicon: Lexicon | None = None) -> Spans:
    return Spans(_folded(text), text, normalizer, False, lexicon, _folded(before))  # type: ignore[arg-type]


def _said(text: str) -> str:
    return text


def _digits_read(text: str) -> str:
    """A normaliser that rewrites digits and leaves the rest: runs partly unchanged."""
    return re.sub(r"[0-9]", lambda m: "零一二三四五六七八九"[int(m.group())], text)


@pytest.mark.parametrize(
    ("normalizer", "every_rule", "prose_rules"),
    [(_said, _SPAN_RULES, _PROSE_RULES), (None, _BARE_RULES, _BARE_PROSE_RULES)],
    ids=["library", "bare"],
)
def test_no_rule_skipped_on_prose_claims_any_of_it(
    normalizer: object, every_rule: tuple, prose_rules: tuple
) -> None:
    skipped = [rule for rule in every_rule if rule not in prose_rules]
    assert len(skipped) == len(every_rule) - len(prose_rules)
    # Texts with the odd digit, letter or symbol too: whatever the gate takes for prose
    # must be prose to every rule, and whatever it does not goes through them all.
    texts = _texts(seed=31, count=4000, other_share=0.03)
    befores = _texts(seed=32, count=len(texts), other_share=0.4)  # cue words and digits
    prose = 0
    for text, before in zip(texts, befores, strict=True):
        spans = _spans(text, before[-16:], normalizer)
        rules = _rules(spans)
        if rules is every_rule:
            continue
        assert rules is prose_rules, text
        prose += 1
        for rule in skipped:
            assert list(rule(spans)) == [], (rule.__name__, text, before)
    assert prose > 2000  # the sample is mostly prose


def test_prose_is_exactly_its_characters() -> None:
    """Every character of the Basic Multilingual Plane, alone and between two
    ideographs: prose takes the prose rules, anything else every rule."""
    for code in range(0x10000):
        if 0xD800 <= code <= 0xDFFF:
            continue
        ch = chr(code)
        prose = _is_prose_character(ch)
        for text in (ch, f"中{ch}文"):
            assert (_rules(_spans(text, "", _said)) is _PROSE_RULES) is prose, hex(code)
            assert (_rules(_spans(text, "", None)) is _BARE_PROSE_RULES) is prose, hex(code)
    for ch in _NEAR_IDEOGRAPHS:
        assert _rules(_spans(ch, "", _said)) is _SPAN_RULES, ascii(ch)


def test_a_run_token_is_only_what_classify_reads_as_itself() -> None:
    """A character the run takes in is a word of itself, with no rule, wherever it
    stands (what a run of one token assumes); anything else is left to ``classify``."""
    for code in range(0x10000):
        if 0xD800 <= code <= 0xDFFF:
            continue
        ch = chr(code)
        if not _IDEOGRAPHS.fullmatch(ch):
            continue
        for text, at in ((ch, 0), (f"a{ch}1", 1), (f"，{ch} ", 1), (f"中{ch}文", 1)):
            assert classify(text, at) == word(at, at + 1, ch), hex(code)
    for ch in _NEAR_IDEOGRAPHS:
        assert not _IDEOGRAPHS.search(ch), ascii(ch)


def _per_character(text: str, start: int, end: int) -> list[Token]:
    return [classify(text, k) for k in range(start, end)]


@pytest.mark.parametrize(
    ("name", "plain"),
    [("_PROSE", re.compile(r"(?!)")), ("_classified", _per_character)],
    ids=["every rule", "a token a character"],
)
@pytest.mark.parametrize(
    "normalizer", [_said, _digits_read, None], ids=["library", "digits", "bare"]
)
def test_prose_is_read_the_same_as_the_long_way(
    monkeypatch: pytest.MonkeyPatch, name: str, plain: object, normalizer: object
) -> None:
    """Whole segments, prose or not, with the user's entries, named days, cue words
    before them, tags allowed or not and codes read before: neither short cut (prose past
    the rules, a run of ideographs as one token) changes anything a listener hears or a
    caller is told."""
    lexicon = Lexicon.from_mapping(
        {"流式": "流水式", "公园": "花园", "AI": "人工智能"},
        origin="test",
        limits=LexiconSettings(),
    )
    rng = random.Random(34)
    texts = _texts(seed=33, count=800, other_share=0.08)
    texts += [
        "过了双十一再说。",
        "流式合成，去公园。",
        "GPU很快，ＧＰＵ也是。",
        "好 坏\n中",
        "〇㈠\u3400好",
    ]
    befores = [
        rng.choice(["", "验证码：", "尾号", "拨打", "第", *_texts(35, 1, 0.4)]) for _ in texts
    ]
    tags = [rng.random() < 0.5 for _ in texts]
    earlier = prepare_text("验证码826491，", normalizer=_said).codes
    assert earlier

    def read() -> list[PreparedText]:
        return [
            prepare_text(
                t,
                normalizer=normalizer,  # type: ignore[arg-type]
                allow_tags=tag,
                lexicon=lexicon,
                before=before,
                codes=earlier,
            )
            for t, before, tag in zip(texts, befores, tags, strict=True)
        ]

    short = read()
    monkeypatch.setattr(prepare_module, name, plain)
    assert short == read()
    assert sum(bool(p.spoken) for p in short) > len(texts) // 2
    assert any(p.removed for p in short)
