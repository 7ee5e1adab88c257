"""Span rules for what is not words: control tags, Markdown syntax, URLs and e-mail."""

from __future__ import annotations

import re
from collections.abc import Iterator

from streaming.text.names import DOMAINS
from streaming.text.readings import read_cardinal
from streaming.text.spans import Spans
from streaming.text.tokens import (
    REASON_MARKUP,
    REASON_NUMBER,
    REASON_TAG,
    REASON_URL,
    Kind,
    Token,
    dropped,
    word,
)

# ChatTTS's control tokens as users write them in text: [uv_break], [lbreak], [laugh],
# and the numbered families [break_N], [laugh_N], [oral_N], [speed_N].
CONTROL_TAG = re.compile(
    r"\[(?:uv_break|v_break|lbreak|laugh|(?:break|laugh|oral|speed)_[0-9]{1,2})\]"
)

RULE_URL = "address.url"
RULE_EMAIL = "address.email"


def tag_rule(spans: Spans) -> Iterator[Token]:
    for match in CONTROL_TAG.finditer(spans.text):
        if spans.allow_tags:
            yield Token(match.start(), match.end(), Kind.TAG, match.group())
        else:
            yield dropped(match.start(), match.end(), REASON_TAG)


# Markdown: fences with their language, inline code ticks, emphasis, citation marks,
# and line markers (heading, quote, bullet, table rule, horizontal rule).
_MARKUP = re.compile(
    r"```[\w+#.-]*|`|\*{1,3}|_{2,3}|~~|\[\^?[0-9]{1,3}\]"
    r"|^[ \t]*(?:#{1,6}(?=[ \t])|>+|[-*+•](?=[ \t]))"
    r"|^[ \t]*\|?(?:[ \t]*:?-{3,}:?[ \t]*\|?)+[ \t]*$"
    r"|^[ \t]*(?:[-*_][ \t]*){3,}$",
    re.MULTILINE,
)
# [text](url) and ![alt](url): the text is read, the rest is markup.
_LINK = re.compile(r"(!?\[)([^\]\n]*)(\]\([^)\s]*\))")


def markup_rule(spans: Spans) -> Iterator[Token]:
    text = spans.text
    for match in _LINK.finditer(text):
        yield dropped(match.start(1), match.end(1), REASON_MARKUP)
        yield dropped(match.start(3), match.end(3), REASON_MARKUP)
    for match in _MARKUP.finditer(text):
        if match.end() > match.start() and not _masks_digits(text, match.start(), match.end()):
            yield dropped(match.start(), match.end(), REASON_MARKUP)


def _masks_digits(text: str, start: int, end: int) -> bool:
    """Stars between two digits are no emphasis: a run of them masks a number
    (138****5678), one is a product (1200*600, 600 * 560)."""
    if text[start] != "*":
        return False
    while start > 0 and text[start - 1] == "*":
        start -= 1
    while end < len(text) and text[end] == "*":
        end += 1
    if end - start == 1:
        start -= text[start - 1 : start] == " "
        end += text[end : end + 1] == " "
    return (
        start > 0
        and end < len(text)
        and ("0" <= text[start - 1] <= "9" and "0" <= text[end] <= "9")
    )


