"""Connections before a request reaches the app: each must send its request head in
bounded time, and only so many may be waiting to.

uvicorn (0.55, httptools) arms no timer on a connection until it has answered a first
request: a client that connects and sends nothing, or sends its header lines a few
seconds apart (slowloris), holds a file descriptor for ever, and nothing caps how many
do (500 such connections measured: all open after a minute). Its options do not cover
it: ``timeout_keep_alive`` starts after a response, ``h11_max_incomplete_event_size``
is h11's (the server runs httptools), ``limit_concurrency`` answers 503 only once a head
is complete. :class:`GuardedHttpProtocol` is uvicorn's httptools protocol plus:

- **Header timeout.** A connection has ``header_timeout_s`` from the moment it opens,
  and again from the end of each response on a kept-alive connection, to complete its
  request head (request line and headers; a WebSocket upgrade's too). A connection that
  has sent part of a head then gets ``408``; one that sent nothing is just closed.
- **Pre-authentication limit.** A connection waiting for a request head has shown no
  token yet (a WebSocket upgrade is authenticated as soon as its head is read, an HTTP
  request by its route). At most ``max_preauth`` connections wait at once: one more
  closes the one that has waited longest, so a flood of silent connections cannot lock
  out a client that sends its head at once (refusing the newest would).

Each closure is counted in ``tts_connections_closed_total{reason}``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from server.metrics import Metrics

__all__ = ["ConnectionGuard", "GuardSettings", "GuardedHttpProtocol"]

logger = logging.getLogger(__name__)

_TIMEOUT_BODY = b"the request head did not arrive in time (--header-timeout-s)\n"
_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_TIMEOUT_BODY), _TIMEOUT_BODY)
)
#: The warning that the pre-authentication limit is full comes at most this often.
_WARN_EVERY_S = 60.0


@dataclass(frozen=True)
class GuardSettings:
    header_timeout_s: float
    max_preauth: int


class ConnectionGuard:
    """The connections waiting for a request head, oldest first, and what closes them."""

    def __init__(self, options: GuardSettings, metrics: Metrics | None = None) -> None:
        self.options = options
        self._metrics = metrics
        # A dict keeps insertion order: the first key has waited longest.
        self._waiting: dict[GuardedHttpProtocol, None] = {}
        self._warned_at = -_WARN_EVERY_S

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def wait(self, connection: GuardedHttpProtocol) -> None:
        """``connection`` now waits for a request head; the limit makes room for it."""
        self._waiting[connection] = None
        while len(self._waiting) > self.options.max_preauth:
            oldest = next(iter(self._waiting))
            self.close(oldest, "preauth_limit")
            if time.monotonic() - self._warned_at >= _WARN_EVERY_S:
                self._warned_at = time.monotonic()
                logger.warning(
                    "%d connections are waiting to send a request head "
                    "(--max-preauth-connections): the longest waiting are closed",
                    self.options.max_preauth,
                )

    def done(self, connection: GuardedHttpProtocol) -> None:
        self._waiting.pop(connection, None)

    def close(self, connection: GuardedHttpProtocol, reason: str) -> None:
        """Close a waiting connection (``reason``: header_timeout, preauth_limit)."""
        self.done(connection)
        connection.stop_waiting()
        if self._metrics is not None:
            self._metrics.connections_closed.labels(reason=reason).inc()
        logger.debug("closed a connection waiting for a request head (%s)", reason)
        connection.close_waiting(timed_out=reason == "header_timeout")


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header timeout and the pre-authentication
    limit of :class:`ConnectionGuard` (see the module docstring)."""

    def __init__(self, *args: Any, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._guard = guard
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_started = False  # some bytes of the awaited head have arrived

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self.stop_waiting()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._await_head()  # a pipelined head arriving during a response
        self._head_started = True

    def on_headers_complete(self) -> None:
        # Before uvicorn hands a WebSocket upgrade to its own protocol object.
        self.stop_waiting()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        idle = self.cycle is not None and self.cycle.response_complete
        if idle and not self.transport.is_closing():
            self._await_head()  # kept alive: the next head is awaited like the first

    def _await_head(self) -> None:
        if self._head_timer is not None:
            return
        self._head_started = False
        self._head_timer = self.loop.call_later(
            self._guard.options.header_timeout_s, self._guard.close, self, "header_timeout"
        )
        self._guard.wait(self)

    def stop_waiting(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
            self._guard.done(self)

    def close_waiting(self, *, timed_out: bool) -> None:
        if self.transport.is_closing():
            return
        if timed_out and self._head_started:
            self.transport.write(_TIMEOUT_RESPONSE)
        self.transport.close()
