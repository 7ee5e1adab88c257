"""When each character (or Latin word) of a segment is heard: timestamps for its audio.

A segment's text is cut into **units**: each Chinese (CJK) character is one, each
symbol (%, @, €, π) is one, each run of letters (any script), digits and apostrophes is
one (a word), and whatever else (blanks, punctuation) is glued to the unit before it (to the first unit when it leads),
so the units cover the text and their texts joined give it back.

Each unit gets ``[start_ms, end_ms)`` on the context's audio clock (0 = the context's
first sample), inside the segment's own audio span (its pause excluded):

- **from marks** (the fallback voice: espeak-ng reports where each word starts in its
  audio): a unit starts at the first mark that falls inside it; units without a mark
  share the time between their neighbours by weight;
- **estimated** (ChatTTS, which reports nothing of the kind): the span is shared out
  in proportion to each unit's **weight**: 1 for a CJK character or a symbol read as a
  word (%, @, €), the number of digits
  for a digit run (each is read as a syllable), the number of vowel groups (at least 1)
  for a Latin word; glued punctuation adds nothing.

Either way consecutive units touch (one's end is the next one's start), the first unit
starts where the segment's audio starts and the last ends where it ends.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from streaming.speech import SegmentSpan
from streaming.text import Piece

__all__ = ["Timed", "Unit", "estimate", "for_segment", "from_marks", "source_offset", "units"]

_VOWELS = re.compile(r"[aeiouyAEIOUY]+")


@dataclass(frozen=True)
class Unit:
    """A piece of the segment's text, ``[start, end)`` in it, timed as one."""

    text: str
    start: int
    end: int
    weight: float


@dataclass(frozen=True)
class Timed:
    """A unit on the audio clock: offsets in the context's text, times in milliseconds."""

    text: str
    start_char: int
    end_char: int
    start_ms: float
    end_ms: float

    def to_json(self) -> dict[str, object]:
        return {
            "text": self.text,
            "start_char": self.start_char,
            "end_char": self.end_char,
            "start_ms": round(self.start_ms, 1),
            "end_ms": round(self.end_ms, 1),
        }


def _is_cjk(ch: str) -> bool:
    return (
        "CJK" in unicodedata.name(ch, "")
        or "\u3040" <= ch <= "\u30ff"
        or "\uac00" <= ch <= "\ud7af"
    )


def _word_at(text: str, i: int) -> str:
    """The word starting at ``i``: letters (any script but CJK), digits, apostrophes."""
    j = i
    while j < len(text) and (
        (text[j].isalnum() and not _is_cjk(text[j])) or (j > i and text[j] in "'’")
    ):
        j += 1
    return text[i:j]


def _is_symbol(ch: str) -> bool:
    """A symbol read as a word: Unicode's S* categories (€, +, ©) and % @ # &."""
    return ch in "%@#&" or unicodedata.category(ch).startswith("S")


def _weight(word: str) -> float:
    if word.isdigit():
        return float(len(word))
    return float(max(1, len(_VOWELS.findall(word))))


def units(text: str) -> list[Unit]:
    """The units of ``text`` (see the module docstring)."""
    found: list[Unit] = []
    lead = ""  # glue before the first unit
    i = 0
    while i < len(text):
        ch = text[i]
        match = _word_at(text, i)
        if _is_cjk(ch) or _is_symbol(ch):
            found.append(Unit(lead + ch, i - len(lead), i + 1, 1.0))
            lead, i = "", i + 1
        elif match:
            found.append(Unit(lead + match, i - len(lead), i + len(match), _weight(match)))
            lead, i = "", i + len(match)
        elif found:
            last = found[-1]
            found[-1] = Unit(last.text + ch, last.start, i + 1, last.weight)
            i += 1
        else:
            lead += ch
            i += 1
    if lead and not found:
        return []  # nothing spoken in it
    return found


