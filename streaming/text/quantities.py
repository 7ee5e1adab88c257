"""Numbers read as numbers (SSML ``cardinal``, ``ordinal``): counts, units, ranges, signs.

What a number is decides 二 or 两 (:mod:`.readings`): before a count measure word or a
unit it counts (两个, 两公里, 两瓦); after 第, 周, 初, or before a naming measure (号,
楼, 月) it names (第二, 周二, 二号); alone it is said 二. A range says its unit once
(20~25℃ 二十到二十五摄氏度; 1-2小时 一到两小时).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from streaming.text.context import latin_before, measure_after, unit_after
from streaming.text.readings import read_cardinal, read_digits, read_fraction, read_number
from streaming.text.spans import Spans
from streaming.text.tables import COUNT_MEASURES, ORDINAL_MEASURES
from streaming.text.tokens import Kind, Token, word
from streaming.text.units import AMBIGUOUS_UNITS, LETTER_UNITS, UNITS

RULE_UNIT = "number.unit"
RULE_COUNT = "number.count"
RULE_ORDINAL = "number.ordinal"
RULE_NUMBER = "number"
RULE_RANGE = "number.range"
RULE_FRACTION = "number.fraction"
RULE_DIGITS = "digits"

_NUM = r"[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?|[0-9]+(?:\.[0-9]+)?"
_SIGN = r"(?:(?<![0-9A-Za-z)）\]²³])[-−+±])?"
_RANGE = re.compile(
    rf"(?<![0-9.,A-Za-z])({_SIGN})({_NUM})[ \t]?([万亿千]?)[ \t]?([-–—~～〜]|到|至)[ \t]?({_SIGN})({_NUM})"
    r"[ \t]?([万亿千]?)(?![0-9,]|\.[0-9])"
)
_ORDINAL_PREFIX = re.compile(
    r"(第|周|星期|礼拜|No\.[ \t]?|NO\.[ \t]?|No[ \t]|(?<![\u4e00-\u9fff])[初高大研](?=[0-9](?![0-9])))"
    rf"[ \t]?({_NUM})"
)
_NUMBER = re.compile(rf"(?<![0-9.,])({_SIGN})({_NUM})(\+(?![0-9]))?(?![0-9])")
# "/" and perhaps a count after a unit, before another unit: mg/kg, L/100km.
_PER_UNIT = re.compile(r"/([0-9]+)?(?=[A-Za-z°℃μ])")
_FRACTION = re.compile(
    r"(?<![0-9/.:])([0-9]+(?:\.[0-9]+)?)[ \t]?/[ \t]?([0-9]+(?:\.[0-9]+)?)(?![0-9/:]|\.[0-9])"
)
_SIGNS = {"-": "负", "−": "负", "+": "正", "±": "正负"}
_PER = re.compile(
    r"/(?=(?:" + "|".join(sorted(COUNT_MEASURES + ORDINAL_MEASURES, key=len, reverse=True)) + "))"
)


def _plain(number: str) -> str:
    return number.replace(",", "")


def _unit(text: str, end: int, per: bool = False) -> tuple[str, str, int] | None:
    """(said after, said before, end) of the unit written after ``text[:end]``; ``per``:
    after a "/", where one letter is a unit whatever stands before (μmol/L)."""
    unit = unit_after(text, end)
    if unit is None:
        return None
    if unit in AMBIGUOUS_UNITS and not per and latin_before(text, end - 1):
        return None
    start = text.index(unit, end)
    after, before = UNITS[unit]
    return after, before, start + len(unit)


def _counts(text: str, end: int) -> bool:
    unit = _unit(text, end)
    if unit is not None:
        return unit[0] not in LETTER_UNITS
    measure = measure_after(text, end)
    return measure is not None and measure[1]


def range_rule(spans: Spans) -> Iterator[Token]:
    """``a-b``, ``a~b``, ``a到b`` with what follows said once (unit) or after (measure)."""
    text = spans.text
    for match in _RANGE.finditer(text):
        low_sign, low, low_mag, dash, high_sign, high, high_mag = match.groups()
        if dash in "-–—" and text[match.start() - 1 : match.start()] in ("-", "/"):
            continue
        end = match.end()
        ordinal = text[max(0, match.start() - 1) : match.start()] == "第"
        unit = _unit(text, end)
        # A signed end makes both values, not counts: -2~2℃ 负二到二摄氏度.
        counts = not ordinal and not (low_sign or high_sign) and _counts(text, end)
        said = (
            _SIGNS.get(low_sign, "")
            + read_number(_plain(low), count=counts or bool(low_mag))
            + low_mag
            + "到"
            + _SIGNS.get(high_sign, "")
            + read_number(_plain(high), count=counts or bool(high_mag))
            + high_mag
        )
        if unit is not None:
            after, before, end = unit
            per = _per_unit(text, end)
            if per is not None:
                after, end = after + per[0], per[1]  # 10-15mg/kg 十到十五毫克每千克
            said = before + said + after
        yield word(match.start(), end, said, RULE_RANGE)


_ENGLISH_ORDINAL = re.compile(r"(?<![A-Za-z0-9.])([0-9]+)(?:st|nd|rd|th)(?![A-Za-z])")


def ordinal_rule(spans: Spans) -> Iterator[Token]:
    """第2 第二, 周2 周二, 初2 初二, No.1 第一, 1st 第一; a count measure after still
    counts (每周2次)."""
    text = spans.text
    for match in _ENGLISH_ORDINAL.finditer(text):
        yield word(match.start(), match.end(), "第" + read_ordinal(match[1]), RULE_ORDINAL)
    for match in _ORDINAL_PREFIX.finditer(text):
        prefix, number = match[1], _plain(match[2])
        if prefix != "第" and _counts(text, match.end()):
            continue
        said = read_ordinal(number)
        if prefix.startswith(("No", "NO")):
            if len(number) >= 3:
                continue  # "No.12345": a code
            yield word(match.start(), match.end(), "第" + said, RULE_ORDINAL)
        else:
            yield word(match.start(2), match.end(2), said, RULE_ORDINAL)


def read_ordinal(number: str) -> str:
    """A number that names a place: 二, 二百 (两千 and 两万 as said)."""
    said = read_number(number)
    return "二百" + said[2:] if said.startswith("两百") else said


def unit_rule(spans: Spans) -> Iterator[Token]:
    """A number and its Latin unit: 3000mAh 三千毫安时, 50km/h 每小时五十公里."""
    text = spans.text
    for match in _NUMBER.finditer(text):
        unit = _unit(text, match.end(2))
        if unit is None:
            continue
        after, before, end = unit
        counts = after not in LETTER_UNITS
        # A signed number is a value, not a count: -2℃ 负二摄氏度 (2℃ 两摄氏度).
        said = _SIGNS.get(match[1], "") + read_number(
            _plain(match[2]), count=counts and not match[1]
        )
        per = _per_unit(text, end)
        if per is not None:
            after, end = after + per[0], per[1]
        yield word(match.start(), end, before + said + after, RULE_UNIT)


def _per_unit(text: str, end: int) -> tuple[str, int] | None:
    """("每" and the unit, end) of a "/" and a unit after a unit: mg/kg 每千克, L/100km
    每一百公里."""
    per = _PER_UNIT.match(text, end)
    if per is None:
        return None
    per_unit = _unit(text, per.end(1) if per[1] else per.start() + 1, per=not per[1])
    if per_unit is None:
        return None
    count = read_number(per[1], count=True) if per[1] else ""
    return "每" + count + per_unit[1] + per_unit[0], per_unit[2]


def fraction_rule(spans: Spans) -> Iterator[Token]:
    for match in _FRACTION.finditer(spans.text):
        said = read_fraction(match[1], match[2])
        yield word(match.start(), match.end(), said, RULE_FRACTION)


def per_rule(spans: Spans) -> Iterator[Token]:
    """ "/" between a quantity and a measure word is 每 (3次/天 三次每天)."""
    text = spans.text
    for match in _PER.finditer(text):
        k = match.start() - 1
        while k >= 0 and not "0" <= text[k] <= "9" and match.start() - k <= 4:
            k -= 1
        if k >= 0 and "0" <= text[k] <= "9":
            yield word(match.start(), match.end(), "每", RULE_UNIT)


def number_rule(spans: Spans) -> Iterator[Token]:
    """Every other number: a count before a measure word, a code if long, else a number."""
    text = spans.text
    for match in _NUMBER.finditer(text):
        sign, number, more = match[1], _plain(match[2]), match[3]
        end = match.end(2)
        if _is_code_like(number, text, end):
            yield word(match.start(2), match.end(2), read_digits(number), RULE_DIGITS)
            continue
        counts = _counts(text, end)
        rule = RULE_COUNT if counts else RULE_NUMBER
        said = _SIGNS.get(sign, "") + read_number(number, count=counts and not sign)
        if more:  # 10+ 十多; a version's or a decimal's (Python 3.10+, 4.5+) 以上
            said += "以上" if "." in number or latin_before(text, match.start()) else "多"
        yield word(match.start(), match.end(), said, rule)


def _is_code_like(number: str, text: str, end: int) -> bool:
    """A leading 0 (007, 0755) or eight digits or more not round (12345678): digits."""
    if "." in number or len(number) < 2:
        return False
    if number[0] == "0":
        return True
    if len(number) >= 12:
        return True
    return len(number) >= 8 and not number.endswith("000") and not _counts(text, end)


# A tilde between two quantities each with its unit (20℃~25℃, 5kg～10kg): 到.
_UNIT_TILDE = re.compile(r"(?<=[℃°%‰²³A-Za-zμΩ])[ \t]?[~～〜][ \t]?(?=[-−+]?[0-9])")
# Blood pressure, systolic over diastolic (120/80mmHg): two values, a pause between.
_PRESSURE = re.compile(r"(?<![0-9./])([0-9]{2,3})/([0-9]{2,3})(?=[ \t]?(?:mmHg|kPa|毫米汞柱))")


def pair_rule(spans: Spans) -> Iterator[Token]:
    """20℃~25℃ 二十摄氏度到二十五摄氏度; 120/80mmHg 一百二十，八十毫米汞柱."""
    text = spans.text
    for match in _UNIT_TILDE.finditer(text):
        yield word(match.start(), match.end(), "到", RULE_RANGE)
    for match in _PRESSURE.finditer(text):
        said = read_cardinal(match[1]) + "，"
        yield word(match.start(), match.end(2) - len(match[2]), said, RULE_NUMBER)


_WORD_HYPHEN_DIGIT = re.compile(
    r"(?<=[A-Za-z])-(?=[0-9])|(?<=[A-Za-z0-9])-(?=[0-9]+(?:\.[0-9]+)?[A-Za-z]+(?![A-Za-z0-9]))"
    r"|(?<=[A-Za-z][0-9])-(?=[0-9])|(?<=[A-Za-z][0-9][0-9])-(?=[0-9])"  # DDR5-6000, i9-14900K
    r"|(?<=[0-9])-(?=[0-9])"  # inside a code no other rule read (RMA20240518-003)
)


def hyphen_rule(spans: Spans) -> Iterator[Token]:
    """A hyphen in a name ("COVID-19", "Llama-3.1-8B") is a word break, not 负 or 减."""
    for match in _WORD_HYPHEN_DIGIT.finditer(spans.text):
        yield Token(match.start(), match.end(), Kind.GAP)


__all__ = [
    "fraction_rule",
    "hyphen_rule",
    "number_rule",
    "ordinal_rule",
    "pair_rule",
    "per_rule",
    "range_rule",
    "read_cardinal",
    "unit_rule",
]
