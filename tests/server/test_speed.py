"""One speed range, 0.25-4, on every route (WebSocket start, /v1/tts, /v1/audio/speech):
the engine's own rate control as far as it goes, a pitch-keeping time-stretch beyond;
outside the range, the same refusal everywhere."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from chattts_client import StreamClient

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from tests.conftest import CHATTTS_TEST_STEPS, fixed_length_chattts
from tests.scripted_engine import ScriptedEngine

pytestmark = pytest.mark.live

REFUSAL = "field 'speed' must be a number in [0.25, 4.0]"
#: The scripted engine's tone for this seed: 200 + seed % 300 Hz (the OpenAI route
#: speaks the preset alloy, whose seed is 1000: 300 Hz).
SEED, TONE_HZ = 40, {"start": 240.0, "/v1/tts": 240.0, "/v1/audio/speech": 300.0}
TEXT = "一二三四五六七八九十"  # 1.0 s of tone: 100 ms a character


@pytest.fixture(scope="module")
def tone_server() -> Iterator[LiveServer]:
    """A server whose engine says a plain tone of 100 ms a character whatever the speed
    asked (its own rate control does nothing), joins off: what comes out at another
    speed is the stretch alone, sample for sample."""
    engine = ScriptedEngine(chunk_delay_s=0.0)
    settings = Settings(engine="espeak", shape_joins=False)
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        yield live


async def ws_answer(url: str, **start: Any) -> tuple[dict[str, Any], np.ndarray]:
    """The start's answer (started or error) and the context's audio."""
    async with StreamClient.connect(url) as tts:
        await tts.start("c", seed=SEED, **start)
        async with asyncio.timeout(TIMEOUT_S):
            while True:
                event = await tts.recv()
                if isinstance(event, dict) and event["type"] in ("started", "error"):
                    break
        if event["type"] == "error":
            return event, np.zeros(0, np.float32)
        await tts.send_text(TEXT, "c")
        await tts.end("c")
        result = await tts.collect("c", timeout_s=TIMEOUT_S)
    return event, np.frombuffer(result.pcm, "<i2").astype(np.float32) / 32768


def http_audio(live: LiveServer, route: str, speed: object) -> httpx.Response:
    if route == "/v1/tts":
        body = {"text": TEXT, "seed": SEED, "speed": speed, "format": "pcm"}
    else:
        body = {"model": "tts-1", "input": TEXT, "voice": "alloy", "speed": speed,
                "response_format": "pcm"}  # fmt: skip
    return httpx.post(live.base_url + route, json=body, timeout=TIMEOUT_S)


def samples(answer: httpx.Response) -> np.ndarray:
    assert answer.status_code == 200, answer.text
    return np.frombuffer(answer.content, "<i2").astype(np.float32) / 32768


def dominant_hz(audio: np.ndarray, rate: int = 24000) -> float:
    spectrum = np.abs(np.fft.rfft(audio * np.hanning(audio.size)))
    return float(np.argmax(spectrum) * rate / audio.size)


@pytest.mark.parametrize("bad", [0.2, 4.5, 0, -1, "fast", "2", True, [2]])
def test_every_route_refuses_a_speed_outside_the_range_the_same_way(
    tone_server: LiveServer, bad: object
) -> None:
    """0.2, 4.5, 0, -1, a string, a boolean, a list: the WebSocket start and both HTTP
    routes refuse it, 400 invalid_field on HTTP, with the one message naming the range."""
    event, _ = asyncio.run(ws_answer(tone_server.ws_url, speed=bad))
    assert (event["type"], event["code"], event["message"]) == ("error", "invalid_field", REFUSAL)
    for route in ("/v1/tts", "/v1/audio/speech"):
        answer = http_audio(tone_server, route, bad)
        assert answer.status_code == 400, (route, answer.status_code)
        error = answer.json()["error"]
        assert (error["code"], error["message"], error["param"]) == (
            "invalid_field",
            REFUSAL,
            "speed",
        ), route


def test_a_null_speed_is_the_default_on_every_route(tone_server: LiveServer) -> None:
    """speed null (or left out) is 1 on the WebSocket and both HTTP routes."""
    started, _ = asyncio.run(ws_answer(tone_server.ws_url, speed=None))
    assert started["speed"] == 1.0
    for route in ("/v1/tts", "/v1/audio/speech"):
        assert samples(http_audio(tone_server, route, None)).size == 24000, route


@pytest.mark.parametrize("speed", [0.25, 0.5, 1.0, 2.0, 4.0])
def test_on_every_route_the_duration_scales_as_asked_and_the_pitch_stays(
    tone_server: LiveServer, speed: float
) -> None:
    """The tone engine (1.0 s for the text, its own rate ignored) through the WebSocket,
    /v1/tts and /v1/audio/speech: beyond its range (0.5-2) the audio lasts 1.0 s x (range
    edge / speed) to the sample's rounding, within it 1.0 s; its tone keeps its pitch."""
    engine_speed = min(max(speed, 0.5), 2.0)
    expected = round(24000 * engine_speed / speed)
    started, ws = asyncio.run(ws_answer(tone_server.ws_url, speed=speed))
    assert started["speed"] == speed
    heard = {"start": ws, **{r: samples(http_audio(tone_server, r, speed))
                             for r in ("/v1/tts", "/v1/audio/speech")}}  # fmt: skip
    for route, audio in heard.items():
        assert abs(audio.size - expected) <= 2, (route, audio.size, expected)
        assert abs(dominant_hz(audio) - TONE_HZ[route]) <= 2, route
    header = http_audio(tone_server, "/v1/tts", speed).headers["X-TTS-Speed"]
    assert header == f"engine={engine_speed:g}; stretch={speed / engine_speed:g}"


def test_chattts_speaks_its_fastest_and_the_stretch_does_the_rest(tiny_checkpoint: Path) -> None:
    """ChatTTS (fixed-length runs: 72 GPT steps, 1.54 s, whatever its [speed_N]) at speed
    4 is [speed_9] stretched 2x, 0.77 s; at 0.25 it is [speed_2] stretched 0.5x, 3.07 s;
    the headers say so (within what the joins trim of silence)."""
    settings = Settings(engine="chattts", model_dir=tiny_checkpoint)
    engine_s = CHATTTS_TEST_STEPS * 512 / 24000
    with run_live_server(settings, engine=fixed_length_chattts(tiny_checkpoint)) as live:
        for speed, engine_speed in ((4.0, 2.0), (0.25, 0.5)):
            answer = http_audio(live, "/v1/tts", speed)
            assert answer.headers["X-TTS-Speed"] == (
                f"engine={engine_speed:g}; stretch={speed / engine_speed:g}"
            )
            seconds = samples(answer).size / 24000
            assert seconds == pytest.approx(engine_s * engine_speed / speed, rel=0.1)
