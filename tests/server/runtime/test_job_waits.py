"""A job's wait for audio: one budget over all its waits, checked by one timer."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from server.engines.base import SynthesisRequest, VoiceSpec
from server.runtime.jobs import Handoff, Job
from streaming.errors import SynthesisTimeout


def a_job() -> Job:
    return Job(
        SynthesisRequest("一句话。", VoiceSpec(seed=1)),
        asyncio.get_running_loop(),
        Handoff(),
        deadline=0.0,
        order=0,
        playing=False,
        on_end=lambda job: None,
    )


async def test_a_job_that_gets_no_audio_times_out_and_is_cancelled() -> None:
    job = a_job()
    started = asyncio.get_running_loop().time()
    with pytest.raises(SynthesisTimeout, match=r"0\.2 s"):
        async for _ in job.chunks(0.2):
            pass
    waited = asyncio.get_running_loop().time() - started
    assert 0.19 <= waited < 1.0
    assert job.cancelled and job.is_cancelled()
    assert job._timer is None  # nothing left armed on the loop


async def test_the_budget_counts_only_the_waits() -> None:
    """Chunks 0.1 s apart, a caller that takes 0.3 s over each: 0.25 s of budget covers
    waits of ~0.1 s and ~0 s (the chunks queued while the caller was busy), however long
    the caller's own time; a third wait with no audio uses up the rest."""
    job = a_job()
    received = []

    async def engine() -> None:
        for _ in range(3):
            await asyncio.sleep(0.1)
            job.receive(np.zeros(240, dtype=np.float32))

    feeding = asyncio.create_task(engine())
    with pytest.raises(SynthesisTimeout):
        async for chunk in job.chunks(0.25):
            received.append(chunk.size)
            await asyncio.sleep(0.3)
    await feeding
    assert received == [240, 240, 240]


async def test_audio_queued_as_the_budget_runs_out_is_audio_not_a_timeout() -> None:
    """The timer firing in the loop turn that handed a chunk over (the waiting consumer
    not yet woken) finds the wait over: the chunk comes, and the job ends as the engine
    ends it, with no timeout queued behind the chunk."""
    job = a_job()
    got: list[int] = []

    async def consume() -> None:
        async for chunk in job.chunks(30.0):
            got.append(chunk.size)

    consumer = asyncio.create_task(consume())
    await asyncio.sleep(0.05)  # waiting, its timer armed
    assert job._timer is not None
    job.receive(np.zeros(480, dtype=np.float32))
    job._waited_s = 60.0  # the budget spent, as the timer fires in this turn
    job._wait_checked()
    job.abandon()  # the engine's end
    await asyncio.wait_for(consumer, 5)
    assert got == [480]


async def test_a_waiting_consumer_takes_a_hand_over_whole_and_in_order() -> None:
    """Chunks handed over in one turn while the consumer waits reach it as one joined
    chunk (up to ``join_samples``), in order, then the item that is not audio ends it."""
    job = a_job()
    got: list[list[float]] = []

    async def consume() -> None:
        async for chunk in job.chunks(30.0, join_samples=4):
            got.append(chunk.tolist())

    consumer = asyncio.create_task(consume())
    await asyncio.sleep(0.01)  # waiting for its first item
    for value in (1.0, 2.0, 3.0, 4.0, 5.0):
        job.receive(np.full(2, value, dtype=np.float32))
    job.receive(RuntimeError("the engine failed"))
    with pytest.raises(RuntimeError, match="failed"):
        await asyncio.wait_for(consumer, 5)
    assert got == [[1, 1, 2, 2], [3, 3, 4, 4], [5, 5]]
    assert job.handed_over == []


async def test_a_consumer_cancelled_while_waiting_leaves_the_job_clean() -> None:
    """Cancelling the task that waits for audio ends its wait: nothing armed, and later
    audio is kept for whoever iterates next, not lost to a dead wait."""
    job = a_job()

    async def consume() -> None:
        async for _ in job.chunks(30.0):
            pass

    consumer = asyncio.create_task(consume())
    await asyncio.sleep(0.01)
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    assert job._timer is None and job._waiter is None
    job.receive(np.zeros(3, dtype=np.float32))
    assert [item.size for item in job.handed_over] == [3]  # type: ignore[attr-defined]
