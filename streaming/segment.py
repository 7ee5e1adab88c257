"""Incremental text segmentation: text deltas in, speakable segments out.

An LLM streams text a few characters at a time; the synthesiser wants whole sentences
(prosody) but the listener wants the first sound soon. :class:`Segmenter` cuts the
stream into :class:`Segment` slices (every mark's role is a row of
:mod:`streaming.punctuation`, the table text preparation and segment joins use too):

- at sentence ends: ``。！？；…⋯｡``, a newline, and ASCII ``. ! ?`` that end a sentence;
  closers right after the terminator (``。”``, ``?!``, ``）」』］``) stay with it;
- in the first segment of an utterance only, also at a clause mark (``，、：,;:``) once
  the segment holds ``first_min_chars`` non-whitespace characters, so speech starts
  early (a colon between digits is none: ``10：00``, ``3 : 2``);
- never inside a quoted or bracketed span (``“…”``, ``（…）``, ``"…"``, ``[…]``) that
  is shorter than ``max_chars``: a sentence or clause end inside one is not a cut, so
  quotes and brackets stay balanced inside segments;
- never longer than ``max_chars``: before a quote or bracket still open, else at the
  latest clause mark, else the latest gap between words, else next to a CJK
  character, each outside quotes and brackets and not inside a number, a decimal, a
  time or a date (``12:30``, ``2024年10月1日``, ``19点17``), a URL, an English word or
  a token the text front-end reads as one (``app.py``, ``v1.2.3``, ``Mr. Smith``,
  ``RTX 4090``, ``+86 138 1234 5678``: up to 24 characters past the limit are looked
  at to see it whole); only a span longer than ``max_chars`` is cut inside, at a
  sentence end first.

Calling contract:

- ``"".join(emitted texts) + pending_text`` equals everything pushed, at every step;
  whitespace before a segment belongs to it, nothing is dropped.
- A decision that depends on characters not yet seen waits for them (or for
  :meth:`Segmenter.flush`), and every lookahead is bounded, so any chunking of the same
  text followed by ``flush()`` yields exactly the segments of one ``push`` + ``flush``.
- Work is linear in the input: each push rescans at most one undecided run.

Rules for ASCII ``.`` (only ``.``-runs need them; ``!``/``?`` end a sentence unless a
letter or digit follows directly):

- glued to the next character (``3.14``, ``v1.2.3``, ``example.com``, ``e.g.,``):
  not an end;
- followed by whitespace and then a lowercase letter (``e.g. this``, ``wait... what``):
  not an end;
- a single ``.`` after an abbreviation (``Mr.``, ``Dr.``, ``vs.``), a dotted acronym
  (``U.S.``, ``e.g.``, ``a.m.``), an initial (``J. K.``), ``No.`` before a number
  (``No. 1``), ``etc.`` before Chinese, or a list number at the start of the segment
  (``1. First``) or after a blank or a clause mark before Chinese (``步骤：1. 打开``):
  not an end;
- otherwise (end of input, a newline, a capital, CJK, a digit...): an end.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from streaming.length_cut import (
    TOKEN_LOOKAHEAD,
    is_ascii_alnum,
    is_ascii_digit,
    is_ascii_letter,
    length_cut,
    track_brackets,
)
from streaming.punctuation import (
    ASCII_CLAUSE_MARKS,
    ASCII_SENTENCE_MARKS,
    CJK_CLAUSE_MARKS,
    CJK_SENTENCE_MARKS,
    CLOSERS,
    NEWLINES,
)

__all__ = ["DEFAULT_ABBREVIATIONS", "Segment", "Segmenter", "SegmenterSettings"]

# Lowercased, without the final dot. Left out on purpose: words that often end a
# sentence ("etc", "inc", "ltd", "no"); a lowercase next word still keeps them joined.
DEFAULT_ABBREVIATIONS: frozenset[str] = frozenset(
    {
        "mr", "mrs", "ms", "dr", "prof", "rev", "gen", "sen", "rep", "gov", "capt",
        "col", "lt", "sgt", "st", "mt", "jr", "sr", "vs", "cf", "viz", "approx", "fig",
        "eq", "ca", "dept", "est", "al",
    }
)  # fmt: skip

_CJK_TERMINATORS = CJK_SENTENCE_MARKS
_TERMINATORS = CJK_SENTENCE_MARKS | ASCII_SENTENCE_MARKS
_CLAUSE_MARKS = CJK_CLAUSE_MARKS | ASCII_CLAUSE_MARKS
# After ". " a long blank run means the sentence ended; bounding it bounds lookahead.
_MAX_BLANK_LOOKAHEAD = 16
# Longest abbreviation word looked back over before a ".".
_MAX_ABBREVIATION_CHARS = 12
# Words that may end an English sentence but not a Chinese one: "Apple Inc. 发布了".
_JOIN_BEFORE_CHINESE = frozenset({"etc", "inc", "ltd", "co", "corp"})
_ACRONYM = re.compile(r"[A-Za-z](?:\.[A-Za-z])+")
# Marks after which "1. " opens a list item inline ("步骤：1. 打开").
_LIST_OPENERS = frozenset("：:；;，,、")


@dataclass(frozen=True)
class Segment:
    """One cut of the input stream, an exact slice of it."""

    index: int
    text: str
    start: int
    end: int
    reason: str  # "sentence" | "clause" | "length" | "flush"


@dataclass(frozen=True)
class SegmenterSettings:
    """Segmentation policy; lengths are in characters."""

    max_chars: int = 80
    first_min_chars: int = 6
    abbreviations: frozenset[str] = field(default=DEFAULT_ABBREVIATIONS)

    def __post_init__(self) -> None:
        if self.max_chars < 1:
            raise ValueError(f"max_chars must be >= 1, got {self.max_chars}")
        if self.first_min_chars < 0:
            raise ValueError(f"first_min_chars must be >= 0, got {self.first_min_chars}")


class _NeedMore(Exception):
    """A decision needs a character that has not arrived yet."""


class Segmenter:
    """Cuts a stream of text deltas into segments; see the module docstring."""

    def __init__(self, config: SegmenterSettings | None = None) -> None:
        self._config = config if config is not None else SegmenterSettings()
        self._buf = ""
        self._buf_offset = 0  # stream offset of self._buf[0]
        self._start = 0  # buffer index where the pending segment starts
        self._scan = 0  # buffer index of the first character not yet decided
        self._index = 0
        self._first = True  # the next segment opens an utterance
        # Counts over self._buf[self._start:self._scan]:
        self._nonblank = 0
        self._double_quotes = 0
        self._single_quotes = 0  # "'" not after a letter, i.e. not an apostrophe
        self._open: list[str] = []  # closers awaited by the quotes and brackets open

    @property
    def pending_text(self) -> str:
        """Text pushed but not yet emitted in a segment."""
        return self._buf[self._start :]

    @property
    def holds_complete_sentence(self) -> bool:
        """The pending text ends a Chinese sentence (。！？；… plus any closers after it).

        Such text is held only in case more closers follow; a caller whose input has
        paused may flush it early. ASCII '.' does not count: "3." may become "3.5".
        """
        pending = self.pending_text.rstrip().rstrip("".join(CLOSERS))
        return bool(pending) and pending[-1] in _CJK_TERMINATORS

    def push(self, text: str) -> list[Segment]:
        """Feed a delta; return the segments it completes, in order."""
        if not text:
            return []
        if self._start:
            self._buf_offset += self._start
            self._buf = self._buf[self._start :]
            self._scan -= self._start
            self._start = 0
        self._buf += text
        return self._drain(final=False)

    def flush(self) -> list[Segment]:
        """Cut everything pending; the next segment opens a new utterance."""
        segments = self._drain(final=True)
        if self._start < len(self._buf):
            segments.append(self._emit(len(self._buf), "flush"))
        self._first = True
        return segments

    # -- decisions -------------------------------------------------------------------

    def _drain(self, final: bool) -> list[Segment]:
        segments: list[Segment] = []
        while True:
            try:
                cut = self._next_cut(final)
            except _NeedMore:
                return segments
            if cut is None:
                return segments
            segments.append(self._emit(*cut))

    def _at(self, i: int, final: bool) -> str | None:
        """The character at buffer index i; None past the end of the input."""
        if i < len(self._buf):
            return self._buf[i]
        if final:
            return None
        raise _NeedMore

    def _advance(self, to: int) -> None:
        buf = self._buf
        for k in range(self._scan, to):
            ch = buf[k]
            if ch.isspace():
                continue
            self._nonblank += 1
            if ch == '"':
                self._double_quotes += 1
            elif ch == "'" and not (k > self._start and is_ascii_letter(buf[k - 1])):
                self._single_quotes += 1
            track_brackets(self._open, buf, k, self._start)
        self._scan = to

    def _balanced_after(self, end: int) -> bool:
        """Whether no quote or bracket is open after buf[self._scan:end] is taken in."""
        awaited = list(self._open)
        for k in range(self._scan, end):
            track_brackets(awaited, self._buf, k, self._start)
        return not awaited

    def _next_cut(self, final: bool) -> tuple[int, str] | None:
        """The next cut as (buffer index, reason); None when the input is exhausted."""
        buf = self._buf
        max_chars = self._config.max_chars
        while True:
            i = self._scan
            if i - self._start > max_chars:
                return self._length_cut(final), "length"
            if i >= len(buf):
                return None
            ch = buf[i]
            if ch in NEWLINES:
                if self._nonblank:
                    cut = i
                    while buf[cut - 1].isspace():
                        cut -= 1
                    return cut, "sentence"
                self._advance(i + 1)
            elif ch in _TERMINATORS:
                end, is_end = self._terminator_run(i, final)
                if is_end and end - self._start <= max_chars and self._balanced_after(end):
                    return end, "sentence"
                self._advance(end)
            elif self._first and ch in _CLAUSE_MARKS:
                end, valid = self._clause_run(i, final)
                nonblank = self._nonblank + (end - i)  # runs hold no whitespace
                if (
                    valid
                    and end - self._start <= max_chars
                    and nonblank >= self._config.first_min_chars
                    and self._balanced_after(end)
                ):
                    return end, "clause"
                self._advance(end)
            else:
                self._advance(i + 1)

    def _closers_end(self, k: int, final: bool) -> int:
        """Index after the closers starting at k (bounded by the length limit)."""
        limit = self._start + self._config.max_chars + 1
        double_quotes, single_quotes = self._double_quotes, self._single_quotes
        while k < limit:
            ch = self._at(k, final)
            if ch is None:
                break
            if ch == '"' and double_quotes % 2:
                double_quotes += 1
            elif ch == "'" and single_quotes % 2:
                single_quotes += 1
            elif ch not in CLOSERS:
                break
            k += 1
        return k

    def _terminator_run(self, i: int, final: bool) -> tuple[int, bool]:
        """(index after terminators and closers from i, whether that ends a sentence)."""
        limit = self._start + self._config.max_chars + 1
        k = i
        while k < limit and (ch := self._at(k, final)) is not None and ch in _TERMINATORS:
            k += 1
        marks = self._buf[i:k]
        k = self._closers_end(k, final)
        if k >= limit:
            return k, False  # too long to be one segment: the length rule decides
        if any(ch in _CJK_TERMINATORS for ch in marks):
            return k, True
        nxt = self._at(k, final)
        single_dot = marks == "."
        if nxt is None:
            return k, not (single_dot and self._is_abbreviation(i))
        if not nxt.isspace():
            if nxt.isascii():
                return k, False  # glued: 3.14, v1.2, example.com, ?q=1, e.g.,
            return k, not (
                single_dot
                and (
                    self._is_abbreviation(i) or self._joins(i, nxt) or self._is_list_number(i, nxt)
                )
            )  # "1.不要外传": a list item glued to its text
        if set(marks) != {"."}:
            return k, True
        following = self._next_word_char(k, final)
        if following is None:
            return k, True
        if following.isascii() and following.islower():
            return k, False  # "e.g. this", "wait... what"
        if single_dot and (
            self._is_abbreviation(i)
            or self._is_list_number(i, following)
            or self._joins(i, following)
        ):
            return k, False
        return k, True

    def _joins(self, dot: int, following: str) -> bool:
        """A word whose dot joins what follows: "No. 1" (a number), "etc. 都", "Inc. 发布"
        (Chinese)."""
        buf = self._buf
        j = dot
        while j > self._start and is_ascii_letter(buf[j - 1]) and dot - j < 4:
            j -= 1
        if j > self._start and (is_ascii_alnum(buf[j - 1]) or buf[j - 1] == "."):
            return False
        word = buf[j:dot].lower()
        return (word == "no" and is_ascii_digit(following)) or (
            word in _JOIN_BEFORE_CHINESE and not following.isascii()
        )

    def _next_word_char(self, k: int, final: bool) -> str | None:
        """First non-blank character from k; None at a newline, far away, or the end."""
        for j in range(k, k + _MAX_BLANK_LOOKAHEAD):
            ch = self._at(j, final)
            if ch is None or ch in NEWLINES:
                return None
            if not ch.isspace():
                return ch
        return None

    def _is_abbreviation(self, dot: int) -> bool:
        buf = self._buf
        j = dot
        while j > self._start and (is_ascii_letter(buf[j - 1]) or buf[j - 1] == "."):
            j -= 1
            if dot - j > _MAX_ABBREVIATION_CHARS:
                return False
        if j > self._start and is_ascii_alnum(buf[j - 1]):
            return False
        word = buf[j:dot].strip(".")
        if not word:
            return False
        if word.lower() in self._config.abbreviations or _ACRONYM.fullmatch(word):
            return True
        # An initial ("J. K. Rowling"); "I." is far more often the pronoun.
        return len(word) == 1 and word.isupper() and word != "I"

    def _is_list_number(self, dot: int, following: str) -> bool:
        """A "1." that opens the segment, or that follows a blank or a clause mark before
        Chinese ("步骤：1. 打开 2. 点击"): a list item, not the end of a sentence."""
        buf = self._buf
        j = dot
        while j > self._start and is_ascii_digit(buf[j - 1]) and dot - j < 3:
            j -= 1
        digits = dot - j
        if digits == 0 or (j > self._start and is_ascii_digit(buf[j - 1])):
            return False
        if self._nonblank == digits:  # only blanks before the number
            return True
        return not following.isascii() and (buf[j - 1].isspace() or buf[j - 1] in _LIST_OPENERS)

    def _clause_run(self, i: int, final: bool) -> tuple[int, bool]:
        """(index after clause marks and closers from i, whether it is a clause end)."""
        limit = self._start + self._config.max_chars + 1
        k = i
        while k < limit and (ch := self._at(k, final)) is not None and ch in _CLAUSE_MARKS:
            k += 1
        marks = self._buf[i:k]
        k = self._closers_end(k, final)
        if k >= limit:
            return k, False
        nxt = self._at(k, final)
        if marks == "：" and is_ascii_digit(self._buf[i - 1 : i]) and is_ascii_digit(nxt or ""):
            return k, False  # "10：00" is a time written with a full-width colon
        if any(ch in CJK_CLAUSE_MARKS for ch in marks):
            return k, True
        if marks == ":" and nxt == " " and self._buf[max(self._start, i - 2) : i].endswith(" "):
            # "3 : 2", "9 : 30": a score or a time written with blanks, not a clause end.
            before, after = self._buf[i - 2 : i - 1], self._at(k + 1, final)
            if is_ascii_digit(before) and after is not None and is_ascii_digit(after):
                return k, False
        # "12:30", "1,000", "http://" are not clause ends.
        return k, nxt is None or nxt.isspace() or not nxt.isascii()

    def _length_cut(self, final: bool) -> int:
        """Where to cut a segment that would exceed max_chars."""
        start = self._start
        last = start + self._config.max_chars  # latest allowed cut; buf[last] exists
        lookahead = ""
        for k in range(last + 1, last + 1 + TOKEN_LOOKAHEAD):
            ch = self._at(k, final)
            if ch is None:
                break
            lookahead += ch
        return length_cut(self._buf, start, last, lookahead)

    def _emit(self, cut: int, reason: str) -> Segment:
        text = self._buf[self._start : cut]
        start = self._buf_offset + self._start
        segment = Segment(self._index, text, start, start + len(text), reason)
        self._index += 1
        self._start = self._scan = cut
        self._nonblank = self._double_quotes = self._single_quotes = 0
        self._open = []
        self._first = False
        return segment
