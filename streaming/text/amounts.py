"""Money and percentages as assistants write them, read as Chinese says them.

WeTextProcessing 1.2.0 reads a currency sign only directly before a plain number:
``¥12`` is 十二元, but ``¥199元`` becomes 一元九十九元 (it reads ``¥1`` then ``99元``),
``¥1,299`` 一元,两百九十九, ``¥10-20`` 十元负二十, ``$1.2万`` keeps its ``$``, ``2美元`` is
二美元, ``+5%`` 百分之正五, ``5%-10%`` 百分之五百分之负十 and ``5‰`` is left as it is.
:func:`find_amounts` finds each such span whole, so the library never sees it:

- a currency before or after the amount: a sign (``$ ¥ ￥ € £ HK$ US$``...), an ISO
  code (``USD 5``, ``5 CNY``) or a word (``5美元``, ``12元``); a sign and a word
  together are said once, by the word (``¥199元`` 一百九十九元, ``¥1000日元`` 一千日元);
- ranges (``¥10-20``, ``$5–$10``, ``10~20元``): 十到二十元, the currency said once;
- magnitudes, Chinese (``$1.2万``, ``¥3.5亿``) and English (``$1.2M``, ``$5B``, ``$3K``);
- thousands separators (``¥1,299``), zero cents (``¥199.00`` 一百九十九元), negatives
  (``-¥5``, ``¥-5``: 负五元), a rate (``$10/月``: 十美元每月);
- percentages with a sign (``+5%`` 正百分之五, ``-3.2%``, ``±2%`` 正负百分之二), per
  mille and per myriad (``5‰`` 千分之五, ``5‱``) and ranges (``5%-10%``, ``5-10%``);
- a Latin magnitude with no currency, as salaries and budgets are written (``月薪3k``
  三千, ``15-20k`` 一万五千到两万, ``5w`` 五万, ``20k+`` 两万多), after a cue word.

The numbers themselves are read by the caller's ``read_number``
(``streaming.text.numbers.read_count``), given unsigned decimals with at most a
Chinese magnitude (``1299``, ``99.5``, ``120万``) to read as counts (2 is 两).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal

from streaming.text.tables import MAGNITUDE_CUES

__all__ = ["Amount", "NumberReader", "find_amounts"]

#: Reads an unsigned decimal, perhaps with a Chinese magnitude, as a count (as before a
#: measure word: "2" -> "两", "1299" -> "一千二百九十九", "1.2万" -> "一点二万").
NumberReader = Callable[[str], str]


@dataclass(frozen=True)
class Amount:
    """A span ``[start, end)`` of the text holding money or a percentage, and its reading."""

    start: int
    end: int
    said: str


# What each way of writing a currency is said as.
# fmt: off
_SIGNS = {
    "$": "美元", "＄": "美元", "US$": "美元", "¥": "元", "￥": "元", "CN¥": "元",
    "€": "欧元", "£": "英镑", "￡": "英镑", "HK$": "港元", "NT$": "新台币",
    "S$": "新加坡元", "A$": "澳元", "C$": "加元", "₩": "韩元", "₹": "卢比", "₽": "卢布",
    "₿": "比特币",
}
_CODES = {
    "USD": "美元", "CNY": "元", "RMB": "元", "EUR": "欧元", "GBP": "英镑", "JPY": "日元",
    "HKD": "港元", "TWD": "新台币", "NTD": "新台币", "SGD": "新加坡元", "AUD": "澳元",
    "CAD": "加元", "KRW": "韩元", "INR": "卢比", "RUB": "卢布", "CHF": "瑞士法郎",
    "BTC": "比特币",
}
# Currency words written after an amount; said as written.
_WORDS = (
    "新加坡元", "瑞士法郎", "新台币", "人民币", "比特币", "块钱", "美元", "美金", "欧元",
    "英镑", "港元", "港币", "日元", "韩元", "澳元", "加元", "台币", "卢比", "卢布", "法郎",
    "元", "块", "圆",
)
# fmt: on
# Signs written after the amount ("5€", "12¥"): the one-character signs.
_SUFFIX_SIGNS = {sign: word for sign, word in _SIGNS.items() if len(sign) == 1}
_PERCENT_WORDS = {"%": "百分之", "％": "百分之", "‰": "千分之", "‱": "万分之"}
_SIGN_WORDS = {"-": "负", "−": "负", "－": "负", "+": "正", "＋": "正", "±": "正负"}
# An English magnitude as a factor and the Chinese magnitude it is said with.
_ENGLISH_MAGNITUDES = {
    "k": (Decimal(1000), ""),
    "m": (Decimal(100), "万"),
    "mn": (Decimal(100), "万"),
    "b": (Decimal(10), "亿"),
    "bn": (Decimal(10), "亿"),
    "t": (Decimal(1), "万亿"),
    "tn": (Decimal(1), "万亿"),
}


def _alternatives(words: Iterable[str]) -> str:
    """A regex alternation of ``words``, longest first ("US$" before "$")."""
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


_D = "[0-9０-９]"
# "1,299.5" (groups of exactly three) or "1299.5"; full-width digits and point too.
_NUMBER = rf"{_D}{{1,3}}(?:,{_D}{{3}})+(?!{_D})(?:[.．]{_D}+)?|{_D}+(?:[.．]{_D}+)?"
_CHINESE_MAGNITUDE = "万亿|[十百千]?[万亿]|千"
_ENGLISH_MAGNITUDE = "[Kk]|[Mm]n?|[Bb]n|B|[Tt]n|T"
# A sign of its own: not a minus or plus between two numbers ("10-5").
_SIGN = r"(?<![0-9０-９A-Za-z%％‰‱.)）\]])[-−－+＋±]"
_SEPARATOR = r"[ \t]?(?:[-–—~～〜]|到|至)[ \t]?"
_PREFIX = rf"(?<![A-Za-z])(?:{_alternatives(_SIGNS)}|(?:{_alternatives(_CODES)})(?![A-Za-z]))"
_SUFFIX = (
    rf"[ \t]?(?:{_alternatives(_WORDS)})|[ \t]?(?:{_alternatives(_SUFFIX_SIGNS)})"
    rf"|[ \t]?(?:{_alternatives(_CODES)})(?![A-Za-z])"
)
# "/月", "/kg", "/1K tokens": a rate, said 每 (per).
_PER = r"/(?:(?P<per_num>[0-9]+)(?P<per_mag>[Kk]|M)?)?(?=[ \t]?[\u4e00-\u9fffA-Za-z])"


def _amount(side: str) -> str:
    return (
        rf"(?P<{side}_num>{_NUMBER})"
        rf"(?:(?P<{side}_cn>{_CHINESE_MAGNITUDE})|(?P<{side}_en>{_ENGLISH_MAGNITUDE})(?![A-Za-z]))?"
    )


# "¥199元", "-$1.2万", "¥-5", "$5–$10", "USD 5", "¥10~20元", "$10/月".
_PREFIXED = re.compile(
    rf"(?P<neg>{_SIGN})?(?P<cur>{_PREFIX})[ \t]?(?P<neg2>[-−－])?{_amount('lo')}"
    rf"(?:{_SEPARATOR}(?P<hi_neg>[-−－+＋])?(?:{_PREFIX})?[ \t]?{_amount('hi')})?"
    rf"(?:[ \t]?(?P<unit>{_SUFFIX}))?(?P<per>{_PER})?"
)
# "5美元", "10元-20元", "10~20元", "5 USD", "12¥", "-5美元", "1.5元/斤".
_SUFFIXED = re.compile(
    rf"(?P<neg>{_SIGN})?(?<![0-9０-９.．,A-Za-z]){_amount('lo')}(?P<lo_unit>{_SUFFIX})?"
    rf"(?:{_SEPARATOR}(?P<hi_neg>[-−－+＋])?{_amount('hi')})?"
    rf"(?P<unit>{_SUFFIX})(?P<per>{_PER})?"
)
# "+5%", "-3.2%", "±2%", "5‰", "5%-10%", "5-10%", "-5%~+5%".
_PERCENT = re.compile(
    rf"(?P<neg>{_SIGN})?(?<![0-9０-９.．,])(?P<lo_num>{_NUMBER})(?P<lo_unit>[%％‰‱])?"
    rf"(?:{_SEPARATOR}(?P<hi_neg>[-−－+＋])?(?P<hi_num>{_NUMBER}))?"
    rf"[ \t]?(?P<unit>[%％‰‱])"
)
_FULLWIDTH_DIGITS = str.maketrans("０１２３４５６７８９．", "0123456789.")


def _plain(number: str) -> str:
    """ASCII digits, no thousands separators: "１,２９９" -> "1299"."""
    return number.translate(_FULLWIDTH_DIGITS).replace(",", "")


def _money_number(number: str, english: str | None) -> str:
    """An amount as the reader takes it: zero cents dropped, "1.2M" as "120万"."""
    plain = _plain(number)
    if "." in plain:
        plain = plain.rstrip("0").rstrip(".")  # "199.00" is said 一百九十九, not ...点零零
    if english is None:
        return plain
    factor, magnitude = _ENGLISH_MAGNITUDES[english.lower()]
    return format((Decimal(plain) * factor).normalize(), "f") + magnitude


def _read_money(match: re.Match[str], side: str, read_number: NumberReader) -> str:
    number = _money_number(match[f"{side}_num"], match[f"{side}_en"])
    return read_number(number + (match[f"{side}_cn"] or ""))


def _currency_word(written: str) -> str:
    written = written.strip(" \t")
    return _SIGNS.get(written) or _CODES.get(written) or written


def _per(match: re.Match[str], read_number: NumberReader) -> str:
    if match["per"] is None:
        return ""
    count = match["per_num"]
    if count is None:
        return "每"
    return "每" + read_number(_money_number(count, match["per_mag"]))


def _said_money(match: re.Match[str], read_number: NumberReader) -> str:
    unit = match["unit"]
    currency = _currency_word(unit) if unit else _currency_word(match.groupdict().get("cur") or "")
    if match.groupdict().get("lo_unit") and match["hi_num"] is None:
        currency = _currency_word(match["lo_unit"]) + currency  # "100元人民币" 一百元人民币
    sign = match["neg"] or match.groupdict().get("neg2") or ""
    said = _SIGN_WORDS.get(sign, "") + _read_money(match, "lo", read_number)
    if match["hi_num"] is not None:
        high = _read_money(match, "hi", read_number)
        said += "到" + _SIGN_WORDS.get(match["hi_neg"] or "", "") + high
    return said + currency + _per(match, read_number)


def _read_fraction(number: str, read_number: NumberReader) -> str:
    said = read_number(_plain(number))
    return "二" if said == "两" else said  # 百分之二: a count's 两 is no count here


def _said_percent(match: re.Match[str], read_number: NumberReader) -> str:
    unit = match["unit"]
    said = (
        _SIGN_WORDS.get(match["neg"] or "", "")
        + _PERCENT_WORDS[match["lo_unit"] or unit]
        + _read_fraction(match["lo_num"], read_number)
    )
    if match["hi_num"] is not None:
        said += (
            "到"
            + _SIGN_WORDS.get(match["hi_neg"] or "", "")
            + _PERCENT_WORDS[unit]
            + _read_fraction(match["hi_num"], read_number)
        )
    return said


# Amounts written with a Latin magnitude and no currency, as in salaries and budgets
# (月薪3k, 15-20k, 5w, 1.5w+): money, or a count, when a cue says so (薪, 预算, 粉丝...)
# or a rate follows; a lowercase "w" (万) needs no cue. "3k" is 三千, "20k" 两万.
_LATIN_MAGNITUDES = {
    "k": Decimal(1000),
    "K": Decimal(1000),
    "w": Decimal(10000),
    "W": Decimal(10000),
}
_MAGNITUDE_AMOUNT = re.compile(
    rf"(?<![0-9A-Za-z.])(?P<lo>{_NUMBER})(?P<lo_mag>[kKwW])?"
    rf"(?:{_SEPARATOR}(?P<hi>{_NUMBER}))?(?P<mag>[kKwW])(?P<more>\+)?(?![A-Za-z0-9])"
)
_MAGNITUDE_CUE = re.compile(rf"(?:{_alternatives(MAGNITUDE_CUES)})[^，。；！？,;!?\n]{{0,8}}$")
_RATE_AFTER = re.compile(
    r"[ \t]?(?:/[月年天]|每[月年天]|一个月|起|左右|以上|以内|元|块|的薪资|的月薪|的年薪|粉丝|播放)"
)


def _magnitude_cued(text: str, match: re.Match[str], before: str) -> bool:
    if match["mag"] == "w" and not (match["lo_mag"] or "w").isupper():
        return True
    behind, at = before + text, match.start() + len(before)
    cue = _MAGNITUDE_CUE.search(behind, max(0, at - 14), at)
    return cue is not None or _RATE_AFTER.match(text, match.end()) is not None


def _said_magnitude(match: re.Match[str], read_number: NumberReader) -> str:
    def value(number: str, magnitude: str) -> str:
        total = Decimal(_plain(number)) * _LATIN_MAGNITUDES[magnitude]
        return read_number(format(total.normalize(), "f"))

    said = value(match["lo"], match["lo_mag"] or match["mag"])
    if match["hi"] is not None:
        said += "到" + value(match["hi"], match["mag"])
    return said + ("多" if match["more"] else "")


def find_amounts(text: str, read_number: NumberReader, before: str = "") -> Iterator[Amount]:
    """Money and percentages in ``text``, in the order of the rules above (may overlap).

    A caller keeps the first of overlapping spans: a sign before the amount is tried
    first (``¥10-20元`` whole), then a currency after it, then percentages. ``before``
    is the text before ``text`` (the previous segment's end), where a cue may stand.
    """
    for match in _PREFIXED.finditer(text):
        yield Amount(match.start(), match.end(), _said_money(match, read_number))
    for match in _SUFFIXED.finditer(text):
        yield Amount(match.start(), match.end(), _said_money(match, read_number))
    for match in _PERCENT.finditer(text):
        yield Amount(match.start(), match.end(), _said_percent(match, read_number))
    for match in _MAGNITUDE_AMOUNT.finditer(text):
        if _magnitude_cued(text, match, before):
            yield Amount(match.start(), match.end(), _said_magnitude(match, read_number))
