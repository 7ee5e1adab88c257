"""Sentences as assistants and service bots write them, with what a listener expects.

The rows live in tests/streaming/corpus/: each ``*.tsv`` file there holds rows
``category<TAB>text<TAB>expected``; ``expected`` lists the readings a Chinese listener
accepts, separated by ``|``. Lines starting with ``#``
are comments; ``\n`` in a text is a line break (``\neq`` is LaTeX). What is compared is what is heard: the words, not the blanks between
Chinese and other words nor the pauses (punctuation), which the segmenter and the
engine shape; letters spelled apart (``G P U``) still differ from a word (``GPU``).

- ``assistants.tsv``: the corpus the rules are built and tested against
  (tests/server/test_text_corpus.py, bench/text_frontend.py);
- ``other_domains.tsv``: held out (other domains), only measured, never tuned on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parents[1] / "tests" / "streaming" / "corpus"

_PAUSES = re.compile(r"[，。、,.!?;:！？；：…\s]+")


@dataclass(frozen=True)
class Row:
    category: str
    text: str
    expected: tuple[str, ...]
    line: int


def load(name: str) -> list[Row]:
    """The rows of ``name`` (``assistants`` or ``other_domains``)."""
    rows: list[Row] = []
    path = CORPUS_DIR / f"{name}.tsv"
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        category, text, expected = line.split("\t")
        text = re.sub(r"\\n(?![a-z])", "\n", text)  # not LaTeX's \neq, \nu
        rows.append(Row(category, text, tuple(expected.split("|")), number))
    return rows


def heard(spoken: str) -> str:
    """What a listener tells apart: words, with a blank kept only between two Latin
    letters or digits (``G P U`` is not ``GPU``); pauses and other blanks dropped."""
    parts = [p for p in _PAUSES.split(spoken) if p]
    out = ""
    for part in parts:
        if (
            out
            and out[-1].isascii()
            and out[-1].isalnum()
            and part[0].isascii()
            and part[0].isalnum()
        ):
            out += " "
        out += part
    return out


def is_heard_right(spoken: str, row: Row) -> bool:
    """Whether ``spoken`` is heard as one of the row's expected readings."""
    return heard(spoken) in {heard(e) for e in row.expected}