_URL = re.compile(
    r"(?P<prefix>(?:https?|ftp)://(?:www\.)?|www\.)"
    r"(?P<host>[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*)"
    r"(?::(?P<port>[0-9]{1,5}))?"
    r"(?P<rest>(?:[/?#][^\s<>\"'，。、；！？）】」》\u4e00-\u9fff]*)?)"
)
_TLDS = "|".join(sorted(DOMAINS, key=len, reverse=True))
# A host with no scheme, followed by a port or a path: example.com/docs,
# localhost:8080/api, 192.168.1.10:8080/admin (a host and a port alone are dotted.py's).
_BARE_URL = re.compile(
    rf"(?<![A-Za-z0-9_.@/:-])(?P<prefix>)(?P<host>localhost|[0-9]{{1,3}}(?:\.[0-9]{{1,3}}){{3}}"
    rf"|(?:[A-Za-z0-9][A-Za-z0-9-]*\.)+(?:{_TLDS}))"
    r"(?::(?P<port>[0-9]{1,5}))?"
    r"(?P<rest>/[^\s<>\"'，。、；！？）】」》\u4e00-\u9fff]*)"
)
_IPV4 = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}")
# A path said as it is dictated (斜杠 api 斜杠 v一) when it is short: up to three words;
# a longer one, a query and a fragment are removed (and reported).
_SHORT_PATH = re.compile(r"(?:/[A-Za-z0-9_-]{1,24}){1,3}/?")
_PLAIN_DIGITS = str.maketrans("0123456789", "零一二三四五六七八九")
_EMAIL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_ADDRESS_DIGITS = dict(zip("0123456789", "零幺二三四五六七八九", strict=True))


def read_address(address: str) -> str:
    """A host or mailbox: letters kept, digits read one by one, "." as 点, "@" as 艾特."""
    out: list[str] = []
    for ch in address:
        if ch == ".":
            out.append("点")
        elif ch == "@":
            out.append(" 艾特 ")
        elif ch in _ADDRESS_DIGITS:
            out.append(_ADDRESS_DIGITS[ch])
        elif ch.isascii() and ch.isalpha():
            out.append(ch)
        else:
            out.append(" ")
    return re.sub(r" {2,}", " ", "".join(out)).strip()


def _read_host(host: str) -> str:
    if _IPV4.fullmatch(host):  # as an address is said alone: 一二七点零点零点一
        return "点".join(part.translate(_PLAIN_DIGITS) for part in host.split("."))
    return read_address(host)


def _url(text: str, match: re.Match[str]) -> Iterator[Token]:
    """A URL: its scheme removed, its host and port read, a short path read, the rest
    removed."""
    rest_end = match.end("rest")
    while rest_end > match.start("rest") and text[rest_end - 1] in ".,;:!?)]}'\"":
        rest_end -= 1  # a sentence mark after the URL is not part of it
    if match.end("prefix") > match.start("prefix"):
        yield dropped(match.start("prefix"), match.end("prefix"), REASON_URL)
    host = match.group("host")
    yield word(match.start("host"), match.end("host"), _read_host(host), RULE_URL)
    if match["port"]:
        port = " 冒号 " + read_address(match["port"])
        yield word(match.start("port") - 1, match.end("port"), port, RULE_URL)
    rest_start = match.start("rest")
    path = _SHORT_PATH.match(text, rest_start, rest_end)
    if path is not None and (path.end() == rest_end or text[path.end()] in "?#"):
        said = " 斜杠 ".join(path.group().strip("/").split("/")).translate(_PLAIN_DIGITS)
        yield word(rest_start, path.end(), " 斜杠 " + said, RULE_URL)
        rest_start = path.end()
    if rest_end > rest_start:
        yield dropped(rest_start, rest_end, REASON_URL)


def address_rule(spans: Spans) -> Iterator[Token]:
    text = spans.text
    for pattern in (_URL, _BARE_URL):
        for match in pattern.finditer(text):
            yield from _url(text, match)
    for match in _EMAIL.finditer(text):
        yield word(match.start(), match.end(), read_address(match.group()), RULE_EMAIL)


