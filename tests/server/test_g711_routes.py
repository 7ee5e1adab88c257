"""G.711 where audio leaves: ``ulaw``/``alaw`` on both HTTP routes (OpenAI's own client
too) and ``pcm_mulaw``/``pcm_alaw`` on the WebSocket in exact 20 ms frames, from a real
server on a socket speaking the real ChatTTS code path (tiny random-weight checkpoint).
Each G.711 answer is decoded by ffmpeg, independently of the server, and compared with
the 16-bit PCM answer to the same request at 8 kHz."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
from chattts_client import ContextResult, StreamClient

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from tests.conftest import fixed_length_chattts

pytestmark = pytest.mark.live

TEXT = "你好，欢迎致电。请问有什么可以帮您？"
FFMPEG_NAMES = {"ulaw": "mulaw", "alaw": "alaw", "pcm_mulaw": "mulaw", "pcm_alaw": "alaw"}


@pytest.fixture(scope="module")
def server(tiny_checkpoint: Path) -> Iterator[LiveServer]:
    factory = fixed_length_chattts(tiny_checkpoint)
    with run_live_server(
        Settings(engine="chattts", model_dir=tiny_checkpoint), engine=factory
    ) as live:
        yield live


def ffmpeg_decode(data: bytes, law: str) -> np.ndarray:
    """G.711 bytes at 8 kHz as float32, decoded by ffmpeg (``-f mulaw`` / ``-f alaw``)."""
    pcm = subprocess.run(
        ["ffmpeg", "-v", "error", "-f", FFMPEG_NAMES[law], "-ar", "8000", "-ac", "1",
         "-i", "pipe:0", "-f", "f32le", "pipe:1"],
        input=data, capture_output=True, check=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    return np.frombuffer(pcm.stdout, np.float32)


def pcm16(data: bytes) -> np.ndarray:
    return np.frombuffer(data, "<i2").astype(np.float32) / 32768


def assert_same_audio(g711_audio: np.ndarray, reference: np.ndarray) -> None:
    """Sample for sample the PCM answer, within G.711's companding error (under 3.6% of
    each sample's value, 36/32768 near zero)."""
    assert g711_audio.size == reference.size > 8000 // 2  # at least half a second
    assert np.abs(reference).max() > 0.01  # not silence
    bound = np.maximum(np.abs(reference) * 0.036, 36 / 32768) + 1e-6
    assert np.all(np.abs(g711_audio - reference) <= bound)


def post(live: LiveServer, path: str, body: dict[str, object]) -> httpx.Response:
    return httpx.post(f"{live.base_url}{path}", json=body, timeout=TIMEOUT_S * 4)


@pytest.mark.parametrize("law", ["ulaw", "alaw"])
@pytest.mark.parametrize("stream", [False, True])
def test_tts_speaks_g711_at_8_khz(server: LiveServer, law: str, stream: bool) -> None:
    """/v1/tts format ulaw/alaw: raw G.711, 8 kHz by default, the samples of pcm at 8 kHz."""
    answer = post(server, "/v1/tts", {"text": TEXT, "format": law, "seed": 7, "stream": stream})
    assert answer.status_code == 200, answer.text
    media = {"ulaw": "audio/PCMU", "alaw": "audio/PCMA"}[law]
    assert answer.headers["content-type"] == f"{media}; rate=8000; channels=1"
    assert answer.headers["x-tts-sample-rate"] == "8000"
    reference = post(
        server, "/v1/tts", {"text": TEXT, "format": "pcm", "seed": 7, "sample_rate": 8000}
    )
    assert_same_audio(ffmpeg_decode(answer.content, law), pcm16(reference.content))


