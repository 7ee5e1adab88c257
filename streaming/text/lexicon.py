"""A pronunciation lexicon the user controls: written form -> spoken form, applied first.

Entries come from a server-wide file (one entry a line, ``written<TAB>spoken`` or
``written=spoken``, ``#`` comments), from a request, or from a WebSocket context's
``start``; a context's or request's entries win over the file's. An entry is applied
before every other rule (before numbers are read), longest written form first, and its
spoken form is read by the same rules (``G7=G七`` and ``G7=G 7`` say the same). ChatTTS
takes characters, not pinyin: a polyphone is fixed by a homophone (``行长=航长``).

A written form that starts or ends with a Latin letter or a digit matches only whole
(``AI=人工智能`` does not touch ``MAIL``); Chinese written forms match anywhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from streaming.text.prepare import prepare_text

__all__ = ["Entry", "Lexicon", "LexiconError", "LexiconSettings"]


class LexiconError(ValueError):
    """A lexicon that cannot be used; the message names the entry (and the line)."""


@dataclass(frozen=True)
class LexiconSettings:
    """How large a lexicon may be (server settings)."""

    max_entries: int = 10000
    max_written_chars: int = 64
    max_spoken_chars: int = 128


@dataclass(frozen=True)
class Entry:
    """One entry: ``spoken`` is said for ``written``; ``origin`` says where it came from
    ("lexicon.txt:3", "request", "context")."""

    written: str
    spoken: str
    origin: str


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u2028\u2029]")


def _is_alnum(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


@dataclass(frozen=True)
class Lexicon:
    """Entries by written form, and an index by first character for matching."""

    entries: tuple[Entry, ...] = ()
    _index: dict[str, tuple[Entry, ...]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        index: dict[str, list[Entry]] = {}
        for entry in self.entries:
            index.setdefault(entry.written[0], []).append(entry)
        for first, entries in index.items():
            entries.sort(key=lambda e: len(e.written), reverse=True)
            self._index[first] = tuple(entries)

    def __len__(self) -> int:
        return len(self.entries)

    @classmethod
    def parse(cls, text: str, *, source: str, limits: LexiconSettings) -> Lexicon:
        """A lexicon file's text; :class:`LexiconError` names the first bad line."""
        pairs: list[tuple[str, str, str, str]] = []
        for number, line in enumerate(text.splitlines(), start=1):
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            if "\t" in line:
                written, _, spoken = line.partition("\t")
            elif "=" in line:
                written, _, spoken = line.partition("=")
            else:
                raise LexiconError(
                    f"{source} line {number}: no separator: write written<TAB>spoken "
                    "or written=spoken"
                )
            where = f"{source} line {number}: "
            pairs.append((written.strip(), spoken.strip(), f"{source}:{number}", where))
        return cls.build(pairs, limits=limits)

    @classmethod
    def from_mapping(
        cls, mapping: Mapping[str, str], *, origin: str, limits: LexiconSettings
    ) -> Lexicon:
        """A request's or a context's entries (``{"written": "spoken"}``)."""
        pairs = ((w, s, origin, f"{origin} entry {str(w)[:40]!r}: ") for w, s in mapping.items())
        return cls.build(pairs, limits=limits)

    @classmethod
    def build(
        cls, pairs: Iterable[tuple[str, str, str, str]], *, limits: LexiconSettings
    ) -> Lexicon:
        """(written, spoken, origin, where) checked against ``limits`` and made speakable;
        the first problem raises, its message starting with ``where``."""
        entries: dict[str, Entry] = {}
        for written, spoken, origin, where in pairs:
            _check(written, spoken, where, limits)
            if written in entries:
                raise LexiconError(
                    f"{where}{written!r} is already given (at {entries[written].origin})"
                )
            if len(entries) >= limits.max_entries:
                raise LexiconError(f"{where}more than {limits.max_entries} entries")
            entries[written] = Entry(written, _speakable(spoken, where), origin)
        return cls(tuple(entries.values()))

    def merged(self, over: Lexicon | None) -> Lexicon:
        """This lexicon with ``over``'s entries added, winning for the same written form."""
        if over is None or not over.entries:
            return self
        if not self.entries:
            return over
        mine = {e.written: e for e in self.entries}
        mine.update((e.written, e) for e in over.entries)
        return Lexicon(tuple(mine.values()))

    def matches(self, text: str) -> Iterator[tuple[int, int, Entry]]:
        """(start, end, entry) for each match, left to right, longest first, no overlap."""
        i = 0
        while i < len(text):
            for entry in self._index.get(text[i], ()):
                end = i + len(entry.written)
                if text.startswith(entry.written, i) and _whole(text, i, end):
                    yield i, end, entry
                    i = end
                    break
            else:
                i += 1


def _whole(text: str, start: int, end: int) -> bool:
    """A Latin or digit edge of a match is not glued to another letter or digit."""
    if _is_alnum(text[start]) and start > 0 and _is_alnum(text[start - 1]):
        return False
    return not (_is_alnum(text[end - 1]) and end < len(text) and _is_alnum(text[end]))


def _check(written: str, spoken: str, where: str, limits: LexiconSettings) -> None:
    if not isinstance(written, str) or not isinstance(spoken, str):
        raise LexiconError(f"{where}written and spoken forms must be strings")
    if not written.strip():
        raise LexiconError(f"{where}the written form is empty")
    if not spoken.strip():
        raise LexiconError(f"{where}the spoken form is empty")
    if written != written.strip():
        raise LexiconError(f"{where}the written form starts or ends with a blank")
    if len(written) > limits.max_written_chars:
        raise LexiconError(
            f"{where}the written form is longer than {limits.max_written_chars} characters"
        )
    if len(spoken) > limits.max_spoken_chars:
        raise LexiconError(
            f"{where}the spoken form is longer than {limits.max_spoken_chars} characters"
        )
    if _CONTROL.search(written) or _CONTROL.search(spoken) or "\n" in written + spoken:
        raise LexiconError(f"{where}control characters and line breaks are not allowed")


def _speakable(spoken: str, where: str) -> str:
    """The spoken form as the engine will say it (numbers in it read); refuses one with
    nothing to say or with something that would be dropped."""
    prepared = prepare_text(spoken, normalizer=_unchanged)
    if not prepared.spoken:
        raise LexiconError(f"{where}the spoken form {spoken[:40]!r} has nothing to say")
    if prepared.removed:
        dropped = "".join(r.chars for r in prepared.removed)
        raise LexiconError(
            f"{where}the spoken form has characters that cannot be said: {dropped!r}"
        )
    return prepared.spoken


def _unchanged(text: str) -> str:
    """A normaliser that changes nothing: the front-end's own rules read the numbers."""
    return text
