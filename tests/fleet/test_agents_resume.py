"""The pipecat service and the LiveKit plugin through the real balancer, in their own
frameworks' classes: the replica speaking a turn drains (SIGTERM) while an LLM is still
writing it, and the turn is heard to its end, every word once, with no error."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.fleet.fleet import Fleet, requires_fleet, run_fleet
from tests.fleet.test_resume import REPLY, active_streams, metric

pytestmark = [requires_fleet, pytest.mark.slow, pytest.mark.live]

TIMEOUT_S = 60.0
#: The LLM's reply as it streams: about 3 s of 3-character tokens.
TOKENS = [(REPLY * 2)[i : i + 3] for i in range(0, len(REPLY) * 2, 3)]


async def drain_the_speaking_replica(fleet: Fleet) -> int:
    """Once a replica holds the stream, a second later (the tokens still coming), SIGTERM
    it (it drains and exits); the other one's index, where the stream must go on."""
    while sum(counts := await asyncio.to_thread(active_streams, fleet)) == 0:
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)
    speaking = counts.index(1)
    await asyncio.to_thread(fleet.stop, speaking)
    return 1 - speaking


def continued_on(fleet: Fleet, i: int) -> bool:
    """Replica ``i`` took a connection and spoke segments (the rest of the turn)."""
    sessions = metric(fleet, i, "tts_ws_sessions_total")
    return sessions >= 1 and metric(fleet, i, "tts_segments_total") > 0


async def test_a_pipecat_turn_continues_on_another_replica_through_a_drain(
    tmp_path: Path,
) -> None:
    """pipecat's pipeline (run_test) with LLM tokens arriving over 3 s: the replica
    speaking the turn drains halfway; the turn goes on elsewhere, one TTSStoppedFrame, no
    error, and its word timestamps (pipecat's transcript) give the reply exactly."""
    pytest.importorskip("pipecat")
    from chattts_client.pipecat import ChatTTSStreamTTSService
    from pipecat.frames.frames import (
        ErrorFrame,
        Frame,
        LLMFullResponseEndFrame,
        LLMFullResponseStartFrame,
        LLMTextFrame,
        TTSAudioRawFrame,
        TTSStoppedFrame,
        TTSTextFrame,
    )
    from pipecat.tests.utils import SleepFrame, run_test

    frames: list[Frame] = [LLMFullResponseStartFrame()]
    for token in TOKENS:
        frames += [LLMTextFrame(token), SleepFrame(0.1)]
    frames += [LLMFullResponseEndFrame(), SleepFrame(3.0)]
    with run_fleet(2, tmp_path) as fleet:
        drainer = asyncio.create_task(drain_the_speaking_replica(fleet))
        tts = ChatTTSStreamTTSService(url=fleet.ws_url, sample_rate=24000)
        async with asyncio.timeout(TIMEOUT_S):
            down, up = await run_test(tts, frames_to_send=frames)
            other = await drainer
        assert await asyncio.to_thread(continued_on, fleet, other)
    assert not [f for f in up if isinstance(f, ErrorFrame)]
    assert [type(f) for f in down].count(TTSStoppedFrame) == 1
    assert any(isinstance(f, TTSAudioRawFrame) for f in down)
    assert "".join(f.text for f in down if isinstance(f, TTSTextFrame)) == "".join(TOKENS)


async def test_a_livekit_stream_continues_on_another_replica_through_a_drain(
    tmp_path: Path,
) -> None:
    """A LiveKit SynthesizeStream fed LLM tokens over 3 s: the replica speaking it drains
    halfway; the stream goes on elsewhere and ends normally, its aligned transcript the
    reply exactly (every word once)."""
    pytest.importorskip("livekit.agents")
    from chattts_client.livekit import TTS

    with run_fleet(2, tmp_path) as fleet:
        drainer = asyncio.create_task(drain_the_speaking_replica(fleet))
        tts = TTS(url=fleet.ws_url)
        async with asyncio.timeout(TIMEOUT_S), tts.stream() as stream:

            async def feed() -> None:
                for token in TOKENS:
                    stream.push_text(token)
                    await asyncio.sleep(0.1)
                stream.end_input()

            feeder = asyncio.create_task(feed())
            events = [event async for event in stream]
            await feeder
            other = await drainer
        assert await asyncio.to_thread(continued_on, fleet, other)
    assert events and events[-1].is_final
    timed = [t for e in events for t in (e.frame.userdata.get("lk.timed_transcripts") or [])]
    assert "".join(timed) == "".join(TOKENS)
