"""The tokens of a segment: source spans and what each becomes, and the result types.

A :class:`Token` is a span ``[start, end)`` of the segment and its kind: a word (said as
``text``), a control tag, a blank, a gap between words, a pause, or a dropped span (with
the reason it is reported). Span rules (numbers, markup, the lexicon...) make word
tokens for whole spans; :func:`classify` makes one token for each remaining character.
Every word token names the ``rule`` that made it, which the preview shows.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from enum import Enum

from streaming.punctuation import PAUSE_SYMBOLS, WORD_JOINERS, Said, said_as
from streaming.text.symbols import SYMBOL_READINGS

# Removal reasons, as reported to clients.
REASON_UNSPEAKABLE = "unspeakable"  # no reading for it (a symbol, a rare script)
REASON_EMOJI = "emoji"
REASON_MARKUP = "markup"  # markdown syntax, removed on purpose
REASON_URL = "url"  # a URL's scheme, a long path, its query (its host, port, short path are read)
REASON_TAG = "tag"  # a control tag while control tags are not allowed
REASON_PUNCTUATION = "punctuation"  # a mark in a run of marks, or before any word
REASON_NUMBER = "number"  # digits, when no normaliser is configured
REASON_CODE = "code"  # the body of a fenced code block: not read aloud, on purpose
REASON_PAUSE = "pause"  # a symbol (< > |) read as a pause: the symbol itself is not said
REASON_INVALID = "invalid_unicode"  # U+FFFD: a lone surrogate or undecodable input

#: The rule name of characters read by the character table (symbols, accents...).
RULE_SYMBOL = "symbol"
#: The rule name of text rewritten by the text-normalisation library.
RULE_LIBRARY = "wetext"


@dataclass(frozen=True)
class Removal:
    """A run of dropped characters; ``start`` is an offset in the prepared text."""

    start: int
    chars: str
    reason: str = REASON_UNSPEAKABLE


@dataclass(frozen=True)
class Piece:
    """A span of the input ``[start, end)`` and what is spoken for it.

    Pieces are in input order; their ``spoken`` texts joined give ``PreparedText.spoken``.
    A blank or a pause between words may have an empty span (``start == end``). Runs of
    characters spoken as they are form one piece. ``rule`` names what rewrote the span
    (``digits.code``, ``lexicon``...; "" for text said as written), ``origin`` the
    lexicon entry's place when a lexicon did ("lexicon.txt:3", "request", "context").
    """

    start: int
    end: int
    source: str
    spoken: str
    rule: str = ""
    origin: str = ""


@dataclass(frozen=True)
class PreparedText:
    """``spoken`` for the engine; ``removed`` lists every dropped non-blank character.

    ``pieces`` maps input spans to what is said for them (the preview shows them);
    ``tags`` are the control tags passed to the engine inside ``spoken``; ``codes`` the
    digit strings read digit by digit, ``(digits, said, rule)``, for the segments after
    it (the same number said the same way: :mod:`.repeats`).
    """

    spoken: str
    removed: tuple[Removal, ...]
    pieces: tuple[Piece, ...] = ()
    tags: tuple[str, ...] = ()
    codes: tuple[tuple[str, str, str], ...] = ()

    @property
    def rewrites(self) -> tuple[Piece, ...]:
        """Pieces read as other words than written (numbers, acronyms, symbols...)."""
        return tuple(
            p
            for p in self.pieces
            if p.source != p.spoken and any(is_word_char(ch) for ch in p.spoken)
        )


class Kind(Enum):
    WORD = "word"  # spoken text: a CJK ideograph, a letter, or a rewrite of a span
    TAG = "tag"  # a control tag passed through
    BLANK = "blank"
    GAP = "gap"  # a non-blank character read as a word break ("well-known", "snake_case")
    # Pauses, weakest first: their order decides which survives a run of marks.
    ENUMERATION = "enumeration"  # 、
    COMMA = "comma"
    STOP = "stop"
    DROPPED = "dropped"


PAUSE_STRENGTH = {Kind.ENUMERATION: 0, Kind.COMMA: 1, Kind.STOP: 2}
PAUSES = frozenset(PAUSE_STRENGTH)
_SAID_KINDS = {Said.STOP: Kind.STOP, Said.COMMA: Kind.COMMA, Said.ENUMERATION: Kind.ENUMERATION}


@dataclass(frozen=True)
class Token:
    start: int  # source span [start, end)
    end: int
    kind: Kind
    text: str = ""  # what is spoken for a WORD or TAG; the character of a BLANK
    reason: str = REASON_UNSPEAKABLE  # why a DROPPED token is dropped
    rule: str = ""  # what made a WORD that rewrites its span
    origin: str = ""  # where the lexicon entry that made it comes from


def dropped(start: int, end: int, reason: str) -> Token:
    return Token(start, end, Kind.DROPPED, "", reason)


def word(start: int, end: int, text: str, rule: str = "", origin: str = "") -> Token:
    return Token(start, end, Kind.WORD, text, rule=rule, origin=origin)


# -- character rules -------------------------------------------------------------------

_FULLWIDTH_OFFSET = 0xFEE0  # "Ａ" - "A"


def fold_width(ch: str) -> str:
    """Full-width ASCII letters to ASCII; every other character unchanged."""
    if "Ａ" <= ch <= "Ｚ" or "ａ" <= ch <= "ｚ":
        return chr(ord(ch) - _FULLWIDTH_OFFSET)
    return ch


def is_word_char(ch: str) -> bool:
    return "\u4e00" <= ch <= "\u9fff" or (ch.isascii() and ch.isalpha())


def _fold_accents(ch: str) -> str:
    """Accented letters to ASCII ("é" -> "e", "ß" -> "ss"); "" when there is none."""
    decomposed = unicodedata.normalize("NFKD", ch)
    ascii_letters = "".join(c for c in decomposed if c.isascii() and c.isalpha())
    return {"ß": "ss", "æ": "ae", "Æ": "AE", "ø": "o", "Ø": "O", "œ": "oe"}.get(ch, ascii_letters)


def _is_emoji(ch: str) -> bool:
    code = ord(ch)
    return (
        0x1F000 <= code <= 0x1FAFF
        or 0x2600 <= code <= 0x27BF
        or code in (0x200D, 0xFE0F, 0x20E3)
        or 0x1F1E6 <= code <= 0x1F1FF
    )


def classify(text: str, i: int) -> Token:
    """The token of the one character ``text[i]`` (no span rule claimed it)."""
    ch = fold_width(text[i])
    if ch.isspace():
        return Token(i, i + 1, Kind.BLANK, ch)
    if is_word_char(ch):
        return word(i, i + 1, ch, RULE_SYMBOL if ch != text[i] else "")  # "Ａ" is said "A"
    if ch in WORD_JOINERS:
        before = fold_width(text[i - 1]) if i else ""
        after = fold_width(text[i + 1]) if i + 1 < len(text) else ""
        if before.isascii() and before.isalnum() and after.isascii() and after.isalpha():
            # "well-known", "snake_case": ChatTTS would say "well, known".
            return Token(i, i + 1, Kind.GAP)
    if ch in "'’" and 0 < i < len(text) - 1 and text[i - 1].isalpha() and text[i + 1].isalpha():
        return dropped(i, i + 1, REASON_PUNCTUATION)  # "it's" is said "its"
    said = said_as(ch)
    if said is Said.DROPPED:
        return dropped(i, i + 1, REASON_UNSPEAKABLE)
    if said is not None and said is not Said.GAP:
        # A pause symbol's pause is kept; the symbol itself is reported (see tidy).
        reason = REASON_PAUSE if ch in PAUSE_SYMBOLS else REASON_UNSPEAKABLE
        return Token(i, i + 1, _SAID_KINDS[said], reason=reason)
    if ch in SYMBOL_READINGS:
        return word(i, i + 1, SYMBOL_READINGS[ch], RULE_SYMBOL)
    if ch.isalpha() and (folded := _fold_accents(ch)):
        return word(i, i + 1, folded, RULE_SYMBOL)
    if ch == "\ufffd":
        return dropped(i, i + 1, REASON_INVALID)
    if _is_emoji(ch):
        return dropped(i, i + 1, REASON_EMOJI)
    if "0" <= ch <= "9" or "０" <= ch <= "９":
        return dropped(i, i + 1, REASON_NUMBER)
    return dropped(i, i + 1, REASON_UNSPEAKABLE)


def rewrite_tokens(
    start: int, end: int, said: str, rule: str = "", origin: str = ""
) -> list[Token]:
    """What a rewritten span becomes: its words and pauses, in order.

    The first word carries the span, so the span is accounted for once; the other
    words and pauses are zero-width. A span rewritten to marks only is one pause.
    """
    classified = [classify(said, k) for k in range(len(said))]
    pauses = [t.kind for t in classified if t.kind in PAUSES]
    if not any(t.kind is Kind.WORD for t in classified):
        if pauses:
            return [Token(start, end, max(pauses, key=lambda kind: PAUSE_STRENGTH[kind]))]
        return [dropped(start, end, REASON_UNSPEAKABLE)]
    tokens: list[Token] = []
    words: list[str] = []
    spanned = False

    def close_words() -> None:
        nonlocal spanned
        text = re.sub(r" {2,}", " ", "".join(words)).strip()
        words.clear()
        if text:
            span = (end, end) if spanned else (start, end)
            tokens.append(word(*span, text, rule, origin))
            spanned = True

    for token in classified:
        if token.kind is Kind.WORD:
            words.append(token.text)
        elif token.kind in (Kind.BLANK, Kind.GAP):
            words.append(" ")
        elif token.kind in PAUSES:
            close_words()
            tokens.append(Token(end if spanned else start, end if spanned else start, token.kind))
    close_words()
    return tokens


_ACRONYM = re.compile(r"(?<![A-Za-z])[A-Z]{2,}(?![A-Za-z])")


def spell_acronyms(tokens: list[Token]) -> list[Token]:
    """All-caps runs of letters ("GPU") are spelled: a zero-width blank between letters.

    Dropped tokens are skipped when looking for runs: they are not heard.
    """
    heard = [k for k, t in enumerate(tokens) if t.kind is not Kind.DROPPED]
    letters = "".join(
        t.text if t.kind is Kind.WORD and len(t.text) == 1 and t.text.isascii() else "\0"
        for t in (tokens[k] for k in heard)
    )
    spaced_after: set[int] = set()
    for match in _ACRONYM.finditer(letters):
        spaced_after.update(heard[m] for m in range(match.start(), match.end() - 1))
    out: list[Token] = []
    for k, token in enumerate(tokens):
        out.append(token)
        if k in spaced_after:
            out.append(Token(token.end, token.end, Kind.BLANK))
    return out
