"""Where a segment that would exceed ``max_chars`` is cut (:func:`length_cut`), and the
character rules the segmenter (:mod:`streaming.segment`) shares with it: quotes and
brackets awaited (:func:`track_brackets`), ASCII character classes.

The order in which cuts are preferred is the segmenter's contract (the module docstring
of :mod:`streaming.segment`): before a quote or bracket still open, at the latest clause
mark, gap between words, or CJK character outside quotes and brackets, never inside a
number, a URL, a word or a token read as one, seen whole up to :data:`TOKEN_LOOKAHEAD`
characters past the limit.
"""

from __future__ import annotations

import re

from streaming.punctuation import (
    ASCII_CLAUSE_MARKS,
    ASCII_SENTENCE_MARKS,
    CJK_CLAUSE_MARKS,
    CJK_SENTENCE_MARKS,
    CLOSER_ALIASES,
    CLOSERS,
    PAIRS,
    STRAIGHT_QUOTES,
)

__all__ = [
    "TOKEN_LOOKAHEAD",
    "is_ascii_alnum",
    "is_ascii_digit",
    "is_ascii_letter",
    "length_cut",
    "track_brackets",
]

_CJK_TERMINATORS = CJK_SENTENCE_MARKS
_TERMINATORS = CJK_SENTENCE_MARKS | ASCII_SENTENCE_MARKS
_CLAUSE_MARKS = CJK_CLAUSE_MARKS | ASCII_CLAUSE_MARKS
# Punctuation that belongs to the text before it: a length cut should not orphan it.
_ATTACHING = _TERMINATORS | _CLAUSE_MARKS | CLOSERS | STRAIGHT_QUOTES
_NUMBER_SEPARATORS = frozenset(".,:/-")
_ASCII_RUN = re.compile(r"[!-~]+")
_URL_MARKERS = ("://", "www.", "@")
_PAIR_CLOSERS = frozenset(PAIRS.values())
# Numbers with their date and time units: a cut inside one would split its reading.
_NUMERIC_SPAN = re.compile(
    r"[0-9]+(?:\s?(?:[年月日号点時时分秒:：.,/\-]|小时)\s?[0-9]+)+(?:[日号分秒])?"
)
# Tokens read as one (streaming/text): e-mail addresses, dotted names (app.py, v1.2.3,
# 192.168.1.1, H.264, U.S.), an abbreviation and its word (Mr. Smith, No. 1), a name and
# its model number (RTX 4090, Llama 3.1 405B, Windows 11 23H2, PCIe 4.0 x4), digits grouped by blanks
# (+86 138 1234 5678).
_TOKEN_SPAN = re.compile(
    r"\d+(?:\.\d+)+[节章条款]"
    r"|[A-Za-z0-9_%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+"
    r"|[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)+"
    r"|(?:[A-Za-z]\.){2,}"
    r"|(?<![A-Za-z])(?:Mr|Mrs|Ms|Dr|Prof|St|Jr|Sr|No|NO|vs|Vs|VS)\. ?[A-Za-z0-9]+"
    r"|(?<![A-Za-z])[A-Za-z]+ \d+(?:\.\d+)*(?: \d+[A-Za-z]+\d*| [xX]\d+)?"
    r"|\+?\d+(?: \d{2,})+(?![0-9])"
)
# Characters looked at past a length cut's limit, so that a token across it is seen whole.
TOKEN_LOOKAHEAD = 24


def length_cut(buf: str, start: int, last: int, lookahead: str) -> int:
    """Where to cut the segment that starts at ``buf[start]`` and would run past
    ``last``, the latest allowed cut (``buf[last]`` exists); ``lookahead``: the
    characters after ``buf[last]`` that have arrived, up to :data:`TOKEN_LOOKAHEAD`."""
    scan = _CutScan(buf, start, buf[start : last + 1] + lookahead)
    for cut in range(start + 1, last + 1):
        scan.visit(cut)
    return scan.choice(last)


def is_ascii_letter(ch: str) -> bool:
    return ch.isascii() and ch.isalpha()


def is_ascii_digit(ch: str) -> bool:
    return "0" <= ch <= "9"


