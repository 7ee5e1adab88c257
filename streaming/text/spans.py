"""What every span rule is given: the segment, and how it may be read."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from streaming.text.tokens import Token

#: A text normaliser: text in, speakable text out, no alignment (the library's shape).
Normalizer = Callable[[str], str]


class WrittenEntry(Protocol):
    """One user entry as the rules read it (streaming.text.lexicon.Entry)."""

    @property
    def spoken(self) -> str: ...

    @property
    def origin(self) -> str: ...


class Entries(Protocol):
    """A user's entries as the rules read them (streaming.text.lexicon.Lexicon): each
    match of a written form in a text, as (start, end, entry)."""

    def matches(self, text: str) -> Iterator[tuple[int, int, WrittenEntry]]: ...


@dataclass(frozen=True)
class Spans:
    """One segment as the span rules see it.

    ``text`` is the segment with full-width digits, letters and number marks folded to
    ASCII (same length, same offsets), so rules match one alphabet; ``original`` is the
    segment as written. ``normalizer`` is None when no library is loaded: numbers are
    then dropped and reported, not guessed. ``lexicon`` holds the user's entries;
    ``before`` is the end of the previous segment of the same stream (folded too), where a
    cue word may stand.
    """

    text: str
    original: str
    normalizer: Normalizer | None
    allow_tags: bool
    lexicon: Entries | None = None
    before: str = ""

    def lookbehind(self, start: int) -> tuple[str, int]:
        """(text, position) to look for a cue word before ``text[start]``: the segment
        with the end of the one before it (a cut after "验证码：" keeps its cue)."""
        return self.before + self.text, start + len(self.before)


#: A span rule finds spans in the segment and says what each becomes.
SpanRule = Callable[[Spans], Iterator["Token"]]
