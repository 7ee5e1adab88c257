"""The socket under a WebSocket: how much audio it may hold, and how it is let go.

ASGI gives an app no handle on its connection's transport, but two things need one:

- **Bounded buffering.** Audio is made faster than real time. Written straight into the
  socket, it piles up in the kernel's send buffer (autotuned to megabytes on a fast
  link) and the transport's buffer, where a ``cancel`` can no longer reach it: measured
  here, 59 s of audio still arrived after a cancel from a client that had paused
  reading. With both buffers bounded (``--ws-send-buffer-bytes``) the socket applies
  backpressure early, the audio waits in the engine's queue for its context, and a
  cancel drops it there. The price: a fixed send buffer turns off the kernel's
  autotuning, so one connection carries at most about the buffer per round trip (64
  KiB: ~320 KB/s at 100 ms, six 24 kHz streams); raise it for many contexts per
  connection over long links, or set 0 for the operating system's default.
- **Going away at shutdown.** After the drain deadline a send still blocked on a client
  that stopped reading would hold the process until uvicorn cancels it with an error
  and a traceback. The session instead queues a close frame (1001, going away), lets
  it flush for a moment, then aborts the transport.

uvicorn passes its protocol's own bound ``send`` method as the ASGI ``send`` callable;
:func:`tap` reads the transport off it and puts it in the scope under :data:`SCOPE_KEY`
(and, for a WebSocket, the protocol itself under :data:`PROTOCOL_KEY`:
:mod:`server.ws.wire` writes frames through it), from :class:`TransportTap`, the
outermost middleware, or for the streaming WebSocket, which is taken to its endpoint
before the middleware (:class:`server.app.App`). With another
server (or a wrapped ``send``) the keys are absent and these features quietly do nothing
more than ASGI allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = [
    "PROTOCOL_KEY",
    "SCOPE_KEY",
    "TransportTap",
    "bound_send_buffer",
    "drain_then_abort",
    "pending_bytes",
    "tap",
    "unblock_writes",
]

logger = logging.getLogger(__name__)

SCOPE_KEY = "chattts_stream.transport"
PROTOCOL_KEY = "chattts_stream.ws_protocol"
_TRANSPORT_METHODS = ("get_write_buffer_size", "set_write_buffer_limits", "abort", "is_closing")


class TransportTap:
    """ASGI middleware: a WebSocket or HTTP scope gets its asyncio transport under
    SCOPE_KEY (HTTP: a streamed body that fails midway aborts its connection)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tap(scope, send)
        await self.app(scope, receive, send)


def tap(scope: Scope, send: Send) -> None:
    """Put the transport (and a WebSocket's protocol) under ``send`` into ``scope``."""
    if scope["type"] in ("websocket", "http"):
        protocol = getattr(send, "__self__", None)
        transport = getattr(protocol, "transport", None)
        # uvloop's transports are not asyncio.WriteTransport subclasses: duck-type.
        if all(hasattr(transport, name) for name in _TRANSPORT_METHODS):
            scope[SCOPE_KEY] = transport
            if scope["type"] == "websocket":
                scope[PROTOCOL_KEY] = protocol


def bound_send_buffer(transport: asyncio.WriteTransport | None, limit_bytes: int) -> None:
    """Hold at most about ``limit_bytes`` in flight: half in the kernel, half in the transport.

    ``limit_bytes`` 0 leaves the operating system's and asyncio's defaults.
    """
    if transport is None or limit_bytes <= 0 or transport.is_closing():
        return
    half = max(limit_bytes // 2, 1024)
    sock: Any = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            # Linux doubles the value for its bookkeeping; the data held is about `half`.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, half // 2)
    with contextlib.suppress(RuntimeError):  # uvloop: the client left in the meantime
        transport.set_write_buffer_limits(high=half)


def pending_bytes(transport: asyncio.WriteTransport | None) -> int:
    """Bytes written by the app and not yet taken by the kernel (0 without a transport)."""
    if transport is None or transport.is_closing():
        return 0
    return transport.get_write_buffer_size()


def unblock_writes(transport: asyncio.WriteTransport | None) -> None:
    """Let writes through whatever is buffered, so a close frame can still be queued."""
    if transport is not None and not transport.is_closing():
        with contextlib.suppress(RuntimeError):
            transport.set_write_buffer_limits(high=1 << 30)


async def drain_then_abort(transport: asyncio.WriteTransport | None, grace_s: float) -> None:
    """Give what is written ``grace_s`` to reach the client, then drop the connection."""
    if transport is None:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    while transport.get_write_buffer_size():
        if loop.time() >= deadline:
            logger.info("a client that stopped reading is disconnected")
            transport.abort()
            return
        await asyncio.sleep(0.02)
