"""Digit strings read digit by digit: phone numbers, codes, labels (SSML ``telephone``,
``digits``).

Decided from shape (a mobile's 1[3-9] and 11 digits, an area code's leading 0, +86,
400/800, letters glued to three or more digits) and from cue words (验证码, 订单号,
尾号, 房间, 端口...: :mod:`.tables`). 1 is said 幺 (幺三八, 房间三零二 is 三零二,
八零八零端口); a number with a measure word or a unit after it stays a quantity
(手机2台 is 两台).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from streaming.text.context import (
    alternatives,
    code_cue_before,
    count_cue_before,
    dial_cue_before,
    measure_after,
    unit_after,
)
from streaming.text.names import NAMES
from streaming.text.readings import read_cardinal, read_digits, read_year
from streaming.text.spans import Spans
from streaming.text.tables import (
    CALL_MEASURES,
    CODE_CUES_AFTER,
    GENERATIONS,
    LABELS,
    MAGNITUDE_CUES,
    NAMED_DAYS,
    ROOM_WORDS,
    SERVICE_NUMBERS,
)
from streaming.text.tokens import RULE_SYMBOL, Token, word

RULE_PHONE = "digits.phone"
RULE_CODE = "digits.code"
RULE_LABEL = "digits.label"
RULE_MODEL = "digits.model"

_OPEN, _CLOSE = "(（", ")）"
_PHONE = re.compile(
    r"(?<![0-9+A-Za-z])(?<![0-9][ -])(?:"
    r"(?:(?:\+|00)86[ -]?)?1[3-9][0-9](?:[ -]?[0-9]{4}){2}"  # mobile, 3-4-4
    r"|(?:(?:\+|00)86[ -]?)?(?:[(（]0[0-9]{2,3}[)）]|0[0-9]{2,3})[ -]?[0-9]{3,4}[ -]?[0-9]{4}"  # land line
    r"(?:[ ]?(?:转|ext\.?|EXT\.?|Ext\.?)[ ]?[0-9]{1,5})?"  # and its extension
    r"|[48]00[ -]?[0-9]{3}[ -]?[0-9]{4}"  # 400 / 800 service lines
    r"|(?:[(（][0-9]{3}[)）] ?|[0-9]{3}-)[0-9]{3}-[0-9]{4}"  # 3-3-4: (800) 555-0199
    r"|\+[0-9]{1,3}[ -]?(?:[(（][0-9]{1,4}[)）][ -]?)?[0-9]{2,4}(?:[ -]?[0-9]{2,4}){1,3}"  # international
    r")(?![0-9])"
)


def read_code(code: str) -> str:
    """Digits one by one with 幺, letters spelled, "+" as 加, separators as a blank."""
    out: list[str] = []
    for ch in code:
        if "0" <= ch <= "9":
            out.append(read_digits(ch))
        elif ch == "+":
            out.append("加")
        elif ch == "转":
            out.append(" 转 ")
        elif ch.isascii() and ch.isalpha():
            if out and out[-1] and out[-1][-1].isascii() and out[-1][-1].isalpha():
                out.append(" ")
            out.append(ch)
        elif (ch in _CLOSE and out) or ch not in _OPEN:
            out.append(" ")
    return re.sub(r" {2,}", " ", "".join(out)).strip()


# A gate, a seat or a counter: a letter and a number of one or two digits, perhaps a
# range of them (登机口C12-C15 C十二到C十五, as B12登机口 is B十二).
_GATE_RANGE = re.compile(r"([A-Za-z])([0-9]{1,2})(?:-([A-Za-z])([0-9]{1,2}))?")


def _read_cued_code(code: str) -> str:
    """A code after its cue word: digit by digit, but a gate's number as a number."""
    gate = _GATE_RANGE.fullmatch(code)
    if gate is None:
        return read_code(code)
    said = gate[1].upper() + read_cardinal(gate[2])
    if gate[3]:
        said += "到" + gate[3].upper() + read_cardinal(gate[4])
    return said


# A bank card number in groups of four (6222 0212 3456 7890): digit by digit.
_CARD = re.compile(r"(?<![0-9A-Za-z])[0-9]{4}(?:[ -][0-9]{4}){3}(?:[ -][0-9]{1,4})?(?![0-9])")


