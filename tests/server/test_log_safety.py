"""The server's log under a client's hostile input, from the real CLI server at INFO and
DEBUG, in text and JSON: no token in any line, however it was sent; no client value can
forge a text line; a client's bad frame is one quiet line, not an ERROR with a traceback."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from chattts_client import StreamClient
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedError, InvalidStatus

from harness.live import TIMEOUT_S
from server.logs import redact
from streaming import protocol as p

ROOT = Path(__file__).resolve().parents[2]
FORGED = "2031-01-01 00:00:00,000 CRITICAL server.app: forged"
#: The start of a text record (server.logs): a line that does not start so continues one.
RECORD_START = re.compile(
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) \S+"
)


@dataclass
class Run:
    """One server run: its log, and what the clients saw."""

    fmt: str
    level: str
    tokens: dict[str, str]  # how a token was used -> the token
    stderr: str = ""
    utf8_close_code: int | None = None
    statuses: dict[str, int] = field(default_factory=dict)

    def lines(self) -> list[str]:
        return self.stderr.splitlines()

    def records(self) -> list[tuple[str, str]]:
        """(level, whole line) of every record."""
        if self.fmt == "json":
            return [(json.loads(line)["level"], line) for line in self.lines()]
        return [
            (match.group(1), line) for line in self.lines() if (match := RECORD_START.match(line))
        ]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def use_tokens(run: Run, port: int) -> None:
    """Every way a token reaches the server, accepted and refused, HTTP and WebSocket."""
    base, ws_url = f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/v1/stream"
    t = run.tokens
    async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT_S) as http:
        for name, headers, path in [
            ("http header", {"Authorization": f"Bearer {t['good']}"}, "/v1/voices"),
            ("http bad header", {"Authorization": f"Bearer {t['bad http header']}"}, "/v1/voices"),
            ("http query", {}, f"/v1/voices?token={t['good']}"),
            ("http bad query", {}, f"/health?token={t['bad http query']}"),
        ]:
            run.statuses[name] = (await http.get(path, headers=headers)).status_code
    for via in ("header", "subprotocol", "query"):
        async with StreamClient.connect(ws_url, token=t["good"], via=via) as client:
            assert client.ready["type"] == "ready"
    # A percent-encoded parameter name is still read as `token`.
    async with StreamClient.connect(f"{ws_url}?tok%65n={t['good']}") as client:
        assert client.ready["type"] == "ready"
    refused = [
        ({"additional_headers": {"Authorization": f"Bearer {t['bad ws header']}"}}, ws_url),
        ({"subprotocols": [p.SUBPROTOCOL, "token." + t["bad ws subprotocol"]]}, ws_url),
        ({}, f"{ws_url}?token={t['bad ws query']}"),
    ]
    for options, url in refused:
        with pytest.raises(InvalidStatus):
            async with connect(url, **options):  # type: ignore[arg-type]
                pass


async def forge_lines(port: int, token: str) -> None:
    """A request path and a context_id that each carry a line that looks like a record."""
    async with httpx.AsyncClient(timeout=TIMEOUT_S) as http:
        path = "/nothing%0A" + FORGED.replace(" ", "%20") + "-path"
        assert (await http.get(f"http://127.0.0.1:{port}{path}")).status_code == 404
    async with StreamClient.connect(f"ws://127.0.0.1:{port}/v1/stream", token=token) as client:
        context = await client.open(context_id="c\n" + FORGED + "-context", seed=3)
        await client.send_text("你好。", context)
        await client.end(context)
        await client.collect(context, TIMEOUT_S)


async def send_invalid_utf8(port: int, token: str) -> int | None:
    """A text frame that is not UTF-8; the close code the server answers with."""
    headers = {"Authorization": f"Bearer {token}"}
    url = f"ws://127.0.0.1:{port}/v1/stream"
    async with connect(url, additional_headers=headers) as ws:
        await ws.recv()  # ready
        await ws.send(b"\xff\xfe{}", text=True)
        with pytest.raises(ConnectionClosedError) as caught:
            async with asyncio.timeout(TIMEOUT_S):
                while True:
                    await ws.recv()
    return caught.value.rcvd.code if caught.value.rcvd else None


def serve(run: Run) -> None:
    """Run the CLI server through every scenario; its log into ``run.stderr``."""
    port = free_port()
    env = {**os.environ, "TTS_TOKENS": run.tokens["good"]}
    server = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "serve", "--engine", "espeak", "--port", str(port),
         "--log-format", run.fmt, "--log-level", run.level],
        stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env,
    )  # fmt: skip
    try:
        wait_ready(port)

        async def scenario() -> None:
            await use_tokens(run, port)
            await forge_lines(port, run.tokens["good"])
            run.utf8_close_code = await send_invalid_utf8(port, run.tokens["good"])

        asyncio.run(scenario())
    finally:
        server.send_signal(signal.SIGTERM)
        _, run.stderr = server.communicate(timeout=TIMEOUT_S * 2)


def wait_ready(port: int) -> None:
    deadline = time.monotonic() + TIMEOUT_S * 2
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/ready").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError("the server did not become ready")


@pytest.fixture(
    scope="module",
    params=[("text", "info"), ("text", "debug"), ("json", "info"), ("json", "debug")],
    ids=lambda param: "-".join(param),
)
def run(request: pytest.FixtureRequest) -> Iterator[Run]:
    fmt, level = request.param
    uses = ["good", "bad http header", "bad http query", "bad ws header", "bad ws subprotocol",
            "bad ws query"]  # fmt: skip
    tokens = {use: f"tok{secrets.token_hex(12)}" for use in uses}
    result = Run(fmt, level, tokens)
    serve(result)
    yield result


@pytest.mark.live
def test_no_token_is_written_to_the_log_however_it_was_sent(run: Run) -> None:
    """No token, accepted or refused, sent in a header, a subprotocol or the query, over
    HTTP or WebSocket, appears in any log line at INFO or DEBUG."""
    assert run.statuses == {
        "http header": 200, "http bad header": 401, "http query": 401, "http bad query": 200,
    }  # fmt: skip
    # The lines that used to carry them are still written (with the token redacted).
    assert run.stderr.count('"WebSocket /v1/stream') >= 7
    if run.level == "debug":
        assert "< authorization: [redacted]" in run.stderr.lower()
    leaked = {use: token for use, token in run.tokens.items() if token in run.stderr}
    assert leaked == {}


@pytest.mark.live
def test_client_values_cannot_forge_a_text_log_line(run: Run) -> None:
    """A newline in a request path or a context_id is escaped: every line of the text log
    is a record the server wrote (or an indented continuation of one)."""
    if run.fmt != "text":
        pytest.skip("JSON lines escape every value already")
    lines = run.lines()
    assert all(RECORD_START.match(line) or line.startswith(" ") for line in lines)
    assert not [line for line in lines if line.startswith("2031")]
    assert [line for line in lines if "\\n" + FORGED + "-path" in line]
    assert [line for line in lines if "\\n" + FORGED + "-context" in line]


@pytest.mark.live
def test_an_invalid_utf8_frame_is_one_info_line_without_traceback(run: Run) -> None:
    """A text frame that is not UTF-8 closes its connection with 1007 and is logged once,
    at INFO, without a traceback; no ERROR line at all."""
    assert run.utf8_close_code == 1007
    records = run.records()
    assert [level for level, _ in records if level in ("ERROR", "CRITICAL")] == []
    assert "Traceback" not in run.stderr
    assert [level for level, line in records if "UTF-8" in line] == ["INFO"]


# fmt: off
REDACTED = [
    # (case, text as logged, as written)
    ("request target", "GET /v1/stream?token=abc HTTP/1.1", "GET /v1/stream?[redacted] HTTP/1.1"),
    ("quoted target", '1.2.3.4:5 - "WebSocket /v1/stream?a=1&token=abc" 401',
     '1.2.3.4:5 - "WebSocket /v1/stream?[redacted]" 401'),
    ("authorization header", "< authorization: Bearer abc", "< authorization: [redacted]"),
    ("bearer elsewhere", "sent Bearer abc, then", "sent Bearer [redacted], then"),
    ("subprotocol", "< sec-websocket-protocol: tts.v1, token.abc", "< sec-websocket-protocol: tts.v1, token.[redacted]"),
    ("cookie", "< Cookie: session=abc", "< Cookie: [redacted]"),
    ("prose stays", "GET /v1/voices: missing or invalid bearer token (unauthorized)",
     "GET /v1/voices: missing or invalid bearer token (unauthorized)"),
    ("a question stays", "is it ready? yes", "is it ready? yes"),
]
# fmt: on


@pytest.mark.parametrize(
    ("text", "written"), [c[1:] for c in REDACTED], ids=[c[0] for c in REDACTED]
)
def test_redact_cuts_secrets_and_leaves_the_rest(text: str, written: str) -> None:
    """The redaction every log record goes through: secrets out, the rest as it was."""
    assert redact(text) == written
