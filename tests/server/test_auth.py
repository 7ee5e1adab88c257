"""Bearer tokens on a real server (HTTP and WebSocket upgrade), and the token checks and
token-file parsing they are built on."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from chattts_client import AuthError, StreamClient
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus
from websockets.typing import Subprotocol

from server.auth import TokenAuth, bearer_token, websocket_token
from server.config import Settings
from server.config_input import build_settings, read_token_file
from tests.live import TIMEOUT_S, LiveServer, run_live_server

TOKEN = "s3cret"
PROTECTED = Settings(engine="espeak", tokens=(TOKEN,))


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    with run_live_server(PROTECTED) as live:
        yield live


@pytest.fixture(scope="module")
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=TIMEOUT_S) as client:
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --- HTTP -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        (bearer("wrong"), 401),
        (bearer(TOKEN + "x"), 401),
        (bearer(TOKEN[:-1]), 401),
        ({"Authorization": TOKEN}, 401),
        ({"Authorization": f"Basic {TOKEN}"}, 401),
        (bearer(TOKEN), 200),
        ({"Authorization": f"bearer {TOKEN}"}, 200),
    ],
    ids=["none", "wrong", "longer", "prefix", "no scheme", "basic", "right", "lowercase scheme"],
)
def test_tts_needs_the_bearer_token(
    http: httpx.Client, headers: dict[str, str], status: int
) -> None:
    """POST /v1/tts is 401 unauthorized without the exact token and 200 with it."""
    response = http.post("/v1/tts", json={"text": "你好。"}, headers=headers)
    assert response.status_code == status
    if status == 401:
        assert response.json()["error"]["code"] == "unauthorized"
        assert TOKEN not in response.text
    else:
        assert response.headers["content-type"] == "audio/wav"


@pytest.mark.parametrize("path", ["/health", "/ready", "/metrics"])
def test_probes_and_metrics_are_open_by_default(http: httpx.Client, path: str) -> None:
    """/health, /ready and /metrics need no token unless protect_metrics is set."""
    assert http.get(path).status_code == 200


def test_protect_metrics_puts_metrics_behind_the_token() -> None:
    """With protect_metrics, /metrics is 401 without the token and 200 with it;
    /health and /ready stay open for the orchestrator."""
    settings = PROTECTED.replace(protect_metrics=True)
    with (
        run_live_server(settings) as live,
        httpx.Client(base_url=live.base_url, timeout=TIMEOUT_S) as http,
    ):
        refused = http.get("/metrics")
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "unauthorized"
        assert http.get("/metrics", headers=bearer("wrong")).status_code == 401
        assert http.get("/metrics", headers=bearer(TOKEN)).status_code == 200
        assert http.get("/health").status_code == 200
        assert http.get("/ready").status_code == 200


# --- WebSocket ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "via"),
    [
        (None, "header"),
        ("wrong", "header"),
        ("wrong", "subprotocol"),
        ("wrong", "query"),
        ("", "query"),
        (TOKEN.upper(), "header"),
    ],
    ids=["none", "wrong header", "wrong subprotocol", "wrong query", "empty query", "case"],
)
async def test_websocket_without_the_token_is_refused_with_401(
    server: LiveServer, token: str | None, via: str
) -> None:
    """A missing or wrong token refuses the upgrade with 401 and a JSON unauthorized body
    (the client's AuthError)."""
    with pytest.raises(AuthError) as caught:
        async with StreamClient.connect(
            server.ws_url, token=token, via=via, open_timeout_s=TIMEOUT_S
        ):
            pass
    assert (caught.value.status_code, caught.value.code) == (401, "unauthorized")
    assert isinstance(caught.value.__cause__, InvalidStatus)
    response = caught.value.__cause__.response
    assert json.loads(response.body or b"{}")["error"]["code"] == "unauthorized"


@pytest.mark.parametrize("via", ["header", "subprotocol", "query"])
async def test_websocket_with_the_token_is_accepted(server: LiveServer, via: str) -> None:
    """The right token via header, `token.<secret>` subprotocol or ?token= opens a session
    that speaks."""
    async with StreamClient.connect(
        server.ws_url, token=TOKEN, via=via, open_timeout_s=TIMEOUT_S
    ) as client:
        assert client.ready["type"] == "ready"
        await client.send_text("你好。")
        await client.end()
        result = await client.collect(timeout_s=TIMEOUT_S)
    assert result.done is not None and result.done["cancelled"] is False
    assert result.samples > 0


async def test_token_subprotocol_is_never_echoed(server: LiveServer) -> None:
    """With ["tts.v1", "token.<secret>"] the server selects tts.v1 and never names the token."""
    offered = [Subprotocol("tts.v1"), Subprotocol(f"token.{TOKEN}")]
    async with connect(server.ws_url, subprotocols=offered, open_timeout=TIMEOUT_S) as ws:
        assert ws.subprotocol == "tts.v1"
        assert ws.response is not None
        assert ws.response.headers.get_all("Sec-WebSocket-Protocol") == ["tts.v1"]
        assert TOKEN not in str(ws.response.headers)


@pytest.fixture(scope="module")
def open_server() -> Iterator[LiveServer]:
    with run_live_server(Settings(engine="espeak")) as live:
        yield live


async def test_without_tokens_everything_is_open(open_server: LiveServer) -> None:
    """With no tokens configured, WebSocket, /v1/tts and /metrics need no token (any is fine)."""
    async with StreamClient.connect(open_server.ws_url, open_timeout_s=TIMEOUT_S) as client:
        assert client.ready["type"] == "ready"
    async with StreamClient.connect(
        open_server.ws_url, token="anything", open_timeout_s=TIMEOUT_S
    ) as client:
        assert client.ready["type"] == "ready"
    with httpx.Client(base_url=open_server.base_url, timeout=TIMEOUT_S) as http:
        assert http.post("/v1/tts", json={"text": "你好。"}).status_code == 200
        assert http.get("/metrics").status_code == 200


# --- units ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("presented", "accepted"),
    [
        ("first", True),
        ("second", True),
        ("third-token", True),
        ("firs", False),
        ("first ", False),
        ("firstsecond", False),
        ("", False),
        (None, False),
        ("令牌", False),
    ],
)
def test_token_auth_accepts_any_configured_token(presented: str | None, accepted: bool) -> None:
    """TokenAuth accepts exactly the configured tokens, whichever position each has."""
    auth = TokenAuth(["first", "second", "third-token"])
    assert auth.enabled
    assert auth.accepts(presented) is accepted


