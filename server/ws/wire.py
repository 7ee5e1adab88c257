"""The session's own write path: WebSocket messages framed here and written to the socket
in one write per round of the event loop.

Each message sent through ASGI (``websocket.send``) crosses Starlette's WebSocket, the
middleware's send wrappers and uvicorn's protocol, which frames it with the websockets
library's ``Frame`` object and writes it to the transport: one system call a message.
A stream sends ~20 messages per utterance second when it starts (a binary frame per
100 ms, JSON events), most of them while its client is ahead, so those calls were the
largest share of the server's CPU per stream (docs/performance.md).

:class:`Wire` writes server frames straight to uvicorn's websockets-sansio protocol: a
server frame is unmasked and this server negotiates no extension (permessage-deflate is
off), so a frame is a 2-10 byte header and the payload (RFC 6455, section 5.2). Messages
sent in one round of the event loop are written together, with one ``transport.write``,
at the end of the round (``loop.call_soon``); their order and boundaries are kept, and
uvicorn's own frames (pings, pongs, close) are written whole between them. Backpressure is
uvicorn's: a send waits while the protocol's transport is paused (the bounded send
buffer of :mod:`server.transport`). Anything that closes the connection through ASGI
flushes first (:meth:`Wire.flush`), so no data frame follows a close frame; data still
pending when the connection closes otherwise is dropped, as a write to a closed
transport is.

:func:`open_wire` falls back to :class:`AsgiWire` (every message through ASGI, one write
each, as before) when the server is not uvicorn's websockets-sansio protocol or an
extension was negotiated, or when the ``ws_direct_send`` setting is off. Both raise
:class:`WireClosed` once the connection is closing.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

import orjson
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState
from websockets.protocol import State

from server.transport import PROTOCOL_KEY
from streaming import protocol as p

__all__ = ["AsgiWire", "Wire", "WireClosed", "encode_event", "frame_header", "open_wire"]

_TEXT = 0x1
_BINARY = 0x2
_FIN = 0x80
_SHORT = struct.Struct("!BBH")
_LONG = struct.Struct("!BBQ")
_FIELDS: dict[type, tuple[str, ...]] = {}


class WireClosed(Exception):
    """The connection is closing or closed: nothing more can be sent."""


def frame_header(opcode: int, length: int) -> bytes:
    """The header of one unmasked, unfragmented server frame of ``length`` payload bytes."""
    if length < 126:
        return bytes((_FIN | opcode, length))
    if length < 65536:
        return _SHORT.pack(_FIN | opcode, 126, length)
    return _LONG.pack(_FIN | opcode, 127, length)


def encode_event(message: p.ServerMessage) -> bytes:
    """A server event as UTF-8 JSON, the same object as ``message.to_json()`` (orjson:
    ~1 us an event against ~20 us for dataclasses.asdict and json.dumps).

    Fields are shallow-copied (the values are JSON types already); a text orjson
    refuses (a lone surrogate, not UTF-8) is encoded by ``to_json``, which escapes it.
    """
    cls = type(message)
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in fields(cls))
    try:
        return orjson.dumps({name: getattr(message, name) for name in names})
    except TypeError:  # orjson.JSONEncodeError
        return message.to_json().encode()


def open_wire(websocket: WebSocket, *, direct: bool) -> Wire | AsgiWire:
    """The write path of an accepted connection: :class:`Wire` where it can be (and
    ``direct``), else :class:`AsgiWire`."""
    wire = Wire.attach(websocket.scope) if direct else None
    return wire if wire is not None else AsgiWire(websocket)


class AsgiWire:
    """Every message through ASGI's ``websocket.send``: one write each."""

    direct = False

    def __init__(self, websocket: WebSocket) -> None:
        self._websocket = websocket
        self.messages = 0

    async def send_event(self, message: p.ServerMessage) -> None:
        await self._send({"type": "websocket.send", "text": message.to_json()})

    async def send_audio(self, header: bytes, pcm: bytes) -> None:
        await self._send({"type": "websocket.send", "bytes": header + pcm})

    def flush(self) -> None:
        """Nothing is held: each message was written when sent."""

    @property
    def writes(self) -> int:
        return self.messages

    async def _send(self, message: dict[str, Any]) -> None:
        if self._websocket.application_state != WebSocketState.CONNECTED:
            raise WireClosed
        try:
            await self._websocket.send(message)
        except (WebSocketDisconnect, RuntimeError, OSError) as exc:
            raise WireClosed from exc
        self.messages += 1


class Wire:
    """Frames and writes one connection's messages (see the module docstring)."""

    direct = True

    def __init__(self, protocol: Any) -> None:
        self._protocol = protocol
        self._transport: asyncio.WriteTransport = protocol.transport
        self._writable: asyncio.Event = protocol.writable
        self._loop = asyncio.get_running_loop()
        self._parts: list[bytes] = []
        self._scheduled = False
        #: Writes to the transport so far (one per round with something to send).
        self.writes = 0
        #: Messages framed so far.
        self.messages = 0

    @classmethod
    def attach(cls, scope: Mapping[str, Any]) -> Wire | None:
        """The wire of an accepted connection, or None when it cannot be written directly."""
        protocol = scope.get(PROTOCOL_KEY)
        conn = getattr(protocol, "conn", None)
        if conn is None or getattr(conn, "extensions", None) or not hasattr(protocol, "writable"):
            return None
        return cls(protocol)

    @property
    def closed(self) -> bool:
        protocol = self._protocol
        return bool(
            protocol.disconnected
            or protocol.close_sent
            or protocol.conn.state is not State.OPEN
            or self._transport.is_closing()
        )

    async def send_event(self, message: p.ServerMessage) -> None:
        """Queue a JSON event (a text message) for this round's write."""
        await self._ready()
        payload = encode_event(message)
        self._parts += (frame_header(_TEXT, len(payload)), payload)
        self._queued()

    async def send_audio(self, header: bytes, pcm: bytes) -> None:
        """Queue an audio frame (a binary message: ``header`` then ``pcm``)."""
        await self._ready()
        self._parts += (frame_header(_BINARY, len(header) + len(pcm)), header, pcm)
        self._queued()

    def flush(self) -> None:
        """Write what is queued now (before a close through ASGI); dropped when closed."""
        self._scheduled = False
        parts, self._parts = self._parts, []
        if parts and not self.closed:
            self._transport.write(b"".join(parts))
            self.writes += 1

    async def _ready(self) -> None:
        if not self._writable.is_set():
            await self._writable.wait()
        if self.closed:
            raise WireClosed

    def _queued(self) -> None:
        self.messages += 1
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush)
