"""What the listener heard: the text of a context up to a point of its audio.

Voice agents cut their transcript of the bot's turn where the listener interrupted it.
Given the ``timestamps`` events of a context (sent after each segment's audio when the
context was started with ``timestamps=True``) and how much of its audio the listener
heard, :func:`spoken_so_far` returns the text said by then. A unit (a Chinese
character, a Latin word, with the punctuation after it) counts as said once it has
started: an interrupted word was heard in part, and is kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["items", "spoken_so_far"]


def items(timestamps: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The timed units of ``timestamps`` events, in order."""
    for event in sorted(timestamps, key=lambda e: e["index"]):
        yield from event["items"]


def spoken_so_far(timestamps: Iterable[dict[str, Any]], heard_ms: float) -> str:
    """The text heard by ``heard_ms`` (milliseconds of the context's audio)."""
    return "".join(item["text"] for item in items(timestamps) if item["start_ms"] <= heard_ms)