@pytest.mark.parametrize("path", ["/v1/tts", "/v1/audio/speech"])
def test_a_rate_g711_cannot_carry_is_refused(server: LiveServer, path: str) -> None:
    """ulaw at 16 kHz: 400 invalid_field naming sample_rate, before any synthesis."""
    body: dict[str, object] = {"sample_rate": 16000}
    if path == "/v1/tts":
        body |= {"text": TEXT, "format": "ulaw"}
    else:
        body |= {"model": "tts-1", "voice": "alloy", "input": TEXT, "response_format": "ulaw"}
    answer = post(server, path, body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_field" and error["param"] == "sample_rate"
    assert "8000 Hz only" in error["message"]


@pytest.mark.parametrize(("fmt", "law"), [("ulaw", "ulaw"), ("g711_alaw", "alaw")])
def test_openais_client_asks_for_g711(server: LiveServer, fmt: str, law: str) -> None:
    """The openai package, unchanged, asks for response_format ulaw (or the Realtime API's
    g711_alaw) and gets raw G.711 at 8 kHz: the samples of pcm with sample_rate 8000."""
    with openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0) as client:
        answer = client.audio.speech.create(
            model="tts-1",
            voice="alloy",
            input=TEXT,
            response_format=fmt,  # type: ignore[arg-type]
        )
        reference = client.audio.speech.create(
            model="tts-1",
            voice="alloy",
            input=TEXT,
            response_format="pcm",
            extra_body={"sample_rate": 8000},
        )
    assert answer.response.headers["content-type"].endswith("; rate=8000; channels=1")
    assert reference.response.headers["content-type"].startswith("audio/pcm; rate=8000;")
    assert_same_audio(ffmpeg_decode(answer.content, law), pcm16(reference.content))


def test_the_openapi_document_lists_the_g711_formats(server: LiveServer) -> None:
    """/openapi.json offers ulaw and alaw on both routes, and sample_rate on OpenAI's."""
    spec = httpx.get(f"{server.base_url}/openapi.json", timeout=TIMEOUT_S).json()
    schemas = spec["components"]["schemas"]
    tts_formats = schemas["TTSRequest"]["properties"]["format"]["anyOf"][0]["enum"]
    speech = schemas["SpeechRequest"]["properties"]
    assert {"ulaw", "alaw"} <= set(tts_formats)
    assert {"ulaw", "alaw", "g711_ulaw", "g711_alaw"} <= set(speech["response_format"]["enum"])
    assert "sample_rate" in speech
    for path in ("/v1/tts", "/v1/audio/speech"):
        content = spec["paths"][path]["post"]["responses"]["200"]["content"]
        assert {"audio/PCMU", "audio/PCMA"} <= set(content)


async def speak_ws(
    live: LiveServer, encoding: str, sample_rate: int | None = None
) -> ContextResult:
    async with StreamClient.connect(live.ws_url) as client:
        assert client.ready["encodings"] == ["pcm_s16le", "pcm_mulaw", "pcm_alaw"]
        context = await client.start(
            seed=11, encoding=encoding, frame_ms=20, sample_rate=sample_rate
        )
        await client.send_text(TEXT, context)
        await client.end(context)
        return await client.collect(context, timeout_s=TIMEOUT_S * 4)


@pytest.mark.parametrize("encoding", ["pcm_mulaw", "pcm_alaw"])
async def test_the_websocket_sends_g711_in_exact_20_ms_frames(
    server: LiveServer, encoding: str
) -> None:
    """start.encoding pcm_mulaw/pcm_alaw with frame_ms 20: started echoes both at 8 kHz,
    every frame is 160 bytes (a segment's last one filled with silence), and the audio
    is that of pcm_s16le at 8 kHz for the same seed."""
    result = await speak_ws(server, encoding)
    result.raise_for_error()
    started = result.started
    assert (started["encoding"], started["frame_ms"], started["sample_rate"]) == (
        encoding,
        20,
        8000,
    )
    frames = result.frames
    assert frames and {len(frame.pcm) for frame in frames} == {160}
    assert result.samples == 160 * len(frames) == result.done["audio_samples"]
    reference = await speak_ws(server, "pcm_s16le", sample_rate=8000)
    assert {len(frame.pcm) for frame in reference.frames} == {320}
    assert_same_audio(
        ffmpeg_decode(result.pcm, encoding),
        pcm16(reference.pcm),
    )
