"""The client's typed errors, each raised for the server's real refusal on a socket: a
bad token, a full or loading or draining server, a busy engine after the retries, a
refused message, a failed segment, and a peer that does not speak the protocol."""

from __future__ import annotations

import asyncio
import logging
import re
import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from chattts_client import (
    AuthError,
    BusyError,
    ContextError,
    LimitError,
    NotReadyError,
    ProtocolError,
    RequestError,
    StreamClient,
    TTSClientError,
    UnavailableError,
    error_from_event,
)
from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import InvalidStatus
from websockets.http11 import Request, Response

from harness.live import TIMEOUT_S, run_live_server
from server.config import Settings
from tests.scripted_engine import ScriptedEngine

ROOT = Path(__file__).resolve().parents[2]


# --- refused upgrades ------------------------------------------------------------------


@pytest.mark.live
async def test_a_bad_token_raises_auth_error_with_the_servers_code() -> None:
    """A wrong token: AuthError (401, unauthorized), chained to websockets' InvalidStatus."""
    with run_live_server(Settings(engine="espeak", tokens=("s3cret",))) as live:
        with pytest.raises(AuthError) as caught:
            async with StreamClient.connect(live.ws_url, token="wrong", open_timeout_s=TIMEOUT_S):
                pass
        async with StreamClient.connect(live.ws_url, token="s3cret") as client:
            assert client.ready["type"] == "ready"
    error = caught.value
    assert (error.code, error.status_code, error.context_id) == ("unauthorized", 401, None)
    assert "token" in error.message and isinstance(error.__cause__, InvalidStatus)


@pytest.mark.live
async def test_a_full_server_raises_unavailable_too_many_connections() -> None:
    """The connection over --max-connections: UnavailableError too_many_connections with
    the limit (not busy, not not_ready)."""
    with run_live_server(Settings(engine="espeak", max_connections=1)) as live:
        async with StreamClient.connect(live.ws_url, open_timeout_s=TIMEOUT_S):
            with pytest.raises(UnavailableError) as caught:
                async with StreamClient.connect(live.ws_url, open_timeout_s=TIMEOUT_S):
                    pass
    error = caught.value
    assert type(error) is UnavailableError
    assert (error.code, error.status_code, error.limit) == ("too_many_connections", 503, 1)


@pytest.mark.live
async def test_a_loading_engine_raises_not_ready() -> None:
    """An upgrade while the engine loads: NotReadyError (503 not_ready), an UnavailableError."""
    release = threading.Event()

    def slow_factory() -> tuple[ScriptedEngine, bool, None]:
        if not release.wait(TIMEOUT_S):
            raise RuntimeError("test never released the engine")
        return ScriptedEngine(), False, None

    try:
        with run_live_server(Settings(), engine=slow_factory, wait_ready=False) as live:
            with pytest.raises(NotReadyError) as caught:
                async with StreamClient.connect(live.ws_url, open_timeout_s=TIMEOUT_S):
                    pass
            release.set()
            assert live.state.worker.wait_ready(TIMEOUT_S)  # type: ignore[attr-defined]
            async with StreamClient.connect(live.ws_url) as client:
                assert client.ready["type"] == "ready"
    finally:
        release.set()
    assert isinstance(caught.value, UnavailableError)
    assert (caught.value.code, caught.value.status_code) == ("not_ready", 503)


@pytest.mark.live
async def test_a_draining_server_raises_unavailable_draining() -> None:
    """An upgrade while the server drains for shutdown: UnavailableError draining."""
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.05, ms_per_char=300)
    settings = Settings(engine="espeak", drain_timeout_s=TIMEOUT_S)
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        async with StreamClient.connect(live.ws_url) as client:
            ctx = await client.open(seed=1)
            await client.send_text("排空时还在说的一句话。", ctx)
            await client.end(ctx)
            assert isinstance(await client.recv(TIMEOUT_S), dict)  # it is speaking
            live.server.handle_exit(signal.SIGTERM, None)
            with pytest.raises(UnavailableError) as caught:
                async with StreamClient.connect(live.ws_url, open_timeout_s=TIMEOUT_S):
                    pass
            (await client.collect(ctx, timeout_s=TIMEOUT_S)).raise_for_error()
    assert type(caught.value) is UnavailableError
    assert (caught.value.code, caught.value.status_code) == ("draining", 503)


