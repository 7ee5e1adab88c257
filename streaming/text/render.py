"""The last stages: one pause per run of marks (``tidy``), the spoken pieces (``render``),
and the dropped characters as reported runs (``removals``)."""

from __future__ import annotations

import re

from streaming.text.tokens import (
    PAUSE_STRENGTH,
    PAUSES,
    REASON_PAUSE,
    REASON_PUNCTUATION,
    REASON_TAG,
    REASON_UNSPEAKABLE,
    Kind,
    Piece,
    Removal,
    Token,
    dropped,
)


class _Tidier:
    """The state of :func:`tidy` between tokens."""

    def __init__(self) -> None:
        self.kept: list[Token] = []
        self.dropped: list[Token] = []
        self.pause: Token | None = None
        self.blank: Token | None = None
        self.seen_word = False

    def drop(self, token: Token, reason: str = REASON_PUNCTUATION) -> None:
        if token.kind is Kind.DROPPED:
            self.dropped.append(token)
        else:
            self.dropped.append(dropped(token.start, token.end, reason))

    def keep_pause(self, token: Token) -> None:
        if token.reason == REASON_PAUSE:  # a symbol said as a pause: report the symbol
            self.dropped.append(dropped(token.start, token.end, REASON_PAUSE))
            token = Token(token.end, token.end, token.kind)
        self.kept.append(token)

    def take_word(self, token: Token) -> None:
        if self.pause is not None:
            self.keep_pause(self.pause)
        if self.seen_word and self.blank is not None:
            if _is_space(self.blank) and _numbers_apart(self.kept[-1], token):
                self.kept.append(Token(self.blank.start, self.blank.end, Kind.ENUMERATION))
            elif not (_is_space(self.blank) and _inside_phrase(self.kept[-1], token)):
                self.kept.append(self.blank)
        elif self.blank is not None and self.blank.kind is Kind.GAP:
            self.drop(self.blank)
        self.kept.append(token)
        self.seen_word = True
        self.pause = self.blank = None

    def take_pause(self, token: Token) -> None:
        if not self.seen_word:
            self.drop(token)
        elif self.pause is None or PAUSE_STRENGTH[token.kind] > PAUSE_STRENGTH[self.pause.kind]:
            if self.pause is not None:
                self.drop(self.pause)
            if self.blank is not None and self.blank.kind is Kind.GAP:
                self.drop(self.blank)
            self.pause, self.blank = token, None  # no blank before a mark
        else:
            self.drop(token)

    def take(self, token: Token) -> None:
        kind = token.kind
        if kind is Kind.DROPPED:
            self.dropped.append(token)
        elif kind is Kind.BLANK or kind is Kind.GAP:
            if self.blank is None:
                self.blank = token
            elif kind is Kind.GAP:
                self.drop(token)
        elif kind is Kind.WORD or kind is Kind.TAG:
            self.take_word(token)
        else:
            self.take_pause(token)

    def finish(self) -> tuple[list[Token], list[Token]]:
        if self.pause is not None:
            self.keep_pause(self.pause)
        if self.blank is not None and self.blank.kind is Kind.GAP:
            self.drop(self.blank)
        return self.kept, self.dropped


def _is_ideograph(ch: str) -> bool:
    return "\u4e00" <= ch <= "\u9fff"


def _is_space(blank: Token) -> bool:
    """A blank within a line (a line break keeps its blank)."""
    return blank.kind is Kind.BLANK and blank.text in (" ", "\t", "\u3000")


def _inside_phrase(before: Token, after: Token) -> bool:
    """Whether a blank between two words joins a rewrite to Chinese ("下午 3 点", "拨打
    12315 热线"): LLMs put blanks around digits, and said in Chinese they are one phrase."""
    return (
        before.kind is Kind.WORD
        and after.kind is Kind.WORD
        and bool(before.rule or after.rule)
        and _is_ideograph(before.text[-1:])
        and _is_ideograph(after.text[:1])
    )


# How a number read out in Chinese starts and ends.
_NUMERALS = frozenset("零幺一二两三四五六七八九十百千万亿点")


