"""The streaming WebSocket is taken to its endpoint before the middleware stack
(server.app.App); every other connection, and the stream behind a root path, takes the
stack. A real server on a real socket; the built stack is wrapped by a recorder."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from harness.live import LiveServer, run_live_server
from server.config import Settings
from streaming import protocol as p


class Recorder:
    """An ASGI app in front of another: the (type, path) of every scope it passes on."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: list[tuple[str, str]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.seen.append((scope["type"], scope.get("path", "")))
        await self.app(scope, receive, send)


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    with run_live_server(Settings(engine="espeak")) as server:
        yield server


@pytest.fixture
def recorder(live: LiveServer) -> Iterator[Recorder]:
    app: Any = live.app
    built = app.middleware_stack  # built at start-up (the lifespan went through it)
    assert built is not None
    recorder = Recorder(built)
    app.middleware_stack = recorder
    try:
        yield recorder
    finally:
        app.middleware_stack = built
        app.root_path = ""


async def speak(url: str) -> list[str]:
    """A context spoken to its end on ``url``: the events' types, ``ready`` first."""
    types = []
    async with connect(url, subprotocols=[p.SUBPROTOCOL], max_size=None) as ws:
        types.append(json.loads(await ws.recv())["type"])
        await ws.send(json.dumps({"type": "start", "context_id": "a"}))
        await ws.send(json.dumps({"type": "text", "context_id": "a", "text": "你好。"}))
        await ws.send(json.dumps({"type": "end", "context_id": "a"}))
        while True:
            message = await ws.recv()
            if isinstance(message, str):
                types.append(json.loads(message)["type"])
                if types[-1] == "done":
                    return types


@pytest.mark.live
async def test_the_stream_skips_the_middleware_and_still_writes_directly(
    live: LiveServer, recorder: Recorder
) -> None:
    types = await speak(live.ws_url)
    assert types[0] == "ready" and types[-1] == "done" and "segment" in types
    assert recorder.seen == []
    # The transport was tapped without TransportTap: the session wrote frames itself.
    async with connect(live.ws_url, subprotocols=[p.SUBPROTOCOL]) as ws:
        await ws.recv()
        sessions = list(live.state.sessions)  # type: ignore[attr-defined]
        assert sessions and all(s.wire.direct for s in sessions)
    assert recorder.seen == []


@pytest.mark.live
async def test_other_routes_and_other_websockets_take_the_stack(
    live: LiveServer, recorder: Recorder
) -> None:
    async with httpx.AsyncClient(base_url=live.base_url) as http:
        assert (await http.get("/health")).status_code == 200
    with pytest.raises(InvalidStatus):
        async with connect(live.ws_url.replace("/v1/stream", "/v1/streams")):
            pass
    assert recorder.seen == [("http", "/health"), ("websocket", "/v1/streams")]


@pytest.mark.live
async def test_behind_a_root_path_the_stream_takes_the_stack(
    live: LiveServer, recorder: Recorder
) -> None:
    live.app.root_path = "/tts"  # type: ignore[attr-defined]
    for url in (live.ws_url, live.ws_url.replace("/v1/", "/tts/v1/")):
        assert (await speak(url))[-1] == "done"
    assert recorder.seen == [("websocket", "/v1/stream"), ("websocket", "/tts/v1/stream")]
