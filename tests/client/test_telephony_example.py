"""The Twilio Media Streams example (client/examples/twilio_media_streams.py), run as it
is against a real server, with a stand-in for Twilio speaking Twilio's messages."""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import websockets
from chattts_client import AudioFrame, StreamClient

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings

EXAMPLE = Path(__file__).resolve().parents[2] / "client/examples/twilio_media_streams.py"
GREETING = "您好，这里是语音助手。请问有什么可以帮您？"
STREAM_SID = "MZ0123456789abcdef0123456789abcdef"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("twilio_media_streams", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    with run_live_server(Settings(engine="espeak")) as live:
        yield live


def twilio_start() -> list[str]:
    """What Twilio sends when a call's stream starts (its documented messages)."""
    return [
        json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}),
        json.dumps(
            {
                "event": "start",
                "sequenceNumber": "1",
                "streamSid": STREAM_SID,
                "start": {
                    "streamSid": STREAM_SID,
                    "accountSid": "AC0",
                    "callSid": "CA0",
                    "tracks": ["inbound"],
                    "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
                    "customParameters": {},
                },
            }
        ),
    ]


def mulaw_to_float(data: bytes) -> np.ndarray:
    """µ-law decoded by ffmpeg, independently of the server."""
    pcm = subprocess.run(
        ["ffmpeg", "-v", "error", "-f", "mulaw", "-ar", "8000", "-ac", "1", "-i", "pipe:0",
         "-f", "s16le", "pipe:1"],
        input=data, capture_output=True, check=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    return np.frombuffer(pcm.stdout, "<i2").astype(np.float32) / 32768


def test_the_example_is_a_script_with_help() -> None:
    """It runs as written: --help lists its options."""
    shown = subprocess.run(
        [sys.executable, str(EXAMPLE), "--help"], capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert shown.returncode == 0, shown.stderr
    assert "--tts" in shown.stdout and "--port" in shown.stdout


@pytest.mark.live
async def test_a_call_hears_the_greeting_in_20_ms_media_messages(server: LiveServer) -> None:
    """Twilio's start gets the greeting as media messages of 160 bytes of µ-law each
    (20 ms at 8 kHz), then a mark; the audio is the server's for that text."""
    example = load_example()

    async def handler(call: websockets.asyncio.server.ServerConnection) -> None:
        await example.handle_call(call, server.ws_url, GREETING, seed=5)

    async with websockets.serve(handler, "127.0.0.1", 0) as bridge:
        port = bridge.sockets[0].getsockname()[1]
        async with websockets.connect(f"ws://127.0.0.1:{port}") as twilio:
            for message in twilio_start():
                await twilio.send(message)
            sent: list[dict[str, object]] = []
            while not sent or sent[-1]["event"] != "mark":
                sent.append(json.loads(await asyncio.wait_for(twilio.recv(), TIMEOUT_S)))
            await twilio.send(json.dumps({"event": "stop", "streamSid": STREAM_SID}))
    media, mark = sent[:-1], sent[-1]
    assert media and {m["event"] for m in media} == {"media"}
    assert {m["streamSid"] for m in sent} == {STREAM_SID}
    payloads = [base64.b64decode(m["media"]["payload"]) for m in media]  # type: ignore[index]
    assert {len(p) for p in payloads} == {160}
    # The same text in the same voice, asked of the server directly as 16-bit PCM.
    async with StreamClient.connect(server.ws_url) as tts:
        context = await tts.start(seed=5, sample_rate=8000, frame_ms=20)
        await tts.send_text(GREETING, context)
        await tts.end(context)
        reference = await tts.collect(context, timeout_s=TIMEOUT_S)
    heard = mulaw_to_float(b"".join(payloads))
    expected = np.frombuffer(reference.pcm, "<i2").astype(np.float32) / 32768
    assert heard.size == expected.size > 8000
    assert np.all(np.abs(heard - expected) <= np.maximum(np.abs(expected) * 0.036, 36 / 32768))
    assert isinstance(mark["mark"], dict) and mark["mark"]["name"]


@pytest.mark.live
async def test_interrupting_clears_twilio_and_cancels_the_context(server: LiveServer) -> None:
    """The example's interrupt: Twilio gets clear for the stream, and the server stops
    the context (done, cancelled) instead of making the rest of the reply."""
    example = load_example()
    finished: asyncio.Future[dict[str, object]] = asyncio.get_running_loop().create_future()

    async def handler(call: websockets.asyncio.server.ServerConnection) -> None:
        async with StreamClient.connect(server.ws_url) as tts:
            context = await tts.open(encoding="pcm_mulaw", frame_ms=20)
            await tts.send_text(GREETING * 20, context)
            await tts.end(context)
            async for event in tts.events(timeout_s=TIMEOUT_S):
                if isinstance(event, AudioFrame):
                    await example.interrupt(call, STREAM_SID, tts, context)
                    break
            result = await tts.collect(context, timeout_s=TIMEOUT_S)
            finished.set_result(result.done or {})

    async with websockets.serve(handler, "127.0.0.1", 0) as bridge:
        port = bridge.sockets[0].getsockname()[1]
        async with websockets.connect(f"ws://127.0.0.1:{port}") as twilio:
            cleared = json.loads(await asyncio.wait_for(twilio.recv(), TIMEOUT_S))
            done = await asyncio.wait_for(finished, TIMEOUT_S)
    assert cleared == {"event": "clear", "streamSid": STREAM_SID}
    assert done["cancelled"] is True