def phone_rule(spans: Spans) -> Iterator[Token]:
    for match in _CARD.finditer(spans.text):
        yield word(match.start(), match.end(), read_code(match.group()), RULE_CODE)
    for match in _PHONE.finditer(spans.text):
        if _quantity_after(spans.text, match.end()):
            continue  # "400 000 0000元"? a quantity, however long
        yield word(match.start(), match.end(), read_code(match.group()), RULE_PHONE)


# After a cue: letters and digits, perhaps grouped by blanks or dashes ("SF 1234 5678").
# Blanks join digit groups ("SF 1234 5678"), single digits ("4 8 2 6 1 7") and letters
# to their digits ("SF 1234").
_CODE = re.compile(
    r"[A-Za-z0-9]+(?:(?:-|(?<=[0-9]) (?=[0-9]{3})|(?<=[0-9]) (?=[0-9](?![0-9]))"
    r"|(?<=[A-Za-z]) (?=[0-9]{3}))[A-Za-z0-9]+)*"
)
# A number masked in its middle ("138****5678", "4401******1234"): both ends digit by
# digit, the mask a pause.
_MASKED = re.compile(r"(?<![A-Za-z0-9])([0-9]+)([*＊]{2,}|[xX]{3,})([0-9]+)(?![A-Za-z0-9])")
_CODE_AFTER = re.compile(
    rf"(?<![0-9A-Za-z.])([0-9]{{3,}})[ \t]?(?:{alternatives(CODE_CUES_AFTER)})"
    # a room after its building, unit or floor: 12层1208号, 3楼301, 12栋1603, 8 层 806
    r"|(?:(?<=[层楼栋座])|(?<=单元)|(?<=[层楼栋座][ \t])|(?<=单元[ \t]))([0-9]{3,4})(?![0-9]|\.[0-9])"
)
# Building, unit and room with dashes, as addresses are written: 7-2-301 七 二 三零幺,
# 12-3-1502 十二 三 幺五零二.
_ADDRESS_TRIPLE = re.compile(
    r"(?<![0-9A-Za-z.\-])[0-9]{1,3}-[0-9]{1,2}-[0-9]{3,4}(?![0-9\-]|\.[0-9])"
)
# A stock code in brackets after the company's name: 贵州茅台（600519）, 腾讯控股(00700).
_STOCK_IN_BRACKETS = re.compile(r"(?<=[\u4e00-\u9fffA-Za-z])[ \t]?[(（]([0-9]{6}|0[0-9]{4})[)）]")
_NAMED_DAYS_SPACED = alternatives(list(NAMED_DAYS)).replace("双", "双[ \t]?")  # "双 11" too
_NAMED_DAY = re.compile(rf"(?<![0-9.,:/])(?:{_NAMED_DAYS_SPACED})(?![0-9%]|\.[0-9])")
_NAME = re.compile(rf"(?<![A-Za-z0-9])(?:{alternatives(list(NAMES))})(?![A-Za-z0-9+#])")
# "#A1234", "#3": the sign says "number"; a code read digit by digit, a short number 三号.
_NUMBER_SIGN = re.compile(r"(?<![A-Za-z0-9&#＃])[#＃]([A-Za-z]*[0-9][A-Za-z0-9-]*)")


