"""What stands around a number: the measure word or unit after it, a cue word before it.

A number is read by what it is (SSML ``say-as``: telephone, digits, cardinal, ordinal,
date, time), and Chinese text says what it is around it: the measure word or unit
after it (两个, 二号, 两公里), a cue word before it (验证码, 尾号, 拨打, 第, 周), or its
shape. These helpers look; the rules in :mod:`.codes` and :mod:`.quantities` decide.
"""

from __future__ import annotations

import re

from streaming.text.tables import (
    CLAUSE_COUNT_CUES,
    CODE_CUES_BEFORE,
    COUNT_CUES,
    COUNT_MEASURES,
    DIAL_CUES,
    NOT_MEASURES,
    ORDINAL_MEASURES,
    SWITCH_MEASURES,
)
from streaming.text.units import UNITS


def alternatives(words: tuple[str, ...] | list[str]) -> str:
    """A regex alternation of ``words``, longest first."""
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


_MEASURE = re.compile(
    rf"[ \t]?(?:多|余|来|几)?(?!{alternatives(NOT_MEASURES)})"
    rf"(?P<m>{alternatives([*ORDINAL_MEASURES, *COUNT_MEASURES])})"
)
_ORDINAL = frozenset(ORDINAL_MEASURES)
_COUNT_CUE = re.compile(rf"(?:{alternatives(COUNT_CUES)})[ \t]?$")
_UNIT = re.compile(rf"[ \t]?(?P<u>{alternatives(list(UNITS))})(?![A-Za-z0-9²³])")
_CLAUSE_COUNT_CUE = re.compile(
    rf"(?:{alternatives(CLAUSE_COUNT_CUES)})[^，。；！？,;!?\n0-9]{{0,6}}$"
)
_CUE_JOINERS = r"[\s是为：:#＃]{0,3}$"
_CODE_CUE = re.compile(rf"(?:{alternatives(CODE_CUES_BEFORE)}){_CUE_JOINERS}")
_DIAL_CUE = re.compile(rf"(?:{alternatives(DIAL_CUES)}){_CUE_JOINERS}")


def measure_after(text: str, end: int) -> tuple[str, bool] | None:
    """The measure word after ``text[:end]`` and whether it counts (True: 两个) or
    names (False: 二号); None when no measure word follows."""
    match = _MEASURE.match(text, end)
    if match is None:
        return None
    measure = match["m"]
    if measure in _ORDINAL:
        counts = measure in SWITCH_MEASURES and count_cue_before(text, end)
        return measure, counts
    return measure, True


def count_cue_before(text: str, end: int) -> bool:
    """Whether a count cue (有, 共, 了, 前...) stands before the number ending at ``end``,
    or 每 earlier in its clause (每周更新2集)."""
    start = end
    while start > 0 and ("0" <= text[start - 1] <= "9" or text[start - 1] in ".-~"):
        start -= 1
    if _COUNT_CUE.search(text, max(0, start - 4), start) is not None:
        return True
    return _CLAUSE_COUNT_CUE.search(text, max(0, start - 8), start) is not None


def unit_after(text: str, end: int) -> str | None:
    """The Latin unit written right after ``text[:end]`` ("mAh", "km/h"), if any."""
    match = _UNIT.match(text, end)
    return match["u"] if match else None


def code_cue_before(text: str, start: int) -> bool:
    """Whether a code cue (验证码, 尾号, 订单号, 拨打...) stands right before ``start``."""
    return _CODE_CUE.search(text, max(0, start - 12), start) is not None


def dial_cue_before(text: str, start: int) -> bool:
    """Whether a cue of a number to dial (拨打, 致电, 热线, 电话...) stands right before ``start``."""
    return _DIAL_CUE.search(text, max(0, start - 12), start) is not None


def latin_before(text: str, start: int) -> bool:
    """Whether a Latin word (and perhaps a blank) stands right before ``start``."""
    k = start - 1
    if k >= 0 and text[k] in " \t":
        k -= 1
    return k >= 0 and text[k].isascii() and text[k].isalpha()
