"""What one WebSocket connection costs: our server against a bare uvicorn app and a bare
``websockets`` server, each in a child process, measured one after the other in this run.

A connection here is what a stream of bench/capacity.py pays before its text: open
(TCP, HTTP upgrade, handshake), read ``ready``, send ``start`` and read ``started``, then
close. In a burst of new streams both sides' event loops run out of CPU on this (the
capacity trials' "opened in" figures), so its price per connection is what this prints:
the server's CPU (user + system, from /proc) and the clients' (this process), per
connection, ``--connections`` of them, ``--concurrency`` at a time.

- ``ours``: the server (``--engine espeak``: no engine work is asked for), its whole
  ASGI app and middleware, a session and a context per connection;
- ``uvicorn``: a bare ASGI app under the same uvicorn (``ws="websockets-sansio"``,
  uvloop, no compression) answering ``ready`` and ``started`` with the same JSON;
- ``websockets``: a ``websockets`` server on uvloop doing the same;
- ``before`` (``--baseline REF``): our server as git ``REF`` has it.

    .venv/bin/python bench/connection_cost.py                 # 1,000 connections
    .venv/bin/python bench/connection_cost.py --baseline HEAD~1 --rounds 3
    .venv/bin/python bench/connection_cost.py --smoke         # 40 (a test)

With ``--rounds N`` each server is measured N times, the servers alternating, and each
figure is the median of its rounds, each figure on its own (these machines are noisy).
Ends with one JSON line: each server's and its clients' CPU ms per connection, and ours
against the others.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import statistics
import sys
import time
from typing import Any

from bench.server_overhead import checkout, serve_ours, start, start_baseline, stop, wait_ready
from harness.bench_server import cpu_seconds
from streaming.protocol import SUBPROTOCOL

READY = json.dumps({"type": "ready", "sample_rate": 24000})


def _started(message: str) -> str:
    context = json.loads(message).get("context_id", "a")
    return json.dumps({"type": "started", "context_id": context, "stream": 0})


def serve_uvicorn(port_queue: Any) -> None:
    """A bare ASGI app under uvicorn: ``ready`` on accept, ``started`` for ``start``."""
    import socket

    import uvicorn

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        await receive()  # websocket.connect
        await send({"type": "websocket.accept", "subprotocol": SUBPROTOCOL})
        await send({"type": "websocket.send", "text": READY})
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            if '"start"' in (message.get("text") or ""):
                await send({"type": "websocket.send", "text": _started(message["text"])})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port_queue.put(sock.getsockname()[1])
    config = uvicorn.Config(
        app, ws="websockets-sansio", loop="uvloop", log_level="warning",
        ws_per_message_deflate=False, backlog=4096,
    )  # fmt: skip
    uvicorn.Server(config).run(sockets=[sock])


def serve_websockets(port_queue: Any) -> None:
    """A ``websockets`` server on uvloop doing the same."""
    import uvloop
    from websockets.asyncio.server import serve

    async def handler(ws: Any) -> None:
        await ws.send(READY)
        async for message in ws:
            if '"start"' in message:
                await ws.send(_started(message))

    async def main() -> None:
        async with serve(
            handler, "127.0.0.1", 0, backlog=4096, compression=None, subprotocols=[SUBPROTOCOL]
        ) as server:
            port_queue.put(server.sockets[0].getsockname()[1])
            await asyncio.Future()

    uvloop.run(main())


def listening(port: int, deadline_s: float = 60) -> None:
    """Until ``port`` takes connections (a bare server posts its port before it listens)."""
    import socket

    deadline = time.monotonic() + deadline_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"nothing listens on {port}") from None
            time.sleep(0.05)


async def connections(url: str, count: int, concurrency: int) -> None:
    """``count`` connections, ``concurrency`` at a time: open, ready, start, started, close."""
    from websockets.asyncio.client import connect

    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        opening = connect(url, subprotocols=[SUBPROTOCOL], compression=None)  # type: ignore[list-item]
        async with gate, opening as ws:
            ready = json.loads(await ws.recv())
            assert ready["type"] == "ready", ready
            await ws.send(json.dumps({"type": "start", "context_id": f"c{i}", "seed": 1}))
            started = json.loads(await ws.recv())
            assert started["type"] == "started", started

    await asyncio.gather(*(one(i) for i in range(count)))


def measure(name: str, args: argparse.Namespace, root: str | None = None) -> dict[str, float]:
    """One server's figures: ``root`` is the baseline's checkout (``before``)."""
    if root is not None:
        process: Any
        process, port = start_baseline(root)
    else:
        target = {"ours": serve_ours, "uvicorn": serve_uvicorn, "websockets": serve_websockets}
        process, port = start(target[name])
    try:
        if name in ("ours", "before"):
            wait_ready(port)
        else:
            listening(port)
        url = f"ws://127.0.0.1:{port}/v1/stream"
        asyncio.run(connections(url, min(50, args.connections), args.concurrency))  # warm
        assert process.pid is not None
        server_before, clients_before = cpu_seconds(process.pid), time.process_time()
        started = time.perf_counter()
        asyncio.run(connections(url, args.connections, args.concurrency))
        wall_s = time.perf_counter() - started
        server_s = cpu_seconds(process.pid) - server_before
        clients_s = time.process_time() - clients_before
    finally:
        stop(process)
    figures = {
        "server_cpu_ms": round(server_s * 1000 / args.connections, 3),
        "client_cpu_ms": round(clients_s * 1000 / args.connections, 3),
        "connections_a_second": round(args.connections / wall_s),
    }
    print(
        f"{name:10}: server {figures['server_cpu_ms']} ms CPU a connection, clients "
        f"{figures['client_cpu_ms']} ms; {figures['connections_a_second']} connections a "
        "second",
        flush=True,
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=1,
                        help="each server this many times, alternating (medians)")  # fmt: skip
    parser.add_argument("--baseline", metavar="REF",
                        help="also our server as git REF has it ('before')")  # fmt: skip
    parser.add_argument("--smoke", action="store_true", help="40 connections (a test)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.connections = 40
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    print(f"{args.connections} connections, {args.concurrency} at a time", flush=True)
    names = ["ours", *(["before"] if args.baseline else []), "uvicorn", "websockets"]
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    with contextlib.ExitStack() as stack:
        root = stack.enter_context(checkout(args.baseline)) if args.baseline else None
        for _ in range(args.rounds):
            for name in names:
                rounds[name].append(measure(name, args, root if name == "before" else None))
    figures = {
        name: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for name, runs in rounds.items()
    }
    if args.rounds > 1:
        for name, figure in figures.items():
            print(f"{name:10}: median server {figure['server_cpu_ms']} ms a connection")
    ours = figures["ours"]["server_cpu_ms"]
    ratios = {
        f"ours_vs_{name}": round(ours / figures[name]["server_cpu_ms"], 2)
        if figures[name]["server_cpu_ms"] > 0 else None
        for name in names[1:]
    }  # fmt: skip
    print(
        ", ".join(f"server CPU {key.replace('_', ' ')}: {value}x" for key, value in ratios.items())
    )
    print(json.dumps({
        "bench": "connection_cost", "smoke": args.smoke, "connections": args.connections,
        "concurrency": args.concurrency, "rounds": args.rounds, "baseline": args.baseline,
        "figures": figures, **ratios,
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    multiprocessing.freeze_support()
    sys.exit(main())
