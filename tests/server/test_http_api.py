"""The HTTP API as a whole: streaming /v1/tts, one error shape, a truthful OpenAPI spec,
/docs offline, CORS, and a schemathesis run over the spec against the real server."""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.config import Settings
from tests.live import TIMEOUT_S, LiveServer, run_live_server
from tests.scripted_engine import ScriptedEngine

THREE_SEGMENTS = (
    "今天天气很好，我们去公园散步吧。公园里有很多花，红的黄的都有。傍晚我们再回家做饭。"
)


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    with run_live_server(Settings(engine="espeak", max_http_text_chars=300)) as live:
        yield live


@pytest.fixture(scope="module")
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=TIMEOUT_S) as client:
        yield client


def assert_error_shape(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) >= {"message", "type", "param", "code"}
    assert error["code"] == code and error["message"]
    return error


# --- /v1/tts streaming --------------------------------------------------------------


@pytest.fixture(scope="module")
def slow() -> Iterator[tuple[LiveServer, ScriptedEngine]]:
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.02, ms_per_char=60)
    settings = Settings(engine="chattts", model_dir=Path("unused-by-the-scripted-engine"))
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        yield live, engine


@pytest.mark.parametrize("fmt", ["wav", "pcm", "mp3"])
def test_tts_streams_from_the_first_segment_when_asked(
    slow: tuple[LiveServer, ScriptedEngine], fmt: str
) -> None:
    live, engine = slow
    before = len(engine.requests)
    body = {"text": THREE_SEGMENTS, "format": fmt, "stream": True}
    with (
        httpx.Client(base_url=live.base_url, timeout=TIMEOUT_S) as http,
        http.stream("POST", "/v1/tts", json=body) as response,
    ):
        assert response.status_code == 200
        assert response.headers["transfer-encoding"] == "chunked"
        chunks = response.iter_bytes()
        first = next(chunks)
        begun = len(engine.requests) - before
        data = first + b"".join(chunks)
    assert begun < 3, "the response waited for the last segment"
    if fmt == "wav":
        assert data[:4] == b"RIFF" and data[40:44] == b"\xff\xff\xff\xff"  # length unknown
        assert len(data) > 44 + 2 * 24000
    elif fmt == "pcm":
        assert len(data) > 2 * 24000


def test_tts_buffered_wav_has_exact_sizes(http: httpx.Client) -> None:
    data = http.post("/v1/tts", json={"text": "你好。", "format": "wav"}).content
    assert int.from_bytes(data[40:44], "little") == len(data) - 44
    assert int.from_bytes(data[4:8], "little") == len(data) - 8


def test_tts_json_cannot_stream(http: httpx.Client) -> None:
    response = http.post("/v1/tts", json={"text": "你好。", "format": "json", "stream": True})
    assert_error_shape(response, 400, "invalid_field")


def test_streamed_tts_time_to_first_byte_is_less_than_buffered(
    slow: tuple[LiveServer, ScriptedEngine],
) -> None:
    live, _ = slow

    def first_byte_s(stream: bool) -> float:
        started = time.perf_counter()
        body = {"text": THREE_SEGMENTS, "format": "pcm", "stream": stream}
        with (
            httpx.Client(base_url=live.base_url, timeout=TIMEOUT_S) as http,
            http.stream("POST", "/v1/tts", json=body) as response,
        ):
            next(response.iter_bytes())
            return time.perf_counter() - started

    assert first_byte_s(True) < first_byte_s(False) / 2


# --- small truths ------------------------------------------------------------------


def test_an_empty_speaker_is_a_clear_400(http: httpx.Client) -> None:
    error = assert_error_shape(http.post("/v1/tts", json={"text": "你好", "speaker": ""}), 400,
                               "invalid_voice")  # fmt: skip
    assert error["param"] == "speaker"
    both = http.post("/v1/tts", json={"text": "你好", "speaker": "m1", "voice": "f1"})
    assert_error_shape(both, 400, "invalid_field")


