"""The session's own write path (server.ws.wire) and the engine's coalesced wake-ups
(server.runtime.jobs.Handoff): the same messages as through ASGI, in fewer writes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.frames import Frame, Opcode
from websockets.streams import StreamReader

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from server.runtime.jobs import Handoff, Job
from server.ws.wire import encode_event, frame_header
from streaming import protocol as p
from streaming.text import Removal
from tests.conftest import fixed_length_chattts

TEXT = "你好🙂，欢迎使用流式语音合成。今天天气很好！"

VARIANTS = {
    "defaults": {},
    "through_asgi": {"ws_direct_send": False},
    "a_wakeup_per_round": {"coalesce_wakeups": False},
}


@pytest.fixture(scope="module")
def servers(tiny_checkpoint: Path) -> Iterator[dict[tuple[str, str], LiveServer]]:
    """Each variant twice: the fallback voice (espeak-ng, whose audio does not depend on
    timing) and the real ChatTTS code path on the tiny checkpoint."""
    factory = fixed_length_chattts(tiny_checkpoint)
    running: dict[tuple[str, str], LiveServer] = {}
    with contextlib.ExitStack() as stack:
        for name, changes in VARIANTS.items():
            espeak = Settings(engine="espeak", **changes)
            running["espeak", name] = stack.enter_context(run_live_server(espeak))
            chattts = Settings(engine="chattts", model_dir=tiny_checkpoint, **changes)
            running["chattts", name] = stack.enter_context(run_live_server(chattts, engine=factory))
        yield running


async def transcript(server: LiveServer, *, contexts: int = 2) -> list[Any]:
    """Everything the server sends for ``contexts`` contexts on one socket (seeded,
    timestamps on), in order: JSON events parsed (ready without its session id), binary
    frames as bytes; plus the socket's wire counters read before it closes."""
    received: list[Any] = []
    async with connect(server.ws_url, subprotocols=[p.SUBPROTOCOL], max_size=None) as ws:
        ready = json.loads(await ws.recv())
        ready.pop("session_id")
        received.append(ready)
        for index in range(contexts):
            context_id = f"c{index}"
            await ws.send(json.dumps({"type": "start", "context_id": context_id, "seed": 5,
                                      "timestamps": True}))  # fmt: skip
            for i in range(0, len(TEXT), 3):
                await ws.send(json.dumps({"type": "text", "context_id": context_id,
                                          "text": TEXT[i : i + 3]}))  # fmt: skip
            await ws.send(json.dumps({"type": "end", "context_id": context_id}))
            while True:
                message = await asyncio.wait_for(ws.recv(), TIMEOUT_S)
                if isinstance(message, bytes):
                    received.append(message)
                    continue
                event = json.loads(message)
                received.append(event)
                if event["type"] == "done":
                    break
    return received


@pytest.mark.live
@pytest.mark.parametrize("engine", ["espeak", "chattts"])
async def test_every_variant_sends_the_same_audio_and_events(
    servers: dict[tuple[str, str], LiveServer], engine: str
) -> None:
    """Direct writes and coalesced wake-ups on or off: the same messages in the same
    order, field for field for the events (segments, warnings, timestamps, done) and
    byte for byte for the fallback voice's audio frames. ChatTTS's samples depend on
    where its chunks fall, which the scheduler varies with timing, and so do its frames'
    sizes (audio is joined for a listener who is ahead): for it, each segment's run of
    frames is compared by how much audio it holds, its frames numbered in order."""
    got = {name: await transcript(servers[engine, name]) for name in VARIANTS}
    reference = got["defaults"]
    kinds = {m["type"] for m in reference if isinstance(m, dict)}
    assert {"ready", "started", "segment", "warning", "timestamps", "done"} <= kinds
    assert sum(isinstance(m, bytes) for m in reference) >= 10
    for name, messages in got.items():
        if engine == "chattts":
            messages, expected = _without_samples(messages), _without_samples(reference)
        else:
            expected = reference
        assert messages == expected, name


def _without_samples(messages: list[Any]) -> list[Any]:
    """Each run of audio frames of one stream and segment as ``(stream, segment, bytes
    of audio)``, after checking that their sequence numbers count up one by one."""
    out: list[Any] = []
    sequence: dict[int, int] = {}
    for message in messages:
        if not isinstance(message, bytes):
            out.append(message)
            continue
        stream, segment, number, pcm = p.unpack_audio_header(message)
        assert number == sequence.get(stream, 0), "frames numbered in order"
        sequence[stream] = number + 1
        last = out[-1] if out else None
        if isinstance(last, tuple) and last[:2] == (stream, segment):
            out[-1] = (stream, segment, last[2] + len(pcm))
        else:
            out.append((stream, segment, len(pcm)))
    return out


