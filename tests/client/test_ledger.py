"""The resuming client's pure bookkeeping (chattts_client.ledger): what was heard, where
to resume, and each leg's events rewritten onto one stream for the caller."""

from __future__ import annotations

from typing import Any

from chattts_client.ledger import ContextLedger, Part
from chattts_client.wire import AudioFrame

TEXT = "第一句。第二句。第三句。"  # three segments of 4 characters


def segment(index: int, start: int, end: int, sample: int) -> dict[str, Any]:
    return {"type": "segment", "context_id": "srv", "stream": 9, "index": index,
            "text": TEXT[start:end], "spoken": TEXT[start:end], "start_char": start,
            "end_char": end, "audio_start_sample": sample, "audio_start_ms": 0.0}  # fmt: skip


def frame(index: int, samples: int, sequence: int = 0) -> AudioFrame:
    return AudioFrame(stream=9, segment=index, sequence=sequence, pcm=b"\0\0" * samples)


def started_ledger() -> tuple[ContextLedger, Part]:
    ledger = ContextLedger("mine")
    ledger.accept(TEXT)
    started = {"type": "started", "context_id": "srv", "stream": 9, "sample_rate": 24000,
               "voice": "v", "seed": 5, "speed": 1.5}  # fmt: skip
    assert ledger.started(started, stream=1)["stream"] == 1
    leg = Part(base_char=0, sent_chars=len(TEXT))
    ledger.begin(leg)
    return ledger, leg


def test_one_leg_is_passed_through_with_the_callers_numbers() -> None:
    """Without a resume the events keep their numbers (stream renumbered, context id the
    caller's), and done totals what arrived."""
    ledger, leg = started_ledger()
    assert ledger.voice == {"voice": "v", "seed": 5, "speed": 1.5, "sample_rate": 24000}
    first = ledger.segment(leg, segment(0, 0, 4, 0))
    assert (first["context_id"], first["stream"], first["index"]) == ("mine", 1, 0)
    assert (first["start_char"], first["end_char"], first["audio_start_sample"]) == (0, 4, 0)
    rewritten = ledger.frame(leg, frame(0, 2400, sequence=0))
    assert (rewritten.stream, rewritten.segment, rewritten.sequence) == (1, 0, 0)
    done = ledger.done({"type": "done", "context_id": "srv", "stream": 9, "segments": 1,
                        "audio_samples": 2400, "audio_ms": 100.0, "cancelled": False})  # fmt: skip
    assert (done["segments"], done["audio_samples"], done["audio_ms"]) == (1, 2400, 100.0)


def test_a_cut_segment_is_where_a_lost_leg_resumes_and_it_is_heard_again() -> None:
    """Segment 1 started and the leg died: resume at its first character; the new leg's
    segment 0 is the caller's segment 1 again, its audio after everything received."""
    ledger, leg = started_ledger()
    ledger.segment(leg, segment(0, 0, 4, 0))
    ledger.frame(leg, frame(0, 2400))
    ledger.segment(leg, segment(1, 4, 8, 2400))  # segment 0 is complete now
    ledger.frame(leg, frame(1, 1000, sequence=1))  # ...and segment 1 was cut
    assert ledger.resume_char() == 4
    second = Part(base_char=4, sent_chars=len(TEXT) - 4)
    span = ledger.begin(second)
    assert (span.index, span.sample, span.repeated) == (1, 3400, True)
    resumed = ledger.resumed(second, "closed", attempts=2)
    assert (resumed["index"], resumed["start_char"], resumed["repeated"]) == (1, 4, True)
    again = ledger.segment(second, segment(0, 0, 4, 0) | {"text": TEXT[4:8]})
    assert (again["index"], again["start_char"], again["end_char"]) == (1, 4, 8)
    assert again["audio_start_sample"] == 3400
    later = ledger.frame(second, frame(0, 500, sequence=0))
    assert (later.segment, later.sequence) == (1, 2)  # no gap in the caller's sequence
    third = ledger.segment(second, segment(1, 4, 8, 2400) | {"text": TEXT[8:]})
    assert (third["index"], third["start_char"], third["end_char"]) == (2, 8, 12)
    done = ledger.done({"type": "done", "cancelled": False})
    assert (done["segments"], done["audio_samples"]) == (3, 3900)  # the repeat counted once


def test_timestamps_mark_a_segment_heard_whole() -> None:
    """A segment's timestamps come after its last frame: a leg lost then resumes after
    it, repeating nothing; timestamp times and offsets follow the caller's stream."""
    ledger, leg = started_ledger()
    ledger.segment(leg, segment(0, 0, 4, 0))
    ledger.frame(leg, frame(0, 2400))
    item = {"text": "第", "start_char": 0, "end_char": 1, "start_ms": 0.0, "end_ms": 25.0}
    ledger.timestamps(leg, {"type": "timestamps", "index": 0, "start_ms": 0.0,
                            "end_ms": 100.0, "items": [item]})  # fmt: skip
    assert ledger.resume_char() == 4
    second = Part(base_char=4)
    assert ledger.begin(second).repeated is False
    ledger.segment(second, segment(0, 0, 4, 0) | {"text": TEXT[4:8]})
    moved = ledger.timestamps(second, {"type": "timestamps", "index": 0, "start_ms": 0.0,
                                       "end_ms": 100.0, "items": [item]})  # fmt: skip
    assert (moved["index"], moved["start_ms"], moved["end_ms"]) == (1, 100.0, 200.0)
    assert (moved["items"][0]["start_char"], moved["items"][0]["start_ms"]) == (4, 100.0)


def test_a_drained_leg_finishes_and_the_next_one_follows_it() -> None:
    """A drained leg's done covers what it accepted: the next leg starts there, at the
    next index, nothing repeated."""
    ledger, leg = started_ledger()
    ledger.segment(leg, segment(0, 0, 4, 0))
    ledger.frame(leg, frame(0, 2400))
    ledger.finish(leg, covered_chars=4)
    assert ledger.resume_char() == 4
    span = ledger.begin(Part(base_char=4))
    assert (span.index, span.sample, span.repeated) == (1, 2400, False)


def test_a_failed_segment_leaves_a_gap_in_indices_but_is_not_resent() -> None:
    """A segment that failed on the server has no event: the next one's start says the
    text before it is done; done counts the segments that were spoken."""
    ledger, leg = started_ledger()
    ledger.segment(leg, segment(0, 0, 4, 0))
    ledger.segment(leg, segment(2, 8, 12, 2400))  # segment 1 failed
    assert ledger.heard_chars == 8 and ledger.resume_char() == 8
    assert ledger.done({"type": "done"})["segments"] == 2


def test_finished_characters_bound_what_a_leg_may_still_hold() -> None:
    """Text a leg finished with (before its latest segment) no longer counts as held."""
    ledger, leg = started_ledger()
    assert leg.unfinished_chars == len(TEXT)
    ledger.segment(leg, segment(0, 0, 4, 0))
    ledger.segment(leg, segment(1, 4, 8, 2400))
    assert leg.unfinished_chars == len(TEXT) - 4
