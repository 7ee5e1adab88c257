"""uvicorn's WebSocket protocol (the websockets library's sans-I/O core), with a client
whose pong is late let go at once.

On a pong timeout uvicorn fails the connection (1011) and *closes* its transport, which
waits for the write buffer to drain first. A client cut off by the network while audio
streams to it never reads that buffer, so the close never completes and the session,
its stream and its slots are held until TCP gives up (minutes; for ever on loopback).
:class:`LateClientAbortingProtocol` aborts the transport instead: the buffered audio is
dropped, the app sees the disconnect at once and lets everything go.
"""

from __future__ import annotations

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

__all__ = ["LateClientAbortingProtocol"]


class LateClientAbortingProtocol(WebSocketsSansIOProtocol):
    def keepalive_timeout(self) -> None:
        failing = not (self.close_sent or self.transport.is_closing())
        super().keepalive_timeout()
        if failing:  # uvicorn failed it now: nothing in the buffer will be read
            self.transport.abort()
