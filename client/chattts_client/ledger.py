"""What a context said and what of it was heard, across the server contexts that spoke it.

Pure and synchronous: the resuming client (:mod:`chattts_client.resume`) feeds it the
text it accepts and the events each server context ("part") sends, and reads back where
to resume and the events rewritten onto one coherent stream for the caller.

When is a segment heard? A server speaks a context's segments one at a time, on one
socket, in order: a segment's ``segment`` event, its audio frames, its ``timestamps``
(contexts started with ``timestamps``), then the next segment's event. So a segment's
audio has fully arrived once its ``timestamps``, the *next* segment's event or the
part's ``done`` arrives. The last segment with an event and none of those is "open": its
audio may have been cut. Resuming starts at the open segment's first character, so
it is heard again from its start (announced by a ``resumed`` event), or, with no open
segment, at the first character no segment event has covered yet.

What the caller sees across legs (every part numbers from zero; the ledger offsets it):

- ``stream`` stays the context's first stream number;
- ``segment`` indices continue, except that a segment heard again keeps its index (the
  ``resumed`` event names it); ``start_char``/``end_char`` stay offsets in the text the
  caller sent;
- frames keep counting ``sequence`` without a gap, and ``audio_start_sample``/timestamp
  milliseconds are positions in the audio the caller received, all legs joined (the
  cut part of a repeated segment included);
- one ``started`` (the first), one ``done``: ``segments`` counts distinct segments,
  ``audio_samples`` every sample received.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from chattts_client.wire import ONE_BYTE_ENCODINGS, AudioFrame

__all__ = ["ContextLedger", "Part", "Span"]


@dataclass
class Span:
    """Where one leg's numbers start in the context's own (set when it becomes live)."""

    index: int
    sample: int
    #: A segment cut on the previous part is heard again from its start on this one.
    repeated: bool


@dataclass
class Part:
    """The part of the text one server context (a "part") speaks: from ``base_char`` on."""

    base_char: int
    #: Characters sent to it, and how many of them it has finished with (its segments
    #: up to the latest event's start, all of them at ``done``): the difference is what
    #: it may still hold, which the server's ``max_buffered_chars`` bounds.
    sent_chars: int = 0
    finished_chars: int = 0
    span: Span | None = None

    @property
    def unfinished_chars(self) -> int:
        return self.sent_chars - self.finished_chars


class ContextLedger:
    """One context's text and what of it was heard (see the module docstring)."""

    def __init__(self, context_id: str) -> None:
        self.context_id = context_id
        #: Every character accepted for the context, in order.
        self.text = ""
        self.ended = False
        #: Set by the first part's ``started``: what every later part is opened with.
        self.stream: int | None = None
        self.sample_rate_hz = 24000
        #: What fixes how it sounds, as ``started`` reported it (the seed the server
        #: picked when the caller gave none): every later part starts with the same.
        self.voice: dict[str, Any] = {}
        #: Characters before this are heard completely (or failed on the server).
        self.heard_chars = 0
        #: The segment whose audio may have been cut: (index, start_char, end_char).
        self.open_segment: tuple[int, int, int] | None = None
        self.next_index = 0
        self.segments = 0  # distinct segments with an event (a repeated one once)
        self.samples = 0
        self.bytes_per_sample = 2
        self.sequence = 0

    def accept(self, text: str) -> None:
        self.text += text

    def resume_char(self) -> int:
        """Where a new part starts after the live one died: the open segment's start, or
        the first character no segment has covered yet."""
        return self.open_segment[1] if self.open_segment else self.heard_chars

    def begin(self, part: Part) -> Span:
        """``part`` becomes the one heard now: its numbers follow what was heard."""
        repeated = self.open_segment is not None and self.open_segment[1] == part.base_char
        index = self.open_segment[0] if repeated and self.open_segment else self.next_index
        part.span = Span(index=index, sample=self.samples, repeated=repeated)
        self.open_segment = None
        return part.span

    def finish(self, part: Part, covered_chars: int) -> None:
        """The part's ``done`` arrived: its first ``covered_chars`` characters are done."""
        self.open_segment = None
        self.heard_chars = max(self.heard_chars, part.base_char + covered_chars)
        part.finished_chars = part.sent_chars

    # --- the caller's view of a part's events ----------------------------------------

    def started(self, event: dict[str, Any], stream: int) -> dict[str, Any]:
        """The first part's ``started``: the context's numbers and voice from now on."""
        self.stream = stream
        self.sample_rate_hz = int(event.get("sample_rate") or self.sample_rate_hz)
        self.bytes_per_sample = 1 if event.get("encoding") in ONE_BYTE_ENCODINGS else 2
        self.voice = {name: event.get(name) for name in ("voice", "seed", "speed", "sample_rate")}
        # The frames' encoding and length, where the context chose them, go with it too.
        self.voice |= {k: event[k] for k in ("encoding", "frame_ms") if event.get(k) is not None}
        return {**event, "context_id": self.context_id, "stream": stream}

    def segment(self, part: Part, event: dict[str, Any]) -> dict[str, Any]:
        span = _span(part)
        start_char = part.base_char + int(event["start_char"])
        index = span.index + int(event["index"])
        # Everything before this segment is done: heard, or failed on the server.
        self.heard_chars = max(self.heard_chars, start_char)
        part.finished_chars = max(part.finished_chars, int(event["start_char"]))
        if index >= self.next_index:  # not the repeat of a cut segment
            self.segments += 1
        end_char = part.base_char + int(event["end_char"])
        self.open_segment = (index, start_char, end_char)
        self.next_index = index + 1
        sample = span.sample + int(event["audio_start_sample"])
        return {
            **event,
            "context_id": self.context_id,
            "stream": self.stream,
            "index": index,
            "start_char": start_char,
            "end_char": end_char,
            "audio_start_sample": sample,
            "audio_start_ms": self._ms(sample),
        }

    def frame(self, part: Part, frame: AudioFrame) -> AudioFrame:
        span = _span(part)
        assert self.stream is not None
        rewritten = replace(
            frame, stream=self.stream, segment=span.index + frame.segment, sequence=self.sequence
        )
        self.sequence += 1
        self.samples += len(frame.pcm) // self.bytes_per_sample
        return rewritten

    def timestamps(self, part: Part, event: dict[str, Any]) -> dict[str, Any]:
        span = _span(part)
        index = span.index + int(event["index"])
        if self.open_segment is not None and self.open_segment[0] == index:
            # Sent after the segment's last frame: its audio is all here.
            self.heard_chars = max(self.heard_chars, self.open_segment[2])
            self.open_segment = None
        shift_ms = self._ms(span.sample)
        items = [
            {
                **item,
                "start_char": part.base_char + int(item["start_char"]),
                "end_char": part.base_char + int(item["end_char"]),
                "start_ms": round(item["start_ms"] + shift_ms, 1),
                "end_ms": round(item["end_ms"] + shift_ms, 1),
            }
            for item in event.get("items", [])
        ]
        return {
            **event,
            "context_id": self.context_id,
            "stream": self.stream,
            "index": index,
            "start_ms": round(event["start_ms"] + shift_ms, 1),
            "end_ms": round(event["end_ms"] + shift_ms, 1),
            "items": items,
        }

    def warning(self, part: Part, event: dict[str, Any]) -> dict[str, Any]:
        removed = [
            {**r, "start": part.base_char + int(r["start"])} for r in event.get("removed", [])
        ]
        return {**event, "context_id": self.context_id, "removed": removed}

    def done(self, event: dict[str, Any]) -> dict[str, Any]:
        """The context's one ``done``: totals over every part."""
        self.open_segment = None
        return {
            **event,
            "context_id": self.context_id,
            "stream": self.stream,
            "segments": self.segments,
            "audio_samples": self.samples,
            "audio_ms": self._ms(self.samples),
        }

    def resumed(self, part: Part, reason: str, attempts: int) -> dict[str, Any]:
        """The client's ``resumed`` event: where the new part's audio and text begin."""
        span = _span(part)
        return {
            "type": "resumed",
            "context_id": self.context_id,
            "stream": self.stream,
            "index": span.index,
            "repeated": span.repeated,
            "start_char": part.base_char,
            "audio_start_sample": span.sample,
            "audio_start_ms": self._ms(span.sample),
            "reason": reason,
            "attempts": attempts,
        }

    def _ms(self, samples: int) -> float:
        return round(samples * 1000 / self.sample_rate_hz, 1)


def _span(part: Part) -> Span:
    if part.span is None:
        raise RuntimeError("a part's events are rewritten only once it is live")
    return part.span
