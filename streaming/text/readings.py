"""How a number is said once it is known what it is: digits, counts, ordinals, decimals.

二 or 两 (吕叔湘《现代汉语八百词》"两"条): a count before a measure word takes 两 (两个,
两天, 两公里), and so does a 2 at the head of 百/千/万/亿 (两百, 两千, 两万, 两亿); a
number that names (an ordinal, a date, a floor, a digit read alone), a decimal and a
fraction take 二 (第二, 二月, 二楼, 二点五, 三分之二); inside a number it is always 二
(十二, 二十二, 一千二百).

Digit strings (phones, codes, rooms) say 1 as 幺, as Chinese does to keep it apart from
七; years say 一 (二零二一年).
"""

from __future__ import annotations

__all__ = [
    "read_cardinal",
    "read_decimal",
    "read_digits",
    "read_fraction",
    "read_number",
    "read_year",
]

_DIGITS = "零一二三四五六七八九"
_YAO = str.maketrans("0123456789", "零幺二三四五六七八九")
_PLAIN = str.maketrans("0123456789", _DIGITS)
_PLACES = ("", "十", "百", "千")
_GROUPS = ("", "万", "亿", "万亿")


def read_digits(digits: str, *, yao: bool = True) -> str:
    """Digit by digit: "110" -> "幺幺零" (``yao=False``: "一一零"); other characters kept."""
    return digits.translate(_YAO if yao else _PLAIN)


def read_year(digits: str) -> str:
    """A year, digit by digit with 一: "2021" -> "二零二一"."""
    return digits.translate(_PLAIN)


def _read_group(group: str, head: bool) -> str:
    """One group of up to four digits ("0305" -> "三百零五"); ``head``: the number's first."""
    out: list[str] = []
    zero = False
    width = len(group)
    for k, ch in enumerate(group):
        place = width - 1 - k
        if ch == "0":
            zero = bool(out)
            continue
        if zero:
            out.append("零")
            zero = False
        if not (head and not out and ch == "1" and place == 1):  # "十二", not "一十二"
            out.append(_DIGITS[int(ch)])
        out.append(_PLACES[place])
    return "".join(out)


def read_cardinal(digits: str, *, count: bool = False) -> str:
    """An integer said as a number: "100080" -> "十万零八十", "2000" -> "两千".

    ``count``: the number counts something (it stands before a measure word), so 2
    alone is 两; a 2 at the head of 百/千/万/亿 is 两 either way.
    """
    digits = digits.lstrip("0")
    if not digits:
        return "零"
    if len(digits) > 16:
        return read_digits(digits, yao=False)
    groups: list[str] = []
    while digits:
        groups.insert(0, digits[-4:])
        digits = digits[:-4]
    out: list[str] = []
    zero = False
    for k, group in enumerate(groups):
        unit = _GROUPS[len(groups) - 1 - k]
        if int(group) == 0:
            zero = bool(out)
            continue
        if out and (zero or group[0] == "0"):
            out.append("零")
        out.append(_read_group(group.lstrip("0") if not out else group, head=not out) + unit)
        zero = False
    said = "".join(out)
    if said == "二":
        return "两" if count else "二"
    if said.startswith("二") and len(said) > 1 and said[1] in "百千万亿":
        return "两" + said[1:]
    return said


def read_decimal(number: str) -> str:
    """A decimal: the integer part as a number, the rest digit by digit ("2.05" -> "二点零五")."""
    whole, _, fraction = number.partition(".")
    said = read_cardinal(whole or "0")
    if said == "两":
        said = "二"
    return said + "点" + read_digits(fraction, yao=False)


def read_number(number: str, *, count: bool = False) -> str:
    """An unsigned integer or decimal (``count`` as :func:`read_cardinal`)."""
    if "." in number:
        return read_decimal(number)
    return read_cardinal(number, count=count)


def read_fraction(numerator: str, denominator: str) -> str:
    """``numerator/denominator`` -> "三分之二" (二, never 两: a fraction counts nothing)."""
    return read_number(denominator) + "分之" + read_number(numerator)
