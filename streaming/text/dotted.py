"""Tokens with a dot inside: no pause where they have a dot (the dot is no sentence end).

Abbreviations (Mr. Dr. e.g. U.S. vs. etc.), file names (app.py: app点P Y), domains
(example.com), IPv4 addresses (一九二点一六八点一点一), versions (v1.2.3 v一点二点三, 20.11.0 二十点十一点零),
codecs (H.264 H二六四), a host and its port (localhost:8080), and any dot glued between
two letters (Node.js, os.path). ``streaming/segment.py`` does not cut at these dots
either.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from streaming.punctuation import CLOSERS
from streaming.text.context import alternatives
from streaming.text.markup import read_address
from streaming.text.names import (
    ABBREVIATIONS,
    DOMAINS,
    FILE_EXTENSIONS,
    SENTENCE_FINAL_ABBREVIATIONS,
)
from streaming.text.readings import read_cardinal, read_digits, read_number
from streaming.text.spans import Spans
from streaming.text.tokens import Token, word

RULE_ABBREVIATION = "abbreviation"
RULE_FILE = "name.file"
RULE_DOMAIN = "address.domain"
RULE_IP = "address.ip"
RULE_VERSION = "version"
RULE_CODEC = "name.codec"
RULE_DOTTED = "name.dotted"

_ABBREVIATION = re.compile(rf"(?<![A-Za-z.])(?:{alternatives(list(ABBREVIATIONS))})")
# "No." before a number is the ordinal rule's (No.1 第一)...
_NUMBER_AFTER = re.compile(r"[ \t]?[0-9]")
# ... and before a code (No.12345: the code rule reads it), "No." is said as a word.
_CODE_AFTER = re.compile(r"[ \t]?[0-9]{3}")
_INITIALISM = re.compile(r"(?<![A-Za-z.])(?:[A-Za-z]\.){2,}(?![A-Za-z])")
_CJK = re.compile(r"[\u4e00-\u9fff]")
_IP = re.compile(r"(?<![0-9.])([0-9]{1,3}(?:\.[0-9]{1,3}){3})(?::([0-9]{1,5}))?(?![0-9]|\.[0-9])")
_HOST_PORT = re.compile(
    r"(?<![A-Za-z0-9_.:/])(localhost|[A-Za-z][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*):([0-9]{2,5})(?![0-9])"
)
_VERSION = re.compile(
    r"(?<![A-Za-z0-9_.])([vV]?)([0-9]+(?:\.[0-9]+){2,})(?![A-Za-z0-9_]|\.[A-Za-z0-9_])"
)
_CODEC = re.compile(r"(?<![A-Za-z])([Hh])\.(26[1-6])(?![0-9])")
_FILE = re.compile(
    rf"(?<![A-Za-z0-9_.@/\\-])([A-Za-z0-9_][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*)\.((?i:{alternatives(sorted(FILE_EXTENSIONS))}))"
    r"(?![A-Za-z0-9_]|\.[A-Za-z0-9_])"
)
# A file name written in Chinese (财报.xlsx): the dot and the extension; the name is
# read as the text it is.
_CHINESE_FILE = re.compile(
    rf"(?<=[\u4e00-\u9fff])\.((?i:{alternatives(sorted(FILE_EXTENSIONS))}))(?![A-Za-z0-9_]|\.[A-Za-z0-9_])"
)
_DOMAIN = re.compile(
    rf"(?<![A-Za-z0-9_.@/-])((?:[A-Za-z0-9][A-Za-z0-9-]*\.)+(?:{alternatives(sorted(DOMAINS))}))(?![A-Za-z0-9_]|\.[A-Za-z0-9_])"
)
# A dot glued between a letter and a letter or a digit (os.path, M.2, 600519.SH).
_GLUED_DOT = re.compile(
    r"(?<=[A-Za-z])\.(?=[A-Za-z])|(?<=[A-Za-z])(?<![Nn][Oo])\.(?=[0-9])|(?<=[0-9])\.(?=[A-Za-z])"
)
_VOWELS = frozenset("aeiouAEIOU")


def _at_end(text: str, end: int) -> bool:
    """Only blanks and closers after ``end``: the token ends the segment's sentence."""
    return all(ch.isspace() or ch in CLOSERS or ch in "\"'" for ch in text[end:])


