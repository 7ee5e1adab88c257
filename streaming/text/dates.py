"""Years, dates, times and scores (SSML ``date``, ``time``; ratios).

- Years digit by digit with 一: 2024年 二零二四年, 2023-2024赛季 二零二三到二零二四赛季,
  2024-10-01 二零二四年十月一日; 24年3月 二四年三月.
- Times: 2:30 两点三十分, 10:00 十点, 3:05pm 下午三点零五分, 2点半 两点半 (o'clock
  counts: 两点, but 十二点).
- Scores and ratios: 3:2 after a cue (比分, 以, 获胜...) or when it cannot be a time
  (1:1000, 16:9): 三比二, 一比一千; 2 is 二 (二比一).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from streaming.text.context import alternatives, code_cue_before, measure_after, unit_after
from streaming.text.readings import read_cardinal, read_number, read_year
from streaming.text.spans import Spans
from streaming.text.tables import MATCH_CUES, NUMBERED_NOUNS, SCORE_AFTER, SCORE_CUES
from streaming.text.tokens import Token, word

RULE_YEAR = "date.year"
RULE_DATE = "date"
RULE_TIME = "time"
RULE_SCORE = "ratio"

_YEAR_AFTER = r"[ \t]?(?:年|款|财年|学年|赛季|届|级|版(?!本)|Q[1-4]|H[12])"
_YEAR = re.compile(rf"(?<![0-9.])((?:1[0-9]|20)[0-9][0-9])(?={_YEAR_AFTER})")
_YEAR_RANGE = re.compile(
    rf"(?<![0-9.])((?:1[0-9]|20)[0-9][0-9])[ \t]?(?:[-–—~～〜至到]|/)[ \t]?((?:1[0-9]|20)?[0-9][0-9])(?={_YEAR_AFTER})"
)
_SHORT_YEAR = re.compile(r"(?<![0-9.])([0-9]{2})(?=[ \t]?年[ \t]?[0-9]{1,2}[ \t]?月)")
_ISO_DATE = re.compile(
    r"(?<![0-9.\-/])((?:1[0-9]|20)[0-9][0-9])([-/.])(0?[1-9]|1[0-2])\2(0?[1-9]|[12][0-9]|3[01])(?![0-9\-/]|\.[0-9])"
    r"(?:[ \t]?[日号])?"
)
# A range of dates written with dots, slashes or dashes (2024.01.01-2024.12.31,
# 2024/3/1~3/5): 到 between them, the second year said only if written.
_ISO_DATE_RANGE = re.compile(
    r"(?<![0-9.\-/])((?:1[0-9]|20)[0-9][0-9])([-/.])(0?[1-9]|1[0-2])\2(0?[1-9]|[12][0-9]|3[01])"
    r"[ \t]?(?P<to>[-–—~～〜至到])[ \t]?"
    r"(?:((?:1[0-9]|20)[0-9][0-9])\2)?(0?[1-9]|1[0-2])\2(0?[1-9]|[12][0-9]|3[01])"
    r"(?![0-9\-/]|\.[0-9])"
)
# A month and a day with a dash, zero-padded or before a time (03-15, 3-15 14:22), as
# logs and bank messages write them: a date, not a range.
_MONTH_DASH_DAY = re.compile(
    r"(?<![0-9.\-/])(0[1-9]|1[0-2]|[1-9])-(0[1-9]|[12][0-9]|3[01]|[1-9])(?![0-9\-/]|\.[0-9])"
    r"(?=(?P<time>[ \t]+[0-2]?[0-9][:：][0-5][0-9])?)"
)
_YEAR_MONTH = re.compile(
    r"(?<![0-9.\-/])((?:19|20)[0-9][0-9])[-/.](0?[1-9]|1[0-2])(?![0-9\-/]|\.[0-9])"
)
_MONTH_DAY = re.compile(
    r"(?<![0-9.])(0?[1-9]|1[0-2])[ \t]?月[ \t]?(0?[1-9]|[12][0-9]|3[01])(?=[ \t]?[日号])"
)
_SLASH_DATE = re.compile(r"(?<![0-9/.:])(1[0-2])/([1-9]|[12][0-9]|3[01])(?![0-9/.:])")


def _month_day(month: str, day: str) -> str:
    return read_cardinal(month) + "月" + read_cardinal(day) + "日"


# The day or the part of it a range's end is in: "22:00-次日 07:00", "早 8:00-晚 10:00".
_DAY_WORD = (
    r"(?:次日|翌日|隔日|次晨|第二天|明天|明日|今天|今日|当天|当日)?"
    r"(?:凌晨|早上|早晨|上午|中午|下午|傍晚|晚上|夜间|夜里|半夜|早|晚)?"
)
# A dash from a date or a time to the next ("5月1日-5月5日", "9点-11点", "晚8点-次日6点"):
# 到, not 负. What follows must be a date or a time too: "今天-12°C" is 负.
_DATE_DASH = re.compile(
    rf"(?<=[日号月年点分秒天周])[ \t]?[-–—~～〜][ \t]?"
    rf"(?={_DAY_WORD}[ \t]?[0-9]{{1,4}}[ \t]?(?:[年月日号点时分秒天周:：]|/[0-9]))"
)
# Dates written with slashes or dots and the year last (15/03/2024, 03/15/2025,
# 15.03.2024): the day first when the first number cannot be a month, the month first
# when the second cannot be; when both can, slashes are read month first (as US
# software writes them) and dots day first (as Europe does). Dashes are not dates in
# that order (取件码8-3-2051 is a code).
_DAY_MONTH_YEAR = re.compile(
    r"(?<![0-9/.\-:])([0-9]{1,2})([/.])([0-9]{1,2})\2((?:19|20)[0-9]{2})(?![0-9/\-]|\.[0-9])"
)
# A month and a day with a slash (3/15, 6/1) is a date, not a fraction, when a date
# word stands before or after it, or another such date is its range's other end
# (3/15-3/20, forward: 1/3-1/2 are fractions); a month of 10 to 12 always is
# (_SLASH_DATE).
_MONTH_SLASH_DAY = r"(?:0?[1-9]|1[0-2])/(?:0?[1-9]|[12][0-9]|3[01])"
_SLASH_DATE_RANGE = re.compile(
    rf"(?<![0-9/.:])({_MONTH_SLASH_DAY})[ \t]?([-–—~～〜至到])[ \t]?({_MONTH_SLASH_DAY})(?![0-9/.:%])"
)
_CUED_SLASH_DATE = re.compile(rf"(?<![0-9/.:])({_MONTH_SLASH_DAY})(?![0-9/.:%])")
_DATE_WORD_AFTER = re.compile(
    r"[ \t]?(?:[(（]?(?:周|星期|礼拜)[一二三四五六日天]|前|之前|以前|当天|当日|那天|起|开始|截止|到期|"
    r"发货|上线|发布|开售|开抢|生效|零点|凌晨|上午|中午|下午|晚上|[0-9]{1,2}[:：][0-9]{2})"
)
_DATE_WORD_BEFORE = re.compile(
    r"(?:截止|截至|日期|时间|有效期至|有效期|(?<![大小等低高少多过对属处位关由基鉴])于|定于|预计"
    r"|生日|截止到|截止至|还款日|到期日)"
    r"[ \t：:是为]{0,2}$"
)


def date_rule(spans: Spans) -> Iterator[Token]:
    text = spans.text
    for match in _DATE_DASH.finditer(text):
        yield word(match.start(), match.end(), "到", RULE_DATE)
    for match in _ISO_DATE_RANGE.finditer(text):
        to = match["to"] if match["to"] in "至到" else "到"
        said = read_year(match[1]) + "年" + _month_day(match[3], match[4]) + to
        if match[6]:
            said += read_year(match[6]) + "年"
        yield word(match.start(), match.end(), said + _month_day(match[7], match[8]), RULE_DATE)
    for match in _MONTH_DASH_DAY.finditer(text):
        if (
            text[match.start() - 1 : match.start()] == "第"
            or measure_after(text, match.end())
            or code_cue_before(*spans.lookbehind(match.start()))
        ):
            continue  # 第01-05集, 型号01-05: numbers of things, codes
        if match[1].startswith("0") or match["time"]:
            yield word(match.start(), match.end(), _month_day(match[1], match[2]), RULE_DATE)
    for match in _ISO_DATE.finditer(text):
        said = read_year(match[1]) + "年" + _month_day(match[3], match[4])
        yield word(match.start(), match.end(), said, RULE_DATE)
    for match in _YEAR_MONTH.finditer(text):
        said = read_year(match[1]) + "年" + read_cardinal(match[2]) + "月"
        yield word(match.start(), match.end(), said, RULE_DATE)
    for match in _YEAR_RANGE.finditer(text):
        high = match[2] if len(match[2]) == 4 else match[1][:2] + match[2]
        said = read_year(match[1]) + "到" + read_year(high)
        yield word(match.start(), match.end(), said, RULE_YEAR)
    for pattern in (_YEAR, _SHORT_YEAR):
        for match in pattern.finditer(text):
            yield word(match.start(), match.end(), read_year(match[1]), RULE_YEAR)
    for match in _MONTH_DAY.finditer(text):
        said = read_cardinal(match[1]) + "月" + read_cardinal(match[2])
        yield word(match.start(), match.end(), said, RULE_DATE)
    for match in _SLASH_DATE.finditer(text):
        yield word(match.start(), match.end(), _month_day(match[1], match[2]), RULE_DATE)
    yield from _slash_dates(spans)


def _slash_month_day(written: str) -> str:
    month, day = written.split("/")
    return _month_day(month, day)


def _slash_dates(spans: Spans) -> Iterator[Token]:
    """Dates with the year last (15/03/2024), and a month and a day with a slash where
    a date word or a range says it is one (3/15前, 3/15-3/20)."""
    text = spans.text
    if "/" not in text and "." not in text:
        return
    for match in _DAY_MONTH_YEAR.finditer(text):
        first, second = int(match[1]), int(match[3])
        day_first = first > 12 or (second <= 12 and match[2] == ".")
        day, month = (first, second) if day_first else (second, first)
        if 1 <= month <= 12 and 1 <= day <= 31:
            said = read_year(match[4]) + "年" + _month_day(str(month), str(day))
            yield word(match.start(), match.end(), said, RULE_DATE)
    for match in _SLASH_DATE_RANGE.finditer(text):
        low, high = (tuple(int(n) for n in m.split("/")) for m in (match[1], match[3]))
        if high <= low:
            continue  # 1/3-1/2: fractions (a range of dates goes forward)
        said = _slash_month_day(match[1]) + "到" + _slash_month_day(match[3])
        yield word(match.start(), match.end(), said, RULE_DATE)
    for match in _CUED_SLASH_DATE.finditer(text):
        behind, at = spans.lookbehind(match.start())
        if _DATE_WORD_AFTER.match(text, match.end()) or _DATE_WORD_BEFORE.search(
            behind, max(0, at - 8), at
        ):
            yield word(match.start(), match.end(), _slash_month_day(match[1]), RULE_DATE)


_CLOCK = r"([01]?[0-9]|2[0-4])[ \t]?[:：][ \t]?([0-5][0-9])(?:[:：]([0-5][0-9]))?"
_MERIDIEM = r"(?:[ \t]?(am|pm|AM|PM|a\.m\.|p\.m\.))?"
_TIME = re.compile(rf"(?<![0-9:.])(?:{_CLOCK}{_MERIDIEM})(?![0-9:])")
_TIME_RANGE = re.compile(
    rf"(?<![0-9:.]){_CLOCK}{_MERIDIEM}[ \t]?[-–—~～〜至到][ \t]?(?P<day>{_DAY_WORD})[ \t]?"
    rf"{_CLOCK}{_MERIDIEM}(?![0-9:])"
)
_BARE_MERIDIEM = re.compile(r"(?<![0-9:.])(1[0-2]|0?[1-9])[ \t]?(am|pm|AM|PM)(?![A-Za-z])")
# Between two such times a dash is 到 (10am-6pm).
_MERIDIEM_DASH = re.compile(
    r"(?<=[aApP][mM])[ \t]?[-–—~～〜][ \t]?(?=(?:1[0-2]|0?[1-9])[ \t]?[aApP][mM])"
)
_DIAN = re.compile(
    r"(?<![0-9.第])([01]?[0-9]|2[0-4])[ \t]?点(?:[ \t]?([0-9]{1,2})[ \t]?(分)?|(半|整|钟|一刻|三刻))?(?![0-9])"
)
_DURATION = re.compile(
    r"(?<![0-9.])([0-9]+)[ \t]?(?:h|hr|小时)[ \t]?([0-9]+)[ \t]?(min|m|分钟?)"
    r"(?:[ \t]?([0-9]+)[ \t]?(?:s|秒))?(?![A-Za-z])"
)
# A length of time written as a clock after a word that says so (视频时长1:23:45,
# 倒计时00:59:59, 成绩2:05:30, 用时3:45): hours, minutes and seconds, not o'clock.
_CLOCK_DURATION = re.compile(
    r"(?<![0-9:.])(?:([0-9]{1,2})[:：])?([0-5]?[0-9])[:：]([0-5][0-9])(?![0-9:])"
)
_DURATION_CUE = re.compile(
    r"(?:时长|倒计时|用时|耗时|历时|成绩|跑出|游出|完赛|净时间|片长|剩余|还剩|长度|总长)"
    r"[ \t是为：:了]{0,3}$"
)
_SCORE_CUE = re.compile(rf"(?:{alternatives(SCORE_CUES)})[\s是为了：:]{{0,3}}$")


def _clock(hour: str, minute: str, second: str | None, meridiem: str | None) -> str:
    prefix = ""
    if meridiem:
        prefix = "上午" if meridiem[0] in "aA" else "下午"
    said = prefix + read_cardinal(hour, count=True) + "点"
    if minute != "00" or (second and second != "00"):
        said += _minutes(minute) + "分"
    if second and second != "00":
        said += _minutes(second) + "秒"
    return said


# A 分 written after a clock time (not "14:30分15秒", a time of its own shape).
_MINUTE_WORD = re.compile(r"[ \t]?分(?![ \t]?[0-9])")


def _minutes(minutes: str) -> str:
    if len(minutes) == 2 and minutes[0] == "0":
        return "零" + read_cardinal(minutes[1])
    return read_cardinal(minutes)


# A race time with its hundredths after 秒 (9秒83, 23秒61): the hundredths digit by digit,
# as announcers say them (九秒八三).
_RACE_TIME = re.compile(r"(?<![0-9.])([0-9]{1,2})[ \t]?秒[ \t]?([0-9]{2})(?![0-9]|[ \t]?[秒分])")


def _clock_durations(spans: Spans) -> Iterator[Token]:
    text = spans.text
    if "秒" not in text and ":" not in text:  # full-width colons are folded to ":"
        return
    for match in _RACE_TIME.finditer(text):
        said = read_cardinal(match[1], count=True) + "秒" + read_year(match[2])
        yield word(match.start(), match.end(), said, RULE_TIME)
    for match in _CLOCK_DURATION.finditer(text):
        behind, at = spans.lookbehind(match.start())
        if not _DURATION_CUE.search(behind, max(0, at - 6), at):
            continue
        hours, minutes, seconds = match[1], match[2], match[3]
        said = read_cardinal(hours, count=True) + "小时" if hours and int(hours) else ""
        # After a larger unit 05 is 零五 (两小时零五分), and a gap one 零 (一小时零五秒).
        if int(minutes):
            said += (_minutes(minutes) if said else read_cardinal(minutes, count=True)) + "分"
        elif said and int(seconds):
            said += "零"
        if int(seconds) or not said:
            late = said and not said.endswith("零")
            said += (_minutes(seconds) if late else read_cardinal(seconds, count=True)) + "秒"
        yield word(match.start(), match.end(), said, RULE_TIME)


def time_rule(spans: Spans) -> Iterator[Token]:
    text = spans.text
    yield from _clock_durations(spans)
    for match in _TIME_RANGE.finditer(text):
        low = _clock(match[1], match[2], match[3], match[4] or match[9])
        high = _clock(match[6], match[7], match[8], match[9])
        yield word(match.start(), match.end(), low + "到" + match["day"] + high, RULE_TIME)
    for match in _TIME.finditer(text):
        if _is_score(*spans.lookbehind(match.start())) or (match[1] == "24" and match[2] != "00"):
            continue
        said = _clock(match[1], match[2], match[3], match[4])
        end = match.end()
        minute_word = _MINUTE_WORD.match(text, end)
        if minute_word is not None:
            end = minute_word.end()  # "3:05分" 三点零五分, "10:00 分" 十点零分: one 分
            said += "" if said.endswith("分") else "零分"
        yield word(match.start(), end, said, RULE_TIME)
    for match in _MERIDIEM_DASH.finditer(text):
        yield word(match.start(), match.end(), "到", RULE_TIME)
    for match in _BARE_MERIDIEM.finditer(text):
        yield word(match.start(), match.end(), _clock(match[1], "00", None, match[2]), RULE_TIME)
    for match in _DURATION.finditer(text):
        unit = "分" if match[3] == "分" else "分钟"  # as written: 1小时02分, 2h15min
        said = read_cardinal(match[1], count=True) + "小时" + _minutes(match[2]) + unit
        if match[4]:
            said += _minutes(match[4]) + "秒"
        yield word(match.start(), match.end(), said, RULE_TIME)
    for match in _DIAN.finditer(text):
        said = read_cardinal(match[1], count=True) + "点"
        if match[2]:
            said += _minutes(match[2]) + (match[3] or "")
        elif match[4]:
            said += match[4]
        yield word(match.start(), match.end(), said, RULE_TIME)


def _is_score(text: str, start: int) -> bool:
    return _SCORE_CUE.search(text, max(0, start - 8), start) is not None


_RATIO = re.compile(
    r"(?<![0-9:.])([0-9]+(?:\.[0-9]+)?)[ \t]?[:：][ \t]?([0-9]+(?:\.[0-9]+)?)(?:[ \t]?[:：][ \t]?([0-9]+(?:\.[0-9]+)?))?"
    r"(?![0-9:])"
)
# A match earlier in the clause, or what a score is followed by (2-0 领先).
_MATCH_BEFORE = re.compile(rf"(?:{alternatives(MATCH_CUES)})[^，。；！？,;!?\n]*$")
_SCORE_AFTER = re.compile(rf"[ \t]?(?:的比分|暂时|最终|才|再)?(?:{alternatives(SCORE_AFTER)})")
_DASH_SCORE = re.compile(
    r"(?<![0-9.\-])([0-9]{1,3})[ \t]?[-–—][ \t]?([0-9]{1,3})(?![0-9\-]|\.[0-9])"
)


def score_rule(spans: Spans) -> Iterator[Token]:
    """Scores and ratios; the time rule already took what reads as a time."""
    text = spans.text
    for match in _RATIO.finditer(text):
        parts = [p for p in match.groups() if p is not None]
        said = "比".join(read_number(p) for p in parts)
        yield word(match.start(), match.end(), said, RULE_SCORE)
    for match in _DASH_SCORE.finditer(text):
        if _is_dash_score(spans, match):
            said = read_number(match[1]) + "比" + read_number(match[2])
            yield word(match.start(), match.end(), said, RULE_SCORE)


# Measure words that are also results (打成1-1平): a score after a match cue.
_SCORE_MEASURES = frozenset("平胜负")
_NUMBERED = re.compile(rf"(?:{alternatives(NUMBERED_NOUNS)})[ \t]?$")
_RANGE_AFTER = re.compile(r"[ \t]?(?:之间|左右|以上|以下|以内|不等|范围|区间|上下)")


def _is_dash_score(spans: Spans, match: re.Match[str]) -> bool:
    """A score (比) rather than a range (到): a match cue before it in its clause, a
    result after it (2-0 领先), or two teams around a pair no range is written as
    (湖人 105-98 勇士: a range goes up)."""
    text, start, end = spans.text, match.start(), match.end()
    measure = measure_after(text, end)
    if unit_after(text, end) or (measure and measure[0] not in _SCORE_MEASURES):
        return False  # 3-5组, 3-4小时: a range
    k = start - 1 if text[start - 1 : start] in (" ", "\t") else start
    if text[k - 1 : k] == "第":
        return False  # 第3-5
    behind, at = spans.lookbehind(start)
    if (
        _is_score(behind, at)
        or _MATCH_BEFORE.search(behind, max(0, at - 16), at)
        or _SCORE_AFTER.match(text, end)
    ):
        return True
    after = end + (text[end : end + 1] in (" ", "\t"))
    return (
        measure is None
        and not _NUMBERED.search(text, max(0, start - 5), start)  # 图3-1, 步骤 2-1
        and int(match[1]) >= int(match[2])
        and _is_ideograph(text[k - 1 : k])
        and _is_ideograph(text[after : after + 1])
        and not _RANGE_AFTER.match(text, end)
    )


def _is_ideograph(ch: str) -> bool:
    return len(ch) == 1 and "\u4e00" <= ch <= "\u9fff"
