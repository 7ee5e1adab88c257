"""Three replicas behind the shipped HAProxy configuration: how streams spread, and a full
replica's refusal retried elsewhere by the balancer itself."""

from __future__ import annotations

import asyncio
import contextlib
import re
from pathlib import Path

import pytest
from chattts_client import BusyError, ContextResult, StreamClient

from tests.fleet.fleet import Fleet, http_get, requires_fleet, run_fleet

pytestmark = [requires_fleet, pytest.mark.slow, pytest.mark.live]

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


async def test_a_full_replica_is_skipped_and_busy_comes_only_when_all_are_full(
    tmp_path: Path,
) -> None:
    """Replicas capped at 2, 4 and 4 streams: ten streams open through the balancer with
    no refusal and no client retry, the full replica's refusals retried by the balancer
    itself; the eleventh is refused busy with the replicas' retry_after_ms."""
    caps = (2, 4, 4)
    flags = [["--max-streams", str(cap), "--busy-retry-after-ms", "700"] for cap in caps]
    with run_fleet(3, tmp_path, extra_args=flags) as fleet:
        async with contextlib.AsyncExitStack() as held:
            for seed in range(sum(caps)):
                tts = await held.enter_async_context(StreamClient.connect(fleet.ws_url))
                await tts.open(seed=seed, attempts=1)
            admitted = [gauge(fleet, i, "tts_admitted_streams") for i in range(3)]
            refused = [refusals(fleet, i) for i in range(3)]
            with pytest.raises(BusyError) as full:
                async with StreamClient.connect(fleet.ws_url):
                    pass
        # Room again once the streams end.
        async with StreamClient.connect(fleet.ws_url) as tts:
            await tts.open(seed=99, attempts=1)
    assert admitted == list(caps)
    assert refused[0] >= 1, "the capped replica was never asked while full"
    assert (full.value.status_code, full.value.retry_after_ms) == (503, 700)


def refusals(fleet: Fleet, i: int) -> float:
    """WebSocket upgrades replica ``i`` refused as busy."""
    _, body = http_get(fleet.replicas[i].url + "/metrics")
    found = re.search(
        r'^tts_ws_sessions_refused_total\{reason="busy"\} (\S+)$', body.decode(), re.M
    )
    return float(found.group(1)) if found else 0.0


async def test_a_replica_whose_engine_failed_to_load_gets_no_traffic(tmp_path: Path) -> None:
    """A replica whose model failed to load serves the fallback voice degraded, its /ready
    503 (--ready-when-degraded false): the balancer marks it down and every stream goes
    to the two healthy replicas."""
    failed = ["--engine", "chattts", "--model-dir", str(tmp_path / "no-model"),
              "--fallback-on-load-failure", "true", "--ready-when-degraded", "false"]  # fmt: skip
    with run_fleet(
        3, tmp_path, extra_args=[[], [], failed], wait=["ready", "ready", "up"]
    ) as fleet:
        status, body = http_get(fleet.replicas[2].url + "/ready")
        assert status == 503 and b'"degraded":true' in body
        assert fleet.balancer.server_states()[2] == "DOWN"
        async with contextlib.AsyncExitStack() as held:
            for seed in range(6):
                tts = await held.enter_async_context(StreamClient.connect(fleet.ws_url))
                await tts.open(seed=seed, attempts=1)
            sessions = [gauge(fleet, i, "tts_ws_sessions_active") for i in range(3)]
    assert sessions == [3, 3, 0]
