"""Span rules for money and percentages (:mod:`.amounts`), and for numbers when no
text-normalisation library is loaded."""

from __future__ import annotations

import re
from collections.abc import Iterator

from streaming.text.amounts import find_amounts
from streaming.text.readings import read_digits, read_number
from streaming.text.spans import Spans
from streaming.text.tokens import REASON_NUMBER, Token, dropped, word

RULE_MONEY = "money"

_LONG_DIGITS = re.compile(r"(?<![0-9.])[0-9]{12,}[Xx]?(?![0-9]|\.[0-9])")
_VERSION = re.compile(r"(?<![A-Za-z0-9_.])[vV]?[0-9]+(?:\.[0-9]+){2,}(?![A-Za-z0-9_.])")
_NUMBER = re.compile(r"[0-9０-９]+(?:[.,:/\-．：／－][0-9０-９]+)*")


def bare_number_rule(spans: Spans) -> Iterator[Token]:
    """Without the library: long digit strings and versions read digit by digit, every
    other number dropped whole (separators included, so "12.5" leaves no "。")."""
    text = spans.original
    for match in _LONG_DIGITS.finditer(text):
        yield word(match.start(), match.end(), read_digits(match.group().upper(), yao=False))
    for match in _VERSION.finditer(text):
        version = match.group()
        head = version[0] if version[0] in "vV" else ""
        parts = version[len(head) :].split(".")
        yield word(
            match.start(), match.end(), head + "点".join(read_digits(p, yao=False) for p in parts)
        )
    for match in _NUMBER.finditer(text):
        yield dropped(match.start(), match.end(), REASON_NUMBER)


_MAGNITUDE = re.compile(r"([0-9.]+)([十百千万亿]*)")


def read_count(number: str) -> str:
    """An amount's number as a count, perhaps with a Chinese magnitude: "2" -> "两",
    "1.2万" -> "一点二万", "2亿" -> "两亿"."""
    match = _MAGNITUDE.fullmatch(number)
    if match is None:
        return number
    said = read_number(match[1], count=True)
    if match[2] and said == "二":
        said = "两"
    return said + match[2]


def amount_rule(spans: Spans) -> Iterator[Token]:
    """Money and percentages (``¥199元``, ``$5–10``, ``-3.2%``, ``月薪3k``): see .amounts."""
    for amount in find_amounts(spans.text, read_count, spans.before):
        yield word(amount.start, amount.end, amount.said, RULE_MONEY)
