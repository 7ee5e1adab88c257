"""The same digit string said the same way each time it comes back.

A cue word makes a number a code once (验证码是3307), a year once (2024年); the same
number written again without its cue (请输入3307, 2024也是龙年) is still that code, and a listener who heard 三三零七
must not hear 三千三百零七 next. The digit strings read digit by digit in a segment,
and in the segments of its stream before it, are remembered; a bare number later
(one no rule read as anything but a number: no measure word, no unit) that is the
same string is said as it was first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from streaming.text.codes import RULE_CODE, RULE_LABEL, RULE_MODEL, RULE_PHONE
from streaming.text.dates import RULE_YEAR
from streaming.text.quantities import RULE_NUMBER
from streaming.text.tokens import Token, word

#: A digit string remembered: (digits, said, rule).
Code = tuple[str, str, str]

_READ_AS_DIGITS = frozenset({RULE_CODE, RULE_PHONE, RULE_LABEL, RULE_MODEL, RULE_YEAR})
# Three digits or more: "12" is read the same either way.
_DIGITS = re.compile(r"[0-9]{3,}")


def codes_read(text: str, tokens: Iterable[Token]) -> tuple[Code, ...]:
    """The digit strings of ``text`` that ``tokens`` read digit by digit, in order."""
    return tuple(
        (text[t.start : t.end], t.text, t.rule)
        for t in tokens
        if t.rule in _READ_AS_DIGITS and _DIGITS.fullmatch(text, t.start, t.end)
    )


def said_again(text: str, claimed: dict[int, Token], known: Mapping[str, tuple[str, str]]) -> None:
    """Replace, in ``claimed``, each bare number of ``text`` that is a digit string in
    ``known`` (digits -> (said, rule)) by what it was said as."""
    for start, token in list(claimed.items()):
        if token.rule != RULE_NUMBER:
            continue
        reading = known.get(text[token.start : token.end])
        if reading is not None:
            claimed[start] = word(token.start, token.end, reading[0], reading[1])


def remembered(earlier: Iterable[Code], now: Iterable[Code]) -> dict[str, tuple[str, str]]:
    """digits -> (said, rule) from codes ``earlier`` in the stream and ``now`` (the
    segment's own win)."""
    return {digits: (said, rule) for digits, said, rule in (*earlier, *now)}