def abbreviation_rule(spans: Spans) -> Iterator[Token]:
    text = spans.text
    chinese = _CJK.search(text) is not None
    for match in _ABBREVIATION.finditer(text):
        abbreviation = match.group()
        if (
            abbreviation.lower() == "no."
            and _NUMBER_AFTER.match(text, match.end())
            and not _CODE_AFTER.match(text, match.end())
        ):
            continue  # No.1: the ordinal rule's 第一
        said = ABBREVIATIONS[abbreviation][0 if chinese else 1]
        if abbreviation in SENTENCE_FINAL_ABBREVIATIONS and _at_end(text, match.end()):
            said += "."
        yield word(match.start(), match.end(), said, RULE_ABBREVIATION)
    for match in _INITIALISM.finditer(text):
        said = " ".join(ch.upper() for ch in match.group() if ch != ".")
        if _at_end(text, match.end()):
            said += "."
        yield word(match.start(), match.end(), said, RULE_ABBREVIATION)


def _name_digits(digits: str) -> str:
    """Digits in a name: a short number as a number (file10 十), longer digit by digit
    (report_2024 二零二四)."""
    return read_number(digits) if len(digits) <= 2 else read_digits(digits, yao=False)


def _read_name(name: str) -> str:
    """A name in a file name or a dotted name: letters kept, digits read, "_-" a blank."""
    out = re.sub(r"[0-9]+", lambda m: _name_digits(m.group()), name)
    return re.sub(r"[_\-]+", " ", out.replace(".", "点")).strip()


def _read_extension(extension: str) -> str:
    """An extension said as a word when it has a vowel (json), else spelled (P D F)."""
    if any(ch in _VOWELS for ch in extension) or len(extension) > 4:
        return re.sub(r"[0-9]+", lambda m: read_digits(m.group()), extension)
    return " ".join(ch.upper() if ch.isalpha() else read_digits(ch) for ch in extension)


def _version_part(part: str) -> str:
    """One number of a version as said: 20.11.0 is 二十点十一点零 (each a number; a
    leading zero digit by digit: 22.04 二十二点零四)."""
    if len(part) > 1 and part[0] == "0":
        return read_digits(part, yao=False)
    return read_cardinal(part)


def name_rule(spans: Spans) -> Iterator[Token]:
    """File names, domains, codecs and versions."""
    text = spans.text
    for match in _CODEC.finditer(text):
        yield word(match.start(), match.end(), "H" + read_digits(match[2]), RULE_CODEC)
    for match in _FILE.finditer(text):
        said = _read_name(match[1]) + "点" + _read_extension(match[2])
        yield word(match.start(), match.end(), said, RULE_FILE)
    for match in _CHINESE_FILE.finditer(text):
        yield word(match.start(), match.end(), "点" + _read_extension(match[1]), RULE_FILE)
    for match in _DOMAIN.finditer(text):
        yield word(match.start(), match.end(), read_address(match[1]), RULE_DOMAIN)
    for match in _VERSION.finditer(text):
        head, version = match[1], match[2]
        said = head + "点".join(_version_part(part) for part in version.split("."))
        yield word(match.start(), match.end(), said, RULE_VERSION)
    for match in _GLUED_DOT.finditer(text):
        yield word(match.start(), match.end(), "点", RULE_DOTTED)


def address_number_rule(spans: Spans) -> Iterator[Token]:
    """IPv4 addresses (digits with 一, as said) and a host's port (冒号 八零八零)."""
    text = spans.text
    for match in _IP.finditer(text):
        said = "点".join(read_digits(part, yao=False) for part in match[1].split("."))
        if match[2]:
            said += " 冒号 " + read_digits(match[2])
        yield word(match.start(), match.end(), said, RULE_IP)
    for match in _HOST_PORT.finditer(text):
        yield word(match.start(2) - 1, match.end(2), " 冒号 " + read_digits(match[2]), RULE_IP)
