"""End-to-end streaming over /v1/stream: real server, real socket, real engines."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from chattts_client import ContextResult, StreamClient

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from server.runtime.phrase_cache import PhraseCacheSettings
from tests.conftest import fixed_length_chattts
from tests.scripted_engine import ScriptedEngine

pytestmark = pytest.mark.live

TEXT = "你好，欢迎使用流式语音合成。今天天气很好！我们一起去公园散步吧？好的"


def deltas(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def assert_complete(result: ContextResult, text: str) -> None:
    """The invariants every finished, uncancelled context must satisfy."""
    assert result.errors == []
    assert result.done is not None and result.done["cancelled"] is False
    # Segment texts are exact, contiguous slices that cover the input.
    assert "".join(s["text"] for s in result.segments) == text
    ends = [0] + [s["end_char"] for s in result.segments]
    assert [s["start_char"] for s in result.segments] == ends[:-1]
    assert [s["index"] for s in result.segments] == list(range(len(result.segments)))
    assert result.done["segments"] == len(result.segments)
    # Frames: sequence numbers without gaps; their samples add up to done's count.
    assert [f.sequence for f in result.frames] == list(range(len(result.frames)))
    assert result.samples == result.done["audio_samples"] > 0
    # Each segment's audio starts where the previous segments' audio ended.
    per_segment: dict[int, int] = {}
    for frame in result.frames:
        per_segment[frame.segment] = per_segment.get(frame.segment, 0) + frame.samples
    offset = 0
    for segment in result.segments:
        assert segment["audio_start_sample"] == offset
        offset += per_segment.get(segment["index"], 0)


async def speak(
    server: LiveServer, text: str, *, size: int = 2, seed: int = 7, **start: object
) -> ContextResult:
    async with StreamClient.connect(server.ws_url) as client:
        ctx = await client.start(seed=seed, **start)  # type: ignore[arg-type]
        for delta in deltas(text, size):
            await client.send_text(delta, ctx)
        await client.end(ctx)
        return await client.collect(ctx, timeout_s=TIMEOUT_S * 4)


async def speak_default(server: LiveServer, text: str) -> ContextResult:
    """``text`` whole on the implicit default context (no start), then end; collected."""
    async with StreamClient.connect(server.ws_url) as client:
        await client.send_text(text)
        await client.end()
        return await client.collect(timeout_s=TIMEOUT_S)


# --- the real ChatTTS code path on the generated tiny checkpoint ----------------------


@pytest.fixture(scope="module")
def chattts_server(tiny_checkpoint: Path) -> Iterator[LiveServer]:
    factory = fixed_length_chattts(tiny_checkpoint)
    # Without the phrase cache: a seed said twice is made twice (the engine's own
    # determinism is what test_chattts_same_seed_same_audio checks; the cache's is
    # tests/server/runtime/test_phrase_cache.py's).
    settings = Settings(
        engine="chattts",
        model_dir=tiny_checkpoint,
        phrase_cache=PhraseCacheSettings(phrase_cache_mb=0),
    )
    with run_live_server(settings, engine=factory) as server:
        yield server


async def test_chattts_streams_deltas_as_segments_and_audio(chattts_server: LiveServer) -> None:
    """Text streamed in 2-char deltas comes back as covering segments and complete PCM (ChatTTS)."""
    result = await speak(chattts_server, TEXT)
    assert_complete(result, TEXT)
    assert len(result.segments) >= 3
    assert result.started is not None and result.started["sample_rate"] == 24000


async def test_chattts_two_connections_are_independent(chattts_server: LiveServer) -> None:
    """Two concurrent connections each get their own complete stream (ChatTTS)."""
    text_a = "第一个连接说话。第二句话在这里。"
    text_b = "另外一个连接，也在说话。"
    result_a, result_b = await asyncio.gather(
        speak(chattts_server, text_a, seed=1), speak(chattts_server, text_b, seed=2)
    )
    assert_complete(result_a, text_a)
    assert_complete(result_b, text_b)


async def test_chattts_same_seed_same_audio(chattts_server: LiveServer) -> None:
    """The voice lock: one seed gives identical audio for the same text, another seed differs."""
    text = "同一个声音。"
    first = await speak(chattts_server, text, seed=11)
    again = await speak(chattts_server, text, seed=11)
    other = await speak(chattts_server, text, seed=12)
    assert first.pcm == again.pcm
    assert first.pcm != other.pcm


async def test_chattts_cancel_reports_done_cancelled(chattts_server: LiveServer) -> None:
    """Cancel mid-stream stops audio for that context and reports done with cancelled (ChatTTS)."""
    async with StreamClient.connect(chattts_server.ws_url) as client:
        ctx = await client.start(seed=3)
        await client.send_text("这是一段很长的文本。" * 6, ctx)
        first = await client.recv(TIMEOUT_S)
        while not (isinstance(first, dict) and first.get("type") == "segment"):
            first = await client.recv(TIMEOUT_S)
        await client.cancel(ctx)
        result = await client.collect(ctx, timeout_s=TIMEOUT_S)
        assert result.done is not None and result.done["cancelled"] is True
        assert result.done["segments"] < 6


async def test_chattts_disconnect_mid_stream_frees_the_engine(chattts_server: LiveServer) -> None:
    """A client leaving mid-segment stops ChatTTS's job early; the next client is served (ChatTTS)."""
    state = chattts_server.state
    cancelled = state.metrics.jobs_cancelled  # type: ignore[attr-defined]
    before = cancelled._value.get()
    async with StreamClient.connect(chattts_server.ws_url) as client:
        await client.send_text("这是一段很长的文本，说到一半客户端就会断开连接。" * 4)
        await client.flush()
        while isinstance(await client.recv(TIMEOUT_S), dict):
            pass  # until the first audio frame
    async with asyncio.timeout(TIMEOUT_S):
        while cancelled._value.get() == before:
            await asyncio.sleep(0.01)
    result = await speak(chattts_server, "下一位。")
    assert_complete(result, "下一位。")


