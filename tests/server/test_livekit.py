"""The LiveKit Agents plugin with livekit-agents' own stream classes, against the real
server on a socket: streamed tokens, aligned transcripts, synthesize, interruption."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("livekit.agents")

from chattts_client import StreamClient
from chattts_client.livekit import TTS

from server.config import Settings
from tests.live import TIMEOUT_S, LiveServer, run_live_server
from tests.scripted_engine import ScriptedEngine

TOKENS = ["你好，", "世界。", "今天", "天气", "很好！"]


@pytest.fixture(scope="module")
def espeak() -> Iterator[LiveServer]:
    with run_live_server(Settings(engine="espeak")) as live:
        yield live


async def test_streamed_tokens_come_back_as_audio_with_an_aligned_transcript(
    espeak: LiveServer,
) -> None:
    tts = TTS(url=espeak.ws_url, voice="nova", sample_rate=16000)
    assert tts.capabilities.streaming and tts.capabilities.aligned_transcript
    async with tts.stream() as stream:
        for token in TOKENS:
            stream.push_text(token)
        stream.end_input()
        events = [event async for event in stream]
    assert events and events[-1].is_final and not any(e.is_final for e in events[:-1])
    frames = [event.frame for event in events]
    assert all(f.sample_rate == 16000 and f.num_channels == 1 for f in frames)
    assert sum(f.samples_per_channel for f in frames) / 16000 > 2.0
    timed = [t for f in frames for t in (f.userdata.get("lk.timed_transcripts") or [])]
    assert "".join(timed) == "".join(TOKENS)
    starts = [t.start_time for t in timed]
    assert starts == sorted(starts) and starts[0] == 0.0
    assert all(t.end_time >= t.start_time for t in timed)


async def test_synthesize_speaks_one_text(espeak: LiveServer) -> None:
    tts = TTS(url=espeak.ws_url, voice="alloy")
    async with tts.synthesize("再见，明天见。") as stream:
        frames = [event.frame async for event in stream]
    assert sum(f.samples_per_channel for f in frames) / 24000 > 0.8


async def test_volume_reaches_the_server(espeak: LiveServer) -> None:
    """TTS(volume=0.5) speaks the same text at half the level (alloy fixes its seed)."""
    levels = []
    for volume in (None, 0.5):
        tts = TTS(url=espeak.ws_url, voice="alloy", volume=volume)
        async with tts.synthesize("再见，明天见。") as stream:
            frames = [event.frame async for event in stream]
        pcm = np.frombuffer(b"".join(bytes(f.data) for f in frames), "<i2").astype(np.float64)
        levels.append(np.sqrt(np.mean(pcm**2)))
    assert levels[1] == pytest.approx(levels[0] / 2, rel=0.01)


async def test_closing_the_stream_cancels_the_context_on_the_server() -> None:
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.05, ms_per_char=100)
    settings = Settings(engine="chattts", model_dir=Path("unused-by-the-scripted-engine"))
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        tts = TTS(url=live.ws_url)
        stream = tts.stream()
        stream.push_text("".join(f"这是第{n}句话。" for n in "一二三四五六七八九十"))
        stream.end_input()
        first = await anext(stream)  # the first audio: it is speaking
        assert first.frame.samples_per_channel > 0
        await stream.aclose()  # what an interruption does (Agent.tts_node)
        admission = live.state.admission  # type: ignore[attr-defined]
        for _ in range(100):
            if admission.streams == 0:
                break
            await asyncio.sleep(0.05)
        assert admission.streams == 0
        assert len(engine.requests) < 10


async def test_a_refused_voice_is_a_client_error_not_retried(espeak: LiveServer) -> None:
    from livekit.agents import APIStatusError

    tts = TTS(url=espeak.ws_url, voice="nobody")
    with pytest.raises(APIStatusError) as raised:
        async with tts.synthesize("你好。") as stream:
            [event async for event in stream]
    assert raised.value.status_code == 400 and not raised.value.retryable
    assert "voice_not_found" in str(raised.value)


async def test_a_bad_token_is_a_401_not_retried() -> None:
    from livekit.agents import APIStatusError

    with run_live_server(Settings(engine="espeak", tokens=("s3cret",))) as live:
        good = TTS(url=live.ws_url, token="s3cret")
        async with good.synthesize("好。") as stream:
            assert [event async for event in stream]
        bad = TTS(url=live.ws_url, token="wrong")
        with pytest.raises(APIStatusError) as raised:
            async with bad.synthesize("好。") as stream:
                [event async for event in stream]
    assert raised.value.status_code == 401 and not raised.value.retryable


async def test_a_busy_server_is_a_retryable_503_once_the_retries_run_out() -> None:
    """A start refused busy on every try: APIStatusError 503, retryable, carrying the
    server's retry_after_ms, from the client's BusyError."""
    from chattts_client import BusyError
    from livekit.agents import APIConnectOptions, APIStatusError

    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.05, ms_per_char=300)
    settings = Settings(
        engine="chattts", model_dir=Path("unused"), max_streams=1, busy_retry_after_ms=100
    )
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        async with StreamClient.connect(live.ws_url) as holder:
            ctx = await holder.open(seed=1)
            await holder.send_text("占着引擎的很长的一句话，" * 4, ctx)
            tts = TTS(url=live.ws_url)
            with pytest.raises(APIStatusError) as raised:
                async with tts.synthesize(
                    "你好。", conn_options=APIConnectOptions(max_retry=0)
                ) as s:
                    [event async for event in s]
            await holder.cancel(ctx)
    assert raised.value.status_code == 503 and raised.value.retryable
    assert isinstance(raised.value.__cause__, BusyError)
    assert raised.value.body["retry_after_ms"] == 100  # type: ignore[index]


async def test_a_loading_server_is_a_retryable_503_not_ready() -> None:
    """An upgrade refused while the engine loads: APIStatusError 503 not_ready, retryable."""
    from chattts_client import NotReadyError
    from livekit.agents import APIConnectOptions, APIStatusError

    release = threading.Event()

    def slow_factory() -> tuple[ScriptedEngine, bool, None]:
        release.wait(TIMEOUT_S)
        return ScriptedEngine(), False, None

    try:
        with run_live_server(Settings(), engine=slow_factory, wait_ready=False) as live:
            tts = TTS(url=live.ws_url)
            with pytest.raises(APIStatusError) as raised:
                async with tts.synthesize(
                    "你好。", conn_options=APIConnectOptions(max_retry=0)
                ) as s:
                    [event async for event in s]
            release.set()
    finally:
        release.set()
    assert raised.value.status_code == 503 and raised.value.retryable
    assert isinstance(raised.value.__cause__, NotReadyError)
    assert raised.value.body["code"] == "not_ready"  # type: ignore[index]
