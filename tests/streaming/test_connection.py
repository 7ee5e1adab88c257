"""The sans-I/O connection core: client frames in, events out (no socket, no loop)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from streaming import connection as c
from streaming import protocol as p
from streaming.errors import NotFound
from streaming.speech import SpeechSettings

LIMITS = c.ConnectionSettings(
    max_message_bytes=200, max_text_message_chars=20, max_buffered_chars=30, max_contexts=2
)


def no_foreign_voices(voice: str) -> int | None:
    if voice == "bass":
        return 7  # a named voice with a seed of its own
    if voice == "contralto":
        raise NotFound("no voice 'contralto'; the voices are: alto, bass", code="voice_not_found")
    if voice != "alto":
        raise ValueError("accepted: alto")
    return None


def core() -> c.Connection:
    return c.Connection(
        LIMITS,
        SpeechSettings(),
        engine_rate_hz=24000,
        idle_flush_ms=700,
        sentence_flush_ms=150,
        check_voice=no_foreign_voices,
        choose_seed=lambda: 42,
    )


def frame(kind: str, context_id: str | None = "a", **fields: Any) -> str:
    body: dict[str, Any] = {"type": kind, **fields}
    if context_id is not None:
        body["context_id"] = context_id
    return json.dumps(body, ensure_ascii=False)


def summary(events: list[c.Event]) -> list[tuple[Any, ...]]:
    """Events as comparable tuples."""
    out: list[tuple[Any, ...]] = []
    for event in events:
        if isinstance(event, c.Reply):
            out.append(("reply", event.message.type, getattr(event.message, "context_id", None)))
        elif isinstance(event, c.Refused):
            error = event.error
            out.append(("refused", error.code, error.context_id, error.limit))
        elif isinstance(event, c.Opened):
            out.append(("opened", event.context.id))
        elif isinstance(event, c.Segments):
            out.append(("segments", event.context_id, [s.text for s in event.segments]))
        elif isinstance(event, c.IdleTimer):
            out.append(("idle", event.context_id, event.delay_s))
        else:
            out.append((type(event).__name__.lower(), event.context_id))
    return out


START = frame("start")
# (case, frames fed before, the frame, the events it gives)
# fmt: off
CASES: list[tuple[str, list[str], str | bytes, list[tuple[Any, ...]]]] = [
    ("start", [], START, [("opened", "a"), ("reply", "started", "a")]),
    ("start twice", [START], START, [("refused", "context_exists", "a", None)]),
    ("third context", [START, frame("start", "b")], frame("start", "c"),
     [("refused", "too_many_contexts", "c", 2)]),
    ("foreign voice", [], frame("start", voice="tenor"), [("refused", "invalid_field", "a", None)]),
    ("known voice", [], frame("start", voice="alto"), [("opened", "a"), ("reply", "started", "a")]),
    ("unknown named voice", [], frame("start", voice="contralto"),
     [("refused", "voice_not_found", "a", None)]),
    ("text cuts a sentence", [START], frame("text", text="你好。再见"),
     [("firsttext", "a"), ("segments", "a", ["你好。"]), ("idle", "a", 0.7)]),
    ("complete sentence held", [START], frame("text", text="好的。"),
     [("firsttext", "a"), ("idle", "a", 0.15)]),
    ("blank text arms nothing", [START], frame("text", text="  "), [("idle", "a", None)]),
    ("default context opens on text", [], frame("text", None, text="嗯"),
     [("opened", "default"), ("reply", "started", "default"), ("firsttext", "default"),
      ("idle", "default", 0.7)]),
    ("default context does not open on a refused delta", [], frame("text", None, text="好" * 21),
     [("refused", "text_too_long", "default", 20)]),
    ("default context does not open on flush", [], frame("flush", None),
     [("refused", "unknown_context", "default", None)]),
    ("flush speaks the fragment", [START, frame("text", text="半句")], frame("flush"),
     [("idle", "a", None), ("segments", "a", ["半句"])]),
    ("end speaks the rest and closes", [START, frame("text", text="半句")], frame("end"),
     [("idle", "a", None), ("segments", "a", ["半句"]), ("ended", "a")]),
    ("text after end", [START, frame("end")], frame("text", text="晚了"),
     [("refused", "context_closing", "a", None)]),
    ("cancel", [START, frame("text", text="半句")], frame("cancel"),
     [("idle", "a", None), ("cancelled", "a")]),
    ("cancel unknown is ignored", [], frame("cancel", "zzz"), []),
    ("cancel after end", [START, frame("end")], frame("cancel"),
     [("idle", "a", None), ("cancelled", "a")]),
    ("text for an unknown context", [], frame("text", "b", text="你好"),
     [("refused", "unknown_context", "b", None)]),
    ("delta too long", [START], frame("text", text="好" * 21),
     [("refused", "text_too_long", "a", 20)]),
    ("buffer full", [START, frame("text", text="好" * 20)], frame("text", text="好" * 11),
     [("refused", "buffer_full", "a", 30)]),
    ("message too large", [START], frame("text", text="好" * 80),
     [("refused", "message_too_large", None, 200)]),
    ("binary", [], b"{}", [("refused", "binary_not_supported", None, None)]),
    ("bad json", [], "{", [("refused", "bad_json", None, None)]),
    ("unknown type", [], frame("speak"), [("refused", "unknown_type", "a", None)]),
    ("lone surrogate in context_id", [], '{"type":"start","context_id":"\\ud800"}',
     [("refused", "invalid_field", None, None)]),
    ("lone surrogate in voice", [], '{"type":"start","context_id":"a","voice":"\\udc00"}',
     [("refused", "invalid_field", "a", None)]),
]
# fmt: on


@pytest.mark.parametrize(
    ("before", "raw", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_frame_gives_its_events(before: list[str], raw: str | bytes, expected: list[Any]) -> None:
    """Each frame, after the frames before it, gives exactly the listed events."""
    connection = core()
    for earlier in before:
        assert not [e for e in connection.receive(earlier) if isinstance(e, c.Refused)]
    assert summary(connection.receive(raw)) == expected


def test_a_refused_first_delta_leaves_no_default_context_and_no_admission() -> None:
    """A first text for "default" that is refused opens nothing and admits nothing: the
    next acceptable one opens it normally."""
    admitted: list[str] = []
    connection = core()
    connection._admit = lambda context_id: bool(admitted.append(context_id))
    connection.receive(frame("text", None, text="好" * 21))
    assert connection.contexts == {} and admitted == []
    events = summary(connection.receive(frame("text", None, text="好")))
    assert events[:2] == [("opened", "default"), ("reply", "started", "default")]
    assert admitted == ["default"]


def test_a_refused_frame_changes_nothing() -> None:
    """After a refusal the context is as it was: its text and limits are untouched."""
    connection = core()
    connection.receive(START)
    connection.receive(frame("text", text="好" * 20))
    connection.receive(frame("text", text="好" * 11))  # buffer_full
    assert connection.contexts["a"].buffered_chars == 20
    assert summary(connection.receive(frame("text", text="好" * 10))) == [("idle", "a", 0.7)]


def test_a_lone_surrogate_in_text_is_replaced_and_the_text_around_it_kept() -> None:
    """ "\\ud800" in a delta becomes U+FFFD: the words on both sides are still cut and spoken."""
    connection = core()
    connection.receive(START)
    events = connection.receive('{"type":"text","context_id":"a","text":"你好\\ud800世界。再"}')
    segments = [e for e in events if isinstance(e, c.Segments)]
    assert [s.text for s in segments[0].segments] == ["你好\ufffd世界。"]


def test_spoken_segments_free_the_buffer_and_done_frees_the_id() -> None:
    """Finished segments stop counting toward the limit; a forgotten context may reopen."""
    connection = core()
    connection.receive(START)
    events = connection.receive(frame("text", text="好" * 9 + "。再"))
    (cut,) = [e for e in events if isinstance(e, c.Segments)]
    assert connection.contexts["a"].buffered_chars == 11
    connection.spoken("a", cut.segments[0])
    assert connection.contexts["a"].buffered_chars == 1  # "再", still pending
    (rest,) = [e for e in connection.idle("a") if isinstance(e, c.Segments)]
    connection.spoken("a", rest.segments[0])
    assert not connection.holds_unspoken_text
    connection.receive(frame("end"))
    connection.forget("a")
    assert summary(connection.receive(START)) == [("opened", "a"), ("reply", "started", "a")]


def test_idle_speaks_the_pending_fragment_once() -> None:
    """The idle timer's call cuts what is pending; after end it does nothing."""
    connection = core()
    connection.receive(START)
    connection.receive(frame("text", text="没有句号"))
    assert summary(connection.idle("a")) == [("segments", "a", ["没有句号"])]
    assert connection.idle("a") == []
    connection.receive(frame("text", text="又一句"))
    connection.receive(frame("end"))
    assert connection.idle("a") == []