def _numbers_apart(before: Token, after: Token) -> bool:
    """Whether a blank parts two numbers read out ("Llama 3.1 405B", "DDR5 6000MHz"), or a
    code read digit by digit and a number written in Chinese ("验证码 826491 五分钟"): said
    together they would be one number (三点一四百零五, 五六千, 八二六四九幺五), and ChatTTS
    does not hear a blank between ideographs, so it is said as a short pause."""
    return (
        before.kind is Kind.WORD
        and after.kind is Kind.WORD
        and bool(after.rule or before.rule.startswith("digits"))
        and bool(before.rule)
        and before.text[-1:] in _NUMERALS
        and after.text[:1] in _NUMERALS
    )


def tidy(tokens: list[Token]) -> tuple[list[Token], list[Token]]:
    """(kept tokens, dropped tokens): one pause per run of marks, no stray blanks.

    A run of marks and blanks between two words keeps its strongest mark ("。。。" and
    "！？" become one stop, "，。" a stop); marks before the first word are dropped.
    A run of blanks survives as one blank, and only between a word or kept mark and
    the next word, unless it joins a rewrite (a number read out) to Chinese: "下午 3 点"
    is said 下午三点, one phrase; between two numbers read out it is a short pause
    ("Llama 3.1 405B": 三点一、四百零五B). A gap ("-" in "well-known") is the blank it
    stands for when kept.
    """
    tidier = _Tidier()
    for token in tokens:
        tidier.take(token)
    return tidier.finish()


# ChatTTS's own language guess (Normalizer._detect_language): in "zh" text it turns
# ASCII ",." into "，。", so the marks are written the way it would leave them.
_CJK_CHAR = re.compile(r"[\u4e00-\u9fff]")
_ENGLISH_WORD = re.compile(r"\b[A-Za-z]+\b")
# A spelled acronym ("G P T" for "GPT-4o") is one word, not one a letter: counted
# letter by letter it outvotes a short Chinese clause (GPT-4o很强 said with ".").
_SPELLED_LETTER = re.compile(r"(?<![A-Za-z])([A-Z]) (?=[A-Z](?![A-Za-z]))")
_ZH_MARKS = {Kind.ENUMERATION: "、", Kind.COMMA: "，", Kind.STOP: "。"}
_EN_MARKS = {Kind.ENUMERATION: "、", Kind.COMMA: ",", Kind.STOP: "."}


def render(text: str, kept: list[Token]) -> list[Piece]:
    """The spoken pieces of the kept tokens, marks written as ChatTTS would leave them."""
    # Detected on the spoken text as ChatTTS would see it (marks and tags as breaks).
    words = "".join(token.text if token.kind is Kind.WORD else " " for token in kept)
    words = _SPELLED_LETTER.sub(r"\1", words)
    is_chinese = len(_CJK_CHAR.findall(words)) > len(_ENGLISH_WORD.findall(words))
    marks = _ZH_MARKS if is_chinese else _EN_MARKS
    pieces: list[Piece] = []
    for token in kept:
        if token.kind in (Kind.WORD, Kind.TAG):
            said = token.text
        elif token.kind in (Kind.BLANK, Kind.GAP):
            said = " "
        else:
            said = marks[token.kind]
        source = text[token.start : token.end]
        last = pieces[-1] if pieces else None
        if (
            last is not None
            and source == said
            and last.source == last.spoken
            and last.end == token.start
            and last.end > last.start
        ):
            pieces[-1] = Piece(last.start, token.end, last.source + source, last.spoken + said)
        else:
            pieces.append(Piece(token.start, token.end, source, said, token.rule, token.origin))
    return pieces


def removals(text: str, tokens: list[Token]) -> tuple[Removal, ...]:
    """Dropped non-blank characters as runs of adjacent source characters, by reason."""
    runs: list[tuple[int, int, str]] = []  # (start, end, reason)
    for token in sorted(tokens, key=lambda token: token.start):
        for i in range(token.start, token.end):
            if text[i].isspace():
                continue
            if runs and runs[-1][1] == i and runs[-1][2] == token.reason:
                runs[-1] = (runs[-1][0], i + 1, token.reason)
            else:
                runs.append((i, i + 1, token.reason))
    return tuple(Removal(start, text[start:end], reason) for start, end, reason in runs)


def reason_alone(token: Token) -> str:
    """Why a token is dropped when nothing in its segment can be said."""
    if token.kind is Kind.TAG:
        return REASON_TAG
    if token.kind in PAUSES:
        return REASON_PUNCTUATION
    return REASON_UNSPEAKABLE
