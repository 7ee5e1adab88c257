"""Drain and crash through the real balancer: three replica processes behind the shipped
HAProxy configuration, restarted in turn (SIGTERM) or killed (SIGKILL) under LLM-like
streams. Every stream's text is heard completely and in order, checked against the
input slices of its segment events; a drain repeats nothing, a crash at most the one
segment that was cut; with no replica left the client stops with ResumeError."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest
from chattts_client import ContextResult, ResumeError, ResumePolicy, StreamClient

from tests.fleet.fleet import Fleet, http_get, requires_fleet, run_fleet
from tests.spoken import heard_once, send_like_an_llm

pytestmark = [requires_fleet, pytest.mark.slow, pytest.mark.live]

TIMEOUT_S = 60.0
#: An assistant's reply: about 1.3 s of deltas, so some are always in progress.
REPLY = "好的，我来介绍一下。这家店周一到周五营业，早上九点开门。周末休息，节假日另行通知。"


def metric(fleet: Fleet, i: int, name: str) -> float:
    """A sample of replica ``i``'s own /metrics (0 when it is down)."""
    status, body = http_get(fleet.replicas[i].url + "/metrics")
    found = re.search(rf"^{name} (\S+)$".encode(), body, re.M) if status == 200 else None
    return float(found.group(1)) if found else 0.0


def active_streams(fleet: Fleet) -> list[int]:
    """Each replica's tts_active_streams (0 for one that is down)."""
    return [int(metric(fleet, i, "tts_active_streams")) for i in range(len(fleet.replicas))]


async def conversation(url: str, seed: int, until: asyncio.Event) -> list[ContextResult]:
    """One voice-bot session: replies back to back on one client until ``until``."""
    results: list[ContextResult] = []
    async with StreamClient.connect(url) as client:
        while not until.is_set():
            context = await client.start(seed=seed)
            feeding = asyncio.create_task(send_like_an_llm(client, context, REPLY))
            results.append(await client.collect(context, timeout_s=TIMEOUT_S))
            await feeding
    return results


async def under_way(
    fleet: Fleet, text: str, count: int, **connect: Any
) -> tuple[list[asyncio.Task[ContextResult]], list[int]]:
    """``count`` streams of ``text`` through the balancer, a client each (``connect``: its
    options), sent like an LLM; once a third of each has gone out, the tasks and each
    replica's active streams."""
    halfway = [asyncio.Event() for _ in range(count)]

    async def stream(seed: int) -> ContextResult:
        async with StreamClient.connect(fleet.ws_url, **connect) as client:
            context = await client.start(seed=seed)
            feeding = asyncio.create_task(
                send_like_an_llm(client, context, text, halfway=halfway[seed])
            )
            result = await client.collect(context, timeout_s=TIMEOUT_S)
            await feeding
            return result

    streams = [asyncio.create_task(stream(seed)) for seed in range(count)]
    async with asyncio.timeout(TIMEOUT_S):
        await asyncio.gather(*(event.wait() for event in halfway))
    return streams, await asyncio.to_thread(active_streams, fleet)


async def test_a_rolling_restart_under_twelve_streams_loses_and_repeats_nothing(
    tmp_path: Path,
) -> None:
    """Every replica restarted in turn (SIGTERM: it drains; then it starts again and the
    balancer sees it up) while 12 conversations speak replies back to back: each reply
    is heard completely, in order, nothing twice; the drains moved open contexts."""
    with run_fleet(3, tmp_path) as fleet:
        done = asyncio.Event()
        sessions = [asyncio.create_task(conversation(fleet.ws_url, s, done)) for s in range(12)]
        await asyncio.sleep(1.0)
        for i in range(3):
            await asyncio.to_thread(fleet.restart, i)
            await asyncio.to_thread(fleet.wait_balanced)
        done.set()
        async with asyncio.timeout(TIMEOUT_S):
            replies = [result for results in await asyncio.gather(*sessions) for result in results]
    assert len(replies) >= 12
    for result in replies:
        assert heard_once(result, REPLY) == 0
    resumed = [event for result in replies for event in result.resumed]
    assert resumed and {event["reason"] for event in resumed} == {"draining"}


async def test_a_replica_killed_mid_stream_loses_nothing(tmp_path: Path) -> None:
    """SIGKILL of the replica holding the most of 12 streams, mid-stream: its streams
    continue on the others from the segment that was cut; every stream is heard
    completely and in order, with at most that one segment twice."""
    text = REPLY * 3  # about 4 s of deltas
    with run_fleet(3, tmp_path) as fleet:
        streams, counts = await under_way(fleet, text, 12)
        victim = counts.index(max(counts))
        await asyncio.to_thread(fleet.kill, victim)
        async with asyncio.timeout(TIMEOUT_S):
            results = await asyncio.gather(*streams)
    repeats = [heard_once(result, text) for result in results]
    assert all(n <= 1 for n in repeats)
    resumed = [result for result in results if result.resumed]
    assert len(resumed) >= max(counts) > 0
    assert all(len(r.resumed) == 1 and r.resumed[0]["reason"] == "closed" for r in resumed)


async def test_with_no_replica_left_resumption_stops_with_resume_error(tmp_path: Path) -> None:
    """Every replica killed mid-stream: the client tries as its policy allows (4 tries
    within 5 s, each answered 503 by the balancer or refused) and then raises
    ResumeError naming the context and where its text stopped."""
    policy = ResumePolicy(attempts=4, within_s=5.0, backoff_s=0.2)
    with run_fleet(2, tmp_path) as fleet:
        async with StreamClient.connect(fleet.ws_url, resume=policy) as client:
            context = await client.open(seed=1)
            await client.send_text(REPLY * 3, context)
            collecting = asyncio.create_task(client.collect(context, timeout_s=TIMEOUT_S))
            await asyncio.sleep(0.3)
            for i in range(2):
                await asyncio.to_thread(fleet.kill, i)
            began = time.monotonic()
            with pytest.raises(ResumeError) as failed:
                await collecting
            waited_s = time.monotonic() - began
    error = failed.value
    assert error.code == "resume_failed" and error.context_id == context
    assert 1 <= error.body["attempts"] <= 4
    assert error.__cause__ is not None
    assert waited_s < 5.0 + TIMEOUT_S / 6


async def test_a_replica_that_stops_answering_loses_nothing(tmp_path: Path) -> None:
    """The replica holding the most of 9 streams stops answering mid-stream without
    closing anything (SIGSTOP: what a network cut looks like from both ends): each
    client's keepalive notices within three times ``keepalive_s``, the balancer's checks
    mark the replica down, and every stream continues on the others from the segment
    that was cut, heard completely and in order."""
    text = REPLY * 3
    policy = ResumePolicy(try_timeout_s=2.0)
    with run_fleet(3, tmp_path) as fleet:
        streams, counts = await under_way(fleet, text, 9, keepalive_s=0.5, resume=policy)
        victim = counts.index(max(counts))
        fleet.freeze(victim)
        frozen_at = time.monotonic()
        try:
            async with asyncio.timeout(TIMEOUT_S):
                results = await asyncio.gather(*streams)
            taken_s = time.monotonic() - frozen_at
        finally:
            await asyncio.to_thread(fleet.kill, victim)
    repeats = [heard_once(result, text) for result in results]
    assert all(n <= 1 for n in repeats)
    resumed = [result for result in results if result.resumed]
    assert len(resumed) >= max(counts) > 0
    assert all(r.resumed[0]["reason"] == "closed" for r in resumed)
    # The rest of the text (~2.6 s of deltas) plus noticing (<= 1.5 s) and moving.
    assert taken_s < 15.0
