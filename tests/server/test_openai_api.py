"""OpenAI's speech API, driven by the real ``openai`` package, unchanged, over a socket."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from server.config import Settings
from server.engines.espeak import SPEED_RANGE
from tests.conftest import fixed_length_chattts
from tests.live import TIMEOUT_S, LiveServer, run_live_server
from tests.scripted_engine import ScriptedEngine

THREE_SEGMENTS = (
    "今天天气很好，我们去公园散步吧。公园里有很多花，红的黄的都有。傍晚我们再回家做饭。"
)
FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")


def decode(data: bytes, fmt: str) -> tuple[int, np.ndarray]:
    """(sample rate, float32 samples) of a response body, decoded independently of the
    server: ffprobe/ffmpeg for compressed formats, the RIFF header for WAV."""
    if fmt == "pcm":
        return 24000, np.frombuffer(data, "<i2").astype(np.float32) / 32768
    if fmt == "wav":
        assert data[:4] == b"RIFF" and data[8:16] == b"WAVEfmt " and data[36:40] == b"data"
        rate = int.from_bytes(data[24:28], "little")
        return rate, np.frombuffer(data[44:], "<i2").astype(np.float32) / 32768
    probe = subprocess.run(
        ["ffprobe", "-v", "error", "-show_streams", "-of", "json", "-i", "pipe:0"],
        input=data, capture_output=True, check=True,
    )  # fmt: skip
    (stream,) = json.loads(probe.stdout)["streams"]
    rate = int(stream["sample_rate"])
    if fmt == "opus":  # Opus always decodes at 48 kHz; OpusHead keeps the input's rate
        head = data.index(b"OpusHead")
        rate = int.from_bytes(data[head + 12 : head + 16], "little")
    pcm = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", "pipe:0", "-f", "f32le", "-ac", "1", "-ar", str(rate),
         "pipe:1"],
        input=data, capture_output=True, check=True,
    )  # fmt: skip
    return rate, np.frombuffer(pcm.stdout, np.float32)


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    with run_live_server(Settings(engine="espeak")) as live:
        yield live


def openai_client(live: LiveServer, api_key: str = "unused") -> openai.OpenAI:
    """OpenAI's own client for ``live``, no retries (use it in a ``with``: it pools sockets)."""
    return openai.OpenAI(base_url=f"{live.base_url}/v1", api_key=api_key, max_retries=0)


@pytest.fixture(scope="module")
def client(server: LiveServer) -> Iterator[openai.OpenAI]:
    with openai_client(server) as c:
        yield c


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_decodes_at_24_khz(client: openai.OpenAI, fmt: str) -> None:
    response = client.audio.speech.create(
        model="tts-1", voice="alloy", input=THREE_SEGMENTS, response_format=fmt
    )
    rate, audio = decode(response.content, fmt)
    assert rate == 24000
    assert audio.size / rate > 1.0  # three sentences of speech
    assert np.abs(audio).max() > 0.05  # not silence
    expected = {"pcm": "audio/pcm", "wav": "audio/wav", "mp3": "audio/mpeg",
                "opus": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac"}  # fmt: skip
    assert response.response.headers["content-type"].startswith(expected[fmt])


def test_pcm_says_its_layout_and_wav_streams_with_an_open_ended_header(
    client: openai.OpenAI,
) -> None:
    pcm = client.audio.speech.create(
        model="tts-1", voice="echo", input="你好。", response_format="pcm"
    )
    assert pcm.response.headers["content-type"] == (
        "audio/pcm; rate=24000; channels=1; encoding=s16le"
    )
    wav = client.audio.speech.create(
        model="tts-1", voice="echo", input="你好。", response_format="wav"
    )
    assert wav.content[4:8] == b"\xff\xff\xff\xff" and wav.content[40:44] == b"\xff\xff\xff\xff"


def test_sse_sends_base64_deltas_then_done_with_usage(client: openai.OpenAI) -> None:
    with client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts",
        voice="nova",
        input=THREE_SEGMENTS,
        response_format="pcm",
        stream_format="sse",
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[len("data: ") :]) for line in response.iter_lines() if line]
    *deltas, done = events
    assert len(deltas) > 1 and {e["type"] for e in deltas} == {"speech.audio.delta"}
    audio = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    assert len(audio) / 2 / 24000 > 1.0
    assert done["type"] == "speech.audio.done"
    usage = done["usage"]
    assert usage["input_tokens"] == len(THREE_SEGMENTS)
    assert usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


