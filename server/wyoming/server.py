"""The Wyoming listener: a TCP server on the app's event loop, sharing its state.

Started by the app's lifespan when ``--wyoming-port`` is set (binding
``--wyoming-host``, loopback by default) and closed with it: no new connections, the
requests in progress get until ``--drain-timeout-s`` to finish (new ones are refused
with ``draining`` meanwhile), then what is left is cut. Connections count against
``--max-connections`` beside the WebSocket's; one over it gets a
``too_many_connections`` error and is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from server import logs
from server.errors import report
from server.state import AppState
from server.wyoming.framing import write_error
from server.wyoming.handler import WyomingConnection
from streaming.errors import Unavailable

__all__ = ["WyomingServer"]

logger = logging.getLogger(__name__)


class WyomingServer:
    """One listening socket and the connections it accepted."""

    def __init__(self, state: AppState, server: asyncio.Server) -> None:
        self.state = state
        self._server = server
        self._connections: dict[asyncio.Task[None], WyomingConnection] = {}

    @classmethod
    async def start(cls, state: AppState) -> WyomingServer:
        """Listen on ``--wyoming-host``:``--wyoming-port`` (OSError if it cannot)."""
        settings = state.settings
        holder: list[WyomingServer] = []

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await holder[0]._serve(reader, writer)

        server = await asyncio.start_server(
            accept,
            settings.wyoming.wyoming_host,
            settings.wyoming.wyoming_port,
            limit=settings.max_message_bytes,  # the longest header line read
        )
        wyoming = cls(state, server)
        holder.append(wyoming)
        loopback = settings.wyoming.wyoming_host in ("127.0.0.1", "::1", "localhost")
        logger.log(
            logging.INFO if loopback else logging.WARNING,
            "Wyoming protocol (TTS) on %s:%d; it has no authentication%s",
            settings.wyoming.wyoming_host,
            wyoming.port,
            "" if loopback else ": anyone who can reach this port can use it (firewall it)",
        )
        return wyoming

    @property
    def port(self) -> int:
        """The port bound (the one asked for)."""
        return int(self._server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        state = self.state
        connection_id = logs.new_request_id(None)
        logs.SESSION_ID.set(connection_id)
        try:
            limit = state.settings.max_connections
            if state.connections >= limit:
                await self._turn_away(writer, limit)
                return
            state.connections += 1
            connection = WyomingConnection(state, reader, writer, connection_id)
            self._connections[task] = connection
            try:
                await connection.run()
            finally:
                state.connections -= 1
        finally:
            self._connections.pop(task, None)
            writer.close()

    async def _turn_away(self, writer: asyncio.StreamWriter, limit: int) -> None:
        refusal = Unavailable(
            f"the server already has {limit} connections (--max-connections)",
            code="too_many_connections",
            limit=limit,
        )
        code, message = report(refusal, metrics=self.state.metrics, log=logger, where="wyoming")
        with contextlib.suppress(OSError):
            await write_error(writer, code, message, self.state.settings.http_stall_timeout_s)

    async def close(self, grace_s: float) -> None:
        """Stop listening; close the connections between requests now, give those with a
        request in progress ``grace_s``, then cut them."""
        self._server.close()
        for task, connection in list(self._connections.items()):
            if not connection.busy:
                task.cancel()
        tasks = list(self._connections)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        await self._server.wait_closed()
