"""Timestamps over the WebSocket and in SSE, against the audio actually sent."""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from chattts_client import ContextResult, StreamClient

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from streaming.joins import pause_ms_for
from tests.conftest import fixed_length_chattts

THREE = "今天天气很好，我们去公园散步吧。公园里有很多花，红的黄的都有！Hello world, 2024年见。"


@pytest.fixture(scope="module")
def espeak() -> Iterator[LiveServer]:
    with run_live_server(Settings(engine="espeak")) as live:
        yield live


@pytest.fixture(scope="module")
def chattts(tiny_checkpoint: Path) -> Iterator[LiveServer]:
    settings = Settings(engine="chattts", model_dir=tiny_checkpoint)
    with run_live_server(settings, engine=fixed_length_chattts(tiny_checkpoint)) as live:
        yield live


async def speak(live: LiveServer, text: str, **start: object) -> ContextResult:
    async with StreamClient.connect(live.ws_url) as client:
        ctx = await client.open(timestamps=True, seed=3, **start)  # type: ignore[arg-type]
        await client.send_text(text, ctx)
        await client.end(ctx)
        return await client.collect(ctx, timeout_s=TIMEOUT_S)


def first_samples(result: ContextResult) -> dict[int, int]:
    """Each segment's first audio sample, counted from the frames actually received."""
    firsts: dict[int, int] = {}
    sent = 0
    for frame in result.frames:
        firsts.setdefault(frame.segment, sent)
        sent += frame.samples
    return firsts


def check_against_the_audio(result: ContextResult, rate: int, *, estimated: bool) -> None:
    assert result.done is not None and not result.errors
    frame_ms = 40  # --first-frame-ms: the first frame of each segment
    firsts = first_samples(result)
    total_ms = result.done["audio_ms"]
    assert len(result.timestamps) == len(result.segments) >= 3
    for event, segment in zip(result.timestamps, result.segments, strict=True):
        items = event["items"]
        assert event["estimated"] is estimated and event["index"] == segment["index"]
        # Each segment's first character is heard within one frame of its first sample.
        assert abs(items[0]["start_ms"] - firsts[segment["index"]] * 1000 / rate) <= frame_ms
        # The units cover the segment's text, in order, touching, inside its span.
        assert "".join(i["text"] for i in items) == segment["text"].rstrip()
        assert items[0]["start_char"] == segment["start_char"]
        assert all(a["end_ms"] == b["start_ms"] for a, b in itertools.pairwise(items))
        assert items[-1]["end_ms"] == event["end_ms"]
        # After the span comes exactly the segment's pause, then the next segment (or the end).
        following = firsts.get(segment["index"] + 1)
        next_ms = following * 1000 / rate if following is not None else total_ms
        assert next_ms - event["end_ms"] == pytest.approx(pause_ms_for(segment["text"]), abs=1)


@pytest.mark.live
async def test_espeak_words_are_timed_by_its_own_events(espeak: LiveServer) -> None:
    result = await speak(espeak, THREE)
    check_against_the_audio(result, 24000, estimated=False)


@pytest.mark.live
@pytest.mark.parametrize(("speed", "rate"), [(0.6, 16000), (1.8, 48000)])
async def test_timestamps_follow_speed_and_output_rate(
    espeak: LiveServer, speed: float, rate: int
) -> None:
    result = await speak(espeak, THREE, speed=speed, sample_rate=rate)
    check_against_the_audio(result, rate, estimated=False)


@pytest.mark.live
async def test_chattts_timestamps_are_estimates_on_the_same_clock(chattts: LiveServer) -> None:
    result = await speak(chattts, THREE)
    check_against_the_audio(result, 24000, estimated=True)


@pytest.mark.live
async def test_no_timestamps_unless_asked(espeak: LiveServer) -> None:
    async with StreamClient.connect(espeak.ws_url) as client:
        ctx = await client.open(seed=1)
        await client.send_text("你好。再见。", ctx)
        await client.end(ctx)
        result = await client.collect(ctx, timeout_s=TIMEOUT_S)
    assert result.timestamps == [] and result.samples > 0


