"""Three replicas behind the shipped HAProxy configuration: how streams spread, and a full
replica's refusal retried elsewhere by the balancer itself."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from chattts_client import ContextResult, StreamClient

from tests.fleet.fleet import Fleet, http_get, requires_fleet, run_fleet

pytestmark = [requires_fleet, pytest.mark.slow]

TIMEOUT_S = 60.0
#: An LLM's reply as it streams: a few characters at a time.
REPLY = "好的，我来介绍一下。这家店周一到周五营业，早上九点开门。周末休息。"


def gauge(fleet: Fleet, i: int, name: str) -> float:
    """A gauge from replica ``i``'s own /metrics."""
    status, body = http_get(fleet.replicas[i].url + "/metrics")
    assert status == 200
    found = re.search(rf"^{name} (\S+)$", body.decode(), re.MULTILINE)
    assert found, f"{name} not in replica {i}'s /metrics"
    return float(found.group(1))


async def speak_like_an_llm(
    url: str, seed: int, hold: asyncio.Event, opened: list[int]
) -> ContextResult:
    """One stream: open, send the reply in small deltas, wait for ``hold``, end, collect."""
    async with StreamClient.connect(url) as tts:
        context = await tts.open(seed=seed)
        opened.append(seed)
        for start in range(0, len(REPLY), 3):
            await tts.send_text(REPLY[start : start + 3], context)
            await asyncio.sleep(0.03)
        await hold.wait()
        await tts.end(context)
        return await tts.collect(context, timeout_s=TIMEOUT_S)


async def test_thirty_streams_spread_over_three_replicas(tmp_path: Path) -> None:
    """30 LLM-like streams through the balancer: each replica holds 10 ± 3 of them at
    once, and every stream is spoken to its end without an error."""
    with run_fleet(3, tmp_path) as fleet:
        hold, opened = asyncio.Event(), []
        streams = [
            asyncio.create_task(speak_like_an_llm(fleet.ws_url, seed, hold, opened))
            for seed in range(30)
        ]
        async with asyncio.timeout(TIMEOUT_S):
            while len(opened) < 30:
                await asyncio.sleep(0.05)
        held = [await asyncio.to_thread(gauge, fleet, i, "tts_active_streams") for i in range(3)]
        hold.set()
        results = await asyncio.gather(*streams)
    assert sum(held) == 30 and all(7 <= n <= 13 for n in held), held
    for result in results:
        assert result.errors == [] and result.done is not None and result.frames
        assert "".join(s["text"] for s in result.segments) == REPLY
