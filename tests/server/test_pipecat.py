"""The pipecat service in pipecat's own pipeline (pipecat.tests.utils.run_test), against
the real server on a socket: audio, word timestamps as TTSTextFrames, interruptions."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pipecat")

from chattts_client import AuthError, BusyError, RequestError, StreamClient
from chattts_client.pipecat import ChatTTSStreamTTSService
from pipecat.frames.frames import (
    InterruptionFrame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    TTSTextFrame,
)
from pipecat.tests.utils import SleepFrame, run_test
from pipecat.utils.errors import ErrorCategory

from server.config import Settings
from tests.live import LiveServer, run_live_server
from tests.scripted_engine import ScriptedEngine

TEXT = "你好，世界。今天天气很好！"


@pytest.fixture(scope="module")
def espeak() -> Iterator[LiveServer]:
    with run_live_server(Settings(engine="espeak")) as live:
        yield live


async def test_a_turn_is_spoken_with_its_words(espeak: LiveServer) -> None:
    tts = ChatTTSStreamTTSService(url=espeak.ws_url, voice="nova", sample_rate=16000)
    down, _ = await run_test(tts, frames_to_send=[TTSSpeakFrame(TEXT)])
    kinds = [type(frame) for frame in down]
    assert kinds.index(TTSStartedFrame) < kinds.index(TTSAudioRawFrame)
    assert kinds.count(TTSStoppedFrame) == 1
    audio = [f for f in down if isinstance(f, TTSAudioRawFrame)]
    assert all(f.sample_rate == 16000 and f.num_channels == 1 for f in audio)
    assert sum(len(f.audio) for f in audio) / 2 / 16000 > 1.5
    # Word timestamps became the transcript, unit by unit, punctuation kept.
    assert "".join(f.text for f in down if isinstance(f, TTSTextFrame)) == TEXT


async def test_volume_reaches_the_server(espeak: LiveServer) -> None:
    """volume=0.5 speaks the same turn at half the level (alloy fixes its seed)."""
    levels = []
    for volume in (None, 0.5):
        tts = ChatTTSStreamTTSService(
            url=espeak.ws_url, voice="alloy", sample_rate=24000, volume=volume
        )
        down, _ = await run_test(tts, frames_to_send=[TTSSpeakFrame(TEXT)])
        pcm = b"".join(f.audio for f in down if isinstance(f, TTSAudioRawFrame))
        levels.append(np.sqrt(np.mean(np.frombuffer(pcm, "<i2").astype(np.float64) ** 2)))
    assert levels[1] == pytest.approx(levels[0] / 2, rel=0.01)


async def test_turns_share_one_socket(espeak: LiveServer) -> None:
    metrics = espeak.state.metrics  # type: ignore[attr-defined]
    before = metrics.sessions._value.get()
    tts = ChatTTSStreamTTSService(url=espeak.ws_url, voice="alloy", sample_rate=24000)
    down, _ = await run_test(
        tts, frames_to_send=[TTSSpeakFrame("第一轮。"), SleepFrame(0.5), TTSSpeakFrame("第二轮。")]
    )
    assert [type(f) for f in down].count(TTSStoppedFrame) == 2
    assert metrics.sessions._value.get() - before == 1


async def test_an_interruption_cancels_the_turn_on_the_server() -> None:
    """A slow engine, ten sentences: the interruption reaches the server, which stops
    synthesising the turn (no more segments are asked of the engine) and frees it."""
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.05, ms_per_char=100)
    settings = Settings(engine="chattts", model_dir=Path("unused-by-the-scripted-engine"))
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        tts = ChatTTSStreamTTSService(url=live.ws_url, sample_rate=24000)
        text = "".join(f"这是第{n}句话。" for n in "一二三四五六七八九十")
        admission = live.state.admission  # type: ignore[attr-defined]
        sessions = live.state.metrics.active_sessions  # type: ignore[attr-defined]
        seen: list[tuple[int, float]] = []  # (contexts speaking, sockets open)

        async def watch() -> None:
            while True:
                seen.append((admission.streams, sessions._value.get()))
                await asyncio.sleep(0.02)

        watcher = asyncio.ensure_future(watch())
        try:
            down, _ = await run_test(
                tts,
                frames_to_send=[
                    TTSSpeakFrame(text),
                    SleepFrame(1.0),
                    InterruptionFrame(),
                    SleepFrame(1.5),
                ],
            )
        finally:
            watcher.cancel()
        # The context ended while the socket was still open: the cancel did it, not the
        # disconnect at the end of the pipeline.
        spoke = seen.index(next(s for s in seen if s[0] == 1))
        assert (0, 1) in seen[spoke:]
        assert 1 <= len(engine.requests) < 10  # the rest of the turn was never synthesised
        assert any(isinstance(f, TTSAudioRawFrame) for f in down)


async def test_a_refused_turn_ends_with_an_error_instead_of_hanging(espeak: LiveServer) -> None:
    """A turn whose start is refused (an unknown voice) ends, with one error: the typed
    RequestError, which pipecat reads as a permanent configuration mistake."""
    from pipecat.frames.frames import ErrorFrame

    tts = ChatTTSStreamTTSService(url=espeak.ws_url, voice="nobody", sample_rate=24000)
    down, up = await run_test(tts, frames_to_send=[TTSSpeakFrame("你好。"), SleepFrame(0.5)])
    errors = [f for f in up if isinstance(f, ErrorFrame)]
    assert any("voice_not_found" in f.error for f in errors)
    assert [type(f) for f in down].count(TTSStoppedFrame) == 1
    assert not tts._opened  # the refused context is forgotten
    [refused] = [f for f in errors if f.exception is not None]
    assert isinstance(refused.exception, RequestError)
    assert (refused.exception.code, refused.category) == (
        "voice_not_found",
        ErrorCategory.INVALID_REQUEST,
    )


async def test_a_bad_token_is_an_auth_error_and_the_service_stops_taking_work() -> None:
    """A refused upgrade (401) reaches pipecat as AuthError, category authentication, and
    the service is no longer given work."""
    from pipecat.frames.frames import ErrorFrame

    with run_live_server(Settings(engine="espeak", tokens=("s3cret",))) as live:
        tts = ChatTTSStreamTTSService(url=live.ws_url, token="wrong", sample_rate=24000)
        _, up = await run_test(tts, frames_to_send=[TTSSpeakFrame("你好。"), SleepFrame(0.2)])
    [error] = [f for f in up if isinstance(f, ErrorFrame)]
    assert isinstance(error.exception, AuthError) and error.exception.status_code == 401
    assert error.category is ErrorCategory.AUTHENTICATION and not tts.is_usable


async def test_a_busy_turn_ends_with_a_busy_error_and_the_service_goes_on() -> None:
    """A turn refused busy ends (TTSStoppedFrame) with BusyError carrying retry_after_ms;
    busy is not permanent: the service stays usable."""
    from pipecat.frames.frames import ErrorFrame

    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.05, ms_per_char=300)
    settings = Settings(
        engine="chattts", model_dir=Path("unused"), max_streams=1, busy_retry_after_ms=700
    )
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        async with StreamClient.connect(live.ws_url) as holder:
            ctx = await holder.open(seed=1)
            await holder.send_text("占着引擎的很长的一句话，" * 4, ctx)
            tts = ChatTTSStreamTTSService(url=live.ws_url, sample_rate=24000)
            down, up = await run_test(
                tts, frames_to_send=[TTSSpeakFrame("你好。"), SleepFrame(0.5)]
            )
            await holder.cancel(ctx)
    errors = [f for f in up if isinstance(f, ErrorFrame) and f.exception is not None]
    [busy] = errors  # one error for the turn, not one per piece of its text
    assert isinstance(busy.exception, BusyError) and busy.exception.retry_after_ms == 700
    assert busy.category is ErrorCategory.RATE_LIMIT
    assert [type(f) for f in down].count(TTSStoppedFrame) == 1
    assert tts.is_usable