RULE_LIST = "list"
# A list item's number: at a line's start ("1. 打开", "2) 点击", "(3) 输入", "①"), or
# inline after a sentence or clause mark or a blank ("步骤：1. 打开 2. 点击"). Read as
# the number and a pause ("一，打开"), never as a sentence end ("一。") nor as 两.
_LIST_NUMBER = re.compile(
    r"(?:^|(?<=[：:。；;！？!?，,\s]))[ \t]*"
    r"(?:(?P<num>[0-9]{1,2})(?P<mark>[.．)）、])(?=[ \t]*[^0-9\s.．)）、。，,；;！!？?：:】」』》])"
    r"|(?P<open>[(（])(?P<pnum>[0-9]{1,2})(?P<close>[)）])(?=[ \t]*[^0-9\s)）]))",
    re.MULTILINE,
)
# A letter as an item's or an option's mark before Chinese ("A. 同意 B. 不同意",
# "A）选项一"; a dot needs a blank after it): the letter and a pause, never a stop.
_LIST_LETTER = re.compile(
    r"(?:^|(?<=[：:。；;！？!?，,\s]))[ \t]*([A-H])([.．](?=[ \t]+)|[)）、])(?=[ \t]*[\u4e00-\u9fff])",
    re.MULTILINE,
)
# Chinese text or English text, counted as the engine's language guess counts it.
_CJK = re.compile(r"[\u4e00-\u9fff]")
_LATIN_WORD = re.compile(r"\b[A-Za-z]+\b")
_MARKS_BEFORE_ITEM = frozenset("：:。；;！？!?，,、\n")
_CIRCLED = re.compile(r"(?:^|(?<=[：:。；;！？!?，,\s]))[ \t]*([①②③④⑤⑥⑦⑧⑨⑩])", re.MULTILINE)
_CIRCLED_NUMBERS = {ch: str(k) for k, ch in enumerate("①②③④⑤⑥⑦⑧⑨⑩", start=1)}


def list_rule(spans: Spans) -> Iterator[Token]:
    text = spans.text
    for match in _LIST_NUMBER.finditer(text):
        if match["num"] is not None:
            if match["mark"] in ".．" and _inline_english(text, match.start("num"), match.end()):
                continue
            if match["mark"] != "、":  # "每周 2、周 4" is no list: no pause before it
                yield from _pause_before(text, match.start("num"))
            yield _list_number(spans, match.start("num"), match["num"])
            pause = Kind.ENUMERATION if match["mark"] == "、" else Kind.COMMA
            yield Token(match.start("mark"), match.end("mark"), pause)
        else:
            yield dropped(match.start("open"), match.end("open"), REASON_MARKUP)
            yield _list_number(spans, match.start("pnum"), match["pnum"])
            yield Token(match.start("close"), match.end("close"), Kind.COMMA)
    chinese = len(_CJK.findall(text)) > len(_LATIN_WORD.findall(text))
    for match in _LIST_LETTER.finditer(text):
        if match[2] in ".．" and not chinese:
            continue  # "Plan A. 世": English text's stop, said as one (and stays one)
        yield word(match.start(1), match.end(1), match[1], RULE_LIST)
        pause = Kind.ENUMERATION if match[2] == "、" else Kind.COMMA
        yield Token(match.start(2), match.end(2), pause)
    for match in _CIRCLED.finditer(text):
        number = _CIRCLED_NUMBERS[match[1]]
        yield word(match.start(1), match.end(1), read_cardinal(number) + "，", RULE_LIST)


def _pause_before(text: str, start: int) -> Iterator[Token]:
    """The blanks before an inline item's number, after a word, as a pause ("1.快 2.稳":
    一，快，二，稳; 快二 would be another word)."""
    k = start
    while k > 0 and text[k - 1] in " \t":
        k -= 1
    if k < start and k > 0 and text[k - 1] not in _MARKS_BEFORE_ITEM:
        yield Token(k, start, Kind.COMMA)


def _list_number(spans: Spans, start: int, number: str) -> Token:
    if spans.normalizer is None:  # no number is read without the library
        return dropped(start, start + len(number), REASON_NUMBER)
    return word(start, start + len(number), read_cardinal(number), RULE_LIST)


def _inline_english(text: str, start: int, end: int) -> bool:
    """A "42." inside a line before a Latin word ("The answer is 42. Next"): no list item
    (one inline is followed by Chinese: "步骤：1. 打开")."""
    k = start - 1
    while k >= 0 and text[k] in " \t":
        k -= 1
    if k < 0 or text[k] == "\n":
        return False
    following = text[end:].lstrip(" \t")[:1]
    return not following or following.isascii()
