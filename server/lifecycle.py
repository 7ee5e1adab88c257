"""Process lifecycle: drain on the first shutdown signal, exit at once on the second."""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import logging
import socket
import threading
import time
from types import FrameType
from typing import Any

import uvicorn

from server.config import Settings
from server.connection_guard import ConnectionGuard, GuardedHttpProtocol
from server.state import AppState
from server.ws.keepalive import LateClientAbortingProtocol

logger = logging.getLogger(__name__)

#: How long a close frame queued behind unread audio may take to reach its client.
_GOING_AWAY_GRACE_S = 1.0


def uvicorn_config(app: Any, settings: Settings, **overrides: Any) -> uvicorn.Config:
    """The one uvicorn configuration the server runs with (``overrides`` for tests and
    benchmarks: log level, graceful-shutdown timeout)."""
    state: AppState | None = getattr(getattr(app, "state", None), "tts", None)
    guard = state.guard if state is not None else ConnectionGuard(settings.connection_guard)
    options: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        # httptools with a header timeout and the pre-authentication limit.
        "http": functools.partial(GuardedHttpProtocol, guard=guard),
        # websockets-sansio, aborting a client whose pong is late (server.ws.keepalive).
        "ws": LateClientAbortingProtocol,
        "loop": "uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        "ws_max_size": settings.transport_max_bytes,
        "ws_ping_interval": settings.ws_ping_interval_s or None,
        "ws_ping_timeout": settings.ws_ping_timeout_s,
        # PCM does not compress: permessage-deflate cost a quarter of the server's CPU.
        "ws_per_message_deflate": False,
        "log_level": settings.log_level,
        "timeout_graceful_shutdown": 10,
        "log_config": None,
        # Each request's one summary line (server.logs) replaces uvicorn's access line.
        "access_log": False,
        "backlog": 4096,
    }
    return uvicorn.Config(app, **{**options, **overrides})


class DrainingServer(uvicorn.Server):
    """A uvicorn server that lets audio in progress finish before it closes connections.

    On the first SIGTERM/SIGINT it turns /ready to 503, refuses new connections and
    requests, and sends every open WebSocket session a ``draining`` event (its open
    contexts end after the text they accepted, new ones are refused, so clients continue
    elsewhere); then it waits until no context holds unspoken text and the engine has been
    idle for a little longer than the idle-flush time, or until
    ``drain_timeout_s``; only then does uvicorn shut down (WebSocket close code 1012).
    A connection whose client stopped reading (sends blocked) gets 1001 instead, and is
    dropped if even that cannot reach it. A second signal, or ``drain_timeout_s = 0``,
    shuts down at once.
    """

    def __init__(self, config: uvicorn.Config, state: AppState) -> None:
        super().__init__(config)
        self._state = state
        self._loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # The signal handler may run on another thread (tests call it directly): it
        # reaches the sessions through the loop.
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop serving (None before startup): other threads reach the
        server's connections only through it (``call_soon_threadsafe``)."""
        return self._loop

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # A client that stopped reading would hold its connection open until uvicorn
        # cancels it with an error: let it go first, with a close code that says why.
        await self._state.release_blocked_sessions(_GOING_AWAY_GRACE_S)
        # One round of the loop: messages queued by sessions' wires (server.ws.wire) are
        # written before uvicorn's close frames.
        await asyncio.sleep(0)
        await super().shutdown(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        timeout_s = self._state.settings.drain_timeout_s
        if self._state.draining or timeout_s <= 0 or not self.started:
            super().handle_exit(sig, frame)
            return
        self._state.draining = True
        self._state.metrics.draining.set(1)
        logger.info(
            "draining: refusing new work, waiting up to %.0f s for audio in progress", timeout_s
        )
        deadline = time.monotonic() + timeout_s
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._state.tell_sessions_draining, deadline)
        threading.Thread(target=self._drain, args=(deadline,), name="drain", daemon=True).start()

    def _drain(self, deadline: float) -> None:
        quiet_needed_s = self._state.settings.idle_flush_ms / 1000 + 0.5
        quiet_since: float | None = None
        while not self.should_exit:
            now = time.monotonic()
            if now >= deadline:
                logger.warning("drain timeout: closing connections with audio still in progress")
                break
            if self._state.worker.busy or self._state.has_pending_text():
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            elif now - quiet_since >= quiet_needed_s:
                logger.info("drained: no audio in progress")
                break
            time.sleep(0.05)
        self.should_exit = True
