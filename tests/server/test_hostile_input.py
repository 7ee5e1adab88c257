"""Failures found with hostile input, each through the real server on a socket: a clear
error, the connection and its other contexts untouched, nothing accepted lost."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from chattts_client import AudioFrame, StreamClient
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from server.engines.espeak import VOICES
from server.voices import PRESET_NAMES
from tests.scripted_engine import ScriptedEngine
from tests.server.ws.test_protocol_errors import json_events, read_until_done

pytestmark = pytest.mark.live

IDLE_FLUSH_MS = 60_000  # nothing is spoken before `end` unless a sentence ends


@pytest.fixture(scope="module")
def espeak_server() -> Iterator[LiveServer]:
    with run_live_server(Settings(engine="espeak", idle_flush_ms=IDLE_FLUSH_MS)) as server:
        yield server


def raw(kind: str, context_id: str, tail: str = "") -> str:
    """A frame written by hand, so that it can hold a JSON escape such as \\ud800."""
    return f'{{"type":"{kind}","context_id":"{context_id}"{tail}}}'


async def test_a_lone_surrogate_in_text_is_reported_and_the_text_around_it_spoken(
    espeak_server: LiveServer,
) -> None:
    """ "\\ud800" in a delta: 你好 and 世界 are spoken, the surrogate is reported, no error."""
    async with StreamClient.connect(espeak_server.ws_url) as client:
        await client.start("a", seed=1)
        await client.send_raw(raw("text", "a", ',"text":"你好\\ud800世界。"'))
        await client.end("a")
        result = await client.collect("a", timeout_s=TIMEOUT_S)
    assert result.errors == [] and result.done is not None and result.samples > 0
    assert "".join(s["spoken"] for s in result.segments) == "你好世界。"
    removed = [r for w in result.warnings for r in w["removed"]]
    assert removed == [{"start": 2, "chars": "\ufffd", "reason": "invalid_unicode"}]


@pytest.mark.parametrize(
    ("frame", "context_id"),
    [
        (raw("start", "\\ud800"), None),
        (raw("text", "\\udfff", ',"text":"你好"'), None),
        (raw("start", "b", ',"voice":"\\ud800"'), "b"),
    ],
    ids=["context_id in start", "context_id in text", "voice"],
)
async def test_a_lone_surrogate_in_another_field_is_invalid_field_and_nothing_else_changes(
    espeak_server: LiveServer, frame: str, context_id: str | None
) -> None:
    """Never 1011: one invalid_field error, and the open context still speaks all its text."""
    async with StreamClient.connect(espeak_server.ws_url) as client:
        await client.start("a", seed=1)
        await client.send_text("今天天气很好。", "a")
        await client.send_raw(frame)
        await client.end("a")
        events = await read_until_done(client, "a")
        errors = json_events(events, "error")
        assert [(e["code"], e["context_id"]) for e in errors] == [("invalid_field", context_id)]
        done = json_events(events, "done")[0]
        assert done["audio_samples"] > 0 and not done["cancelled"]
        # The connection is still open and serving.
        await client.start("c", seed=2)
        await client.send_text("还在。", "c")
        await client.end("c")
        assert (await client.collect("c", timeout_s=TIMEOUT_S)).samples > 0


async def test_the_fallback_voice_refuses_unknown_voices_listing_its_own(
    espeak_server: LiveServer,
) -> None:
    """Like ChatTTS, the fallback voice refuses a voice it does not have, and says which it
    has: its named voices (OpenAI's names among them) and its raw variants."""
    async with StreamClient.connect(espeak_server.ws_url) as client:
        await client.start("a", voice="someone")
        refused = await client.collect("a", timeout_s=TIMEOUT_S)
        assert [e["code"] for e in refused.errors] == ["voice_not_found"]
        assert all(name in refused.errors[0]["message"] for name in (*VOICES, *PRESET_NAMES))
        await client.start("b", voice="m1")
        await client.send_text("你好。", "b")
        await client.end("b")
        spoken = await client.collect("b", timeout_s=TIMEOUT_S)
    assert spoken.errors == [] and spoken.started is not None
    assert spoken.started["voice"] == "m1" and spoken.samples > 0


async def test_symbols_said_as_pauses_are_reported(espeak_server: LiveServer) -> None:
    """< and table pipes become pauses, and the warning lists them (reason pause)."""
    async with StreamClient.connect(espeak_server.ws_url) as client:
        await client.start("a", seed=1)
        await client.send_text("甲<乙|丙。", "a")
        await client.end("a")
        result = await client.collect("a", timeout_s=TIMEOUT_S)
    removed = [r for w in result.warnings for r in w["removed"]]
    assert removed == [
        {"start": 1, "chars": "<", "reason": "pause"},
        {"start": 3, "chars": "|", "reason": "pause"},
    ]
    assert result.segments[0]["spoken"] == "甲，乙，丙。"


async def test_a_closer_after_a_sentence_end_stays_with_it(espeak_server: LiveServer) -> None:
    """［完。］下一句 is cut after the closer, as {完。}下一句 is: one punctuation table."""
    for opener, closer in (("［", "］"), ("{", "}")):
        async with StreamClient.connect(espeak_server.ws_url) as client:
            await client.start("a", seed=1)
            await client.send_text(f"{opener}完。{closer}下一句", "a")
            await client.end("a")
            result = await client.collect("a", timeout_s=TIMEOUT_S)
        assert [s["text"] for s in result.segments] == [f"{opener}完。{closer}", "下一句"]


async def test_a_stopped_engine_is_reported_as_not_ready_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The engine stopping under a waiting and a speaking segment: both get not_ready, the
    log carries no traceback, and nothing is reported as internal_error."""
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.05, ms_per_char=500)
    settings = Settings(idle_flush_ms=IDLE_FLUSH_MS, max_active_segments=1)
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        async with StreamClient.connect(live.ws_url) as client:
            for context_id in ("a", "b"):
                await client.start(context_id, seed=1)
                await client.send_text("一段很长的话。", context_id)
                await client.end(context_id)
            while not isinstance(await client.recv(TIMEOUT_S), AudioFrame):
                pass
            with caplog.at_level(logging.DEBUG):
                await asyncio.to_thread(live.state.worker.stop)  # type: ignore[attr-defined]
                results = [await client.collect(c, timeout_s=TIMEOUT_S) for c in ("a", "b")]
    codes = [[e["code"] for e in result.errors] for result in results]
    assert codes == [["not_ready"], ["not_ready"]]
    assert not [r for r in caplog.records if r.exc_info and r.name.startswith("server.")]


async def open_paused_client(ws_url: str) -> ClientConnection:
    """A client that holds little itself (small receive buffer, one queued message)."""
    host, port = ws_url.split("//")[1].split("/")[0].split(":")
    sock = socket.socket()
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, int(port)))
        ws = await connect(ws_url, sock=sock, max_queue=1, max_size=None, open_timeout=TIMEOUT_S)
    except BaseException:
        sock.close()  # the connection owns it only once it is open
        raise
    try:
        assert json.loads(await ws.recv())["type"] == "ready"
    except BaseException:
        await ws.close()
        raise
    return ws


async def speak_long(ws: ClientConnection, seconds_of_audio: float) -> None:
    """Start context a on a long text and read its first second of audio."""
    await ws.send(json.dumps({"type": "start", "context_id": "a", "seed": 1}))
    text = "这是一段很长的话。" * int(seconds_of_audio / 3)
    await ws.send(json.dumps({"type": "text", "context_id": "a", "text": text}))
    await ws.send(json.dumps({"type": "end", "context_id": "a"}))
    received = 0
    while received < 24_000:
        message = await asyncio.wait_for(ws.recv(), TIMEOUT_S)
        if isinstance(message, bytes):
            received += (len(message) - 12) // 2


async def test_after_cancel_only_what_the_network_already_holds_arrives() -> None:
    """A client pauses while audio streams, then cancels: the server drops what it holds,
    so only the bounded network buffers' worth still arrives (59 s did, unbounded)."""
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.002, ms_per_char=300)
    settings = Settings(ws_send_buffer_bytes=16 * 1024)
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        ws = await open_paused_client(live.ws_url)
        async with ws:
            await speak_long(ws, 60)
            await asyncio.sleep(2.0)  # not reading: a faster-than-real-time engine runs ahead
            await ws.send(json.dumps({"type": "cancel", "context_id": "a"}))
            after = 0
            done: dict[str, Any] = {}
            while not done:
                message = await asyncio.wait_for(ws.recv(), TIMEOUT_S)
                if isinstance(message, bytes):
                    after += (len(message) - 12) // 2
                elif json.loads(message)["type"] == "done":
                    done = json.loads(message)
    assert done["cancelled"] is True
    # 16 KiB of server buffers plus the client's own: well under a second at 24 kHz.
    assert after / 24_000 < 1.0, f"{after / 24_000:.2f} s of audio after the cancel"
    assert done["audio_samples"] / 24_000 < 5.0  # of 60 s, the rest was never sent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("reads_again", [False, True], ids=["never reads", "reads again"])