# --- refusals on the open connection ---------------------------------------------------


@asynccontextmanager
async def engine_at_capacity(retry_after_ms: int) -> AsyncIterator[tuple[Any, StreamClient]]:
    """A real server admitting one stream (``--max-streams 1``), that stream speaking a
    long text on the yielded client; on exit it is cancelled and must end cleanly."""
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.05, ms_per_char=300)
    settings = Settings(engine="chattts", model_dir=Path("unused"), max_streams=1,
                        busy_retry_after_ms=retry_after_ms)  # fmt: skip
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        async with StreamClient.connect(live.ws_url) as client:
            speaking = await client.open("a", seed=1)
            await client.send_text("占着引擎的很长的一句话，" * 3, speaking)
            yield live, client
            await client.cancel(speaking)
            result = await client.collect(speaking, timeout_s=TIMEOUT_S)
    assert result.errors == [] and result.done is not None  # it spoke on, unaffected


def refused(live: Any) -> float:
    """The WebSocket starts the server has refused ``busy`` so far."""
    metrics = httpx.get(live.base_url + "/metrics", timeout=TIMEOUT_S).text
    found = re.search(r'^tts_contexts_refused_total\{route="ws"\} (\S+)$', metrics, re.M)
    return float(found.group(1)) if found else 0.0


def retries_logged(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("chattts_client") and "busy" in
            r.getMessage()]  # fmt: skip