async def test_production_engine_selection_loads_chattts(tiny_checkpoint: Path) -> None:
    """--model-dir with engine auto loads ChatTTS through the production path; /ready names it."""
    with run_live_server(Settings(model_dir=tiny_checkpoint, warm_up=True)) as server:
        ready = httpx.get(server.base_url + "/ready", timeout=TIMEOUT_S).json()
        assert (
            ready["engine"] == "chattts" and ready["ready"] is True and ready["degraded"] is False
        )


# --- the fallback voice --------------------------------------------------------------


@pytest.fixture(scope="module")
def espeak_server() -> Iterator[LiveServer]:
    with run_live_server(Settings(engine="espeak", idle_flush_ms=300)) as server:
        yield server


@pytest.mark.parametrize("size", [1, 3, 50])
async def test_espeak_streams_deltas(espeak_server: LiveServer, size: int) -> None:
    """Any delta size gives the same covering segments and complete audio (fallback voice)."""
    result = await speak(espeak_server, TEXT, size=size)
    assert_complete(result, TEXT)


async def test_segmentation_is_independent_of_delta_size(espeak_server: LiveServer) -> None:
    """The same text in 1-char deltas and in one message is cut into the same segments."""
    one = await speak(espeak_server, TEXT, size=1)
    whole = await speak(espeak_server, TEXT, size=len(TEXT))
    assert [s["text"] for s in one.segments] == [s["text"] for s in whole.segments]


async def test_unspeakable_characters_are_reported(espeak_server: LiveServer) -> None:
    """Characters that cannot be spoken come back in a warning with their exact offsets."""
    text = "你好😀，世界🎉。"
    result = await speak(espeak_server, text)
    assert_complete(result, text)
    removed = [r for w in result.warnings for r in w["removed"]]
    assert removed == [
        {"start": 2, "chars": "😀", "reason": "emoji"},
        {"start": 6, "chars": "🎉", "reason": "emoji"},
    ]
    assert "😀" not in "".join(s["spoken"] for s in result.segments)