def code_rule(spans: Spans) -> Iterator[Token]:
    """Codes after a cue word (验证码826491) or before one (302房间), and named days."""
    text = spans.text
    for match in _MASKED.finditer(text):
        said = read_digits(match[1]) + "，" + read_digits(match[3])
        yield word(match.start(), match.end(), said, RULE_CODE)
    for match in _STOCK.finditer(text):
        said = read_digits(match[1]) + "点" + " ".join(match[2])
        yield word(match.start(), match.end(), said, RULE_CODE)
    for match in _ADDRESS_TRIPLE.finditer(text):
        if not _quantity_after(text, match.end()):
            *building, room = match.group().split("-")
            said = " ".join([*(read_cardinal(b) for b in building), read_digits(room)])
            yield word(match.start(), match.end(), said, RULE_CODE)
    for match in _STOCK_IN_BRACKETS.finditer(text):
        yield word(match.start(1), match.end(1), read_digits(match[1]), RULE_CODE)
    for match in _HEX.finditer(text):
        yield word(match.start(), match.end(), "零X " + read_code(match.group()[2:]), RULE_CODE)
    for match in _NAMED_DAY.finditer(text):
        said = NAMED_DAYS[match.group().replace(" ", "").replace("\t", "")]
        yield word(match.start(), match.end(), said, RULE_LABEL)
    for match in _NAME.finditer(text):
        yield word(match.start(), match.end(), NAMES[match.group()], RULE_LABEL)
    for match in _NUMBER_SIGN.finditer(text):
        code = match[1]
        said = (
            read_cardinal(code) + ("" if text[match.end() : match.end() + 1] == "号" else "号")
            if code.isascii() and code.isdigit() and len(code) <= 2
            else read_code(code)
        )  # "#3" 三号, and "#3号" too
        yield word(match.start(), match.end(), said, RULE_CODE)
    for match in _CODE.finditer(text):
        start, end = match.start(), match.end()
        if start and text[start - 1].isascii() and text[start - 1].isalnum():
            continue
        code = match.group()
        behind = spans.lookbehind(start)
        if sum("0" <= ch <= "9" for ch in code) < 3 or not code_cue_before(*behind):
            continue
        if (
            code.isascii()
            and code.isdigit()
            and _quantity_after(text, end, dial_cue_before(*behind))
        ):
            continue  # 手机2台, 订单300个, 拨打了300次: a quantity
        if start and text[start - 1] in "#＃":
            start -= 1  # "#20240521": the sign says "number", the code says it
        yield word(start, end, _read_cued_code(code), RULE_CODE)
    for match in _CODE_AFTER.finditer(text):
        group = 1 if match[1] is not None else 2
        counted = measure_after(text, match.end())
        if group == 2 and (
            unit_after(text, match.end())
            or (counted and counted[1] and counted[0] not in ROOM_WORDS)
        ):
            continue  # 2楼200平: a quantity (1208号, 612床 name a room)
        said = read_code(match[group])
        yield word(match.start(group), match.end(group), said, RULE_CODE)


# A stock code after the company's name with no brackets (贵州茅台600519, 比亚迪 002594):
# six digits in the ranges the Shanghai and Shenzhen exchanges give (60x, 688, 000-003,
# 300, 301), not round (600000 alone is a count more often than a code).
_BARE_STOCK = re.compile(
    r"(?<=[\u4e00-\u9fff])[ \t]?((?:60[0-5]|68[89]|00[0-3]|30[01])(?!000)[0-9]{3})"
    r"(?![0-9]|\.[0-9])"
)


def stock_rule(spans: Spans) -> Iterator[Token]:
    """Stock codes after a name: 六零零五幺九 (a count cue or a measure word keeps a count)."""
    text = spans.text
    for match in _BARE_STOCK.finditer(text):
        if (
            _quantity_after(text, match.end())
            or count_cue_before(text, match.end())
            or _NOT_A_NAME.search(text, max(0, match.start() - 4), match.start())
        ):
            continue  # 涨了600519元, 销量600519: a quantity
        yield word(match.start(1), match.end(1), read_digits(match[1]), RULE_CODE)


# Service numbers by shape: 95xxx(x) (nationwide companies), 96xxx (local services), 12xxx
# (government hotlines); read as digits after a name (顺丰95338) or before a hotline
# word in the clause (95338是顺丰的电话), not after a count cue (用户数为95338).
_SERVICE_SHAPE = re.compile(
    r"(?<![0-9.,:A-Za-z¥$€£+\-])(95[0-9]{3,4}|96[0-9]{3}|12[0-9]{3})(?<!00)"
    r"(?![0-9,:%A-Za-z]|\.[0-9])"
)
# Any number of 3 to 6 digits before a hotline word, a few words between (12356心理援助热线).
_BEFORE_HOTLINE = re.compile(r"(?<![0-9.,:A-Za-z¥$€£+\-])([0-9]{3,6})(?![0-9,:%A-Za-z]|\.[0-9])")
_HOTLINE_AFTER = re.compile(
    r"[ \t]?[\u4e00-\u9fff]{0,8}?(?:热线|专线|服务电话|监督电话|客服电话|电话|查号台|客服号|服务号)"
)
_HOTLINE_IN_CLAUSE = re.compile(r"[^，。；！？,;!?\n]{0,12}?(?:热线|专线|电话|客服)")
# Words before a number that make it a value, not a name's number (数量是95338, 营收95610).
_NOT_A_NAME = re.compile(rf"(?:[是的了在和与或及到至约超第]|{alternatives(MAGNITUDE_CUES)})[ \t]?$")


