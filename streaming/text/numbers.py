"""Span rules for numbers (temporary home, moved from streaming/text.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from streaming.text.amounts import counting, find_amounts
from streaming.text.spans import Normalizer, Spans
from streaming.text.tokens import REASON_NUMBER, Kind, Token, dropped, word

_DIGIT_READINGS = dict(zip("0123456789", "零一二三四五六七八九", strict=True))


def _read_digits(digits: str) -> str:
    return "".join(_DIGIT_READINGS.get(ch, ch) for ch in digits)


def _normalize_or_drop(
    start: int, end: int, text: str, normalizer: Normalizer | None, suffix: str = ""
) -> Token:
    if normalizer is None:
        return dropped(start, end, REASON_NUMBER)
    return word(start, end, normalizer(text) + suffix)


_LIST_NUMBER = re.compile(r"^[ \t]*(\d{1,3})([.)．）、])(?=[ \t]+\S)", re.MULTILINE)


def list_rule(spans: Spans) -> Iterator[Token]:
    for match in _LIST_NUMBER.finditer(spans.original):
        yield _normalize_or_drop(match.start(1), match.end(1), match.group(1), spans.normalizer)
        yield Token(match.start(2), match.end(2), Kind.COMMA)


_LONG_DIGITS = re.compile(r"(?<![\d.])\d{12,}[Xx]?(?![\d.])")
_VERSION = re.compile(r"(?<![A-Za-z0-9_.])[vV]?\d+(?:\.\d+){2,}(?![A-Za-z0-9_.])")
_THOUSANDS = re.compile(r"(?<![\d,.])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d,])")
_RANGE = re.compile(
    r"(?<![A-Za-z0-9_.\-/:])(\d+(?:\.\d+)?)[ \t]?[-–—~～][ \t]?(\d+(?:\.\d+)?)"
    r"(%|％|℃|°C|[a-zA-Z]{1,3}\b)?(?![\d.\-/:])"
)
_NUMBER = re.compile(r"[0-9０-９]+(?:[.,:/\-．：／－][0-9０-９]+)*")
_FRACTION = re.compile(r"(?<![\d/.:])\d+/\d+(?![\d/.:])")
_WORD_HYPHEN_DIGIT = re.compile(
    r"(?<=[A-Za-z])-(?=\d)|(?<=[A-Za-z0-9])-(?=\d+(?:\.\d+)?[A-Za-z]+(?![A-Za-z0-9]))"
)


def number_rule(spans: Spans) -> Iterator[Token]:
    text, normalizer = spans.original, spans.normalizer
    for match in _LONG_DIGITS.finditer(text):
        yield word(match.start(), match.end(), _read_digits(match.group().upper()))
    for match in _VERSION.finditer(text):
        version = match.group()
        head = version[0] if version[0] in "vV" else ""
        if not head and re.fullmatch(r"(?:19|20)\d\d\.\d{1,2}\.\d{1,2}", version):
            continue
        spoken = head + "点".join(_read_digits(part) for part in version[len(head) :].split("."))
        yield word(match.start(), match.end(), spoken)
    if normalizer is None:
        for match in _NUMBER.finditer(text):
            yield dropped(match.start(), match.end(), REASON_NUMBER)
    for match in _FRACTION.finditer(text):
        yield _normalize_or_drop(match.start(), match.end(), match.group(), normalizer)
    for match in _THOUSANDS.finditer(text):
        yield _normalize_or_drop(
            match.start(), match.end(), match.group().replace(",", ""), normalizer
        )
    for match in _RANGE.finditer(text):
        low, high, unit = match.group(1), match.group(2), match.group(3) or ""
        if len(low) == 4 and low[:2] in ("19", "20") and len(high) <= 2 and not unit:
            continue
        if low.startswith("0") or len(high) > 6:
            continue
        if normalizer is None:
            yield dropped(match.start(), match.end(), REASON_NUMBER)
            continue
        said = normalizer(f"{low}{unit}") + "到" + normalizer(f"{high}{unit}")
        yield word(match.start(), match.end(), said)
    for match in _WORD_HYPHEN_DIGIT.finditer(text):
        yield Token(match.start(), match.end(), Kind.GAP)


def amount_rule(spans: Spans) -> Iterator[Token]:
    if spans.normalizer is None:
        return
    for amount in find_amounts(spans.original, counting(spans.normalizer)):
        yield word(amount.start, amount.end, amount.said)