def test_a_voice_given_as_an_id_object(client: openai.OpenAI) -> None:
    response = client.audio.speech.create(
        model="tts-1", voice={"id": "shimmer"}, input="你好。", response_format="pcm"
    )
    assert len(response.content) > 24000  # more than half a second


def test_an_unknown_voice_lists_the_voices(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.audio.speech.create(model="tts-1", voice="nobody", input="你好。")
    error = raised.value.body
    assert isinstance(error, dict)
    assert error["code"] == "voice_not_found" and error["param"] == "voice"
    assert "alloy" in error["message"] and "nova" in error["message"]
    assert error["type"] == "invalid_request_error"


def test_a_bad_format_is_refused_naming_the_field(client: openai.OpenAI) -> None:
    with pytest.raises(openai.UnprocessableEntityError) as raised:
        client.audio.speech.create(
            model="tts-1",
            voice="alloy",
            input="你好。",
            response_format="ogx",  # type: ignore[arg-type]
        )
    error = raised.value.body
    assert isinstance(error, dict) and error["param"] == "response_format"
    assert "mp3" in error["message"]


def test_an_unknown_field_or_model_is_refused(client: openai.OpenAI) -> None:
    with pytest.raises(openai.UnprocessableEntityError) as extra:
        client.audio.speech.create(
            model="tts-1", voice="alloy", input="你好。", extra_body={"pitch": 3}
        )
    assert isinstance(extra.value.body, dict) and extra.value.body["param"] == "pitch"
    with pytest.raises(openai.BadRequestError) as model:
        client.audio.speech.create(model="whisper-1", voice="alloy", input="你好。")
    assert isinstance(model.value.body, dict) and model.value.body["code"] == "model_not_found"


def test_models_list_the_engine_and_openai_names(client: openai.OpenAI) -> None:
    ids = [model.id for model in client.models.list()]
    assert ids[0] == "espeak" and "tts-1" in ids and "gpt-4o-mini-tts" in ids
    assert client.models.retrieve("tts-1-hd").id == "tts-1-hd"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("dall-e-3")


def duration_s(client: openai.OpenAI, speed: float) -> float:
    response = client.audio.speech.create(
        model="tts-1", voice="alloy", input="一二三四五六七八九十。", response_format="pcm",
        speed=speed,
    )  # fmt: skip
    return len(response.content) / 2 / 24000


def test_speed_beyond_the_engine_range_is_time_stretched(client: openai.OpenAI) -> None:
    """The fallback voice's own rate covers 80-450 words a minute (speed 0.457-2.571):
    4.0 is its fastest stretched 1.556x, 0.25 its slowest stretched 0.547x."""
    low, high = SPEED_RANGE
    fastest, faster = duration_s(client, high), duration_s(client, 4.0)
    slowest, slower = duration_s(client, low), duration_s(client, 0.25)
    assert faster == pytest.approx(fastest * high / 4.0, rel=0.1)
    assert slower == pytest.approx(slowest * low / 0.25, rel=0.1)
    response = client.audio.speech.with_raw_response.create(
        model="tts-1", voice="alloy", input="快。", speed=4.0, response_format="pcm"
    )
    assert response.headers["x-tts-speed"] == f"engine={high:g}; stretch={4.0 / high:g}"


def test_instructions_are_accepted_and_said_to_be_ignored(client: openai.OpenAI) -> None:
    response = client.audio.speech.with_raw_response.create(
        model="gpt-4o-mini-tts", voice="alloy", input="你好。", instructions="Speak cheerfully."
    )
    assert response.status_code == 200
    assert "ignored" in response.headers["x-tts-instructions"]


def test_a_token_is_required_when_configured() -> None:
    settings = Settings(engine="espeak", tokens=("s3cret",))
    with run_live_server(settings) as live:
        with openai_client(live, "s3cret") as good:
            assert good.audio.speech.create(model="tts-1", voice="alloy", input="好。").content
        with (
            openai_client(live, "wrong") as bad,
            pytest.raises(openai.AuthenticationError),
        ):
            bad.audio.speech.create(model="tts-1", voice="alloy", input="好。")


# --- streaming: first bytes before the last segment is synthesised -------------------


@pytest.fixture(scope="module")
def slow_server() -> Iterator[tuple[LiveServer, ScriptedEngine]]:
    """An engine that takes ~0.4 s per segment, so the timing of the stream shows."""
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.02, ms_per_char=60)
    settings = Settings(engine="chattts", model_dir=Path("unused-by-the-scripted-engine"))
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        yield live, engine


