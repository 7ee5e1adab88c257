"""Frames ready together go out as one (--max-frame-ms): an engine ahead of its listener
sends a frame, not ten, each no longer than the audio the listener already holds, so a
link that carries the stream in real time still delivers it before it is needed. A
context's own frame_ms keeps exact frames; --max-frame-ms 0 keeps the frames as made."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from websockets.asyncio.client import connect

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from server.delivery import DeliverySettings
from streaming import protocol as p
from tests.scripted_engine import ScriptedEngine

pytestmark = pytest.mark.live

RATE = 24_000
TEXT = "今天天气很好，我们一起去公园散步吧。欢迎使用流式语音合成服务，有问题随时问我。"
SLACK_S = 0.05  # the server's clock and this client's differ by the delivery time


@dataclass
class Heard:
    frames: list[tuple[float, int]]  # (arrival, samples)
    done: dict[str, object]


async def speak(server: LiveServer, **start: object) -> Heard:
    frames: list[tuple[float, int]] = []
    async with connect(server.ws_url, subprotocols=[p.SUBPROTOCOL]) as ws:  # type: ignore[list-item]
        assert json.loads(await ws.recv())["type"] == "ready"
        await ws.send(json.dumps({"type": "start", "context_id": "a", **start}))
        await ws.send(json.dumps({"type": "text", "context_id": "a", "text": TEXT}))
        await ws.send(json.dumps({"type": "end", "context_id": "a"}))
        async with asyncio.timeout(TIMEOUT_S):
            while True:
                message = await ws.recv()
                if isinstance(message, bytes):
                    frames.append((time.monotonic(), (len(message) - p.AUDIO_HEADER.size) // 2))
                    continue
                event = json.loads(message)
                assert event["type"] not in ("error", "warning"), event
                if event["type"] == "done":
                    return Heard(frames, event)


def serve(max_frame_ms: int | None = None) -> Iterator[LiveServer]:
    # Chunks of 500 ms (as ChatTTS makes them, after its first) at 25x real time.
    engine = ScriptedEngine(chunk_ms=500, chunk_delay_s=0.02, ms_per_char=150)
    settings = Settings(model_dir=Path("unused"))
    if max_frame_ms is not None:
        settings = settings.replace(delivery=DeliverySettings(max_frame_ms=max_frame_ms))
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        yield live


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    yield from serve()


async def test_frames_ready_together_are_joined_within_the_listeners_lead(
    server: LiveServer,
) -> None:
    heard = await speak(server)
    sizes = [samples for _, samples in heard.frames]
    assert sum(sizes) == heard.done["audio_samples"]
    assert sizes[:3] == [960, 1920, 2400]  # the first frames as made: nothing is ahead yet
    assert max(sizes) > 2400  # joined
    assert max(sizes) <= RATE  # --max-frame-ms 1000
    assert len(sizes) < sum(sizes) / 2400 / 2  # fewer than half as many as 100 ms frames
    # A joined frame holds no more than the listener had ahead when it arrived (a
    # player started at the first frame, in real time).
    first_at = heard.frames[0][0]
    received = 0
    for at, samples in heard.frames:
        if samples > 2400:
            lead_s = received / RATE - (at - first_at)
            assert samples / RATE <= lead_s + SLACK_S, (samples, lead_s)
        received += samples


async def test_a_contexts_own_frame_ms_is_never_joined(server: LiveServer) -> None:
    heard = await speak(server, frame_ms=20)
    sizes = {samples for _, samples in heard.frames}
    assert sizes == {480}
    assert len(heard.frames) * 480 == heard.done["audio_samples"]


async def test_max_frame_ms_0_sends_the_frames_as_made() -> None:
    for live in serve(max_frame_ms=0):
        heard = await speak(live)
    sizes = [samples for _, samples in heard.frames]
    assert max(sizes) == 2400 and sum(sizes) == heard.done["audio_samples"]
    assert len(sizes) >= sum(sizes) / 2400
