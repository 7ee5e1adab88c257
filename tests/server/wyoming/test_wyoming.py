"""The Wyoming protocol (--wyoming-port), driven by the ``wyoming`` package's own client
(AsyncTcpClient) the way Home Assistant's wyoming integration drives it, against a real
server speaking the real ChatTTS code path (tiny random-weight checkpoint)."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from chattts_client import StreamClient
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Describe, Info
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
    SynthesizeVoice,
)

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from server.wyoming_settings import WyomingSettings
from tests.conftest import fixed_length_chattts
from tests.scripted_engine import ScriptedEngine

TEXT = "你好，欢迎回家。客厅的灯已经打开了。"
# A reply as Home Assistant streams it from an LLM: deltas of a few characters.
FIRST_SENTENCE = ["你好，", "欢迎", "回家。"]
REST = ["客厅的", "灯已经", "打开了。"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Served:
    live: LiveServer
    port: int

    def client(self) -> AsyncTcpClient:
        return AsyncTcpClient("127.0.0.1", self.port)


@pytest.fixture(scope="module")
def served(tiny_checkpoint: Path) -> Iterator[Served]:
    port = free_port()
    settings = Settings(
        engine="chattts",
        model_dir=tiny_checkpoint,
        wyoming=WyomingSettings(wyoming_port=port),
        max_streams=1,
    )
    with run_live_server(settings, engine=fixed_length_chattts(tiny_checkpoint)) as live:
        yield Served(live, port)


@dataclass
class Answer:
    """What the server sent for one request, in order."""

    types: list[str] = field(default_factory=list)
    start: AudioStart | None = None
    audio: bytes = b""
    errors: list[Error] = field(default_factory=list)
    closed: bool = False  # the server ended the connection


async def read_answer(client: AsyncTcpClient, until: str, answer: Answer | None = None) -> Answer:
    """Events until one of type ``until`` (or the end of the connection)."""
    answer = answer or Answer()
    while True:
        event = await asyncio.wait_for(client.read_event(), TIMEOUT_S * 4)
        if event is None:
            answer.closed = True
            return answer
        record(answer, event)
        if event.type == until:
            return answer


def record(answer: Answer, event: Event) -> None:
    answer.types.append(event.type)
    if AudioStart.is_type(event.type):
        answer.start = AudioStart.from_event(event)
    elif AudioChunk.is_type(event.type):
        answer.audio += AudioChunk.from_event(event).audio
    elif Error.is_type(event.type):
        answer.errors.append(Error.from_event(event))


def shape(types: list[str]) -> list[str]:
    """The event types with runs of audio-chunk folded into one."""
    folded: list[str] = []
    for kind in types:
        if not (folded and kind == folded[-1] == "audio-chunk"):
            folded.append(kind)
    return folded


async def describe(served: Served) -> Info:
    async with served.client() as client:
        await client.write_event(Describe().event())
        event = await asyncio.wait_for(client.read_event(), TIMEOUT_S)
    assert event is not None and Info.is_type(event.type)
    return Info.from_event(event)


def voice_names(served: Served) -> list[str]:
    listed = httpx.get(f"{served.live.base_url}/v1/voices", timeout=TIMEOUT_S).json()
    return [voice["name"] for voice in listed["data"]]


@pytest.mark.live
async def test_describe_lists_every_voice_in_chinese_and_english(served: Served) -> None:
    """info: one installed TTS program that streams, with every voice of /v1/voices
    (presets and created ones, the one created just now too), each speaking zh and en."""
    made = httpx.post(
        f"{served.live.base_url}/v1/voices",
        json={"name": "front-door", "speaker_seed": 5},
        timeout=TIMEOUT_S,
    )
    assert made.status_code == 201, made.text
    (program,) = (await describe(served)).tts
    assert program.installed and program.supports_synthesize_streaming
    names = [voice.name for voice in program.voices]
    assert names == voice_names(served) and "front-door" in names and "alloy" in names
    assert all(voice.languages == ["zh", "en"] and voice.installed for voice in program.voices)
    assert [voice.description for voice in program.voices] == names  # what Home Assistant shows


@pytest.mark.live
async def test_synthesize_speaks_the_whole_text_as_tts_does(served: Served) -> None:
    """synthesize (Home Assistant's non-streaming call): audio-start, chunks, audio-stop;
    16-bit mono at the engine's rate, the very samples POST /v1/tts gives as pcm."""
    async with served.client() as client:
        await client.write_event(Synthesize(text=TEXT, voice=SynthesizeVoice(name="alloy")).event())
        answer = await read_answer(client, AudioStop().event().type)
    assert shape(answer.types) == ["audio-start", "audio-chunk", "audio-stop"]
    assert answer.start is not None
    assert (answer.start.rate, answer.start.width, answer.start.channels) == (24000, 2, 1)
    reference = httpx.post(
        f"{served.live.base_url}/v1/tts",
        json={"text": TEXT, "voice": "alloy", "format": "pcm"},
        timeout=TIMEOUT_S * 4,
    )
    assert len(answer.audio) > 24000 and answer.audio == reference.content


@pytest.mark.live
async def test_a_stream_speaks_from_its_first_sentence_as_one_utterance(served: Served) -> None:
    """synthesize-start, chunks, the compatibility synthesize, synthesize-stop (Home
    Assistant's order): audio comes before the text is complete, the repeated whole text
    is not spoken twice, synthesize-stopped ends it, and the audio is that of a WebSocket
    context speaking the same text in the same voice."""
    async with served.client() as client:
        voice = SynthesizeVoice(name="alloy")
        await client.write_event(SynthesizeStart(voice=voice).event())
        for delta in FIRST_SENTENCE:
            await client.write_event(SynthesizeChunk(text=delta).event())
        answer = await read_answer(client, AudioChunk(24000, 2, 1, b"").event().type)
        assert answer.types == ["audio-start", "audio-chunk"]  # before the rest of the text
        for delta in REST:
            await client.write_event(SynthesizeChunk(text=delta).event())
        await client.write_event(Synthesize(text=TEXT, voice=voice).event())
        await client.write_event(SynthesizeStop().event())
        await read_answer(client, SynthesizeStopped().event().type, answer)
    assert shape(answer.types) == ["audio-start", "audio-chunk", "audio-stop", "synthesize-stopped"]
    async with StreamClient.connect(served.live.ws_url) as tts:
        context = await tts.start(voice="alloy")
        await tts.send_text(TEXT, context)
        await tts.end(context)
        reference = await tts.collect(context, timeout_s=TIMEOUT_S * 4)
    assert len(answer.audio) > 24000 and answer.audio == reference.pcm


@pytest.mark.live
@pytest.mark.parametrize("streaming", [False, True])
async def test_an_unknown_voice_is_an_error_event(served: Served, streaming: bool) -> None:
    """A voice there is not: error voice_not_found naming the voices, then the end."""
    async with served.client() as client:
        voice = SynthesizeVoice(name="nobody")
        request = SynthesizeStart(voice=voice) if streaming else Synthesize(TEXT, voice=voice)
        await client.write_event(request.event())
        answer = await read_answer(client, "never")
    assert answer.closed and answer.types == ["error"]
    (error,) = answer.errors
    assert error.code == "voice_not_found" and "alloy" in error.text


@pytest.mark.live
async def test_busy_is_an_error_event_with_the_admission_of_every_route(served: Served) -> None:
    """With --max-streams 1 taken by an open stream, a synthesize is refused busy (and
    counted on the wyoming route); the open stream is not disturbed."""
    async with served.client() as holder, served.client() as other:
        await holder.write_event(SynthesizeStart().event())
        await holder.write_event(SynthesizeChunk(text="你好。").event())
        first = await read_answer(holder, "audio-chunk")
        await other.write_event(Synthesize(text=TEXT).event())
        refused = await read_answer(other, "never")
        await holder.write_event(SynthesizeStop().event())
        await read_answer(holder, "synthesize-stopped", first)
    assert refused.closed and [e.code for e in refused.errors] == ["busy"]
    assert shape(first.types) == ["audio-start", "audio-chunk", "audio-stop", "synthesize-stopped"]
    metrics = httpx.get(f"{served.live.base_url}/metrics", timeout=TIMEOUT_S).text
    assert 'tts_contexts_refused_total{route="wyoming"} 1.0' in metrics


@pytest.mark.live
async def test_requests_are_counted_timed_and_logged(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    """A synthesize: tts_wyoming_requests_total, first audio on route wyoming, and one
    summary line with its outcome."""
    caplog.set_level(logging.INFO, logger="chattts_stream.summary")
    async with served.client() as client:
        await client.write_event(Synthesize(text="好的。").event())
        await read_answer(client, "audio-stop")
    metrics = httpx.get(f"{served.live.base_url}/metrics", timeout=TIMEOUT_S).text
    assert 'tts_wyoming_requests_total{kind="synthesize",outcome="complete"}' in metrics
    assert 'tts_time_to_first_audio_seconds_count{route="wyoming"}' in metrics
    lines = [r.getMessage() for r in caplog.records if r.name == "chattts_stream.summary"]
    assert any(line.startswith("wyoming synthesize complete") for line in lines), lines


@pytest.mark.live
async def test_an_event_over_the_limit_is_refused_before_it_is_read(served: Served) -> None:
    """A header announcing a payload beyond --max-message-bytes gets error
    message_too_large and the connection closes; nothing that large is read."""
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    header = {"type": "synthesize", "data": {"text": "x"}, "payload_length": 1 << 30}
    writer.write(json.dumps(header).encode() + b"\n")
    await writer.drain()
    line = await asyncio.wait_for(reader.readline(), TIMEOUT_S)
    event = json.loads(line)
    data = json.loads(await reader.readexactly(event["data_length"]))
    assert event["type"] == "error" and data["code"] == "message_too_large"
    assert await asyncio.wait_for(reader.read(), TIMEOUT_S) == b""  # closed
    writer.close()


@pytest.mark.live
async def test_an_engine_failure_is_an_error_event_and_the_stream_goes_on() -> None:
    """A segment the engine fails on: error synthesis_failed, then the next segment's
    audio, audio-stop and synthesize-stopped."""
    engine = ScriptedEngine(chunk_delay_s=0.0, ms_per_char=50, fail_on="坏")
    port = free_port()
    settings = Settings(engine="espeak", wyoming=WyomingSettings(wyoming_port=port))
    with run_live_server(settings, engine=lambda: (engine, False, None)):
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(SynthesizeStart().event())
            await client.write_event(SynthesizeChunk(text="坏的一句。好的一句。").event())
            await client.write_event(SynthesizeStop().event())
            answer = await read_answer(client, "synthesize-stopped")
    assert [e.code for e in answer.errors] == ["synthesis_failed"]
    assert shape(answer.types) == [
        "error", "audio-start", "audio-chunk", "audio-stop", "synthesize-stopped"
    ]  # fmt: skip
    assert answer.audio


def test_the_wyoming_port_is_off_by_default_and_binds_loopback() -> None:
    """No --wyoming-port: no listener; its host defaults to 127.0.0.1 (no authentication)."""
    settings = Settings()
    assert settings.wyoming == WyomingSettings(wyoming_port=0, wyoming_host="127.0.0.1")


@pytest.mark.live
async def test_connections_are_limited_and_an_idle_one_is_closed() -> None:
    """With --max-connections 1, a second connection gets too_many_connections and is
    closed; the first, sending nothing for --ws-idle-timeout-s, is closed too."""
    port = free_port()
    settings = Settings(
        engine="espeak",
        wyoming=WyomingSettings(wyoming_port=port),
        max_connections=1,
        ws_idle_timeout_s=1.0,
    )
    with run_live_server(settings) as live:
        async with AsyncTcpClient("127.0.0.1", port) as first:
            await first.write_event(Describe().event())
            assert (await read_answer(first, "info")).types == ["info"]
            async with AsyncTcpClient("127.0.0.1", port) as second:
                turned_away = await read_answer(second, "never")
            idle = await read_answer(first, "never")
        metrics = httpx.get(f"{live.base_url}/metrics", timeout=TIMEOUT_S).text
    assert turned_away.closed and [e.code for e in turned_away.errors] == ["too_many_connections"]
    assert idle.closed and idle.types == []
    assert 'tts_connections_closed_total{reason="idle_session"} 1.0' in metrics


@pytest.mark.live
async def test_a_stream_over_the_buffer_limit_waits_and_loses_nothing() -> None:
    """With --max-buffered-chars 20, a stream of 60 characters sent at once is read as
    segments are spoken (the client waits, as TCP makes it): every segment is spoken, in
    order; a chunk over --max-text-message-chars is refused with text_too_long."""
    engine = ScriptedEngine(chunk_delay_s=0.005, ms_per_char=60)
    port = free_port()
    settings = Settings(
        engine="espeak",
        wyoming=WyomingSettings(wyoming_port=port),
        max_buffered_chars=20,
        max_text_message_chars=12,
    )
    sentences = [f"第{n}句话说完了。" for n in "一二三四五六七八九十"]
    with run_live_server(settings, engine=lambda: (engine, False, None)):
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(SynthesizeStart().event())
            for sentence in sentences:
                await client.write_event(SynthesizeChunk(text=sentence).event())
            await client.write_event(SynthesizeStop().event())
            answer = await read_answer(client, "synthesize-stopped")
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(SynthesizeStart().event())
            await client.write_event(
                SynthesizeChunk(text="这一块文字超过了十二个字的上限。").event()
            )
            refused = await read_answer(client, "never")
    assert not answer.errors and answer.types[-1] == "synthesize-stopped"
    assert [request.text for request in engine.requests] == sentences
    assert refused.closed and [e.code for e in refused.errors] == ["text_too_long"]


@pytest.mark.live
@pytest.mark.parametrize(
    ("event", "code"),
    [
        (Event("synthesize", {"voice": {"name": "alloy"}}), "bad_message"),
        (Event("synthesize", {"text": 5}), "bad_message"),
        (Event("synthesize", {"text": TEXT, "voice": "alloy"}), "bad_message"),
        (Event("synthesize-start", {"voice": {"language": "fr"}}), "voice_not_found"),
        (Event("synthesize-chunk", {"text": "你好。"}), "bad_message"),
    ],
    ids=["no text", "text not a string", "voice not an object", "french", "chunk first"],
)
async def test_a_malformed_request_is_an_error_event(
    served: Served, event: Event, code: str
) -> None:
    """Each gets its error event (no traceback, no hang), then the end of the connection."""
    async with served.client() as client:
        await client.write_event(event)
        answer = await read_answer(client, "never")
    assert answer.closed and [e.code for e in answer.errors] == [code]


@pytest.mark.live
async def test_a_language_alone_picks_the_default_voice(served: Served) -> None:
    """voice {language: zh} (Home Assistant without a voice chosen): spoken, not refused."""
    async with served.client() as client:
        await client.write_event(
            Synthesize(text="好的。", voice=SynthesizeVoice(language="zh")).event()
        )
        answer = await read_answer(client, "audio-stop")
    assert not answer.errors and answer.audio


@pytest.mark.live
async def test_at_capacity_with_when_busy_fallback_a_stream_is_spoken_by_the_fallback_voice(
    tiny_checkpoint: Path,
) -> None:
    """--when-busy fallback: a stream beyond --max-streams is spoken by espeak (counted as
    degraded on the wyoming route), at the rate its audio-start announced."""
    port = free_port()
    settings = Settings(
        engine="chattts", model_dir=tiny_checkpoint, wyoming=WyomingSettings(wyoming_port=port), max_streams=1,
        when_busy="fallback",
    )  # fmt: skip
    with run_live_server(settings, engine=fixed_length_chattts(tiny_checkpoint)) as live:
        async with (
            AsyncTcpClient("127.0.0.1", port) as holder,
            AsyncTcpClient("127.0.0.1", port) as other,
        ):
            await holder.write_event(SynthesizeStart().event())
            await holder.write_event(SynthesizeChunk(text="你好。").event())
            await read_answer(holder, "audio-chunk")
            await other.write_event(SynthesizeStart().event())
            await other.write_event(SynthesizeChunk(text="好的，马上就来。").event())
            await other.write_event(SynthesizeStop().event())
            degraded = await read_answer(other, "synthesize-stopped")
            await holder.write_event(SynthesizeStop().event())
            await read_answer(holder, "synthesize-stopped")
        metrics = httpx.get(f"{live.base_url}/metrics", timeout=TIMEOUT_S).text
    assert not degraded.errors and degraded.start is not None and degraded.start.rate == 24000
    assert len(degraded.audio) > 24000  # over half a second of 16-bit audio at 24 kHz
    assert 'tts_contexts_degraded_total{route="wyoming"} 1.0' in metrics


@pytest.mark.live
async def test_home_assistants_copy_of_a_long_reply_does_not_end_the_stream() -> None:
    """The whole-text synthesize Home Assistant sends inside a stream may exceed
    --max-message-bytes (a long reply): it is read past, the stream ends normally; the
    same synthesize outside a stream is refused message_too_large."""
    engine = ScriptedEngine(chunk_delay_s=0.0, ms_per_char=60)
    port = free_port()
    settings = Settings(
        engine="espeak", wyoming=WyomingSettings(wyoming_port=port), max_message_bytes=2048
    )
    long_reply = "好的。" * 400  # 3,600 bytes of UTF-8
    with run_live_server(settings, engine=lambda: (engine, False, None)):
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(SynthesizeStart().event())
            await client.write_event(SynthesizeChunk(text="你好。").event())
            await client.write_event(Synthesize(text=long_reply).event())
            await client.write_event(SynthesizeStop().event())
            streamed = await read_answer(client, "synthesize-stopped")
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(Synthesize(text=long_reply).event())
            refused = await read_answer(client, "never")
    assert not streamed.errors and shape(streamed.types)[-2:] == [
        "audio-stop",
        "synthesize-stopped",
    ]
    assert [request.text for request in engine.requests] == ["你好。"]
    assert refused.closed and [e.code for e in refused.errors] == ["message_too_large"]


@pytest.mark.live
def test_a_wyoming_port_taken_stops_the_start_up_with_one_line() -> None:
    """chattts-stream serve with --wyoming-port on a port in use: exit status 3 and a
    line naming the flag and why (before the engine loads)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "server", "serve", "--engine", "espeak", "--port", "0",
             "--wyoming-port", str(port)],
            capture_output=True, text=True, timeout=TIMEOUT_S,
        )  # fmt: skip
    assert done.returncode == 3, done.stderr[-2000:]
    assert "exiting: cannot serve the Wyoming protocol on --wyoming-port" in done.stderr
    assert "address already in use" in done.stderr