async def test_sigterm_with_a_client_that_stopped_reading_exits_cleanly(reads_again: bool) -> None:
    """After the drain deadline a session blocked on a client that stopped reading is let
    go: the process exits 0 with no cancelled task, traceback or error in its log, and a
    client that reads again in time gets close code 1001 (going away)."""
    port = free_port()
    command = [
        sys.executable, "-m", "server", "serve", "--engine", "espeak", "--port", str(port),
        "--drain-timeout-s", "1", "--ws-send-buffer-bytes", "16384",
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            for _ in range(int(TIMEOUT_S * 40)):
                with contextlib.suppress(httpx.TransportError):
                    if (await http.get("/ready")).status_code == 200:
                        break
                await asyncio.sleep(0.1)
        ws = await open_paused_client(f"ws://127.0.0.1:{port}/v1/stream")
        await speak_long(ws, 60)
        process.send_signal(signal.SIGTERM)
        if reads_again:
            await asyncio.sleep(1.3)  # past the drain deadline, within the close grace
        else:
            await asyncio.to_thread(process.wait, TIMEOUT_S)
        with pytest.raises(ConnectionClosed):
            while True:
                await asyncio.wait_for(ws.recv(), TIMEOUT_S)
        if reads_again:
            assert ws.close_code == 1001
        _, stderr = process.communicate(timeout=TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr[-3000:]
    problems = [line for line in stderr.splitlines() if " ERROR " in line or "Traceback" in line]
    assert not problems, stderr[-3000:]


async def test_a_cancelled_segment_is_not_counted_as_synthesised() -> None:
    """tts_segments_total and the characters spoken count segments that finished, not one
    cancelled halfway."""
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.05, ms_per_char=300)
    with run_live_server(Settings(), engine=lambda: (engine, False, None)) as live:
        async with StreamClient.connect(live.ws_url) as client:
            await client.start("a", seed=1)
            await client.send_text("一段会被取消的很长的话。", "a")
            await client.end("a")
            while not isinstance(await client.recv(TIMEOUT_S), AudioFrame):
                pass
            await client.cancel("a")
            assert (await client.collect("a", timeout_s=TIMEOUT_S)).done["cancelled"]  # type: ignore[index]
        metrics = httpx.get(live.base_url + "/metrics", timeout=TIMEOUT_S).text
    assert "tts_segments_total 0.0" in metrics and "tts_characters_total 0.0" in metrics
