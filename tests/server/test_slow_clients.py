"""Clients that hold a connection without using it, on a real server with real sockets:
idle WebSocket sessions are closed and give their slot back."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from chattts_client import StreamClient
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosedOK

from server.config import Settings
from streaming import protocol as p
from tests.live import TIMEOUT_S, LiveServer, run_live_server

IDLE_S = 1.0  # --ws-idle-timeout-s in these tests


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