def estimate(found: Sequence[Unit], offset: int, start_ms: float, end_ms: float) -> list[Timed]:
    """``found`` shared out over ``[start_ms, end_ms)`` by weight; ``offset``: where the
    segment's text starts in the context's text."""
    total = sum(u.weight for u in found) or 1.0
    timed: list[Timed] = []
    at = start_ms
    spent = 0.0
    for unit in found:
        spent += unit.weight
        until = start_ms + (end_ms - start_ms) * spent / total
        timed.append(Timed(unit.text, offset + unit.start, offset + unit.end, at, until))
        at = until
    return _close(timed, end_ms)


def from_marks(
    found: Sequence[Unit],
    marks: Sequence[tuple[int, float]],
    offset: int,
    start_ms: float,
    end_ms: float,
) -> list[Timed]:
    """``found`` timed by ``marks``: (offset in the segment's text, ms on the audio clock)
    where the engine says a word starts; units without one are interpolated by weight."""
    if not found:
        return []
    starts: list[float | None] = [None] * len(found)
    for char, ms in sorted(marks):
        for k, unit in enumerate(found):
            if unit.start <= char < unit.end and starts[k] is None:
                starts[k] = min(max(ms, start_ms), end_ms)
                break
    starts[0] = start_ms if found else None
    # Fill the gaps by weight, between the known starts around them (end_ms after the last).
    k = 0
    while k < len(found):
        if starts[k] is not None:
            k += 1
            continue
        j = k
        while j < len(found) and starts[j] is None:
            j += 1
        before = starts[k - 1]
        assert before is not None
        after = starts[j] if j < len(found) else end_ms
        weights = [found[i].weight for i in range(k - 1, j)]
        total = sum(weights) or 1.0
        acc = 0.0
        for i in range(k, j):
            acc += weights[i - k]
            starts[i] = before + (after - before) * acc / total  # type: ignore[operator]
        k = j
    timed = []
    monotonic = start_ms
    for k, unit in enumerate(found):
        begin = max(monotonic, starts[k] or start_ms)
        monotonic = begin
        timed.append(Timed(unit.text, offset + unit.start, offset + unit.end, begin, begin))
    return _close(timed, end_ms)


def _close(timed: list[Timed], end_ms: float) -> list[Timed]:
    """Each unit ends where the next starts; the last where the audio ends."""
    closed = []
    for k, item in enumerate(timed):
        until = timed[k + 1].start_ms if k + 1 < len(timed) else end_ms
        closed.append(Timed(item.text, item.start_char, item.end_char, item.start_ms, until))
    return closed


def source_offset(pieces: Sequence[Piece], spoken_offset: int) -> int:
    """Where in the segment's text the character ``spoken_offset`` of its spoken form
    comes from (``PreparedText.pieces`` maps one to the other)."""
    at = 0
    for piece in pieces:
        if spoken_offset < at + len(piece.spoken):
            within = spoken_offset - at
            if piece.source == piece.spoken:
                return piece.start + within
            return piece.start  # a rewritten piece (a number, a symbol): its start
        at += len(piece.spoken)
    return pieces[-1].end if pieces else 0


def for_segment(
    text: str,
    offset: int,
    pieces: Sequence[Piece],
    span: SegmentSpan,
    rate_hz: int,
    marks: Sequence[tuple[int, int]] | None,
) -> tuple[list[Timed], bool]:
    """A finished segment's units timed: ``(timed, estimated)``.

    ``text`` is the segment as the client wrote it (at ``offset`` in the context's text),
    ``pieces`` how it was prepared, ``span`` where its audio was sent (at ``rate_hz``),
    ``marks`` the engine's word starts ``(offset in the spoken text, engine sample)``, if
    it gave any."""
    found = units(text)
    if not found:  # nothing in it reads as a unit (only punctuation): no items
        return [], not marks
    start_ms = span.start_sample * 1000 / rate_hz
    end_ms = span.end_sample * 1000 / rate_hz
    if marks:
        timed = [
            (source_offset(pieces, char), span.output_sample(sample) * 1000 / rate_hz)
            for char, sample in marks
        ]
        return from_marks(found, timed, offset, start_ms, end_ms), False
    return estimate(found, offset, start_ms, end_ms), True