def test_streams_are_numbered_and_seeds_chosen() -> None:
    """Each context gets the next stream number; without a seed the chooser's is used."""
    connection = core()
    first = connection.receive(START)
    second = connection.receive(frame("start", "b", seed=7, sample_rate=16000))
    started = [e.message for e in first + second if isinstance(e, c.Reply)]
    assert [(m.stream, m.seed, m.sample_rate) for m in started] == [(1, 42, 24000), (2, 7, 16000)]  # type: ignore[attr-defined]


def test_cancel_all_cancels_every_context() -> None:
    """A closing connection cancels each open context."""
    connection = core()
    connection.receive(START)
    connection.receive(frame("start", "b"))
    cancelled = [e.context_id for e in connection.cancel_all() if isinstance(e, c.Cancelled)]
    assert cancelled == ["a", "b"]
    assert all(context.cancelled for context in connection.contexts.values())


@pytest.mark.parametrize(
    ("fields", "seed"),
    [({"voice": "bass"}, 7), ({"voice": "bass", "seed": 3}, 3), ({"voice": "alto"}, 42), ({}, 42)],
)
def test_the_seed_comes_from_the_message_then_the_voice_then_chance(
    fields: dict[str, Any], seed: int
) -> None:
    events = core().receive(frame("start", **fields))
    started = [e.message for e in events if isinstance(e, c.Reply)]
    assert [m.seed for m in started if m.type == "started"] == [seed]