@pytest.mark.live
async def test_busy_after_the_last_retry_raises_busy_error_with_the_hint(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """open() retries busy as hinted, ``attempts`` times, logging each retry (logger
    chattts_client, WARNING, with the server's retry_after_ms and the wait), then raises
    BusyError carrying retry_after_ms; the stream already speaking is not affected."""
    caplog.set_level(logging.WARNING, logger="chattts_client")
    async with engine_at_capacity(retry_after_ms=200) as (live, client):
        with pytest.raises(BusyError) as caught:
            await client.open("b", seed=2, attempts=3)
        assert refused(live) == 3  # all three attempts
    error = caught.value
    assert (error.code, error.retry_after_ms, error.context_id) == ("busy", 200, "b")
    assert isinstance(error, UnavailableError) and error.status_code == 503
    logged = [r.getMessage() for r in retries_logged(caplog)]
    assert logged == [
        f"context 'b': the server is busy (retry_after_ms=200); try {n} of 3 in "
        f"{wait} s (giving up 10.0 s after the first refusal)"
        for n, wait in ((2, "0.25"), (3, "0.50"))  # the backoff, longer than the hint
    ]
    assert all(r.levelno == logging.WARNING for r in retries_logged(caplog))
    # docs/protocol.md shows the same line (for other numbers).
    documented = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8").splitlines()
    numbers = re.compile(r"\d+(?:\.\d+)?")
    assert numbers.sub("#", logged[0]) in {numbers.sub("#", line) for line in documented}


@pytest.mark.live
async def test_attempts_1_fails_fast_without_waiting(caplog: pytest.LogCaptureFixture) -> None:
    """open(attempts=1): the first busy refusal raises at once, long before the server's
    retry_after_ms, with no retry logged."""
    caplog.set_level(logging.INFO, logger="chattts_client")
    async with engine_at_capacity(retry_after_ms=int(TIMEOUT_S * 1000)) as (live, client):
        began = asyncio.get_running_loop().time()
        with pytest.raises(BusyError) as caught:
            await client.open("b", seed=2, attempts=1)
        waited_s = asyncio.get_running_loop().time() - began
        assert refused(live) == 1
    assert caught.value.retry_after_ms == TIMEOUT_S * 1000 and waited_s < TIMEOUT_S / 2
    assert retries_logged(caplog) == []


@pytest.mark.live
async def test_busy_within_s_bounds_the_whole_wait(caplog: pytest.LogCaptureFixture) -> None:
    """However many attempts are allowed, open() gives up rather than start a wait that
    would end more than busy_within_s after the first refusal: with a 1 s hint and a
    2.5 s bound, three tries (two waits of 1 s), then BusyError."""
    caplog.set_level(logging.WARNING, logger="chattts_client")
    async with engine_at_capacity(retry_after_ms=1000) as (live, client):
        with pytest.raises(BusyError):
            await client.open("b", seed=2, attempts=50, busy_within_s=2.5)
        assert refused(live) == 3
    logged = [r.getMessage() for r in retries_logged(caplog)]
    assert [re.search(r"try (\d+) of 50 in (\S+) s", m).groups() for m in logged] == [  # type: ignore[union-attr]
        ("2", "1.00"), ("3", "1.00"),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def espeak() -> Any:
    with run_live_server(Settings(engine="espeak", max_contexts=1)) as live:
        yield live


@pytest.mark.live
@pytest.mark.parametrize(
    ("options", "code"),
    [({"voice": "nobody"}, "voice_not_found"), ({"speed": 9.0}, "invalid_field")],
    ids=["voice", "speed"],
)
async def test_a_refused_start_raises_request_error_at_once(
    espeak: Any, options: dict[str, Any], code: str
) -> None:
    """A start refused as sent: RequestError with the code and the context, no retry."""
    async with StreamClient.connect(espeak.ws_url) as client:
        with pytest.raises(RequestError) as caught:
            await client.open("x", attempts=5, timeout_s=TIMEOUT_S, **options)
    error = caught.value
    assert type(error) is RequestError and isinstance(error, ProtocolError)
    assert (error.code, error.context_id, error.status_code) == (code, "x", 400)
    assert error.message and code in str(error)


@pytest.mark.live
async def test_a_start_beyond_max_contexts_raises_limit_error(espeak: Any) -> None:
    """A second context over --max-contexts 1: LimitError too_many_contexts with the limit."""
    async with StreamClient.connect(espeak.ws_url) as client:
        await client.open("a")
        with pytest.raises(LimitError) as caught:
            await client.open("b")
    assert (caught.value.code, caught.value.limit, caught.value.context_id) == (
        "too_many_contexts",
        1,
        "b",
    )


@pytest.mark.live
async def test_a_bad_message_is_raised_as_request_error(espeak: Any) -> None:
    """A frame that is not JSON gets bad_json; raise_for_error raises it as RequestError
    for the connection (no context), and the context spoken after it is whole."""
    async with StreamClient.connect(espeak.ws_url) as client:
        await client.send_raw("{not json")
        ctx = await client.open()
        await client.send_text("你好。", ctx)
        await client.end(ctx)
        result = await client.collect(ctx, timeout_s=TIMEOUT_S)
    with pytest.raises(RequestError) as caught:
        result.raise_for_error()
    assert (caught.value.code, caught.value.context_id) == ("bad_json", None)
    assert result.done is not None and result.samples > 0


@pytest.mark.live
async def test_a_failed_segment_is_raised_as_context_error() -> None:
    """A segment the engine fails on: raise_for_error raises ContextError synthesis_failed
    for the context; the context went on with its next segment."""
    engine = ScriptedEngine(chunk_delay_s=0.0, ms_per_char=50, fail_on="坏")
    with run_live_server(Settings(engine="espeak"), engine=lambda: (engine, False, None)) as live:
        async with StreamClient.connect(live.ws_url) as client:
            ctx = await client.open("c")
            await client.send_text("坏的一句。好的一句。", ctx)
            await client.end(ctx)
            result = await client.collect(ctx, timeout_s=TIMEOUT_S)
    with pytest.raises(ContextError) as caught:
        result.raise_for_error()
    assert (caught.value.code, caught.value.context_id, caught.value.status_code) == (
        "synthesis_failed",
        "c",
        500,
    )
    assert result.done is not None and {f.segment for f in result.frames} == {1}


# --- a peer that does not speak the protocol -------------------------------------------


@asynccontextmanager
async def peer(
    handler: Callable[[ServerConnection], Awaitable[None]],
    refuse: Response | None = None,
) -> AsyncIterator[str]:
    """A plain websockets server on port 0 that runs ``handler`` (or answers ``refuse``)."""

    def process_request(_connection: ServerConnection, _request: Request) -> Response | None:
        return refuse

    async with serve(handler, "127.0.0.1", 0, process_request=process_request) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}/v1/stream"


async def test_a_peer_that_sends_no_ready_raises_protocol_error() -> None:
    """A WebSocket server whose first message is not `ready`: ProtocolError, not a hang."""

    async def hello(connection: ServerConnection) -> None:
        await connection.send("hello")
        await connection.wait_closed()

    async with peer(hello) as url:
        with pytest.raises(ProtocolError) as caught:
            async with StreamClient.connect(url, open_timeout_s=TIMEOUT_S):
                pass
    assert type(caught.value) is ProtocolError and caught.value.code == "bad_event"


@pytest.mark.parametrize(
    ("frame", "code"),
    [(b"\x01\x00", "bad_audio_frame"), ("[1, 2]", "bad_event"), ('{"no": "type"}', "bad_event")],
    ids=["short binary", "json array", "no type"],
)
async def test_an_unreadable_frame_raises_protocol_error(frame: str | bytes, code: str) -> None:
    """After ready, a frame the client cannot read: recv raises ProtocolError."""

    async def ready_then(connection: ServerConnection) -> None:
        await connection.send('{"type": "ready", "sample_rate": 24000}')
        await connection.send(frame)
        await connection.wait_closed()

    async with peer(ready_then) as url, StreamClient.connect(url) as client:
        with pytest.raises(ProtocolError) as caught:
            await client.recv(TIMEOUT_S)
    assert caught.value.code == code


@pytest.mark.parametrize(
    ("status", "expected"),
    [(401, AuthError), (503, UnavailableError), (404, ProtocolError)],
    ids=["401", "503", "404"],
)
async def test_a_refusal_without_the_servers_body_is_typed_by_its_status(
    status: int, expected: type[TTSClientError]
) -> None:
    """A plain-text refusal (a proxy's): 401 is still AuthError, 503 UnavailableError; any
    other status is a ProtocolError that says the answer is not the server's."""
    refusal = Response(status, "Nope", Headers({"Content-Type": "text/plain"}), b"nope")
    async with peer(lambda _: asyncio.sleep(0), refusal) as url:
        with pytest.raises(TTSClientError) as caught:
            async with StreamClient.connect(url, open_timeout_s=TIMEOUT_S):
                pass
    assert type(caught.value) is expected and caught.value.status_code == status


# --- the table -------------------------------------------------------------------------

#: Each error code the protocol documents, and the class the client raises for it.
EXPECTED = {
    "bad_json": RequestError,
    "bad_message": RequestError,
    "binary_not_supported": RequestError,
    "missing_field": RequestError,
    "invalid_field": RequestError,
    "invalid_lexicon": RequestError,
    "voice_not_found": RequestError,
    "unknown_type": RequestError,
    "message_too_large": LimitError,
    "text_too_long": LimitError,
    "buffer_full": LimitError,
    "too_many_contexts": LimitError,
    "context_exists": RequestError,
    "unknown_context": RequestError,
    "context_closing": RequestError,
    "busy": BusyError,
    "draining": UnavailableError,
    "voices_unavailable": UnavailableError,
    "not_ready": NotReadyError,
    "engine_stalled": UnavailableError,
    "synthesis_failed": ContextError,
    "synthesis_timeout": ContextError,
    "internal_error": ContextError,
}
LIMITED = {"message_too_large", "text_too_long", "buffer_full", "too_many_contexts"}


def test_every_documented_error_code_has_its_class() -> None:
    """docs/protocol.md's error codes are exactly the table above, and each error event
    (with `limit` where the server sets it) becomes the class listed."""
    doc = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    section = doc.split("### Error codes")[1].split("\n### ")[0]
    assert set(re.findall(r"^\| `([a-z_]+)` \|", section, re.M)) == set(EXPECTED)
    for code, cls in EXPECTED.items():
        event = {"type": "error", "context_id": "c", "code": code, "message": "m",
                 "limit": 8 if code in LIMITED else None, "retry_after_ms": None}  # fmt: skip
        error = error_from_event(event)
        assert type(error) is cls, code
        assert (error.code, error.context_id, error.message) == (code, "c", "m")
    assert error_from_event({"code": "synthesis_timeout", "message": ""}).status_code == 504


def test_the_protocol_doc_tells_what_to_do_for_every_client_exception() -> None:
    """docs/protocol.md's client error table has a row for each exception class exported."""
    import chattts_client

    doc = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    section = doc.split("## The Python client's errors")[1].split("\n## ")[0]
    rows = set(re.findall(r"^\| `([A-Za-z]+)`", section, re.M))
    exported = {
        name
        for name in chattts_client.__all__
        if isinstance(cls := getattr(chattts_client, name), type)
        and issubclass(cls, TTSClientError)
        and cls is not TTSClientError
    }
    assert rows == exported
