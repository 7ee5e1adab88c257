"""Clients that hold a connection without using it, on a real server with real sockets:
silent and slowloris connections are closed within the header timeout, a request body
trickled in is answered 408 within the body timeout, a client cut off without a close
is found by the server's pings, the
pre-authentication limit closes the longest waiting so a real client still gets in, idle
WebSocket sessions are closed and give their slot back."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from chattts_client import StreamClient
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosedOK

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from streaming import protocol as p
from tests.relay import CuttableLink
from tests.scripted_engine import ScriptedEngine

pytestmark = pytest.mark.live

IDLE_S = 1.0  # --ws-idle-timeout-s in these tests
HEADER_S = 1.0  # --header-timeout-s
BODY_S = 1.0  # --body-timeout-s
MAX_PREAUTH = 8  # --max-preauth-connections
TOKEN = "s3cret-token"
#: How late past its bound a closure may come on a loaded machine.
SLACK_S = TIMEOUT_S / 6
SLOWLORIS_LINES = [
    b"GET /v1/stream HTTP/1.1\r\n",
    b"Host: 127.0.0.1\r\n",
    b"Upgrade: websocket\r\n",
    b"Connection: Upgrade\r\n",
    b"Sec-WebSocket-Version: 13\r\n",
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
] + [b"X-Padding-%d: x\r\n" % i for i in range(1000)]


@pytest.fixture(scope="module")
def header_server() -> Iterator[LiveServer]:
    settings = Settings(engine="espeak", header_timeout_s=HEADER_S, tokens=(TOKEN,))
    with run_live_server(settings) as live:
        yield live


@pytest.fixture(scope="module")
def preauth_server() -> Iterator[LiveServer]:
    settings = Settings(
        engine="espeak",
        header_timeout_s=TIMEOUT_S * 10,  # only the limit closes connections here
        max_preauth_connections=MAX_PREAUTH,
        tokens=(TOKEN,),
    )
    with run_live_server(settings) as live:
        yield live


def address(server: LiveServer) -> tuple[str, int]:
    host, port = server.base_url.removeprefix("http://").split(":")
    return host, int(port)


async def until_closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection."""
    received = b""
    async with asyncio.timeout(TIMEOUT_S):
        while True:
            try:
                chunk = await reader.read(4096)
            except ConnectionResetError:
                return received
            if not chunk:
                return received
            received += chunk


async def slowloris(server: LiveServer, every_s: float) -> bytes:
    """Send an upgrade's header lines ``every_s`` apart, never its end, until the server
    closes; what the server answered."""
    reader, writer = await asyncio.open_connection(*address(server))
    closed = asyncio.ensure_future(until_closed(reader))
    try:
        for line in SLOWLORIS_LINES:
            if closed.done():
                break
            writer.write(line)
            await asyncio.wait([closed], timeout=every_s)
        return await closed
    finally:
        writer.close()


async def test_silent_and_slowloris_connections_are_closed_within_the_header_timeout(
    header_server: LiveServer,
) -> None:
    """Connections that never send a byte, and upgrades whose header lines trickle in,
    are closed within --header-timeout-s of opening (a partial head gets 408); a
    WebSocket session that finished its upgrade is not, and nothing is left waiting."""
    loop = asyncio.get_running_loop()
    async with StreamClient.connect(header_server.ws_url, token=TOKEN) as client:
        since = loop.time()
        silent = [await asyncio.open_connection(*address(header_server)) for _ in range(100)]
        answers = await asyncio.gather(
            *(until_closed(reader) for reader, _ in silent),
            *(slowloris(header_server, every_s=HEADER_S / 5) for _ in range(10)),
        )
        waited_s = loop.time() - since
        for _, writer in silent:
            writer.close()
        assert answers[:100] == [b""] * 100
        assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers[100:])
        assert HEADER_S * 0.9 <= waited_s < HEADER_S + SLACK_S
        assert header_server.state.guard.waiting == 0  # type: ignore[attr-defined]
        # The session upgraded before the timeout still works after it.
        context = await client.open(seed=1)
        await client.send_text("你好。", context)
        await client.end(context)
        result = await client.collect(context, TIMEOUT_S)
        assert result.done is not None and result.done["cancelled"] is False


