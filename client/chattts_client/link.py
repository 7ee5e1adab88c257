"""One WebSocket to one server: its handshake, its sends in order, its reader task."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from chattts_client.errors import ProtocolError, error_from_handshake
from chattts_client.wire import (
    SUBPROTOCOL,
    TOKEN_SUBPROTOCOL_PREFIX,
    Event,
    parse_event,
    parse_frame,
)

__all__ = ["Link"]

#: What a link hands its owner: each event (or a frame it could not read), then, once,
#: the exception that ended the connection.
OnEvent = Callable[["Link", "Event | ProtocolError"], Awaitable[None]]
OnClose = Callable[["Link", ConnectionClosed], Awaitable[None]]


class Link:
    """A connected WebSocket past ``ready``. Sends go out in the order they are asked
    for (one lock); :meth:`listen` starts the task that reads every frame."""

    def __init__(self, ws: ClientConnection, ready: dict[str, Any], url: str) -> None:
        self.ws = ws
        self.ready = ready
        self.url = url
        #: The server sent ``draining``: no new context goes here.
        self.draining = False
        #: A ``start`` here got no answer in time (the server stopped): no new context
        #: goes here either; keepalive ends the connection.
        self.unresponsive = False
        self.closed = False
        self._send_lock = asyncio.Lock()
        self._reader: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        token: str | None,
        via: str,
        open_timeout_s: float,
        keepalive_s: float | None = None,
    ) -> Link:
        """Connect and wait for ``ready`` (see :meth:`StreamClient.connect` for errors).

        ``keepalive_s``: a ping this often, and the connection is lost (closed 1011) when
        its pong does not come within as long; a close handshake waits as long at most
        (a cut network never completes one). None or 0: no pings, websockets' close
        timeout."""
        keepalive_s = keepalive_s or None
        headers: dict[str, str] = {}
        subprotocols = [SUBPROTOCOL]
        target = url
        if token is not None:
            if via == "header":
                headers["Authorization"] = f"Bearer {token}"
            elif via == "subprotocol":
                subprotocols.append(TOKEN_SUBPROTOCOL_PREFIX + token)
            elif via == "query":
                target += ("&" if "?" in url else "?") + "token=" + token
            else:
                raise ValueError(f"unknown token transport {via!r}")
        try:
            ws = await connect(
                target,
                additional_headers=headers,
                subprotocols=subprotocols,  # type: ignore[arg-type]
                open_timeout=open_timeout_s,
                ping_interval=keepalive_s,
                ping_timeout=keepalive_s,
                close_timeout=keepalive_s if keepalive_s is not None else 10.0,
                max_size=None,
            )
        except InvalidStatus as exc:
            raise error_from_handshake(exc) from exc
        try:
            ready = parse_event(await asyncio.wait_for(ws.recv(), open_timeout_s))
            if ready.get("type") != "ready":
                raise ProtocolError("unexpected_message", f"expected ready, got {ready!r:.200}")
        except BaseException:
            await ws.close()
            raise
        return cls(ws, ready, url)

    @property
    def limits(self) -> dict[str, int]:
        limits: dict[str, int] = self.ready.get("limits") or {}
        return limits

    async def send(self, message: dict[str, Any]) -> None:
        """One client message; ``None`` fields are left out."""
        body = {k: v for k, v in message.items() if v is not None}
        await self.send_raw(json.dumps(body, ensure_ascii=False))

    async def send_raw(self, data: str | bytes) -> None:
        # Queued in call order even while an earlier send waits on a full socket.
        async with self._send_lock:
            await self.ws.send(data)

    def listen(self, on_event: OnEvent, on_close: OnClose) -> None:
        """Read every frame from now on, handing each to ``on_event`` in order, then the
        close to ``on_close``."""
        self._reader = asyncio.get_running_loop().create_task(self._read(on_event, on_close))

    async def _read(self, on_event: OnEvent, on_close: OnClose) -> None:
        while True:
            try:
                raw = await self.ws.recv()
            except ConnectionClosed as exc:
                self.closed = True
                await on_close(self, exc)
                return
            try:
                event: Event | ProtocolError = parse_frame(raw)
            except ProtocolError as exc:
                event = exc
            await on_event(self, event)

    async def close(self) -> None:
        self.closed = True
        with contextlib.suppress(Exception):
            await self.ws.close()
        if self._reader is not None and self._reader is not asyncio.current_task():
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader
