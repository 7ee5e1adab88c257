"""JSON bodies sent as curl sends them by default (``application/x-www-form-urlencoded``),
as ``text/plain``, or with no content type: read as JSON when they are JSON; otherwise a
415 that says what to send. Driven with curl itself, as the docs' examples are."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.app import create_app
from server.config import Settings
from server.http.middleware import json_body_routes

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    with run_live_server(Settings(engine="espeak")) as live:
        yield live


def curl(url: str, *args: str) -> tuple[int, str, bytes]:
    """(status, content type, body) of ``curl -s URL ARGS``."""
    done = subprocess.run(
        ["curl", "-s", "-o", "-", "-w", "\n%{http_code} %{content_type}", url, *args],
        capture_output=True, timeout=TIMEOUT_S, check=True,
    )  # fmt: skip
    body, _, trailer = done.stdout.rpartition(b"\n")
    status, _, content_type = trailer.decode().partition(" ")
    return int(status), content_type, body


@pytest.mark.live
@pytest.mark.parametrize(
    "header",
    [(), ("-H", "content-type:"), ("-H", "content-type: text/plain; charset=utf-8")],
    ids=["curl-default-form", "none", "text-plain"],
)
def test_each_json_route_reads_a_json_body_whatever_its_content_type(
    server: LiveServer, header: tuple[str, ...]
) -> None:
    """curl -d '{...}' (form-encoded by default), with no content type, or as text/plain:
    /v1/tts speaks, /v1/audio/speech speaks, /v1/preview segments, /v1/voices creates."""
    url = server.base_url
    status, kind, body = curl(url + "/v1/tts", *header, "-d", '{"text": "你好。"}')
    assert (status, kind) == (200, "audio/wav") and body[:4] == b"RIFF", body[:300]
    speech = '{"model": "tts-1", "input": "你好。", "voice": "alloy", "response_format": "pcm"}'
    status, kind, body = curl(url + "/v1/audio/speech", *header, "-d", speech)
    assert status == 200 and kind.startswith("audio/pcm") and len(body) > 1000, body[:300]
    status, _, body = curl(url + "/v1/preview", *header, "-d", '{"text": "你好。再见。"}')
    assert status == 200 and len(json.loads(body)["segments"]) == 2, body
    name = f"form{abs(hash(header))}"
    status, _, body = curl(url + "/v1/voices", *header, "-d", f'{{"name": "{name}", "seed": 3}}')
    assert status == 201 and json.loads(body)["name"] == name, body


@pytest.mark.live
@pytest.mark.parametrize(
    ("header", "sent"),
    [((), "application/x-www-form-urlencoded"), (("-H", "content-type:"), "no content type"),
     (("-H", "content-type: multipart/form-data; boundary=x"), "multipart/form-data")],
)  # fmt: skip
def test_a_body_that_is_not_json_is_refused_saying_what_to_send(
    server: LiveServer, header: tuple[str, ...], sent: str
) -> None:
    """A form body (text=...) to /v1/tts: 415 unsupported_media_type, naming the content
    type it came with and the header to send; nothing of Python or pydantic in it."""
    status, kind, body = curl(server.base_url + "/v1/tts", *header, "-d", "text=你好")
    assert (status, kind) == (415, "application/json"), body
    error = json.loads(body)["error"]
    assert error["code"] == "unsupported_media_type"
    assert "content-type: application/json" in error["message"] and sent in error["message"]
    assert "dictionary" not in error["message"] and "Input should" not in error["message"]


@pytest.mark.live
def test_a_json_content_type_with_broken_json_is_still_invalid_json(server: LiveServer) -> None:
    """Said to be JSON and not JSON: 422 invalid_json, as before (not the 415)."""
    status, _, body = curl(server.base_url + "/v1/tts", "-H", "content-type: application/json",
                           "-d", "{bad")  # fmt: skip
    assert status == 422 and json.loads(body)["error"]["code"] == "invalid_json"


def test_the_json_routes_are_found_in_the_schema() -> None:
    """Every route whose OpenAPI request body is JSON is covered: the four POST routes,
    matched by their path; a GET or another path is not."""
    routes = json_body_routes(create_app(Settings(engine="espeak")).openapi())
    covered = {(m, r.pattern) for m, r in routes}
    assert {m for m, _ in covered} == {"POST"} and len(covered) == 4
    for path in ("/v1/tts", "/v1/audio/speech", "/v1/voices", "/v1/preview"):
        assert any(m == "POST" and r.fullmatch(path) for m, r in routes), path
    assert not any(r.fullmatch("/v1/voices/alloy") for _, r in routes)