async def test_sample_rate_is_resampled(espeak_server: LiveServer) -> None:
    """A context asking for 16 kHz gets about 2/3 as many samples as at 24 kHz."""
    text = "采样率转换。"
    native = await speak(espeak_server, text)
    low = await speak(espeak_server, text, sample_rate=16000)
    assert low.started is not None and low.started["sample_rate"] == 16000
    assert low.samples == pytest.approx(native.samples * 2 / 3, abs=4)


async def test_idle_timer_speaks_a_pending_fragment(espeak_server: LiveServer) -> None:
    """Text with no sentence end is spoken after the idle time, without flush or end."""
    async with StreamClient.connect(espeak_server.ws_url) as client:
        await client.send_text("没有句号的片段")
        event = await client.recv(TIMEOUT_S)
        assert event["type"] == "started"  # type: ignore[index]
        event = await client.recv(TIMEOUT_S)
        assert event["type"] == "segment" and event["text"] == "没有句号的片段"  # type: ignore[index]


async def test_idle_time_counts_from_the_last_text(espeak_server: LiveServer) -> None:
    """Text arriving every 100 ms for a second keeps a fragment held (idle 300 ms); it is
    spoken once, about 300 ms after the last piece, as one segment."""
    async with StreamClient.connect(espeak_server.ws_url) as client:
        pieces = ["没有", "句号", "的片", "段还", "在继", "续说", "下去", "一直", "这样", "的话"]
        for piece in pieces:
            await client.send_text(piece)
            await asyncio.sleep(0.1)
        last = time.monotonic()
        assert (await client.recv(TIMEOUT_S))["type"] == "started"  # type: ignore[index]
        event = await client.recv(TIMEOUT_S)
        waited = time.monotonic() - last
        assert event["type"] == "segment" and event["text"] == "".join(pieces)  # type: ignore[index]
        assert 0.15 <= waited <= 0.3 + 0.5, waited  # 300 ms after the last, less the 100 slept


async def test_complete_sentence_is_spoken_when_input_pauses() -> None:
    """A sentence ending in 。 is spoken after the short sentence pause; a fragment waits for the idle time."""
    settings = Settings(engine="espeak", idle_flush_ms=60_000, sentence_flush_ms=50)
    with run_live_server(settings) as server:
        async with StreamClient.connect(server.ws_url) as client:
            await client.send_text("半句话")
            assert (await client.recv(TIMEOUT_S))["type"] == "started"  # type: ignore[index]
            with pytest.raises(TimeoutError):
                await client.recv(1.0)  # the fragment is held: no segment yet
            await client.send_text("说完了。")
            event = await client.recv(TIMEOUT_S)
            assert event["type"] == "segment" and event["text"] == "半句话说完了。"  # type: ignore[index]


async def test_default_context_needs_no_start(espeak_server: LiveServer) -> None:
    """A client that never sends start speaks through the implicit "default" context."""
    result = await speak_default(espeak_server, "默认上下文。")
    assert_complete(result, "默认上下文。")


async def test_flush_speaks_buffered_text_now(espeak_server: LiveServer) -> None:
    """flush cuts a segment mid-sentence at once."""
    async with StreamClient.connect(espeak_server.ws_url) as client:
        ctx = await client.start(seed=1)
        await client.send_text("先说这一段", ctx)
        await client.flush(ctx)
        await client.send_text("再说这一段。", ctx)
        await client.end(ctx)
        result = await client.collect(ctx, timeout_s=TIMEOUT_S)
    assert [s["text"] for s in result.segments] == ["先说这一段", "再说这一段。"]


async def test_several_contexts_on_one_socket(espeak_server: LiveServer) -> None:
    """Contexts on one socket are spoken independently, each complete, with their own streams."""
    texts = {"a": "甲说的话。还有一句。", "b": "乙说的话。", "c": "丙说的话，比较长一些。"}
    async with StreamClient.connect(espeak_server.ws_url) as client:
        for ctx in texts:
            await client.start(ctx, seed=5)
        for i in range(max(map(len, texts.values()))):
            for ctx, text in texts.items():
                if i < len(text):
                    await client.send_text(text[i], ctx)
        for ctx in texts:
            await client.end(ctx)
        results = {ctx: await client.collect(ctx, timeout_s=TIMEOUT_S) for ctx in texts}
    for ctx, text in texts.items():
        assert_complete(results[ctx], text)
    streams = {results[ctx].done["stream"] for ctx in texts}  # type: ignore[index]
    assert len(streams) == 3


