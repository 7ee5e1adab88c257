"""A real server on a real socket for tests: uvicorn on port 0 in a background thread."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from server.app import create_app
from server.config import Settings
from server.engines.select import EngineFactory
from server.gil import GilSettings
from server.heap import HeapSettings
from server.lifecycle import DrainingServer, uvicorn_config

#: Every wait in the server tests is a multiple of this.
TIMEOUT_S = 30.0

T = TypeVar("T")


@dataclass(frozen=True)
class LiveServer:
    base_url: str  # http://127.0.0.1:PORT
    ws_url: str  # ws://127.0.0.1:PORT/v1/stream
    app: object
    server: DrainingServer

    @property
    def state(self) -> object:
        return self.app.state.tts  # type: ignore[attr-defined]

    def on_loop(self, fn: Callable[[], T]) -> T:
        """``fn()`` run on the server's event loop, and its result. The server's
        transports (uvloop's) must be touched on that loop only: aborting one from the
        test's thread races the loop inside libuv and can crash the process."""
        loop = self.server.loop
        assert loop is not None, "the server has not started"

        async def call() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), loop).result(TIMEOUT_S)


@contextlib.contextmanager
def run_live_server(
    settings: Settings, *, engine: EngineFactory | None = None, wait_ready: bool = True
) -> Iterator[LiveServer]:
    """Serve ``create_app(settings)`` on 127.0.0.1 with an OS-chosen port until exit.

    With ``wait_ready`` the context is entered only once the engine is loaded and warm.
    The server shares this process: it leaves the process's garbage collector as it is
    (``gc_young_threshold`` 0: nothing of the caller's frozen), and its switch interval
    (``gil_switch_interval_ms`` 0), unless told otherwise.
    """
    if settings.heap == HeapSettings():
        settings = settings.replace(heap=HeapSettings(gc_young_threshold=0))
    if settings.gil == GilSettings():
        settings = settings.replace(gil=GilSettings(gil_switch_interval_ms=0))
    app = create_app(settings, engine=engine)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn_config(
        app, settings, log_level="warning", lifespan="on", timeout_graceful_shutdown=5
    )
    server = DrainingServer(config, app.state.tts)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    worker = app.state.tts.worker
    if wait_ready and not worker.wait_ready(TIMEOUT_S * 4):
        raise RuntimeError(f"engine not ready: {worker.status}")
    frontend = app.state.tts.frontend
    while wait_ready and settings.warm_up and not frontend.loaded:
        if time.monotonic() > deadline + TIMEOUT_S * 4:
            raise RuntimeError("text front-end not loaded")
        time.sleep(0.01)
    try:
        yield LiveServer(
            f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/v1/stream", app, server
        )
    finally:
        server.should_exit = True
        thread.join(TIMEOUT_S)
        sock.close()


def child_pids(command: str) -> set[int]:
    """This process's children named ``command``, running or not yet reaped (zombies):
    what an in-process server started and still owes a wait."""
    children = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        if name == command and int(fields.split()[1]) == os.getpid():
            children.add(int(entry.name))
    return children