def is_ascii_alnum(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


def track_brackets(awaited: list[str], buf: str, k: int, start: int) -> None:
    """Update the stack of awaited closers with buf[k] (a segment starts at ``start``).

    A closer closes the innermost matching opener (those inside it are taken as never
    closed); a closer with no opener is ignored. ``"`` and ``'`` close an open one of
    their kind, else open; ``'`` or ``’`` after a Latin letter is an apostrophe.
    """
    ch = buf[k]
    if ch in PAIRS:
        awaited.append(PAIRS[ch])
    elif ch == '"' or ch == "'":
        if ch == "'" and k > start and is_ascii_letter(buf[k - 1]):
            return  # an apostrophe ("it's"); after a CJK character it is a quote
        if awaited and awaited[-1] == ch:
            awaited.pop()
        else:
            awaited.append(ch)
    elif (closer := CLOSER_ALIASES.get(ch, ch)) in _PAIR_CLOSERS and closer in awaited:
        if ch == "’" and awaited[-1] != ch and k > start and is_ascii_letter(buf[k - 1]):
            return  # "don’t" inside brackets
        while awaited.pop() != closer:
            pass


class _CutScan:
    """The places an over-long segment may be cut, gathered cut by cut
    (:func:`length_cut`); :meth:`choice` picks the best one."""

    _KINDS = ("sentence", "clause", "blank", "cjk", "symbol")

    def __init__(self, buf: str, start: int, window: str) -> None:
        self.buf = buf
        self.start = start
        self.window = window
        self.url_like = [False] * len(window)
        for match in _ASCII_RUN.finditer(window):
            if any(marker in match.group() for marker in _URL_MARKERS):
                self.url_like[match.start() : match.end()] = [True] * (match.end() - match.start())
        # Interiors of numbers with date/time units ("2024年10月1日", "19点17") and of
        # tokens read as one ("app.py", "Mr. Smith").
        self.numeric = [False] * (len(window) + 1)
        for pattern in (_NUMERIC_SPAN, _TOKEN_SPAN):
            for match in pattern.finditer(window):
                self.numeric[match.start() + 1 : match.end()] = [True] * (
                    match.end() - match.start() - 1
                )
        # Latest cut of each kind: [outside quotes and brackets, anywhere].
        self.best: dict[str, list[int]] = {kind: [0, 0] for kind in self._KINDS}
        self.hard = self.loose = self.split = 0
        self.in_clause = self.clause_cjk = self.in_sentence = False
        self.awaited: list[str] = []
        self.opened_at: list[int] = []  # buffer index of each open quote or bracket

    def char(self, i: int) -> str:
        j = i - self.start
        return self.window[j] if 0 <= j < len(self.window) else ""

    def visit(self, cut: int) -> None:
        """Note what cutting before ``buf[cut]`` would be."""
        before, after = self.char(cut - 1), self.char(cut)
        balanced = self._follow_brackets(cut)
        candidates = self._mark_candidates(before, after)
        inside_number = (
            is_ascii_digit(before)
            and after in _NUMBER_SEPARATORS
            and is_ascii_digit(self.char(cut + 1))
        ) or (
            before in _NUMBER_SEPARATORS
            and is_ascii_digit(after)
            and is_ascii_digit(self.char(cut - 2))
        )
        if not before.isspace():  # else the blanks would be a segment of their own
            self._note_splits(cut, before, after, inside_number)
            kind = self._token_kind(cut, before, after, balanced, inside_number)
            if kind is not None:
                candidates.append(kind)
        if self.numeric[cut - self.start]:
            return
        for kind in candidates:
            self.best[kind][1] = cut
            if balanced:
                self.best[kind][0] = cut

    def _follow_brackets(self, cut: int) -> bool:
        """Follow quotes and brackets up to ``cut``; True when none is open there."""
        depth = len(self.awaited)
        track_brackets(self.awaited, self.buf, cut - 1, self.start)
        if len(self.awaited) > depth:
            self.opened_at.append(cut - 1)
        del self.opened_at[len(self.awaited) :]
        return not self.awaited

    def _mark_candidates(self, before: str, after: str) -> list[str]:
        """A cut after a clause or sentence mark (and the closers that follow it)."""
        if before in _CLAUSE_MARKS:
            self.in_clause = True
            self.clause_cjk = self.clause_cjk or before in CJK_CLAUSE_MARKS
        elif not (self.in_clause and before in CLOSERS):
            self.in_clause = self.clause_cjk = False
        if before in _CJK_TERMINATORS or before in "!?":
            self.in_sentence = True
        elif not (self.in_sentence and (before in CLOSERS or before in _TERMINATORS)):
            self.in_sentence = False
        candidates: list[str] = []
        if (
            self.in_clause
            and after not in _CLAUSE_MARKS
            and after not in CLOSERS
            and (self.clause_cjk or after.isspace() or not after.isascii())
        ):
            candidates.append("clause")
        if (
            self.in_sentence
            and after not in _TERMINATORS
            and after not in CLOSERS
            and not is_ascii_alnum(after)
        ):
            candidates.append("sentence")
        return candidates

    def _note_splits(self, cut: int, before: str, after: str, inside_number: bool) -> None:
        """The last resorts: any cut between two tokens, outside numbers where it can."""
        if (is_ascii_letter(before) and is_ascii_letter(after)) or (
            is_ascii_digit(before) and is_ascii_digit(after)
        ):
            return
        self.split = cut
        if not inside_number:
            # Outside a tight number like 3.14 or 0/0, though perhaps inside a loose
            # date/time span ("0/ 0/0"): better than inside a number.
            self.loose = cut
            if not self.numeric[cut - self.start]:
                self.hard = cut

    def _token_kind(
        self, cut: int, before: str, after: str, balanced: bool, inside_number: bool
    ) -> str | None:
        """A cut at a blank, between CJK and other text, or at a symbol."""
        # A straight quote with nothing open before it opens a quote: a cut may go
        # before it (it starts the next segment whole), unlike a closer.
        opens_quote = balanced and (after == '"' or (after == "'" and not before.isalpha()))
        if after.isspace():
            return "blank"
        if after in _ATTACHING and not opens_quote:
            return None
        if not (before.isascii() and after.isascii()):
            return "cjk"
        if not (
            inside_number
            or self.url_like[cut - self.start]
            or (is_ascii_alnum(before) and is_ascii_alnum(after))
        ):
            return "symbol"
        return None

    def choice(self, last: int) -> int:
        """The best cut seen, ``last`` (the hard limit) when there is none."""
        start, window, best = self.start, self.window, self.best
        # Leading blanks alone, rather than split the token after them.
        lead = start + len(window) - len(window.lstrip())
        lead = lead if start < lead <= last else 0
        # A quote or bracket still open at the limit: cut before it, so that it starts
        # the next segment whole (if it is shorter than max_chars).
        opened = self.opened_at
        open_quote = opened[0] if opened and self.buf[start : opened[0]].strip() else 0
        order = (
            [open_quote]
            + [best[kind][0] for kind in ("clause", "blank", "cjk", "symbol")]
            + [best[kind][1] for kind in self._KINDS]
            + [lead, self.hard, self.loose, self.split]
        )
        for cut in order:
            if cut:
                return cut
        # A single word or number longer than max_chars: the hard limit wins.
        return last