async def test_a_full_preauth_limit_closes_the_longest_waiting_and_a_client_gets_in(
    preauth_server: LiveServer,
) -> None:
    """With --max-preauth-connections silent connections open, each new connection closes
    the one that has waited longest: no more than the limit stay open, and a client with
    a token still connects and speaks."""
    first = [await asyncio.open_connection(*address(preauth_server)) for _ in range(MAX_PREAUTH)]
    second = [await asyncio.open_connection(*address(preauth_server)) for _ in range(MAX_PREAUTH)]
    try:
        # Each of the second wave closed one of the first, oldest first.
        answers = await asyncio.gather(*(until_closed(reader) for reader, _ in first))
        assert answers == [b""] * MAX_PREAUTH
        assert preauth_server.state.guard.waiting == MAX_PREAUTH  # type: ignore[attr-defined]
        async with StreamClient.connect(
            preauth_server.ws_url, token=TOKEN, via="query", open_timeout_s=TIMEOUT_S
        ) as client:
            context = await client.open(seed=2)
            await client.send_text("你好。", context)
            await client.end(context)
            result = await client.collect(context, TIMEOUT_S)
            assert result.done is not None and result.done["cancelled"] is False
        # Its connection closed the oldest of the second wave.
        assert await until_closed(second[0][0]) == b""
        for reader, _ in second[1:]:
            assert not reader.at_eof()
    finally:
        for _, writer in first + second:
            writer.close()


@pytest.fixture(scope="module")
def idle_server() -> Iterator[LiveServer]:
    settings = Settings(engine="espeak", max_connections=1, ws_idle_timeout_s=IDLE_S)
    with run_live_server(settings) as live:
        yield live


async def closed_by_server(ws: ClientConnection) -> ConnectionClosedOK:
    """Read until the server closes the connection; the close it sent."""
    with pytest.raises(ConnectionClosedOK) as caught:
        async with asyncio.timeout(TIMEOUT_S):
            while True:
                await ws.recv()
    return caught.value


async def test_an_idle_session_is_closed_with_1001_and_its_slot_given_back(
    idle_server: LiveServer,
) -> None:
    """A session that opens no context and sends nothing is closed with 1001 and a reason
    naming the idle timeout after --ws-idle-timeout-s; the one --max-connections slot it
    held then takes the next client."""
    loop = asyncio.get_running_loop()
    async with connect(idle_server.ws_url, subprotocols=[p.SUBPROTOCOL]) as ws:  # type: ignore[list-item]
        assert json.loads(await ws.recv())["type"] == "ready"
        since = loop.time()
        closed = await closed_by_server(ws)
        waited_s = loop.time() - since
    assert closed.rcvd is not None
    assert closed.rcvd.code == 1001
    assert closed.rcvd.reason.startswith("idle")
    assert f"{IDLE_S:g} s" in closed.rcvd.reason
    assert IDLE_S * 0.9 <= waited_s < IDLE_S + TIMEOUT_S / 3
    async with StreamClient.connect(idle_server.ws_url, open_timeout_s=TIMEOUT_S) as client:
        assert client.ready["type"] == "ready"


async def test_an_open_context_keeps_a_quiet_session_and_its_end_starts_the_clock(
    idle_server: LiveServer,
) -> None:
    """A session with a context open is not idle however long the client is quiet; once
    the context is done the session closes after --ws-idle-timeout-s."""
    url = idle_server.ws_url
    async with connect(url, subprotocols=[p.SUBPROTOCOL]) as ws:  # type: ignore[list-item]
        assert json.loads(await ws.recv())["type"] == "ready"
        await ws.send(json.dumps({"type": "start", "context_id": "a", "seed": 1}))
        assert json.loads(await ws.recv())["type"] == "started"
        with pytest.raises(TimeoutError):  # quiet for three idle timeouts: still open
            async with asyncio.timeout(IDLE_S * 3):
                await ws.recv()
        await ws.send(json.dumps({"type": "text", "context_id": "a", "text": "你好。"}))
        await ws.send(json.dumps({"type": "end", "context_id": "a"}))
        async with asyncio.timeout(TIMEOUT_S):
            while not isinstance(message := await ws.recv(), str) or (
                json.loads(message)["type"] != "done"
            ):
                pass
        closed = await closed_by_server(ws)
    assert closed.rcvd is not None and closed.rcvd.code == 1001


@pytest.fixture(scope="module")
def body_server() -> Iterator[LiveServer]:
    """A slow scripted engine (3 s of audio take 1.5 s) and a 1 s body timeout."""
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.05, ms_per_char=100)
    settings = Settings(model_dir=Path("unused"), body_timeout_s=BODY_S, tokens=(TOKEN,))
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        yield live


