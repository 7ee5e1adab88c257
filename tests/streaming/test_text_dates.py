"""Dates and lengths of time written with slashes, dots, dashes and colons: which order a
date is read in, when a slash is a date and when a fraction, when a clock is a length."""

from __future__ import annotations

import pytest

from streaming.text import prepare_text
from tests.streaming.test_text import check_accounting


def said(text: str) -> str:
    prepared = prepare_text(text, normalizer=lambda run: run)
    check_accounting(text, prepared)
    return prepared.spoken


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        # the year last: the day first only when the first number cannot be a month...
        ("生于15/03/2024", "生于二零二四年三月十五日"),
        ("至03/15/2025", "至二零二五年三月十五日"),
        # ...and when both can, a slash month first (US), a dot day first (Europe)
        ("于05/03/2024", "于二零二四年五月三日"),
        ("于05.03.2024", "于二零二四年三月五日"),
        ("取件码8-3-2051", "取件码八 三 二零五幺"),
        # ranges of dates with the year first
        ("2024.01.01-2024.12.31", "二零二四年一月一日到二零二四年十二月三十一日"),
        ("2024/3/1~3/5", "二零二四年三月一日到三月五日"),
        ("2024.3.15至2024.3.20", "二零二四年三月十五日至二零二四年三月二十日"),
        # a month and a day with a dash: zero-padded or before a time
        ("于03-15消费", "于三月十五日消费"),
        ("3-15 14:22", "三月十五日十四点二十二分"),
        ("3-5天", "三到五天"),
        ("第01-05集", "第一到五集"),
        ("型号01-05", "型号零幺 零五"),
    ],
)
def test_dates_with_the_year_last_or_in_ranges(text: str, spoken: str) -> None:
    """The order of day and month is decided as docs/text.md says, and a range of dates
    says 到 (or the 至 written)."""
    assert said(text) == spoken


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        ("3/15前完成", "三月十五日前完成"),
        ("6/1起报名", "六月一日起报名"),
        ("截止3/15", "截止三月十五日"),
        ("3/15（周五）", "三月十五日，周五，"),
        ("3/15-3/20", "三月十五日到三月二十日"),
        ("12/31", "十二月三十一日"),
        ("完成了3/5的任务", "完成了五分之三的任务"),
        ("小于3/4", "小于四分之三"),
        ("从1/3增加到1/2", "从三分之一增加到二分之一"),
        ("1/4决赛", "四分之一决赛"),
    ],
)
def test_a_slash_is_a_date_beside_a_date_word(text: str, spoken: str) -> None:
    """month/day is a date beside a date word or in a forward range; a fraction otherwise."""
    assert said(text) == spoken


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        ("视频时长1:23:45", "视频时长一小时二十三分四十五秒"),
        ("成绩2:05:30", "成绩两小时零五分三十秒"),
        ("用时1:00:05", "用时一小时零五秒"),
        ("用时3:45", "用时三分四十五秒"),
        ("倒计时00:59:59", "倒计时五十九分五十九秒"),
        ("会议14:30开始", "会议十四点三十分开始"),
        ("跑出9秒83", "跑出九秒八三"),
        ("会议3:05分开始", "会议三点零五分开始"),
        ("今天-12°C", "今天负十二摄氏度"),
    ],
)
def test_lengths_of_time_and_times_of_day(text: str, spoken: str) -> None:
    """A clock after a word that says it is a length is hours, minutes and seconds; one
    elsewhere is a time of day; a minus after a day word is a sign."""
    assert said(text) == spoken