def test_speaker_and_voice_are_one_name(http: httpx.Client) -> None:
    for field in ("voice", "speaker"):
        response = http.post("/v1/tts", json={"text": "你好。", field: "m1", "format": "pcm"})
        assert response.status_code == 200 and response.content


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"text": "你好", "seed": False}, "seed"),
        ({"text": "你好", "seed": 1.5}, "seed"),
        ({"text": "你好", "pitch": 2}, "pitch"),
        ({"text": 5}, "text"),
    ],
)
def test_wrong_types_and_unknown_fields_are_refused(
    http: httpx.Client, body: dict[str, Any], param: str
) -> None:
    error = assert_error_shape(http.post("/v1/tts", json=body), 422, "invalid_request")
    assert param in error["message"]


def test_every_route_answers_errors_in_one_shape(http: httpx.Client) -> None:
    assert_error_shape(http.get("/v1/nothing-here"), 404, "not_found")
    assert_error_shape(http.delete("/health"), 405, "method_not_allowed")
    undecodable = http.post(
        "/v1/tts", content=b'{"text": ', headers={"content-type": "application/json"}
    )
    assert_error_shape(undecodable, 422, "invalid_json")
    assert_error_shape(http.post("/v1/preview", json={}), 422, "invalid_request")
    too_long = http.post("/v1/tts", json={"text": "好" * 301})
    assert assert_error_shape(too_long, 413, "text_too_long")["limit"] == 300


def test_the_timeout_message_states_the_limit() -> None:
    engine = ScriptedEngine(chunk_delay_s=0.5)
    settings = Settings(
        engine="chattts", model_dir=Path("unused-by-the-scripted-engine"), http_timeout_s=0.3,
        fallback_on_synthesis_failure=False,
    )  # fmt: skip
    with (
        run_live_server(settings, engine=lambda: (engine, False, None)) as live,
        httpx.Client(base_url=live.base_url, timeout=TIMEOUT_S) as http,
    ):
        error = assert_error_shape(http.post("/v1/tts", json={"text": "你好。"}), 504, "timeout")
    assert "0.3 s" in error["message"] and "--http-timeout-s" in error["message"]


def test_cors_is_off_by_default_and_on_for_the_origins_set(http: httpx.Client) -> None:
    preflight = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}
    assert "access-control-allow-origin" not in http.options("/v1/tts", headers=preflight).headers
    settings = Settings(engine="espeak", cors_origins="https://app.example")
    with run_live_server(settings) as live, httpx.Client(base_url=live.base_url) as other:
        allowed = other.options("/v1/tts", headers=preflight)
        assert allowed.headers["access-control-allow-origin"] == "https://app.example"
        refused = other.options("/v1/tts", headers=preflight | {"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in refused.headers


# --- OpenAPI ---------------------------------------------------------------------------


def test_the_spec_declares_audio_bodies_errors_and_security(http: httpx.Client) -> None:
    spec = http.get("/openapi.json").json()
    schemes = spec["components"]["securitySchemes"]
    assert schemes["bearer"] == {"type": "http", "scheme": "bearer",
                                 "description": schemes["bearer"]["description"]}  # fmt: skip
    for path in ("/v1/tts", "/v1/audio/speech"):
        operation = spec["paths"][path]["post"]
        assert operation["security"] == [{"bearer": []}]
        ok = operation["responses"]["200"]["content"]
        assert {"audio/wav", "audio/mpeg", "audio/pcm"} <= set(ok)
        assert ok["audio/wav"]["schema"] == {"type": "string", "format": "binary"}
        for status in ("400", "401", "413", "422", "503", "504"):
            schema = operation["responses"][status]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorBody"}
    assert (
        "text/event-stream"
        in spec["paths"]["/v1/audio/speech"]["post"]["responses"]["200"]["content"]
    )
    tts = spec["components"]["schemas"]["TTSRequest"]
    assert tts["additionalProperties"] is False
    seed = tts["properties"]["seed"]["anyOf"][0]
    assert seed["type"] == "integer"
    assert spec["components"]["schemas"]["SpeechRequest"]["additionalProperties"] is False


def test_docs_work_offline(http: httpx.Client) -> None:
    page = http.get("/docs")
    assert page.status_code == 200
    urls = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text)
    assert urls and not [u for u in urls if re.match(r"https?://", u)], urls
    for url in urls:
        assert http.get(url).status_code == 200, url


# --- schemathesis over the whole spec --------------------------------------------------


def test_schemathesis_finds_no_server_errors_and_conforming_responses(server: LiveServer) -> None:
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis.checks import (
        content_type_conformance,
        not_a_server_error,
        response_schema_conformance,
        status_code_conformance,
    )

    schema = schemathesis.openapi.from_url(f"{server.base_url}/openapi.json")
    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
    ]
    tested = []
    modes = (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)
    for result, mode in itertools.product(list(schema.get_all_operations()), modes):
        operation = result.ok()
        tested.append(operation.label)

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=12,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def run(case: Any) -> None:
            case.call_and_validate(checks=checks, timeout=TIMEOUT_S)

        try:
            run()
        except Unsatisfiable:  # negative data for a route that takes nothing: none exists
            assert mode is schemathesis.GenerationMode.NEGATIVE
    assert {"POST /v1/audio/speech", "POST /v1/tts", "POST /v1/voices"} <= set(tested)


