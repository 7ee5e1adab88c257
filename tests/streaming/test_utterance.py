"""One utterance without I/O: what its client is sent of each speech event, and its tally."""

from __future__ import annotations

import json

import numpy as np
import pytest

from streaming import protocol as p
from streaming.segment import Segment, Segmenter, SegmenterSettings
from streaming.speech import SegmentStart
from streaming.text import Removal
from streaming.utterance import (
    FellBack,
    Frames,
    Retried,
    SegmentStarted,
    SpeechEvent,
    Timed,
    UtteranceState,
    UtteranceTally,
    UtteranceVoice,
    WithoutAudio,
)

SEGMENT = Segment(index=2, text="你好，世界。", start=10, end=16, reason="sentence")
START = SegmentStart(removed=(), audio_start_sample=4800, speaks=True)
REMOVED = SegmentStart(
    removed=(Removal(12, "☃", "unspeakable"),), audio_start_sample=4800, speaks=True
)


def utterance(rate_hz: int = 24000) -> UtteranceState:
    voice = UtteranceVoice(voice="alto", seed=7, speed=1.0, sample_rate_hz=rate_hz)
    return UtteranceState("a", 3, voice, Segmenter(SegmenterSettings()))


def sent(state: UtteranceState, event: SpeechEvent) -> list[dict[str, object] | bytes]:
    """What the client gets of ``event``: JSON messages as dicts, frames as bytes."""
    out: list[dict[str, object] | bytes] = []
    for item in state.heard(SEGMENT, "你好，世界。", event):
        out.append(b"".join(item) if isinstance(item, tuple) else json.loads(item.to_json()))
    return out


TIMED = Timed(index=2, start_ms=200.0, end_ms=900.0, estimated=True, items=[])

#: Each event, and the (type, code) of the messages it becomes, in order.
MESSAGES: list[tuple[SpeechEvent, list[tuple[str, str | None]]]] = [
    (SegmentStarted(START), [("segment", None)]),
    (SegmentStarted(REMOVED), [("warning", "unspeakable_characters"), ("segment", None)]),
    (FellBack(), [("warning", "fallback_voice")]),
    (Retried(2, 7, 8, 0.0, 0.5), [("warning", "segment_retried")]),
    (WithoutAudio(2, 0.1, 0.5, retried=True), [("warning", "segment_without_audio")]),
    (TIMED, [("timestamps", None)]),
]


@pytest.mark.parametrize(("event", "expected"), MESSAGES)
def test_each_event_becomes_its_messages(
    event: SpeechEvent, expected: list[tuple[str, str | None]]
) -> None:
    """Every speech event but audio becomes the messages the protocol defines for it."""
    messages = sent(utterance(), event)
    assert [(m["type"], m.get("code")) for m in messages if isinstance(m, dict)] == expected
    assert all(isinstance(m, dict) and m["context_id"] == "a" for m in messages)


def test_a_segment_event_says_where_its_text_and_audio_start() -> None:
    """The segment event carries the slice, what is spoken, and its audio start in ms."""
    (message,) = sent(utterance(rate_hz=16000), SegmentStarted(START))
    assert message == {
        "type": "segment", "context_id": "a", "stream": 3, "index": 2, "text": "你好，世界。",
        "spoken": "你好，世界。", "start_char": 10, "end_char": 16,
        "audio_start_sample": 4800, "audio_start_ms": 300.0,
    }  # fmt: skip


def test_retry_and_report_name_their_segment() -> None:
    """A segment warning names the segment it is about and says why."""
    (retried,) = sent(utterance(), Retried(2, 7, 8, 0.0, 0.5))
    (without,) = sent(utterance(), WithoutAudio(2, 0.1, 0.5, retried=False))
    assert isinstance(retried, dict) and isinstance(without, dict)
    assert (retried["segment"], without["segment"]) == (2, 2)
    assert "seed 8" in str(retried["message"])
    assert "had been sent" in str(without["message"])


def test_frames_are_numbered_counted_and_sent_as_pcm16() -> None:
    """Each non-empty frame gets the header (stream, segment, sequence) and counts."""
    state = utterance()
    ones = np.full(240, 0.5, dtype=np.float32)
    frames = sent(state, Frames([ones, np.zeros(0, dtype=np.float32), ones[:120]]))
    assert [p.unpack_audio_header(f)[:3] for f in frames if isinstance(f, bytes)] == [
        (3, 2, 0),
        (3, 2, 1),
    ]
    assert [len(f) for f in frames] == [p.AUDIO_HEADER_BYTES + 480, p.AUDIO_HEADER_BYTES + 240]
    assert (state.sequence, state.tally.samples) == (2, 360)


