"""Money and percentages as assistants write them (streaming.text.amounts through
prepare_text).

The front-end reads the numbers itself (streaming.text.readings); the normaliser here is
a stand-in that only turns the number rules on (without a library no number is read),
so these rows need no library; tests/server/test_text_frontend.py has them through it.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.text import SPOKEN_CHARSET, prepare_text
from streaming.text.amounts import find_amounts
from streaming.text.numbers import read_count
from tests.streaming.test_text import check_accounting

_DIGITS = dict(zip("0123456789", "零一二三四五六七八九", strict=True))


def spell(text: str) -> str:
    """A stand-in normaliser: each digit read alone, "." as 点 (what the rules leave)."""
    return "".join(_DIGITS.get(ch, ch) for ch in text.replace(".", "点"))


# (id, text, spoken)
CASES: list[tuple[str, str, str]] = [
    ("issue-sign-and-word", "原价¥199元，现价￥99.5元", "原价一百九十九元，现价九十九点五元"),
    ("issue-fullwidth-sign-and-word", "价格￥12元", "价格十二元"),
    ("sign", "¥12", "十二元"),
    ("dollar", "$5", "五美元"),
    ("fullwidth-dollar", "＄5", "五美元"),
    ("euro", "€10", "十欧元"),
    ("pound", "£3", "三英镑"),
    ("hong-kong", "HK$100", "一百港元"),
    ("us", "US$5", "五美元"),
    ("taiwan", "NT$300", "三百新台币"),
    ("sign-after", "5€", "五欧元"),
    ("yuan-sign-after", "12¥", "十二元"),
    ("sign-then-blank", "¥ 12", "十二元"),
    ("word", "5美元", "五美元"),
    ("word-jpy-wins-over-sign", "¥1000日元", "一千日元"),
    ("code-before", "USD 5", "五美元"),
    ("code-glued", "USD5", "五美元"),
    ("code-cny", "CNY 100", "一百元"),
    ("code-after", "100 CNY", "一百元"),
    ("code-after-glued", "100USD", "一百美元"),
    ("chinese-magnitude", "$1.2万", "一点二万美元"),
    ("chinese-magnitude-yi", "¥3.5亿", "三点五亿元"),
    ("chinese-magnitude-and-word", "¥3.5亿元", "三点五亿元"),
    ("million", "$1.2M", "一百二十万美元"),
    ("billion", "$5B", "五十亿美元"),
    ("billion-bn", "$2.5bn", "二十五亿美元"),
    ("thousand", "$3K", "三千美元"),
    ("trillion", "$1.5T", "一点五万亿美元"),
    ("thousands-separator", "¥1,299", "一千二百九十九元"),
    ("thousands-separator-cents", "$1,299.99", "一千二百九十九点九九美元"),
    ("thousands-separator-and-word", "¥1,299元", "一千二百九十九元"),
    ("zero-cents-dropped", "¥199.00", "一百九十九元"),
    ("trailing-zero-dropped", "12.50元", "十二点五元"),
    ("fullwidth-digits", "￥１２", "十二元"),
    ("range-sign", "¥10-20", "十到二十元"),
    ("range-both-signs", "$5-$10", "五到十美元"),
    ("range-en-dash", "$5–10", "五到十美元"),
    ("range-tilde-word", "10~20元", "十到二十元"),
    ("range-sign-and-word", "¥10~20元", "十到二十元"),
    ("range-spaced", "¥10 - ¥20", "十到二十元"),
    ("range-dao", "¥10到20", "十到二十元"),
    ("range-magnitude", "$5-10万", "五到十万美元"),
    ("range-code", "5-10 USD", "五到十美元"),
    ("range-words", "10元-20元", "十到二十元"),
    ("negative-before-sign", "-¥5", "负五元"),
    ("negative-after-sign", "¥-5", "负五元"),
    ("negative-unicode-minus", "−$5", "负五美元"),
    ("negative-word", "-5美元", "负五美元"),
    ("negative-in-text", "亏损-¥3.5亿", "亏损负三点五亿元"),
    ("minus-between-numbers", "10-¥5", "十，五元"),
    ("rate-cjk", "$10/月", "十美元每月"),
    ("rate-word", "1.5元/斤", "一点五元每斤"),
    ("rate-count", "$0.002/1K tokens", "零点零零二美元每一千 tokens"),
    ("percent-plus", "+5%", "正百分之五"),
    ("percent-minus", "-3.2%", "负百分之三点二"),
    ("percent-plus-minus", "±2%", "正负百分之二"),
    ("percent-unicode-minus", "−5%", "负百分之五"),
    ("percent-in-text", "同比+5%，环比-3.2%", "同比正百分之五，环比负百分之三点二"),
    ("per-mille", "5‰", "千分之五"),
    ("per-myriad", "5‱", "万分之五"),
    ("percent-range", "5%-10%", "百分之五到百分之十"),
    ("percent-range-en-dash", "5%–10%", "百分之五到百分之十"),
    ("percent-range-bare-low", "5-10%", "百分之五到百分之十"),
    ("percent-range-signed", "-5%~+5%", "负百分之五到正百分之五"),
    ("percent-fullwidth", "５０％", "百分之五十"),
]


@pytest.mark.parametrize(("text", "spoken"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_reading(text: str, spoken: str) -> None:
    """Each row is spoken as listed, every character accounted for."""
    prepared = prepare_text(text, normalizer=spell)
    assert prepared.spoken == spoken
    assert prepared.removed == ()
    check_accounting(text, prepared)


def test_an_amount_is_one_rewrite_of_its_whole_span() -> None:
    """The sign, the number and the currency word are one span read as one amount."""
    prepared = prepare_text("原价¥199元，现价￥99.5元", normalizer=spell)
    assert [(p.source, p.spoken) for p in prepared.rewrites] == [
        ("¥199元", "一百九十九元"),
        ("￥99.5元", "九十九点五元"),
    ]


def test_numbers_are_read_as_counts() -> None:
    """The reader is given each number with its Chinese magnitude, and reads a count (两)."""
    asked: list[str] = []

    def reader(number: str) -> str:
        asked.append(number)
        return read_count(number)

    assert [a.said for a in find_amounts("$1.2万", reader)] == ["一点二万美元"]
    assert [a.said for a in find_amounts("¥2", reader)] == ["两元"]
    assert [a.said for a in find_amounts("$2亿", reader)] == ["两亿美元"]
    assert asked == ["1.2万", "2", "2亿"]


@pytest.mark.parametrize("text", ["ABC$5", "$HOME", "USDT 5", "5美", "10-5", "3.5"])
def test_not_amounts(text: str) -> None:
    """A sign glued to a word, a sign without a number, a number without a currency: none."""
    assert list(find_amounts(text, spell)) == []


def test_without_a_normaliser_digits_are_dropped_as_before() -> None:
    """With no normaliser the amount's digits are reported dropped and its words kept."""
    prepared = prepare_text("价格¥12元")
    assert prepared.spoken == "价格元元"
    assert [(r.chars, r.reason) for r in prepared.removed] == [("12", "number")]


PIECES = [
    "¥", "￥", "$", "US$", "HK$", "€", "£", "USD", "CNY", " ", "-", "−", "+", "±", "~",
    "–", "到", "1", "12", "199", "1,299", "99.5", ".00", "万", "亿", "M", "K", "bn", "元",
    "美元", "块", "%", "‰", "/", "月", "价格", "，", "。",
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(text=st.lists(st.sampled_from(PIECES), max_size=16).map("".join))
def test_every_character_accounted_for(text: str) -> None:
    """Whatever money-like text arrives, each character is spoken or reported once."""
    prepared = prepare_text(text, normalizer=spell)
    check_accounting(text, prepared)
    assert all(SPOKEN_CHARSET.fullmatch(ch) for ch in prepared.spoken)
