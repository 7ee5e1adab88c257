"""Malformed and refused client messages on a real server: one `error` event each, the
connection stays open, and text accepted before the bad message is still spoken."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from chattts_client import AudioFrame, Event, StreamClient
from websockets.exceptions import ConnectionClosedError

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from tests.scripted_engine import ScriptedEngine

pytestmark = pytest.mark.live

MAX_MESSAGE_BYTES = 8 * 1024  # room for a 4,097-character voice
# Long enough that nothing is spoken before `end` unless a sentence ends.
IDLE_FLUSH_MS = 60_000
ACCEPTED_TEXT = "今天天气很好。我们去公园"


@pytest.fixture(scope="module")
def espeak_server() -> Iterator[LiveServer]:
    settings = Settings(
        engine="espeak", max_message_bytes=MAX_MESSAGE_BYTES, idle_flush_ms=IDLE_FLUSH_MS
    )
    with run_live_server(settings) as server:
        yield server


@pytest.fixture(scope="module")
def scripted_server() -> Iterator[LiveServer]:
    """A slow engine (about 0.4 s per 10 characters), so a context stays busy after `end`."""
    settings = Settings(idle_flush_ms=IDLE_FLUSH_MS)
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.02, ms_per_char=200)
    with run_live_server(settings, engine=lambda: (engine, False, None)) as server:
        yield server


async def read_until_done(client: StreamClient, context_id: str) -> list[Event]:
    """Every event up to and including `done` for ``context_id``."""
    events: list[Event] = []
    async with asyncio.timeout(TIMEOUT_S):
        while not any(e["context_id"] == context_id for e in json_events(events, "done")):
            events.append(await client.recv())
    return events


def json_events(events: list[Event], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if isinstance(e, dict) and e["type"] == kind]


def start(context_id: str, **fields: Any) -> str:
    return json.dumps({"type": "start", "context_id": context_id, **fields})


def text(context_id: str, value: Any) -> str:
    return json.dumps({"type": "text", "context_id": context_id, "text": value})


OVERSIZE_TEXT = text("a", "好" * (MAX_MESSAGE_BYTES // 3 + 10))  # > limit, < 4 x limit

# (case id, frame, code, context_id of the error, limit)
# fmt: off
BAD_MESSAGES: list[tuple[str, str | bytes, str, str | None, int | None]] = [
    ("bad json", "{not json", "bad_json", None, None),
    # Past Python's int-parsing limit (4,300 digits) json.loads raises a plain ValueError.
    ("json integer of 4301 digits", '{"type":"end","context_id":"a","n":' + "7" * 4301 + "}",
     "bad_json", None, None),
    ("json array", '["text"]', "bad_message", None, None),
    ("missing type", '{"context_id":"a","text":"x"}', "missing_field", "a", None),
    ("non-string type", '{"type":1,"context_id":"a"}', "invalid_field", "a", None),
    ("unknown type", '{"type":"speak","context_id":"a","text":"x"}', "unknown_type", "a", None),
    ("text missing", '{"type":"text","context_id":"a"}', "missing_field", "a", None),
    ("text not a string", text("a", 42), "invalid_field", "a", None),
    ("context_id empty", text("", "x"), "invalid_field", None, None),
    ("context_id too long", text("c" * 65, "x"), "invalid_field", None, None),
    ("seed negative", start("b", seed=-1), "invalid_field", "b", None),
    ("seed bool", start("b", seed=True), "invalid_field", "b", None),
    ("speed out of range", start("b", speed=4.5), "invalid_field", "b", None),
    ("speed string", start("b", speed="fast"), "invalid_field", "b", None),
    ("sample_rate unsupported", start("b", sample_rate=11025), "invalid_field", "b", None),
    ("voice too long", start("b", voice="v" * 4097), "invalid_field", "b", None),
    ("binary frame", b'{"type":"end","context_id":"a"}', "binary_not_supported", None, None),
    ("oversize message", OVERSIZE_TEXT, "message_too_large", None, MAX_MESSAGE_BYTES),
    ("unknown_context text", text("nope", "你好。"), "unknown_context", "nope", None),
    ("unknown_context flush", '{"type":"flush","context_id":"nope"}', "unknown_context", "nope", None),
    ("unknown_context end", '{"type":"end","context_id":"nope"}', "unknown_context", "nope", None),
    ("context_exists", start("a"), "context_exists", "a", None),
]
# fmt: on


@pytest.mark.parametrize(
    ("frame", "code", "context_id", "limit"),
    [case[1:] for case in BAD_MESSAGES],
    ids=[case[0] for case in BAD_MESSAGES],
)
async def test_bad_message_gets_its_error_and_earlier_text_is_still_spoken(
    espeak_server: LiveServer,
    frame: str | bytes,
    code: str,
    context_id: str | None,
    limit: int | None,
) -> None:
    """A refused message gets one error event; the open context still speaks all its text."""
    async with StreamClient.connect(espeak_server.ws_url) as client:
        await client.start("a", seed=1)
        await client.send_text(ACCEPTED_TEXT, "a")
        await client.send_raw(frame)
        await client.end("a")
        events = await read_until_done(client, "a")

        errors = json_events(events, "error")
        assert [(e["code"], e["context_id"], e["limit"]) for e in errors] == [
            (code, context_id, limit)
        ]
        assert errors[0]["message"]
        # The refused message changed nothing: no context was opened by it.
        assert [e["context_id"] for e in json_events(events, "started")] == ["a"]
        segments = json_events(events, "segment")
        assert "".join(s["text"] for s in segments) == ACCEPTED_TEXT
        (done,) = json_events(events, "done")
        assert done["cancelled"] is False
        assert done["segments"] == len(segments) == 2
        frames = [e for e in events if isinstance(e, AudioFrame)]
        assert done["audio_samples"] == sum(f.samples for f in frames) > 0

        # Still open: a new context on the same connection works.
        await client.start("later", seed=2)
        await client.send_text("再见。", "later")
        await client.end("later")
        later = await client.collect("later", TIMEOUT_S)
        assert later.done is not None and later.done["cancelled"] is False
        assert [s["text"] for s in later.segments] == ["再见。"]


async def test_error_is_sent_before_text_that_follows_it(espeak_server: LiveServer) -> None:
    """Messages are answered in order: the error for a bad frame precedes later events."""
    async with StreamClient.connect(espeak_server.ws_url) as client:
        await client.send_raw("{")
        await client.start("a", seed=1)
        first = await client.recv(TIMEOUT_S)
        second = await client.recv(TIMEOUT_S)
        assert isinstance(first, dict) and isinstance(second, dict)
        assert (first["type"], first["code"]) == ("error", "bad_json")
        assert (second["type"], second["context_id"]) == ("started", "a")


async def test_message_of_exactly_the_limit_is_accepted(espeak_server: LiveServer) -> None:
    """A frame of exactly max_message_bytes is read and handled, not refused as too large."""
    head = '{"type":"start","context_id":"a","padding":"'  # unknown fields are ignored
    frame = head + "p" * (MAX_MESSAGE_BYTES - len(head) - 2) + '"}'
    assert len(frame.encode()) == MAX_MESSAGE_BYTES
    async with StreamClient.connect(espeak_server.ws_url) as client:
        await client.send_raw(frame)
        reply = await client.recv(TIMEOUT_S)
        assert isinstance(reply, dict)
        assert (reply["type"], reply["context_id"]) == ("started", "a")
        await client.cancel("a")
        result = await client.collect("a", TIMEOUT_S)
        assert result.done is not None


async def test_text_after_end_is_refused_as_context_closing(scripted_server: LiveServer) -> None:
    """text, flush and end after `end` get context_closing; the context still finishes."""
    spoken = "一二三四五六七八九十。"
    async with StreamClient.connect(scripted_server.ws_url) as client:
        await client.start("a", seed=1)
        await client.send_text(spoken, "a")
        await client.end("a")
        await client.send_text("还有。", "a")
        await client.flush("a")
        await client.end("a")
        events = await read_until_done(client, "a")

        errors = json_events(events, "error")
        assert [(e["code"], e["context_id"]) for e in errors] == [("context_closing", "a")] * 3
        assert [s["text"] for s in json_events(events, "segment")] == [spoken]
        (done,) = json_events(events, "done")
        assert done["cancelled"] is False


async def test_context_id_is_free_again_after_done(scripted_server: LiveServer) -> None:
    """After a context's `done`, `start` with the same id opens a new stream."""
    async with StreamClient.connect(scripted_server.ws_url) as client:
        await client.start("a", seed=1)
        await client.send_text("好。", "a")
        await client.end("a")
        first = await client.collect("a", TIMEOUT_S)
        await client.start("a", seed=1)
        await client.send_text("好。", "a")
        await client.end("a")
        second = await client.collect("a", TIMEOUT_S)
        assert second.errors == []
        assert first.started is not None and second.started is not None
        assert second.started["stream"] != first.started["stream"]
        assert second.done is not None and second.done["cancelled"] is False


async def test_frame_over_the_transport_limit_closes_with_1009(espeak_server: LiveServer) -> None:
    """A frame larger than 4 x max_message_bytes closes the connection with code 1009."""
    async with StreamClient.connect(espeak_server.ws_url) as client:
        await client.send_raw("x" * (4 * MAX_MESSAGE_BYTES + 1))
        with pytest.raises(ConnectionClosedError) as caught:
            async with asyncio.timeout(TIMEOUT_S):
                while True:
                    await client.recv()
        assert caught.value.rcvd is not None
        assert caught.value.rcvd.code == 1009