def test_no_frame_after_a_cancel_even_within_one_event() -> None:
    """Frames are made as they are taken: a cancel between two stops the rest uncounted."""
    state = utterance()
    frames = state.heard(SEGMENT, "", Frames([np.ones(100, dtype=np.float32)] * 3))
    first = next(iter(frames))
    state.cancelled = True
    assert isinstance(first, tuple) and list(frames) == []
    assert state.tally.samples == 100


def test_done_reports_the_tally() -> None:
    """``done`` carries what the utterance said, its audio in ms at its own rate."""
    state = utterance(rate_hz=16000)
    state.tally.count(SegmentStarted(START))
    list(state.heard(SEGMENT, "", Frames([np.ones(800, dtype=np.float32)])))
    state.cancelled = True
    assert json.loads(state.done().to_json()) == {
        "type": "done", "context_id": "a", "stream": 3, "segments": 1,
        "audio_samples": 800, "audio_ms": 50.0, "cancelled": True,
    }  # fmt: skip


def test_the_tally_counts_each_kind_of_event() -> None:
    """Segments, removals, fallbacks, retries and reports are counted; audio is not
    (samples are counted where they are delivered)."""
    tally = UtteranceTally()
    events: list[SpeechEvent] = [
        SegmentStarted(REMOVED),
        FellBack(),
        Frames([np.ones(100, dtype=np.float32)]),
        Retried(2, 7, 8, 0.0, 0.5),
        WithoutAudio(3, 0.0, 0.5, retried=True),
        TIMED,
    ]
    removed = [tally.count(event) for event in events]
    assert removed == [1, 0, 0, 0, 0, 0]
    assert (tally.segments, tally.removed_chars, tally.fallback_segments) == (1, 1, 1)
    assert (tally.retried, tally.without_audio, tally.samples) == ([(2, 8)], [3], 0)


def test_removals_counted_up_front_are_not_counted_again() -> None:
    """An interface that counted removals before speaking (HTTP) still learns them."""
    tally = UtteranceTally(removed_chars=1)
    assert tally.count(SegmentStarted(REMOVED), removals=False) == 1
    assert (tally.removed_chars, tally.segments) == (1, 1)


def test_a_failure_is_counted_and_reported_without_internals() -> None:
    """A failed segment's error names the segment; an internal error says no more."""
    state = utterance()
    internal = state.failed(SEGMENT, "internal_error", "KeyError: 'x'")
    timeout = state.failed(SEGMENT, "synthesis_timeout", "waited 30 s")
    assert (internal.code, internal.message) == ("internal_error", "segment 2 could not be spoken")
    assert (timeout.code, timeout.message) == ("synthesis_timeout", "segment 2: waited 30 s")
    assert {internal.context_id, timeout.context_id} == {"a"}
    assert state.tally.failures == 2


@pytest.mark.parametrize(
    ("failures", "cancelled", "outcome"),
    [(0, False, "done"), (1, False, "done_with_errors"), (1, True, "cancelled")],
)
def test_the_outcome_is_decided_when_done_is_written(
    failures: int, cancelled: bool, outcome: str
) -> None:
    """Until its done is written an utterance's outcome is ``disconnected``."""
    state = utterance()
    state.tally.failures = failures
    state.cancelled = cancelled
    assert state.outcome == "disconnected"
    state.done()
    assert state.outcome == outcome


@pytest.mark.parametrize("in_range", [False, True])
def test_frames_are_encoded_checked_unless_said_in_range(in_range: bool) -> None:
    """Frames not said in range are checked as they are encoded (NaN silence, past full
    scale clipped); frames said in range (the joins' output) encode the same bytes
    without the check where they are in range."""
    calm = np.array([0.25, -0.5, 0.0], np.float32)
    wild = np.array([np.nan, 3.0, -np.inf], np.float32)
    frames = [calm] if in_range else [calm, wild]
    got = [
        m[p.AUDIO_HEADER_BYTES :]
        for m in sent(utterance(), Frames(frames, in_range))
        if isinstance(m, bytes)
    ]
    pcm = [b"\x00\x20\x00\xc0\x00\x00", b"\x00\x00\xff\x7f\x00\x80"][: len(frames)]
    assert got == pcm
