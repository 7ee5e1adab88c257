"""What of a segment is spoken: the text ChatTTS is given, and what was dropped.

ChatTTS 0.2.5 (``ChatTTS/norm.py``) keeps only ``[\\u4e00-\\u9fffA-Za-z，。、,. ]``: it
maps a few marks to a comma or a stop (``：；（）【】『』「」《》－:;()<>-`` to a comma,
``！!`` to a stop), in Chinese text turns ASCII ``,.`` into ``，。``, and silently deletes
everything else, digits included. :func:`prepare_text` does the same on purpose, so the
engine's normaliser finds nothing to change in ``spoken``, and reports each dropped
character with its position instead of losing it silently. Where ChatTTS deletes a mark
that is a pause in speech (``？?…—``), it is mapped too.

The work is a pipeline over :class:`_Token` (a source span and what it becomes):
``_tokenize`` (span rules first, then per character), ``_tidy`` (punctuation runs,
blanks), ``_render``. A fuller normaliser (numbers, dates, units) extends the span
rules: a rule that reads ``12.5`` as ``十二点五`` yields a spoken token for that span
where today's rule yields a dropped one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum

__all__ = ["SPOKEN_CHARSET", "PreparedText", "Removal", "prepare_text"]

# Exactly ChatTTS's keep set (Normalizer.reject_pattern, negated).
SPOKEN_CHARSET = re.compile(r"[\u4e00-\u9fffA-Za-z，。、,. ]")


@dataclass(frozen=True)
class Removal:
    """A run of dropped characters; ``start`` is an offset in the prepared text."""

    start: int
    chars: str


@dataclass(frozen=True)
class PreparedText:
    """``spoken`` for the engine; ``removed`` lists every dropped non-blank character."""

    spoken: str
    removed: tuple[Removal, ...]


class _Kind(Enum):
    WORD = "word"  # a CJK ideograph or an ASCII letter
    BLANK = "blank"
    GAP = "gap"  # a non-blank character read as a blank, and reported as dropped
    # Pauses, weakest first: their order decides which survives a run of marks.
    ENUMERATION = "enumeration"  # 、
    COMMA = "comma"
    STOP = "stop"
    DROPPED = "dropped"


_PAUSE_STRENGTH = {_Kind.ENUMERATION: 0, _Kind.COMMA: 1, _Kind.STOP: 2}


@dataclass(frozen=True)
class _Token:
    start: int  # source span [start, end)
    end: int
    kind: _Kind
    text: str  # what is spoken for a WORD; "" otherwise


# ChatTTS's character_simplifier, plus dashes and the full-width forms of its ASCII.
_COMMA_MARKS = frozenset("，,：:；;（）()【】『』「」《》<>＜＞－-—–―")
# ChatTTS maps only ！! to a stop and deletes ？?…; a question still ends a sentence.
_STOP_MARKS = frozenset("。．.！!？?…⋯")
_ENUMERATION_MARKS = frozenset("、")
_HYPHENS = frozenset("-－")
_FULLWIDTH_OFFSET = 0xFEE0  # "Ａ" - "A"

# A span rule finds spans in the text and says what each becomes.
_SpanRule = Callable[[str], Iterator[_Token]]


def _drop_matches(pattern: re.Pattern[str]) -> _SpanRule:
    def rule(text: str) -> Iterator[_Token]:
        for match in pattern.finditer(text):
            yield _Token(match.start(), match.end(), _Kind.DROPPED, "")

    return rule


# Numbers are dropped whole, separators included, so "12.5" does not leave a "。"
# behind; reading them aloud is the number normaliser's job.
_NUMBER = re.compile(r"[0-9０-９]+(?:[.,:/\-．：／－][0-9０-９]+)*")
# ChatTTS control tags ("[uv_break]", "[laugh]"): dropped whole, not read as words.
_TAG = re.compile(r"\[[\w_]+\]")
_SPAN_RULES: tuple[_SpanRule, ...] = (_drop_matches(_TAG), _drop_matches(_NUMBER))


def _fold_width(ch: str) -> str:
    """Full-width ASCII letters to ASCII; every other character unchanged."""
    if "Ａ" <= ch <= "Ｚ" or "ａ" <= ch <= "ｚ":
        return chr(ord(ch) - _FULLWIDTH_OFFSET)
    return ch


def _is_word_char(ch: str) -> bool:
    return "\u4e00" <= ch <= "\u9fff" or (ch.isascii() and ch.isalpha())


def _classify(text: str, i: int) -> _Token:
    ch = _fold_width(text[i])
    if ch.isspace():
        return _Token(i, i + 1, _Kind.BLANK, "")
    if _is_word_char(ch):
        return _Token(i, i + 1, _Kind.WORD, ch)
    if ch in _HYPHENS:
        before = _fold_width(text[i - 1]) if i else ""
        after = _fold_width(text[i + 1]) if i + 1 < len(text) else ""
        if before.isascii() and before.isalpha() and after.isascii() and after.isalpha():
            # "well-known": ChatTTS would say "well, known"; a gap reads better.
            return _Token(i, i + 1, _Kind.GAP, "")
    if ch in _STOP_MARKS:
        return _Token(i, i + 1, _Kind.STOP, "")
    if ch in _COMMA_MARKS:
        return _Token(i, i + 1, _Kind.COMMA, "")
    if ch in _ENUMERATION_MARKS:
        return _Token(i, i + 1, _Kind.ENUMERATION, "")
    return _Token(i, i + 1, _Kind.DROPPED, "")


def _tokenize(text: str) -> list[_Token]:
    """Tokens covering text in order; span rules win over per-character rules."""
    claimed: dict[int, _Token] = {}
    covered = [False] * len(text)
    for rule in _SPAN_RULES:
        for token in rule(text):
            if any(covered[token.start : token.end]):
                continue
            covered[token.start : token.end] = [True] * (token.end - token.start)
            claimed[token.start] = token
    tokens: list[_Token] = []
    i = 0
    while i < len(text):
        token = claimed.get(i) or _classify(text, i)
        tokens.append(token)
        i = token.end
    return tokens


def _tidy(tokens: list[_Token]) -> tuple[list[_Token], list[_Token]]:
    """(kept tokens, dropped tokens): one pause per run of marks, no stray blanks.

    A run of marks and blanks between two words keeps its strongest mark ("。。。" and
    "！？" become one stop, "，。" a stop); marks before the first word are dropped.
    A run of blanks survives as one blank, and only between a word or kept mark and
    the next word.
    """
    kept: list[_Token] = []
    dropped: list[_Token] = []
    pause: _Token | None = None
    blank: _Token | None = None
    seen_word = False
    for token in tokens:
        kind = token.kind
        if kind is _Kind.DROPPED:
            dropped.append(token)
        elif kind is _Kind.BLANK or kind is _Kind.GAP:
            if kind is _Kind.GAP:
                dropped.append(token)
            if blank is None:
                blank = token
        elif kind is _Kind.WORD:
            if pause is not None:
                kept.append(pause)
            if seen_word and blank is not None:
                kept.append(blank)
            kept.append(token)
            seen_word = True
            pause = blank = None
        elif not seen_word:
            dropped.append(token)
        elif pause is None or _PAUSE_STRENGTH[kind] > _PAUSE_STRENGTH[pause.kind]:
            if pause is not None:
                dropped.append(pause)
            pause, blank = token, None  # no blank before a mark
        else:
            dropped.append(token)
    if pause is not None:
        kept.append(pause)
    return kept, dropped


# ChatTTS's own language guess (Normalizer._detect_language): in "zh" text it turns
# ASCII ",." into "，。", so the marks are written the way it would leave them.
_CJK_CHAR = re.compile(r"[\u4e00-\u9fff]")
_ENGLISH_WORD = re.compile(r"\b[A-Za-z]+\b")
_ZH_MARKS = {_Kind.ENUMERATION: "、", _Kind.COMMA: "，", _Kind.STOP: "。"}
_EN_MARKS = {_Kind.ENUMERATION: "、", _Kind.COMMA: ",", _Kind.STOP: "."}


def _render(kept: list[_Token]) -> str:
    words = "".join(" " if token.kind in (_Kind.BLANK, _Kind.GAP) else token.text for token in kept)
    is_chinese = len(_CJK_CHAR.findall(words)) > len(_ENGLISH_WORD.findall(words))
    marks = _ZH_MARKS if is_chinese else _EN_MARKS
    parts: list[str] = []
    for token in kept:
        if token.kind is _Kind.WORD:
            parts.append(token.text)
        elif token.kind in (_Kind.BLANK, _Kind.GAP):
            parts.append(" ")
        else:
            parts.append(marks[token.kind])
    return "".join(parts)


def _removals(text: str, tokens: list[_Token]) -> tuple[Removal, ...]:
    """Dropped non-blank characters as runs of adjacent source characters."""
    runs: list[list[int]] = []
    for token in sorted(tokens, key=lambda token: token.start):
        for i in range(token.start, token.end):
            if text[i].isspace():
                continue
            if runs and runs[-1][1] == i:
                runs[-1][1] = i + 1
            else:
                runs.append([i, i + 1])
    return tuple(Removal(start, text[start:end]) for start, end in runs)


def prepare_text(text: str) -> PreparedText:
    """Prepare one segment for ChatTTS: what it can say, and what it cannot.

    ``spoken`` holds only :data:`SPOKEN_CHARSET` and is a fixed point of ChatTTS's
    normaliser (its homophone replacement aside); it is "" when nothing in the text
    can be said. Every non-blank character of ``text`` is either in ``spoken`` (one
    for one, possibly mapped) or in exactly one :class:`Removal`.
    """
    tokens = _tokenize(text)
    kept, dropped = _tidy(tokens)
    if not any(token.kind is _Kind.WORD for token in kept):
        return PreparedText("", _removals(text, tokens))
    return PreparedText(_render(kept), _removals(text, dropped))