def hotline_rule(spans: Spans) -> Iterator[Token]:
    """Numbers to call known by their shape or by the hotline word after them."""
    text = spans.text
    for match in _BEFORE_HOTLINE.finditer(text):
        if _HOTLINE_AFTER.match(text, match.end()) and not _quantity_after(text, match.end()):
            yield word(match.start(), match.end(), read_digits(match[1]), RULE_CODE)
    for match in _SERVICE_SHAPE.finditer(text):
        start, end = match.start(), match.end()
        if _quantity_after(text, end) or count_cue_before(text, end):
            continue
        k = start - (text[start - 1 : start] in (" ", "\t"))
        named = (
            k > 0
            and "\u4e00" <= text[k - 1] <= "\u9fff"
            and not _NOT_A_NAME.search(text, max(0, k - 4), k)
        )
        if named or _HOTLINE_IN_CLAUSE.match(text, end):
            yield word(start, end, read_digits(match[1]), RULE_CODE)


# Letters glued to three or more digits ("CA1234", "RTX4090", "x264", "4090Ti"), or a
# name in capitals, a blank, three to five digits ("RTX 4090", "GTX 1080 Ti").
# Also after a hyphen in a name (SHA-256, i9-13900K, MIL-STD-810), not in a range (100-200).
_GLUED = re.compile(
    r"(?<=[A-Za-z])[0-9]{3,}(?![0-9]|\.[0-9])|(?<![0-9.])[0-9]{3,}(?=[A-Za-z])"
    r"|(?:(?<=[A-Za-z]-)|(?<=[A-Za-z][0-9]-)|(?<=[A-Za-z][0-9][0-9]-))[0-9]{3,}(?![0-9]|\.[0-9])"
)
# A standard or a model after a name in capitals: "ISO 9001", "IEEE 802.11", "RTX 4090".
_SPACED = re.compile(
    r"(?<![A-Za-z])([A-Z]{2,}[A-Za-z]*) ([0-9]{3,5}(?:\.[0-9]+)*)(?![0-9]|\.[0-9])"
)
_NOT_MODELS = frozenset({"TOP", "NO", "VOL", "PAGE", "AD", "BC", "FY", "Q", "AND", "OR"})
# Camera sensitivity is a number (ISO 3200 三千二百); a standard (ISO 9001) is digits.
_ROUND_NUMBERS_AFTER = frozenset({"ISO"})
# Stock codes with their exchange (600519.SH, 00700.HK): digits, 点, the letters.
_STOCK = re.compile(r"(?<![0-9A-Za-z.])([0-9]{4,6})\.(SH|SZ|HK|BJ|SS|US|TW|KS|T|L|N|O)(?![A-Za-z])")
_HEX = re.compile(r"(?<![0-9A-Za-z])0[xX][0-9A-Fa-f]+(?![0-9A-Za-z])")
_YEAR_LIKE = re.compile(r"(?:19|20)[0-9][0-9]")
# A half-year release (Windows 11 23H2, 24H2): the year's digits, H, the half.
_HALF_YEAR = re.compile(r"(?<![0-9A-Za-z])([0-9]{2})H([12])(?![0-9A-Za-z])")
_RESOLUTION = re.compile(r"(?<![0-9A-Za-z])([0-9]{3,4})([pPiI])(?![A-Za-z0-9])")
# Letters that may follow a model number's digits though they are also units.
_MODEL_SUFFIXES = frozenset({"x", "X", "K", "G", "M", "B", "T", "k"})


def model_rule(spans: Spans) -> Iterator[Token]:
    """Model numbers and resolutions: 四零九零, 幺零八零P; a unit keeps a quantity (3000mAh)."""
    text = spans.text
    for match in _HALF_YEAR.finditer(text):
        said = read_year(match[1]) + "H" + read_year(match[2])
        yield word(match.start(), match.end(), said, RULE_MODEL)
    for match in _RESOLUTION.finditer(text):
        said = read_digits(match[1]) + match[2].upper()
        yield word(match.start(), match.end(), said, RULE_MODEL)
    for match in _SPACED.finditer(text):
        name, number = match[1], match[2]
        if name.upper() in _NOT_MODELS or _quantity_after(text, match.end()):
            continue
        if name.upper() in _ROUND_NUMBERS_AFTER and number.endswith("00"):
            continue
        said = "点".join(_model_digits(part) for part in number.split("."))
        yield word(match.start(2), match.end(2), said, RULE_MODEL)
    for match in _GLUED.finditer(text):
        unit = unit_after(text, match.end())
        if unit is not None and (unit not in _MODEL_SUFFIXES or len(match.group()) <= 3):
            continue  # "3000mAh", "128GB", "128K", "200M": quantities; "13700K" a model
        yield word(match.start(), match.end(), _model_digits(match.group()), RULE_MODEL)


