"""Each configured limit, set small, on a real server: the documented refusal, and the
connection and the text accepted before it carry on. (Deltas the server must refuse are
sent with ``resume=None``: a resuming client splits and paces text so that none is.)"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from chattts_client import AudioFrame, Event, StreamClient, UnavailableError
from websockets.exceptions import InvalidStatus

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from streaming.joins import pause_ms_for
from tests.scripted_engine import ScriptedEngine

pytestmark = pytest.mark.live

MAX_TEXT_MESSAGE_CHARS = 10
MAX_BUFFERED_CHARS = 20
MAX_CONTEXTS = 2
MAX_HTTP_TEXT_CHARS = 10
# Long enough that text without a sentence end waits for `end`.
IDLE_FLUSH_MS = 60_000

SMALL_LIMITS = Settings(
    engine="espeak",
    max_text_message_chars=MAX_TEXT_MESSAGE_CHARS,
    max_buffered_chars=MAX_BUFFERED_CHARS,
    max_contexts=MAX_CONTEXTS,
    max_http_text_chars=MAX_HTTP_TEXT_CHARS,
    idle_flush_ms=IDLE_FLUSH_MS,
)


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    with run_live_server(SMALL_LIMITS) as live:
        yield live


async def read_until_done(client: StreamClient, *context_ids: str) -> list[Event]:
    """Every event up to and including the last `done` of ``context_ids``."""
    events: list[Event] = []
    waiting = set(context_ids)
    async with asyncio.timeout(TIMEOUT_S):
        while waiting:
            event = await client.recv()
            events.append(event)
            if isinstance(event, dict) and event["type"] == "done":
                waiting.discard(event["context_id"])
    return events


def json_events(events: list[Event], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if isinstance(e, dict) and e["type"] == kind]


def errors_of(events: list[Event]) -> list[tuple[str, str | None, int | None]]:
    return [(e["code"], e["context_id"], e["limit"]) for e in json_events(events, "error")]


# --- max_text_message_chars -----------------------------------------------------------


async def test_text_delta_over_the_limit_is_refused_with_text_too_long(server: LiveServer) -> None:
    """A delta one character over max_text_message_chars is refused; one at it is spoken."""
    at_limit = "一二三四五六七八九十"
    assert len(at_limit) == MAX_TEXT_MESSAGE_CHARS
    async with StreamClient.connect(server.ws_url, resume=None) as client:
        assert client.ready["limits"]["max_text_message_chars"] == MAX_TEXT_MESSAGE_CHARS
        await client.start("a", seed=1)
        await client.send_text(at_limit + "零", "a")
        await client.send_text(at_limit, "a")
        await client.end("a")
        events = await read_until_done(client, "a")
    assert errors_of(events) == [("text_too_long", "a", MAX_TEXT_MESSAGE_CHARS)]
    assert "".join(s["text"] for s in json_events(events, "segment")) == at_limit
    assert json_events(events, "done")[0]["cancelled"] is False


# --- max_buffered_chars ---------------------------------------------------------------


async def test_delta_that_would_overflow_the_buffer_is_refused_whole(server: LiveServer) -> None:
    """buffer_full refuses the whole delta; text accepted before and after it is all spoken."""
    first, second = "一二三四五六七八九十", "十一二三四"  # 15 unspoken characters
    refused = "六七八九十六"  # 15 + 6 > 20
    last = "五六七八九"  # 15 + 5 = 20: exactly at the limit
    async with StreamClient.connect(server.ws_url, resume=None) as client:
        assert client.ready["limits"]["max_buffered_chars"] == MAX_BUFFERED_CHARS
        await client.start("a", seed=1)
        for delta in (first, second, refused, last):
            await client.send_text(delta, "a")
        await client.end("a")
        events = await read_until_done(client, "a")
    assert errors_of(events) == [("buffer_full", "a", MAX_BUFFERED_CHARS)]
    segments = json_events(events, "segment")
    assert "".join(s["text"] for s in segments) == first + second + last
    assert segments[-1]["end_char"] == len(first + second + last)
    (done,) = json_events(events, "done")
    assert done["cancelled"] is False
    assert done["audio_samples"] == sum(e.samples for e in events if isinstance(e, AudioFrame)) > 0


@pytest.fixture(scope="module")
def slow_server() -> Iterator[LiveServer]:
    """About 0.3 s of engine time per 6-character sentence."""
    settings = Settings(max_buffered_chars=MAX_BUFFERED_CHARS, idle_flush_ms=IDLE_FLUSH_MS)
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.05, ms_per_char=100)
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        yield live


async def test_queued_unspoken_segments_count_toward_the_buffer(slow_server: LiveServer) -> None:
    """Segments cut but not yet spoken fill the buffer; once spoken, the refused delta fits."""
    # 12 characters cut into segments and 6 pending: only the queued ones make 6 more overflow.
    sentences = ["一二三四五。", "六七八九十。", "甲乙丙丁戊。"]
    extra = "己庚辛壬癸。"  # 18 + 6 > 20
    async with StreamClient.connect(slow_server.ws_url, resume=None) as client:
        await client.start("a", seed=1)
        for sentence in [*sentences, extra]:
            await client.send_text(sentence, "a")
        # The last sentence waits for a possible closer (。」) until more text or a flush.
        await client.flush("a")
        events: list[Event] = []
        async with asyncio.timeout(TIMEOUT_S):
            # Segment 2 starts only after 0 and 1 are spoken: 6 characters remain queued.
            while not any(s["index"] == 2 for s in json_events(events, "segment")):
                events.append(await client.recv())
        await client.send_text(extra, "a")
        await client.end("a")
        events += await read_until_done(client, "a")
    assert errors_of(events) == [("buffer_full", "a", MAX_BUFFERED_CHARS)]
    assert [s["text"] for s in json_events(events, "segment")] == [*sentences, extra]
    assert json_events(events, "done")[0]["cancelled"] is False


# --- max_contexts ---------------------------------------------------------------------


async def test_start_beyond_max_contexts_is_refused_and_open_contexts_go_on(
    server: LiveServer,
) -> None:
    """too_many_contexts refuses a third context (explicit or implicit); the two open ones
    finish, and a freed slot can be used again."""
    async with StreamClient.connect(server.ws_url) as client:
        assert client.ready["limits"]["max_contexts"] == MAX_CONTEXTS
        for context_id in ("a", "b"):
            await client.start(context_id, seed=1)
            await client.send_text("你好。", context_id)
        await client.start("c", seed=1)
        await client.send_text("隐式。")  # implicit start of "default"
        for context_id in ("a", "b"):
            await client.end(context_id)
        events = await read_until_done(client, "a", "b")
        assert errors_of(events) == [
            ("too_many_contexts", "c", MAX_CONTEXTS),
            ("too_many_contexts", "default", MAX_CONTEXTS),
        ]
        for context_id in ("a", "b"):
            done = [e for e in json_events(events, "done") if e["context_id"] == context_id]
            assert len(done) == 1 and done[0]["cancelled"] is False
            texts = [
                s["text"] for s in json_events(events, "segment") if s["context_id"] == context_id
            ]
            assert texts == ["你好。"]

        await client.start("c", seed=1)
        await client.send_text("再来。", "c")
        await client.end("c")
        result = await client.collect("c", TIMEOUT_S)
        assert result.errors == []
        assert [s["text"] for s in result.segments] == ["再来。"]


# --- max_connections ------------------------------------------------------------------


@pytest.fixture
def one_connection_server() -> Iterator[LiveServer]:
    with run_live_server(Settings(engine="espeak", max_connections=1)) as live:
        yield live


async def test_upgrade_beyond_max_connections_is_refused_with_503(
    one_connection_server: LiveServer,
) -> None:
    """The connection over max_connections gets HTTP 503 too_many_connections; a slot freed
    by a disconnect is given to the next client."""
    url = one_connection_server.ws_url
    async with StreamClient.connect(url, open_timeout_s=TIMEOUT_S):
        with pytest.raises(UnavailableError) as caught:
            async with StreamClient.connect(url, open_timeout_s=TIMEOUT_S):
                pass
        assert caught.value.status_code == 503
        assert isinstance(caught.value.__cause__, InvalidStatus)
        body = json.loads(caught.value.__cause__.response.body or b"{}")
        assert body["error"]["code"] == "too_many_connections"
        assert body["error"]["limit"] == 1

    # The server frees the slot once it sees the close: retry, bounded.
    async with asyncio.timeout(TIMEOUT_S):
        while True:
            try:
                async with StreamClient.connect(url, open_timeout_s=TIMEOUT_S) as client:
                    assert client.ready["type"] == "ready"
                    break
            except UnavailableError as exc:
                assert exc.code == "too_many_connections"
                await asyncio.sleep(0.02)


# --- segment_timeout_s ----------------------------------------------------------------


@pytest.fixture
def timeout_server() -> Iterator[LiveServer]:
    """Segments may take 1 s; the engine needs about 2 s for 40 characters."""
    settings = Settings(segment_timeout_s=1.0, idle_flush_ms=IDLE_FLUSH_MS)
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.05, ms_per_char=100)
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        yield live


async def test_slow_segment_times_out_and_the_context_goes_on(timeout_server: LiveServer) -> None:
    """A segment over segment_timeout_s gets synthesis_timeout; the next one is spoken and
    the context ends with done (not cancelled)."""
    slow = "慢" * 39 + "。"
    quick = "好。"
    async with StreamClient.connect(timeout_server.ws_url) as client:
        await client.start("a", seed=1)
        await client.send_text(slow + quick, "a")
        await client.end("a")
        events = await read_until_done(client, "a")
    errors = json_events(events, "error")
    assert [(e["code"], e["context_id"]) for e in errors] == [("synthesis_timeout", "a")]
    assert [s["text"] for s in json_events(events, "segment")] == [slow, quick]
    quick_frames = [e for e in events if isinstance(e, AudioFrame) and e.segment == 1]
    # 2 characters at 100 ms each, at 24 kHz, then the pause after a sentence (the
    # scripted tone has no silence to trim).
    assert sum(f.samples for f in quick_frames) == 2 * 2400 + pause_ms_for(quick) * 24
    (done,) = json_events(events, "done")
    assert done["cancelled"] is False
    assert done["audio_samples"] == sum(e.samples for e in events if isinstance(e, AudioFrame))


# --- max_http_text_chars --------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "status"),
    [("一二三四五六七八九十", 200), ("一二三四五六七八九十零", 413)],
    ids=["at limit", "one over"],
)
def test_http_text_over_the_limit_is_refused_with_413(
    server: LiveServer, text: str, status: int
) -> None:
    """POST /v1/tts with more than max_http_text_chars gets 413 text_too_long with limit."""
    response = httpx.post(f"{server.base_url}/v1/tts", json={"text": text}, timeout=TIMEOUT_S)
    assert response.status_code == status
    if status == 413:
        assert response.json()["error"]["code"] == "text_too_long"
        assert response.json()["error"]["limit"] == MAX_HTTP_TEXT_CHARS
    else:
        assert response.headers["content-type"] == "audio/wav"