# --- limits a hostile client meets ---------------------------------------------------


def test_the_removed_header_stays_small_whatever_the_text(server: LiveServer) -> None:
    settings = Settings(engine="espeak")
    with run_live_server(settings) as live, httpx.Client(base_url=live.base_url) as http:
        response = http.post("/v1/tts", json={"text": "你好" + "😀" * 1500 + "。" + "☃" * 900})
    assert response.status_code == 200
    assert len(response.headers["x-tts-removed"]) <= 4096
    assert int(response.headers["x-tts-removed-count"]) >= 1


def test_a_body_over_the_limit_is_413_declared_or_chunked() -> None:
    settings = Settings(engine="espeak", max_http_body_bytes=1000)
    with run_live_server(settings) as live, httpx.Client(base_url=live.base_url) as http:
        declared = http.post("/v1/tts", json={"text": "好" * 600})
        assert assert_error_shape(declared, 413, "body_too_large")["limit"] == 1000

        def chunks() -> Iterator[bytes]:
            yield b'{"text": "'
            for _ in range(10):
                yield b"a" * 200
            yield b'"}'

        chunked = http.post(
            "/v1/tts", content=chunks(), headers={"content-type": "application/json"}
        )
        assert_error_shape(chunked, 413, "body_too_large")


def test_a_client_that_stops_reading_is_cut_and_its_slot_freed() -> None:
    """The time a client takes to read does not count against --http-timeout-s, but a
    client that reads nothing for --http-stall-timeout-s loses the response."""
    import socket

    engine = ScriptedEngine(chunk_ms=500, chunk_delay_s=0.0, ms_per_char=400)
    settings = Settings(
        engine="chattts", model_dir=Path("unused-by-the-scripted-engine"), http_stall_timeout_s=1.0
    )
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        admission = live.state.admission  # type: ignore[attr-defined]
        body = ('{"text": "' + "长" * 3000 + '。", "format": "pcm", "stream": true}').encode()
        host, port = live.base_url.removeprefix("http://").split(":")
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((host, int(port)))
            sock.sendall(
                b"POST /v1/tts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
            )  # fmt: skip
            deadline = time.monotonic() + TIMEOUT_S
            while admission.streams == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert admission.streams == 1  # speaking, and nobody reads
            while admission.streams and time.monotonic() < deadline:
                time.sleep(0.1)
            assert admission.streams == 0, "the stalled response still holds its slot"
