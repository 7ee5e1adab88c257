"""How a number is said once it is known what it is (streaming.text.readings), and that
the number rules never fail, whatever the text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.text import SPOKEN_CHARSET, prepare_text
from streaming.text.readings import (
    read_cardinal,
    read_decimal,
    read_digits,
    read_fraction,
    read_year,
)
from tests.streaming.test_text import check_accounting


@pytest.mark.parametrize(
    ("digits", "count", "said"),
    [
        ("0", False, "零"), ("2", False, "二"), ("2", True, "两"), ("10", False, "十"),
        ("12", True, "十二"), ("20", True, "二十"), ("22", True, "二十二"), ("110", False, "一百一十"),
        ("200", False, "两百"), ("1005", False, "一千零五"), ("1050", False, "一千零五十"),
        ("2000", False, "两千"), ("1200", False, "一千二百"), ("10010", False, "一万零一十"),
        ("20000", False, "两万"), ("22000", False, "两万二千"), ("100080", False, "十万零八十"),
        ("110000", False, "十一万"), ("1000000", False, "一百万"), ("200000000", False, "两亿"),
        ("100000001", False, "一亿零一"), ("007", False, "七"),
    ],
)  # fmt: skip
def test_cardinal(digits: str, count: bool, said: str) -> None:
    """Integers as numbers: 十 not 一十 at the head, 零 for a gap, 两 only as GB/T and
    吕叔湘 say (a count of 2, the head of 百/千/万/亿)."""
    assert read_cardinal(digits, count=count) == said


def test_digits_decimals_fractions_years() -> None:
    """Digit strings say 幺 (years 一), decimals and fractions say 二."""
    assert read_digits("110") == "幺幺零"
    assert read_digits("110", yao=False) == "一一零"
    assert read_year("2021") == "二零二一"
    assert read_decimal("2.05") == "二点零五"
    assert read_decimal("0.5") == "零点五"
    assert read_fraction("2", "3") == "三分之二"


MATHY = [
    "√(", "²", "³", "^", "^{", "}", "$", "\\frac{", "\\sqrt", "{", "٣", "①", "½", "⁰", "x", "=",
    "-", "+", "/", ":", ".", ",", "1", "2", "22", "2000", "0x", "#", "No.", "第", "个", "号", "楼",
    "%", "k", "w", "元", "¥", "℃", "km/h", "mAh", " ", "，", "。", "\n", "1. ", "(1)", "验证码",
    "比分", "月薪", "年", "月", "日", "点", "分", "后", "-", "~", "*", "×", "≥", "²", "π", "@",
    "₂", "₁₀", "⁻", "⁺", "f(", "(x)", "'", "H", "O", "mm", "μg/m³", "m/s²", "号键", "键", "按",
    "栋", "单元", "层", "床", "次日", "比赛", "领先", "（", "）", "拨打", "热线", "双", "每", "集",
    "7-2-", "x", "X", " x ", "am", "sin", "=", "<", "：", " : ",
]  # fmt: skip


def rules_only(text: str) -> str:
    return text


@settings(max_examples=500, deadline=None)
@given(text=st.one_of(st.lists(st.sampled_from(MATHY), max_size=24).map("".join), st.text()))
def test_the_rules_never_fail_and_lose_nothing(text: str) -> None:
    """Any text, math-like or not: no exception, every character spoken or reported,
    and only ChatTTS's characters spoken."""
    prepared = prepare_text(text, normalizer=rules_only)
    check_accounting(text, prepared)
    assert all(SPOKEN_CHARSET.fullmatch(ch) for ch in prepared.spoken)
