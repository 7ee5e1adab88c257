"""``volume`` on every route (WebSocket start, /v1/tts, /v1/audio/speech): the audio
scaled, its peaks limited below full scale (never clipped), the same refusal outside
0-4 everywhere."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from server.config import Settings
from tests.live import TIMEOUT_S, LiveServer, run_live_server
from tests.scripted_engine import ScriptedEngine
from tests.server.test_speed import SEED, TEXT, samples, ws_answer

REFUSAL = "field 'volume' must be a number in [0, 4]"
FULL_SCALE = 32767 / 32768


@pytest.fixture(scope="module")
def tone_server() -> Iterator[LiveServer]:
    """A steady tone of 0.3 of full scale, joins off: the level out is the volume's."""
    engine = ScriptedEngine(chunk_delay_s=0.0)
    settings = Settings(engine="espeak", shape_joins=False)
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        yield live


def with_volume(live: LiveServer, route: str, volume: object) -> httpx.Response:
    """``route``'s answer for the test text at ``volume``."""
    if route == "/v1/tts":
        body = {"text": TEXT, "seed": SEED, "volume": volume, "format": "pcm"}
    else:
        body = {"model": "tts-1", "input": TEXT, "voice": "alloy", "volume": volume,
                "response_format": "pcm"}  # fmt: skip
    return httpx.post(live.base_url + route, json=body, timeout=TIMEOUT_S)


@pytest.mark.parametrize("bad", [-0.5, 4.5, "loud", True])
def test_every_route_refuses_a_volume_outside_the_range(
    tone_server: LiveServer, bad: object
) -> None:
    """The WebSocket start and both HTTP routes refuse it: invalid_field, one message."""
    event, _ = asyncio.run(ws_answer(tone_server.ws_url, volume=bad))
    assert (event["type"], event["code"], event["message"]) == ("error", "invalid_field", REFUSAL)
    for route in ("/v1/tts", "/v1/audio/speech"):
        answer = with_volume(tone_server, route, bad)
        assert answer.status_code == 400, (route, answer.status_code)
        error = answer.json()["error"]
        assert (error["code"], error["message"], error["param"]) == (
            "invalid_field", REFUSAL, "volume"
        ), route  # fmt: skip


def test_a_quieter_volume_scales_the_audio(tone_server: LiveServer) -> None:
    """Volume 0.5 halves every sample (to int16 rounding) on every route; started echoes it."""
    started, ws = asyncio.run(ws_answer(tone_server.ws_url, volume=0.5))
    assert started["volume"] == 0.5
    _, ws_plain = asyncio.run(ws_answer(tone_server.ws_url))
    np.testing.assert_allclose(ws, ws_plain * 0.5, atol=2 / 32768)
    for route in ("/v1/tts", "/v1/audio/speech"):
        plain = samples(with_volume(tone_server, route, 1.0))
        half = samples(with_volume(tone_server, route, 0.5))
        np.testing.assert_allclose(half, plain * 0.5, atol=2 / 32768)


def test_volume_4_is_limited_below_full_scale_without_clipping(tone_server: LiveServer) -> None:
    """A 0.3 tone at volume 4 (1.2 as asked) comes out as loud as the ceiling allows, never
    at full scale, its gain moving smoothly (no sample-to-sample step larger than the
    tone's own at volume 4) on every route."""
    _, ws = asyncio.run(ws_answer(tone_server.ws_url, volume=4.0))
    _, ws_plain = asyncio.run(ws_answer(tone_server.ws_url))
    routes = ("/v1/tts", "/v1/audio/speech")
    heard = {"start": (ws, ws_plain), **{
        r: (samples(with_volume(tone_server, r, 4.0)), samples(with_volume(tone_server, r, 1.0)))
        for r in routes}}  # fmt: skip
    for route, (audio, plain) in heard.items():
        assert audio.size == plain.size, route
        peak = np.abs(audio).max()
        assert 0.9 < peak <= 0.97 + 1 / 32768, (route, peak)
        assert np.count_nonzero(np.abs(audio) >= FULL_SCALE) == 0, route
        steady = audio[audio.size // 4 : 3 * audio.size // 4]
        assert np.sqrt(np.mean(steady**2)) > 2.5 * np.sqrt(np.mean(plain**2)), route
        # no click: no step larger than the tone's own at volume 4 (a clip would make one)
        assert np.abs(np.diff(audio)).max() <= 4 * np.abs(np.diff(plain)).max() + 1e-3
