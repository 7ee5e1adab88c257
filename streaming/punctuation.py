"""The one punctuation table: what each mark means to segmentation, speech and joins.

Three parts of the pipeline look at punctuation, and they must agree:

- the segmenter (:mod:`streaming.segment`) cuts at sentence and clause ends, keeps the
  closers after a mark with it, and never cuts inside a quote or bracket;
- text preparation (:mod:`streaming.text`) says each mark as the pause ChatTTS knows
  (``。`` a stop, ``，`` a comma, ``、`` an enumeration), or drops it;
- segment joins (:mod:`streaming.joins`) choose the pause after a segment by the mark
  that ends it.

Every mark is one row of :data:`MARKS`; every opener/closer pair is one entry of
:data:`PAIRS`. Symbols that are not punctuation but are read as a pause (``<``, ``|``:
ChatTTS's own simplifier turns ``<>`` into commas, and ``|`` separates table cells) are
:data:`PAUSE_SYMBOLS`: unlike punctuation they are reported, because the character
itself is not what reaches the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = [
    "ASCII_CLAUSE_MARKS",
    "ASCII_SENTENCE_MARKS",
    "CJK_CLAUSE_MARKS",
    "CJK_SENTENCE_MARKS",
    "CLOSERS",
    "CLOSER_ALIASES",
    "MARKS",
    "NEWLINES",
    "OPENERS",
    "PAIRS",
    "PAUSE_SYMBOLS",
    "STRAIGHT_QUOTES",
    "WORD_JOINERS",
    "Cut",
    "Mark",
    "Said",
    "join_pause_class",
    "said_as",
]


class Cut(Enum):
    """Where the segmenter may cut after a mark."""

    SENTENCE = "sentence"  # always a sentence end (CJK marks)
    ASCII_SENTENCE = "ascii_sentence"  # a sentence end unless glued, an abbreviation...
    CLAUSE = "clause"  # the first segment of an utterance may end here
    ASCII_CLAUSE = "ascii_clause"  # a clause end unless inside a number (12:30, 1,000)
    NONE = "none"


class Said(Enum):
    """How text preparation says a mark to the engine."""

    STOP = "stop"  # 。
    COMMA = "comma"  # ，
    ENUMERATION = "enumeration"  # 、
    GAP = "gap"  # a word break, when between two words ("well-known", "snake_case")
    DROPPED = "dropped"  # not said, reported as removed punctuation


@dataclass(frozen=True)
class Mark:
    cut: Cut
    said: Said
    #: Key of ``streaming.joins.PAUSE_MS`` for a segment ending with this mark; None: "cut".
    join_pause: str | None = None


_S, _C = Cut.SENTENCE, Cut.CLAUSE
# fmt: off
MARKS: dict[str, Mark] = {
    # Sentence ends.
    "。": Mark(_S, Said.STOP, "sentence"),
    "！": Mark(_S, Said.STOP, "sentence"),
    "？": Mark(_S, Said.STOP, "sentence"),
    "｡": Mark(_S, Said.STOP, "sentence"),  # halfwidth ideographic full stop
    "…": Mark(_S, Said.STOP, "ellipsis"),
    "⋯": Mark(_S, Said.STOP, "ellipsis"),  # midline ellipsis, written ⋯⋯ like ……
    "；": Mark(_S, Said.COMMA, "semicolon"),
    ".": Mark(Cut.ASCII_SENTENCE, Said.STOP, "sentence"),
    "!": Mark(Cut.ASCII_SENTENCE, Said.STOP, "sentence"),
    "?": Mark(Cut.ASCII_SENTENCE, Said.STOP, "sentence"),
    # Inside full-width numbers (３．１４) as often as at a sentence end: not a cut.
    "．": Mark(Cut.NONE, Said.STOP, "sentence"),
    # Clause marks.
    "，": Mark(_C, Said.COMMA, "comma"),
    "、": Mark(_C, Said.ENUMERATION, "comma"),
    "：": Mark(_C, Said.COMMA, "semicolon"),
    ",": Mark(Cut.ASCII_CLAUSE, Said.COMMA, "comma"),
    ";": Mark(Cut.ASCII_CLAUSE, Said.COMMA, "semicolon"),
    ":": Mark(Cut.ASCII_CLAUSE, Said.COMMA, "semicolon"),
    # Dashes: a pause inside a sentence.
    "—": Mark(Cut.NONE, Said.COMMA), "–": Mark(Cut.NONE, Said.COMMA),
    "―": Mark(Cut.NONE, Said.COMMA), "－": Mark(Cut.NONE, Said.COMMA),
    "-": Mark(Cut.NONE, Said.COMMA),
    # Joiners of words.
    "_": Mark(Cut.NONE, Said.DROPPED),
}
# fmt: on

#: Openers and the closers that close them: every bracket pair of the CJK punctuation,
#: vertical, small and full-width form blocks, ASCII's, and the Latin quotes. Brackets
#: and corner quotes are said as a comma (as ChatTTS's own simplifier does); quotes
#: are dropped (see _QUOTES_DROPPED).
# fmt: off
PAIRS: dict[str, str] = {
    "“": "”", "‘": "’", "«": "»", "‹": "›", "〝": "〞",
    "（": "）", "(": ")", "「": "」", "『": "』", "【": "】", "《": "》", "〈": "〉",
    "\u2329": "\u232a", "⟨": "⟩", "[": "]", "{": "}", "〔": "〕", "〖": "〗", "〘": "〙",
    "〚": "〛", "［": "］", "｛": "｝", "｟": "｠", "｢": "｣",
    # Vertical presentation forms and small forms (as pasted from vertical layouts).
    "︵": "︶", "︷": "︸", "︹": "︺", "︻": "︼", "︽": "︾", "︿": "﹀", "﹁": "﹂",
    "﹃": "﹄", "﹇": "﹈", "︗": "︘", "﹙": "﹚", "﹛": "﹜", "﹝": "﹞",
}
# fmt: on
#: Closers that also close another pair: 〝 is closed by 〞 or by the low 〟 alike.
CLOSER_ALIASES: dict[str, str] = {"〟": "〞"}
#: Quotes that open and close alike; quote parity decides which.
STRAIGHT_QUOTES = frozenset("\"'")
#: Full-width straight quotes: taken as closers after a sentence end.
_FULLWIDTH_STRAIGHT_QUOTES = frozenset("＂＇")
_QUOTES_DROPPED = frozenset("“”‘’«»‹›〝〞〟\"'＂＇")

OPENERS = frozenset(PAIRS)
CLOSERS = frozenset(PAIRS.values()) | frozenset(CLOSER_ALIASES) | _FULLWIDTH_STRAIGHT_QUOTES
NEWLINES = frozenset("\n\r\u2028\u2029")

#: Symbols read as a pause (a comma) and reported, since the symbol itself is not said.
PAUSE_SYMBOLS = frozenset("<>＜＞|｜")
#: Between a letter or digit and a letter these join words ("well-known", "snake_case")
#: and are said as the word break they stand for.
WORD_JOINERS = frozenset("-－_")

CJK_SENTENCE_MARKS = frozenset(m for m, row in MARKS.items() if row.cut is Cut.SENTENCE)
ASCII_SENTENCE_MARKS = frozenset(m for m, row in MARKS.items() if row.cut is Cut.ASCII_SENTENCE)
CJK_CLAUSE_MARKS = frozenset(m for m, row in MARKS.items() if row.cut is Cut.CLAUSE)
ASCII_CLAUSE_MARKS = frozenset(m for m, row in MARKS.items() if row.cut is Cut.ASCII_CLAUSE)


def said_as(ch: str) -> Said | None:
    """How text preparation says ``ch`` if it is punctuation or a pause symbol, else None."""
    row = MARKS.get(ch)
    if row is not None:
        return row.said
    if ch in _QUOTES_DROPPED:
        return Said.DROPPED
    if ch in OPENERS or ch in CLOSERS or ch in PAUSE_SYMBOLS:
        return Said.COMMA
    return None


def join_pause_class(ch: str) -> str:
    """The ``PAUSE_MS`` key after a segment whose text ends with mark ``ch`` ("cut": none)."""
    row = MARKS.get(ch)
    return row.join_pause if row is not None and row.join_pause else "cut"
