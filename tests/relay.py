"""A TCP relay for tests that can be cut like a network."""

from __future__ import annotations

import asyncio
import socket

__all__ = ["CuttableLink"]


class CuttableLink:
    """A TCP relay to ``target`` that can be cut like a network: from :meth:`cut` on,
    no byte passes either way, and neither side is told (no FIN, no RST).

    ``receive_buffer``: the kernel receive buffer of its socket to the target (small, so
    the target's send buffers fill soon after a cut, as they do over a real network)."""

    def __init__(self, target_url: str, *, receive_buffer: int | None = None) -> None:
        self.target_port = int(target_url.rsplit(":", 1)[1])
        self.receive_buffer = receive_buffer
        self.port = 0
        self._cut = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> CuttableLink:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/stream"

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()

    def cut(self) -> None:
        self._cut.set()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = socket.socket()
        try:
            if self.receive_buffer is not None:
                upstream.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer)
            upstream.setblocking(False)
            await asyncio.get_running_loop().sock_connect(upstream, ("127.0.0.1", self.target_port))
            up_reader, up_writer = await asyncio.open_connection(sock=upstream)
        except BaseException:
            upstream.close()  # its transport owns it only once the connection is open
            writer.close()
            raise
        self._writers += [writer, up_writer]

        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            while not self._cut.is_set():
                reading = asyncio.ensure_future(source.read(65536))
                cut = asyncio.ensure_future(self._cut.wait())
                await asyncio.wait({reading, cut}, return_when=asyncio.FIRST_COMPLETED)
                cut.cancel()
                if self._cut.is_set() or not reading.done() or not reading.result():
                    reading.cancel()
                    return  # cut (say nothing to either side) or closed
                sink.write(reading.result())
                await sink.drain()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