def _quantity_after(text: str, end: int, dialled: bool = False) -> bool:
    """Whether a unit or a measure word makes the number before ``end`` a quantity;
    ``dialled``: it follows a cue of a number to dial, so only what counts or times a
    call does (拨打了3次; 拨打12320卫生热线 dials)."""
    if unit_after(text, end):
        return True
    measure = measure_after(text, end)
    if measure is None:
        return False
    return not dialled or measure[0] in CALL_MEASURES


def _model_digits(digits: str) -> str:
    return read_year(digits) if _YEAR_LIKE.fullmatch(digits) else read_digits(digits)


# Labels: 618, 985/211, 12306 and service numbers alone; generations (95后, 00后).
_LABEL = re.compile(r"(?<![0-9.,:A-Za-z¥$€£+\-])([0-9]{3,5})(?![0-9,:%A-Za-z]|\.[0-9])")
_GENERATION = re.compile(r"(?<![0-9.:月])([0-9]{2})(?=[ \t]?后)")
_EMERGENCY = frozenset(["110", "112", "114", "119", "120", "122"])
_EMERGENCY_CUES = re.compile(
    r"(?:拨打|致电|电话|热线|打|拨|call|报警|急救|火警|求助|查号)[^，。；！？,;!?\n]{0,8}$"
)
_EMERGENCY_AFTER = re.compile(r"(?:急救|报警|火警|求助|查号|救护车|指挥中心|交通事故)")


def label_rule(spans: Spans) -> Iterator[Token]:
    text = spans.text
    for match in _GENERATION.finditer(text):
        if match[1] in GENERATIONS and not measure_after(text, match.end()):
            yield word(match.start(), match.end(), read_digits(match[1], yao=False), RULE_LABEL)
    for match in _LABEL.finditer(text):
        number, end = match[1], match.end()
        if text[match.start() - 1 : match.start()] == "第":
            continue
        if _quantity_after(text, end, dial_cue_before(*spans.lookbehind(match.start()))):
            continue
        if number in _EMERGENCY:
            behind, at = spans.lookbehind(match.start())
            cued = _EMERGENCY_CUES.search(behind, max(0, at - 12), at)
            if not (cued or _EMERGENCY_AFTER.match(text, end)):
                continue
        elif number not in LABELS and number not in SERVICE_NUMBERS:
            continue
        said = LABELS.get(number) or read_digits(number)
        if text[end : end + 1] == "/" and text[end + 1 : end + 4] in LABELS:
            said += "、"  # "985/211"
        yield word(match.start(), end, said, RULE_LABEL)


# The keys of a phone's keypad in a phrase: "按 # 号键" 按井号键, "以*结束" 以星号结束; the
# sign's name holds its 号, so a 号 written after it is not said twice.
_KEY_NAMES = {"#": "井号", "＃": "井号", "*": "星号", "＊": "星号"}
_KEY = re.compile(r"(?<![#＃*＊A-Za-z0-9])([#＃*＊])(?:[ \t]?(号键|号|键))?(?![#＃*＊A-Za-z0-9])")
_KEY_CUE = re.compile(r"(?:按|按下|再按|以|输入|拨|点击|选择)[ \t]?$")


def key_rule(spans: Spans) -> Iterator[Token]:
    """# and * as keys: before 号, 键 or 号键, or after 按, 以, 输入..."""
    text = spans.text
    for match in _KEY.finditer(text):
        suffix = match[2] or ""
        if not suffix and _KEY_CUE.search(text, max(0, match.start() - 3), match.start()) is None:
            continue
        said = _KEY_NAMES[match[1]] + ("键" if suffix.endswith("键") else "")
        yield word(match.start(), match.end(), said, RULE_SYMBOL)