# --- timing-controlled behaviour with the scripted engine -----------------------------


@pytest.fixture
def scripted() -> Iterator[tuple[LiveServer, ScriptedEngine]]:
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.05, ms_per_char=400)
    with run_live_server(Settings(engine="espeak"), engine=lambda: (engine, False, None)) as server:
        yield server, engine


async def test_cancel_stops_audio_promptly_and_frees_engine(
    scripted: tuple[LiveServer, ScriptedEngine],
) -> None:
    """cancel: done(cancelled) comes at once, no more frames follow, the engine stops its job."""
    server, engine = scripted
    async with StreamClient.connect(server.ws_url) as client:
        ctx = await client.start(seed=1)
        await client.send_text("一段会被取消的很长很长的文本。后面还有更多的文本。", ctx)
        while True:
            event = await client.recv(TIMEOUT_S)
            if not isinstance(event, dict):
                break  # the first audio frame
        cancelled_at = time.perf_counter()
        await client.cancel(ctx)
        result = await client.collect(ctx, timeout_s=TIMEOUT_S)
        assert result.done is not None and result.done["cancelled"] is True
        assert time.perf_counter() - cancelled_at < 1.0
        # Nothing for that stream arrives after done.
        with pytest.raises(TimeoutError):
            await client.recv(0.3)
    assert engine.stopped_early == 1
    assert not engine.busy.is_set()


async def test_disconnect_mid_stream_frees_the_engine(
    scripted: tuple[LiveServer, ScriptedEngine],
) -> None:
    """A client that disconnects mid-stream releases the engine for the next client."""
    server, engine = scripted
    async with StreamClient.connect(server.ws_url) as client:
        await client.send_text("这段话很长，说到一半客户端就断开了连接。" * 3)
        await client.flush()
        while isinstance(await client.recv(TIMEOUT_S), dict):
            pass
    async with asyncio.timeout(TIMEOUT_S):
        while engine.busy.is_set():
            await asyncio.sleep(0.01)
    assert engine.stopped_early >= 1
    async with StreamClient.connect(server.ws_url) as client:
        started = time.perf_counter()
        await client.send_text("下一个。")
        await client.end()
        result = await client.collect(timeout_s=TIMEOUT_S)
    assert_complete(result, "下一个。")
    # The old connection's queued segments were dropped, not spoken to nobody.
    assert time.perf_counter() - started < 2.0


async def test_other_connection_keeps_streaming_while_one_cancels(
    scripted: tuple[LiveServer, ScriptedEngine],
) -> None:
    """Cancelling one connection's context does not disturb another connection's stream."""
    server, _engine = scripted
    text = "另一个连接的文本。"

    async def canceller() -> ContextResult:
        async with StreamClient.connect(server.ws_url) as client:
            ctx = await client.start(seed=2)
            await client.send_text("马上会被取消的文本。", ctx)
            await asyncio.sleep(0.2)
            await client.cancel(ctx)
            return await client.collect(ctx, timeout_s=TIMEOUT_S)

    cancelled, kept = await asyncio.gather(canceller(), speak(server, text, seed=9))
    assert cancelled.done is not None and cancelled.done["cancelled"] is True
    assert_complete(kept, text)


async def test_engine_failure_reports_error_and_context_goes_on() -> None:
    """A segment the engine fails on gets synthesis_failed; the next segment is still spoken."""
    engine = ScriptedEngine(chunk_delay_s=0.0, ms_per_char=50, fail_on="坏")
    with run_live_server(Settings(engine="espeak"), engine=lambda: (engine, False, None)) as server:
        result = await speak_default(server, "坏的一句。好的一句。")
    assert [e["code"] for e in result.errors] == ["synthesis_failed"]
    assert result.done is not None and result.done["segments"] == 2
    assert {f.segment for f in result.frames} == {1}


