"""What a listener of a resumed context heard, checked against what was sent (the client
resumption tests: tests/client/test_resume.py, tests/fleet/test_resume.py)."""

from __future__ import annotations

import asyncio
import itertools

from chattts_client import ContextResult, StreamClient


async def send_like_an_llm(
    client: StreamClient,
    context_id: str,
    text: str,
    *,
    chars: int = 3,
    interval_s: float = 0.05,
    halfway: asyncio.Event | None = None,
) -> None:
    """Send ``text`` in deltas of ``chars`` every ``interval_s``, then ``end``; set
    ``halfway`` once a third of it went out."""
    for start in range(0, len(text), chars):
        await client.send_text(text[start : start + chars], context_id)
        if halfway is not None and start >= len(text) // 3:
            halfway.set()
        await asyncio.sleep(interval_s)
    await client.end(context_id)


def heard_once(result: ContextResult, text: str) -> int:
    """Assert the context was spoken completely and in order, checked against the input
    slices of its `segment` events; return how many segments were heard twice (each
    announced by a `resumed` event with `repeated`)."""
    assert result.errors == [], result.errors
    assert result.done is not None and not result.done["cancelled"]
    final: dict[int, dict[str, object]] = {}
    for segment in result.segments:
        final[segment["index"]] = segment  # a repeated segment: its second hearing counts
        assert text[segment["start_char"] : segment["end_char"]] == segment["text"]
    ordered = [final[i] for i in sorted(final)]
    assert "".join(str(s["text"]) for s in ordered) == text
    assert all(a["end_char"] == b["start_char"] for a, b in itertools.pairwise(ordered))
    repeats = len(result.segments) - len(final)
    assert repeats == sum(bool(r["repeated"]) for r in result.resumed)
    # One stream for the caller: frames numbered without a gap, totals over every server.
    assert [f.sequence for f in result.frames] == list(range(len(result.frames)))
    assert result.done["audio_samples"] == result.samples
    assert result.done["segments"] == len(final)
    return repeats