@pytest.mark.live
async def test_a_round_of_frames_goes_out_in_one_write(
    servers: dict[tuple[str, str], LiveServer],
) -> None:
    """With direct writes, the frames and events of one loop round share one write: a
    stream's messages outnumber the writes that carried them."""
    server = servers["espeak", "defaults"]
    async with connect(server.ws_url, subprotocols=[p.SUBPROTOCOL], max_size=None) as ws:
        await ws.recv()
        await ws.send(json.dumps({"type": "start", "context_id": "a", "seed": 1}))
        await ws.send(json.dumps({"type": "text", "context_id": "a", "text": TEXT}))
        await ws.send(json.dumps({"type": "end", "context_id": "a"}))
        count = 0
        while True:
            message = await asyncio.wait_for(ws.recv(), TIMEOUT_S)
            count += 1
            if isinstance(message, str) and json.loads(message)["type"] == "done":
                break
        sessions = list(server.state.sessions)  # type: ignore[attr-defined]
        wires = server.on_loop(lambda: [(s.wire.messages, s.wire.writes) for s in sessions])
    assert len(wires) == 1
    messages, writes = wires[0]
    assert messages == count + 1  # and ready
    assert writes < messages


@pytest.mark.live
async def test_through_asgi_has_no_wire(servers: dict[tuple[str, str], LiveServer]) -> None:
    """ws_direct_send false: sessions send through ASGI, one write a message."""
    server = servers["espeak", "through_asgi"]
    async with connect(server.ws_url, subprotocols=[p.SUBPROTOCOL]) as ws:
        await ws.recv()
        sessions = list(server.state.sessions)  # type: ignore[attr-defined]
        assert [s.wire.direct for s in sessions] == [False]


# --- framing and encoding, without a server --------------------------------------------


@pytest.mark.parametrize("length", [0, 1, 125, 126, 127, 65535, 65536, 70000])
@pytest.mark.parametrize("opcode", [Opcode.TEXT, Opcode.BINARY])
def test_frame_header_reads_back_as_one_whole_frame(length: int, opcode: Opcode) -> None:
    """A header and its payload parse, as a client parses them, into one final,
    unmasked frame of that opcode and payload (RFC 6455's three length forms)."""
    payload = bytes(i % 251 for i in range(length))
    reader = StreamReader()
    reader.feed_data(frame_header(opcode.value, length) + payload)
    reader.feed_eof()
    parser = Frame.parse(reader.read_exact, mask=False)
    try:
        next(parser)
    except StopIteration as done:
        frame = done.value
    else:
        pytest.fail("the frame did not parse from the bytes given")
    assert (frame.opcode, frame.fin, bytes(frame.data)) == (opcode, True, payload)


EVENTS = [
    p.Ready(session_id="s", engine="chattts", sample_rate=24000, limits={"max_contexts": 8}),
    p.Done(
        context_id="a", stream=1, segments=2, audio_samples=48000, audio_ms=2000.0, cancelled=False
    ),
    p.SegmentEvent(
        context_id="a",
        stream=1,
        index=0,
        text="你好，",
        spoken="你好，",
        start_char=0,
        end_char=3,
        audio_start_sample=0,
        audio_start_ms=0.0,
    ),
    p.removed_warning("a", [Removal(2, "🙂", "unspeakable")]),
    p.ErrorEvent(context_id=None, code="busy", message="try later", retry_after_ms=500),
    p.SegmentEvent(
        context_id="a",
        stream=1,
        index=0,
        text="a\ud800b",
        spoken="ab",
        start_char=0,
        end_char=3,
        audio_start_sample=0,
        audio_start_ms=0.5,
    ),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_encode_event_is_the_same_json_as_to_json(event: p.ServerMessage) -> None:
    """An event encoded for the wire reads back as the object ``to_json`` gives, a lone
    surrogate included (escaped, as to_json does), and is valid UTF-8."""
    encoded = encode_event(event)
    assert json.loads(encoded.decode("utf-8")) == json.loads(event.to_json())


# --- the hand-over from the engine thread ----------------------------------------------


def _jobs(loop: asyncio.AbstractEventLoop, handoff: Handoff, n: int) -> list[Job]:
    from server.engines.base import SynthesisRequest, VoiceSpec

    request = SynthesisRequest("你好", VoiceSpec())
    return [
        Job(request, loop, handoff, deadline=0.0, order=i, playing=False, on_end=lambda j: None)
        for i in range(n)
    ]


@pytest.mark.parametrize("coalesce", [True, False])
async def test_rounds_flushed_while_the_loop_is_busy_share_one_wakeup(coalesce: bool) -> None:
    """Rounds flushed by another thread while the loop is busy reach their jobs in order
    with one wake-up (coalesced) or one per round (not)."""
    loop = asyncio.get_running_loop()
    handoff = Handoff(coalesce=coalesce)
    jobs = _jobs(loop, handoff, 3)

    def engine_rounds() -> None:
        for round_index in range(5):
            for job in jobs:
                job.deliver(round_index)
            handoff.flush()

    thread = threading.Thread(target=engine_rounds)
    thread.start()
    thread.join(TIMEOUT_S)  # the loop is blocked here: nothing is handed over yet
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert handoff.wakeups == (1 if coalesce else 5)
    for job in jobs:
        assert job.handed_over == list(range(5))