def test_an_unknown_voice_names_the_field_and_lists_the_voices() -> None:
    (refused,) = core().receive(frame("start", voice="contralto"))
    assert isinstance(refused, c.Refused)
    assert refused.error.message.startswith("field 'voice': no voice 'contralto'")
    assert "alto, bass" in refused.error.message


def drained(before: list[str]) -> tuple[c.Connection, list[c.Event]]:
    connection = core()
    for earlier in before:
        connection.receive(earlier)
    return connection, connection.drain(deadline_ms=5000)


def test_drain_tells_the_client_first_and_ends_each_open_context_after_its_text() -> None:
    """drain: the `draining` reply comes first, listing every open context with the
    characters it accepted; each is ended as by `end` (its fragment cut too); a context
    the client had ended is listed as ended and not ended twice."""
    connection, events = drained(
        [START, frame("text", text="你好。再见"), frame("start", "b"), frame("text", "b", text="好。"),
         frame("end", "b")]
    )  # fmt: skip
    assert summary(events) == [
        ("reply", "draining", None),
        ("idle", "a", None),
        ("segments", "a", ["再见"]),
        ("ended", "a"),
    ]
    reply = events[0]
    assert isinstance(reply, c.Reply) and isinstance(reply.message, p.Draining)
    assert reply.message.deadline_ms == 5000
    assert reply.message.contexts == [
        p.DrainedContext("a", 1, end_char=5, ended=False),
        p.DrainedContext("b", 2, end_char=2, ended=True),
    ]
    assert connection.drain(deadline_ms=5000) == []  # once


# fmt: off
DRAIN_REFUSALS: list[tuple[str, list[str], str, list[tuple[Any, ...]]]] = [
    ("start", [], START, [("refused", "draining", "a", None)]),
    ("implicit default", [], frame("text", None, text="你好"),
     [("refused", "draining", "default", None)]),
    ("text for a drained context", [START], frame("text", text="还有"),
     [("refused", "draining", "a", None)]),
    ("end for a drained context", [START], frame("end"), [("refused", "draining", "a", None)]),
    ("flush for a drained context", [START], frame("flush"),
     [("refused", "draining", "a", None)]),
    ("text after the client's own end", [START, frame("end")], frame("text", text="晚了"),
     [("refused", "context_closing", "a", None)]),
    ("cancel still cancels", [START], frame("cancel"), [("idle", "a", None), ("cancelled", "a")]),
]
# fmt: on


@pytest.mark.parametrize(
    ("before", "raw", "expected"),
    [case[1:] for case in DRAIN_REFUSALS],
    ids=[case[0] for case in DRAIN_REFUSALS],
)
def test_after_a_drain_a_frame_gives_its_events(
    before: list[str], raw: str, expected: list[Any]
) -> None:
    """While draining, new contexts and more text for the drained ones are refused with
    `draining`; a context the client ended keeps its own code; cancel works."""
    connection, _ = drained(before)
    assert summary(connection.receive(raw)) == expected


def test_a_drain_keeps_every_accepted_character() -> None:
    """end_char counts every accepted character (a refused delta not), and the segments
    cut by the end of the drain cover exactly that text."""
    connection = core()
    cut: list[str] = []
    for raw in (START, frame("text", text="第一句。第"), frame("text", text="好" * 21),
                frame("text", text="二句")):  # fmt: skip
        cut += [s.text for e in connection.receive(raw) if isinstance(e, c.Segments)
                for s in e.segments]  # fmt: skip
    events = connection.drain(deadline_ms=1)
    cut += [s.text for e in events if isinstance(e, c.Segments) for s in e.segments]
    reply = events[0]
    assert isinstance(reply, c.Reply) and isinstance(reply.message, p.Draining)
    assert "".join(cut) == "第一句。第二句"
    assert reply.message.contexts[0].end_char == len("第一句。第二句")


def test_the_characters_cut_into_segments_are_tallied() -> None:
    """What an utterance received to speak counts as it is cut, not as it arrives."""
    connection = core()
    connection.receive(frame("start"))
    connection.receive(frame("text", text="你好。再"))
    assert connection.contexts["a"].tally.characters == 3
    connection.receive(frame("end"))
    assert connection.contexts["a"].tally.characters == 4