def test_token_auth_without_tokens_accepts_everything() -> None:
    """With no tokens, TokenAuth is disabled and accepts any token, or none."""
    auth = TokenAuth(())
    assert not auth.enabled
    assert auth.accepts(None) and auth.accepts("") and auth.accepts("x")


@pytest.mark.parametrize(
    ("value", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer abc", "abc"),
        ("BEARER  abc ", "abc"),
        ("Bearer ", None),
        ("Basic abc", None),
        ("abc", None),
        ("", None),
    ],
)
def test_bearer_token_reads_the_authorization_header(value: str, token: str | None) -> None:
    """bearer_token takes the token of a Bearer Authorization header, else None."""
    assert bearer_token({"authorization": value}) == token


@pytest.mark.parametrize(
    ("headers", "subprotocols", "query", "token"),
    [
        ({"authorization": "Bearer h"}, ["tts.v1", "token.s"], {"token": "q"}, "h"),
        ({}, ["tts.v1", "token.s"], {"token": "q"}, "s"),
        ({}, ["tts.v1"], {"token": "q"}, "q"),
        ({}, ["tts.v1"], {"token": ""}, None),
        ({}, ["tts.v1"], {}, None),
    ],
    ids=["header first", "then subprotocol", "then query", "empty query", "none"],
)
def test_websocket_token_is_looked_up_in_the_documented_order(
    headers: dict[str, str], subprotocols: list[str], query: dict[str, str], token: str | None
) -> None:
    """websocket_token checks the header, then a token.* subprotocol, then ?token=."""
    assert websocket_token(headers, subprotocols, query) == token


def test_token_file_skips_comments_and_blank_lines(tmp_path: Path) -> None:
    """read_token_file: one token a line, stripped; blank and '#' lines ignored."""
    path = tmp_path / "tokens"
    path.write_text("# team tokens\n\nalpha\n  beta  \n   # indented comment\n\t\ngamma#1\n")
    assert read_token_file(path) == ("alpha", "beta", "gamma#1")


def test_settings_take_tokens_from_file_and_env(tmp_path: Path) -> None:
    """build_settings merges TTS_TOKEN_FILE and comma-separated TTS_TOKENS, dropping
    blanks and duplicates in order."""
    path = tmp_path / "tokens"
    path.write_text("# comment\nalpha\n\nbeta\n")
    environ = {"TTS_TOKEN_FILE": str(path), "TTS_TOKENS": " gamma, ,alpha,delta"}
    settings = build_settings(args=None, environ=environ)
    assert settings.tokens == ("alpha", "beta", "gamma", "delta")
    assert build_settings(args=None, environ={}).tokens == ()


def test_settings_refuse_a_missing_token_file(tmp_path: Path) -> None:
    """A token file that cannot be read stops start-up with a message naming it."""
    missing = tmp_path / "absent"
    with pytest.raises(SystemExit, match="absent"):
        build_settings(args=None, environ={"TTS_TOKEN_FILE": str(missing)})


def test_settings_repr_does_not_show_tokens() -> None:
    """Settings' repr (logged at start-up) leaves the tokens out."""
    assert TOKEN not in repr(PROTECTED)


async def test_refused_upgrade_logs_no_error(server: LiveServer) -> None:
    """A refused WebSocket upgrade leaves no ERROR in uvicorn's log (upstream sansio quirk)."""
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Collect(level=logging.ERROR)
    uvicorn_log = logging.getLogger("uvicorn.error")
    uvicorn_log.addHandler(handler)
    try:
        for _ in range(3):
            with pytest.raises(InvalidStatus):
                async with connect(server.ws_url, open_timeout=TIMEOUT_S):
                    pass
        await asyncio.sleep(0.2)  # the record would follow the handler's return
    finally:
        uvicorn_log.removeHandler(handler)
    assert [r.getMessage() for r in records] == []