@pytest.mark.live
async def test_a_cancelled_context_has_timestamps_only_for_what_it_finished(
    espeak: LiveServer,
) -> None:
    async with StreamClient.connect(espeak.ws_url) as client:
        ctx = await client.open(timestamps=True, seed=1)
        await client.send_text(
            "第一句话说完了。" + "第二句很长很长很长很长很长很长很长很长很长。" * 20, ctx
        )
        async for event in client.events(TIMEOUT_S):
            if isinstance(event, dict) and event.get("type") == "timestamps":
                break
        await client.cancel(ctx)
        result = await client.collect(ctx, timeout_s=TIMEOUT_S)
    assert result.done is not None and result.done["cancelled"]
    # The first segment's event was read above; any later ones end inside the audio sent.
    assert all(t["end_ms"] <= result.done["audio_ms"] for t in result.timestamps)


@pytest.mark.live
async def test_the_text_heard_when_interrupted(espeak: LiveServer) -> None:
    result = await speak(espeak, THREE)
    second = result.timestamps[1]
    assert result.spoken_by(-1) == ""
    assert result.spoken_by(second["items"][0]["start_ms"] - 1) == "今天天气很好，"
    assert result.spoken_by(second["items"][1]["start_ms"]) == "今天天气很好，我们"
    assert result.spoken_by(10**9).startswith("今天天气很好，我们去公园散步吧。")


@pytest.mark.live
def test_sse_carries_timestamps_when_asked(espeak: LiveServer) -> None:
    body = {"model": "tts-1", "voice": "alloy", "input": THREE, "response_format": "pcm",
            "stream_format": "sse"}  # fmt: skip
    with httpx.Client(base_url=espeak.base_url, timeout=TIMEOUT_S) as http:
        plain = http.post("/v1/audio/speech", json=body)
        timed = http.post("/v1/audio/speech", json=body, headers={"X-TTS-Timestamps": "true"})
    kinds = [json.loads(line[6:])["type"] for line in plain.text.splitlines() if line]
    assert "speech.audio.timestamps" not in kinds  # OpenAI's clients see OpenAI's events
    events = [json.loads(line[6:]) for line in timed.text.splitlines() if line]
    stamps = [e for e in events if e["type"] == "speech.audio.timestamps"]
    audio = b"".join(base64.b64decode(e["audio"]) for e in events if "audio" in e)
    assert len(stamps) >= 3 and stamps[0]["items"][0]["start_ms"] == 0.0
    assert not stamps[0]["estimated"]
    assert stamps[-1]["end_ms"] <= len(audio) / 2 / 24000 * 1000
    assert events[-1]["type"] == "speech.audio.done"


def test_the_client_constants_are_the_protocol_s() -> None:
    from chattts_client import client

    from streaming import protocol as p

    assert (client.SUBPROTOCOL, client.TOKEN_SUBPROTOCOL_PREFIX, client.DEFAULT_CONTEXT_ID) == (
        p.SUBPROTOCOL, p.TOKEN_SUBPROTOCOL_PREFIX, p.DEFAULT_CONTEXT_ID
    )  # fmt: skip
    assert client.AUDIO_HEADER.format == p.AUDIO_HEADER.format


@pytest.mark.live
async def test_collect_waits_as_long_as_audio_keeps_coming() -> None:
    """collect's timeout is an idle one: an utterance that takes three times as long to
    arrive is still collected whole."""
    import time

    from tests.scripted_engine import ScriptedEngine

    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.1, ms_per_char=100)
    settings = Settings(engine="chattts", model_dir=Path("unused-by-the-scripted-engine"))
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        async with StreamClient.connect(live.ws_url) as client:
            ctx = await client.open(seed=1)
            await client.send_text("一二三四五六七八九十。" * 3, ctx)
            await client.end(ctx)
            started = time.monotonic()
            result = await client.collect(ctx, timeout_s=1.0)
            took = time.monotonic() - started
    assert result.done is not None and not result.done["cancelled"] and took > 2.0


@pytest.mark.live
async def test_collect_total_timeout_bounds_the_whole(espeak: LiveServer) -> None:
    async with StreamClient.connect(espeak.ws_url) as client:
        ctx = await client.open(seed=1)
        with pytest.raises(TimeoutError):
            await client.collect(ctx, timeout_s=5.0, total_timeout_s=0.3)  # no text: no done