async def test_failed_segment_is_spoken_by_the_fallback_voice() -> None:
    """With ChatTTS configured, a segment the engine fails on is spoken by espeak, with a warning."""
    engine = ScriptedEngine(chunk_delay_s=0.0, ms_per_char=50, fail_on="坏")
    settings = Settings(engine="chattts", model_dir=Path("unused-by-the-scripted-engine"))
    with run_live_server(settings, engine=lambda: (engine, False, None)) as server:
        result = await speak_default(server, "坏的一句。好的一句。")
        metrics = server.state.metrics  # type: ignore[attr-defined]
        assert metrics.fallback_segments._value.get() == 1
    assert_complete(result, "坏的一句。好的一句。")
    assert [w["code"] for w in result.warnings] == ["fallback_voice"]
    assert {f.segment for f in result.frames} == {0, 1}


async def test_many_contexts_leave_nothing_behind() -> None:
    """Fifty utterances (ended, cancelled, abandoned) on one socket leave no context, stream or job behind."""
    engine = ScriptedEngine(chunk_delay_s=0.0, ms_per_char=20)
    with run_live_server(Settings(engine="espeak"), engine=lambda: (engine, False, None)) as server:
        state = server.state
        async with StreamClient.connect(server.ws_url) as client:
            for i in range(50):
                ctx = await client.start(f"c{i}", seed=i)
                await client.send_text(f"第{i}句话。还有一句。", ctx)
                if i % 3 == 0:
                    await client.cancel(ctx)
                else:
                    await client.end(ctx)
                result = await client.collect(ctx, timeout_s=TIMEOUT_S)
                assert result.done is not None and result.done["cancelled"] is (i % 3 == 0)
            assert client._events.backlog == []
        async with asyncio.timeout(TIMEOUT_S):
            while state.connections or state.worker.busy:  # type: ignore[attr-defined]
                await asyncio.sleep(0.01)
        metrics = state.metrics  # type: ignore[attr-defined]
        assert metrics.active_streams._value.get() == 0
        assert metrics.active_sessions._value.get() == 0
        assert metrics.queue_depth._value.get() == 0


async def test_chattts_refuses_a_foreign_voice_at_start(chattts_server: LiveServer) -> None:
    """A voice that is neither a named voice nor a speaker string the model can use is
    refused at start (voice_not_found, listing the voices), not per segment; the same on
    /v1/tts."""
    async with StreamClient.connect(chattts_server.ws_url) as client:
        ctx = await client.start(voice="not a speaker", seed=1)
        result = await client.collect(ctx, timeout_s=TIMEOUT_S)
    assert result.done is None and result.started is None
    assert [e["code"] for e in result.errors] == ["voice_not_found"]
    assert "voice" in result.errors[0]["message"] and "alloy" in result.errors[0]["message"]
    response = httpx.post(
        chattts_server.base_url + "/v1/tts",
        json={"text": "你好。", "speaker": "nope"},
        timeout=TIMEOUT_S,
    )
    assert response.status_code == 400 and response.json()["error"]["code"] == "voice_not_found"


async def test_a_failing_segment_reports_internal_error_and_the_context_goes_on() -> None:
    """A bug while preparing one segment gives internal_error; later segments and done still come."""
    from server.textnorm import TextFrontend

    def normalizer() -> object:
        def normalize(text: str) -> str:
            if "炸" in text:
                raise RuntimeError("a bug in the text front-end")
            return text

        return normalize

    engine = ScriptedEngine(chunk_delay_s=0.0, ms_per_char=20)
    with run_live_server(Settings(engine="espeak"), engine=lambda: (engine, False, None)) as server:
        server.state.frontend = TextFrontend(normalizer_factory=normalizer)  # type: ignore[attr-defined]
        # ℃ alone is the library's to read (no rule of ours claims it): the bug is hit.
        result = await speak_default(server, "好的一句。炸℃的一句。还有一句。")
    assert [e["code"] for e in result.errors] == ["internal_error"]
    assert result.done is not None and result.done["segments"] == 2
    assert {f.segment for f in result.frames} == {0, 2}