async def test_a_trickled_request_body_gets_408_and_its_connection_closed(
    body_server: LiveServer,
) -> None:
    """A POST whose head says 200 bytes and whose body comes a byte at a time (each
    before the header timeout could matter) is answered 408 ``body_timeout`` within
    --body-timeout-s of its head, and the server closes the connection."""
    head = (
        b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
        b"Content-Type: application/json\r\nContent-Length: 200\r\n\r\n{"
    )
    loop = asyncio.get_running_loop()
    reader, writer = await asyncio.open_connection(*address(body_server))
    writer.write(head)
    since = loop.time()
    closed = asyncio.ensure_future(until_closed(reader))
    try:
        while not closed.done():
            writer.write(b" ")
            await asyncio.wait([closed], timeout=BODY_S / 5)
        answer = await closed
    finally:
        writer.close()
    waited_s = loop.time() - since
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b"connection: close" in answer.lower()
    body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert body["error"]["code"] == "body_timeout"
    assert BODY_S * 0.9 <= waited_s < BODY_S + SLACK_S
    metrics = httpx.get(f"{body_server.base_url}/metrics").text
    assert 'tts_connections_closed_total{reason="body_timeout"} 1.0' in metrics


async def test_a_response_longer_than_the_body_timeout_is_not_cut(
    body_server: LiveServer,
) -> None:
    """The bound is on the request body only: a streamed answer that takes longer than
    --body-timeout-s to make (the app waits on the connection for a disconnect all the
    while) arrives whole."""
    text = "一二三四五六七八九十。" * 3  # 30 characters: 3 s of audio, made in ~1.5 s
    request = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "pcm"}
    loop = asyncio.get_running_loop()
    async with httpx.AsyncClient(timeout=TIMEOUT_S) as http:
        since = loop.time()
        response = await http.post(
            f"{body_server.base_url}/v1/audio/speech", json=request,
            headers={"Authorization": f"Bearer {TOKEN}"},
        )  # fmt: skip
        took_s = loop.time() - since
    assert response.status_code == 200, response.text
    assert took_s > BODY_S * 1.2
    assert len(response.content) >= 2 * 24000 * 3 * 0.9  # 3 s of 16-bit audio at 24 kHz


def gauge(server: LiveServer, name: str) -> float:
    metrics = httpx.get(f"{server.base_url}/metrics").text
    [value] = [line.split()[1] for line in metrics.splitlines() if line.startswith(name + " ")]
    return float(value)


async def test_a_client_cut_off_without_a_close_is_let_go_by_the_servers_pings() -> None:
    """A client speaking a long text whose network goes silent (no FIN, no RST: a relay
    that stops passing bytes): the server's ping gets no pong, so within
    --ws-ping-interval-s + --ws-ping-timeout-s it lets the session go, stops its stream
    and gives back its connection and admission slots, although its send buffers are
    full of audio nobody will read (a plain close would wait for them for ever)."""
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.02, ms_per_char=100)
    interval_s, timeout_s = 2.0, 0.5  # the buffers fill well before the ping goes out
    settings = Settings(
        model_dir=Path("unused"), ws_ping_interval_s=interval_s, ws_ping_timeout_s=timeout_s
    )
    loop = asyncio.get_running_loop()
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        async with CuttableLink(live.base_url, receive_buffer=4096) as link:
            ws = await connect(
                link.ws_url, subprotocols=[p.SUBPROTOCOL], ping_interval=None, close_timeout=0.1
            )  # type: ignore[list-item]
            assert json.loads(await ws.recv())["type"] == "ready"
            await ws.send(json.dumps({"type": "start", "context_id": "a"}))
            text = "一句很长的话。" * 60  # 42 s of audio, made at 5x real time
            await ws.send(json.dumps({"type": "text", "context_id": "a", "text": text}))
            while isinstance(await ws.recv(), str):  # until the first audio frame
                pass
            assert gauge(live, "tts_active_streams") == 1
            link.cut()
            since = loop.time()
            async with asyncio.timeout(TIMEOUT_S):
                while live.state.sessions or gauge(live, "tts_active_streams"):  # type: ignore[attr-defined]
                    await asyncio.sleep(0.05)
            let_go_s = loop.time() - since
            ws.transport.abort()
    assert let_go_s < interval_s + timeout_s + SLACK_S  # the ping, its timeout, some slack