@pytest.mark.parametrize("fmt", ["pcm", "mp3"])
def test_streamed_audio_starts_before_the_last_segment_is_synthesised(
    slow_server: tuple[LiveServer, ScriptedEngine], fmt: str
) -> None:
    live, engine = slow_server
    before = len(engine.requests)
    started = time.perf_counter()
    with (
        openai_client(live) as client,
        client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=THREE_SEGMENTS, response_format=fmt
        ) as response,
    ):
        chunks = response.iter_bytes()
        first = next(chunks)
        first_s = time.perf_counter() - started
        segments_begun_at_first_byte = len(engine.requests) - before
        body = first + b"".join(chunks)
    total_s = time.perf_counter() - started
    assert first and segments_begun_at_first_byte < 3, "the body waited for the last segment"
    assert first_s < total_s / 2
    assert len(engine.requests) - before == 3
    rate, audio = decode(body, fmt)
    # The engine's tone lasts 60 ms per character spoken (punctuation is not sent).
    assert audio.size / rate > 0.06 * 30


def test_a_failure_mid_stream_cuts_the_body_short_instead_of_ending_it() -> None:
    """The status went out with the first audio: a later segment's failure must not look
    like a complete file (no final chunk), or a word would be dropped silently."""
    engine = ScriptedEngine(chunk_delay_s=0.01, fail_on="傍晚")
    settings = Settings(
        engine="chattts",
        model_dir=Path("unused-by-the-scripted-engine"),
        fallback_on_synthesis_failure=False,
    )
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        body = {"model": "tts-1", "voice": "alloy", "input": THREE_SEGMENTS,
                "response_format": "pcm"}  # fmt: skip
        with httpx.Client(timeout=TIMEOUT_S) as http:
            url = f"{live.base_url}/v1/audio/speech"
            with pytest.raises(httpx.RemoteProtocolError), http.stream("POST", url, json=body) as r:
                assert r.status_code == 200
                for _ in r.iter_bytes():
                    pass
            # The server is unharmed and still answers.
            again = http.post(f"{live.base_url}/v1/audio/speech",
                              json=body | {"input": "今天很好。"})  # fmt: skip
            assert again.status_code == 200 and again.content


# --- the real ChatTTS code path --------------------------------------------------------


def test_chattts_speaks_openai_requests(tiny_checkpoint: Path) -> None:
    settings = Settings(engine="chattts", model_dir=tiny_checkpoint)
    with (
        run_live_server(settings, engine=fixed_length_chattts(tiny_checkpoint)) as live,
        openai_client(live) as client,
    ):
        assert client.models.list().data[0].id == "chattts"
        response = client.audio.speech.create(
            model="tts-1", voice="coral", input="你好。", response_format="flac"
        )
        rate, audio = decode(response.content, "flac")
        assert rate == 24000 and audio.size > 0.5 * rate
