"""Chunks handed over together reach the speech path as one: a job's (the engine ran
ahead of the event loop) and a phrase cache hit's (all ready at once), up to
``join_samples``; nothing is waited for, and an end or an error after them still comes
after their audio. A row's chunks of one engine step are handed over as one already."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from harness.live import TIMEOUT_S
from server.engines.base import SynthesisRequest, VoiceSpec
from server.engines.interleave import Interleaver
from server.metrics import Metrics
from server.runtime.fallback import FallbackVoice
from server.runtime.jobs import FELL_BACK, Handoff, Job
from server.runtime.phrase_cache import CachedJob
from server.runtime.phrase_store import CachedPhrase
from server.runtime.scheduler import Scheduler
from streaming.policy import BatchSettings, StepCosts

CHUNK = 2400  # 100 ms at 24 kHz


def make_job() -> tuple[Job, Handoff]:
    handoff = Handoff()
    job = Job(SynthesisRequest("一句话。", VoiceSpec(seed=1)), asyncio.get_running_loop(),
              handoff, deadline=0.0, order=0, playing=False, on_end=lambda job: None)  # fmt: skip
    return job, handoff


def chunks(count: int, start: int = 0) -> list[np.ndarray]:
    return [np.full(CHUNK, start + i, np.float32) for i in range(count)]


async def hand_over(handoff: Handoff) -> None:
    handoff.flush()
    await asyncio.sleep(0)  # the loop runs the hand-over


async def handed_over_together(
    count: int, join_samples: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``count`` chunks and the job's end handed over at once: the chunks sent, and the
    chunks the job gives with ``join_samples``."""
    job, handoff = make_job()
    sent = chunks(count)
    for chunk in sent:
        job.add_audio(chunk)
    job.end()
    await hand_over(handoff)
    return sent, [chunk async for chunk in job.chunks(TIMEOUT_S, join_samples=join_samples)]


@pytest.mark.parametrize(("join_samples", "sizes"), [
    (0, [CHUNK] * 7),
    (4 * CHUNK, [4 * CHUNK, 3 * CHUNK]),
    (3 * CHUNK + 1, [4 * CHUNK, 3 * CHUNK]),  # until it holds join_samples
    (100 * CHUNK, [7 * CHUNK]),
])  # fmt: skip
async def test_chunks_handed_over_together_are_joined(join_samples: int, sizes: list[int]) -> None:
    sent, got = await handed_over_together(7, join_samples)
    assert [chunk.size for chunk in got] == sizes
    assert np.array_equal(np.concatenate(got), np.concatenate(sent))


async def test_a_chunk_is_not_held_for_more_and_an_error_comes_after_the_audio() -> None:
    job, handoff = make_job()
    got: list[int] = []
    first = chunks(1)[0]
    job.add_audio(first)
    await hand_over(handoff)
    stream = job.chunks(TIMEOUT_S, join_samples=10 * CHUNK)
    assert (await anext(stream)).size == CHUNK  # alone: nothing else was there
    for chunk in chunks(3, start=1):
        job.add_audio(chunk)
    job.end(RuntimeError("the engine failed"))
    await hand_over(handoff)
    with pytest.raises(RuntimeError, match="the engine failed"):
        async for chunk in stream:
            got.append(int(chunk[0]))
            assert chunk.size == 3 * CHUNK
    assert got == [1]  # the three chunks, joined, before the error


async def test_the_fallback_mark_is_not_joined_over() -> None:
    job, handoff = make_job()
    job.deliver(FELL_BACK)
    for chunk in chunks(2):
        job.add_audio(chunk)
    job.end()
    await hand_over(handoff)
    got = [chunk.size async for chunk in job.chunks(TIMEOUT_S, join_samples=10 * CHUNK)]
    assert got == [2 * CHUNK] and job.fell_back


@pytest.mark.parametrize(("join_samples", "sizes"), [
    (0, [CHUNK] * 5),
    (2 * CHUNK, [2 * CHUNK, 2 * CHUNK, CHUNK]),
    (2 * CHUNK + 1, [2 * CHUNK, 2 * CHUNK, CHUNK]),  # a hit's are joined up to it, no more
    (5 * CHUNK, [5 * CHUNK]),
])  # fmt: skip
async def test_a_phrase_cache_hit_is_joined_up_to_join_samples(
    join_samples: int, sizes: list[int]
) -> None:
    kept = chunks(5)
    hit = CachedJob(CachedPhrase(tuple(kept)))
    got = [chunk async for chunk in hit.chunks(TIMEOUT_S, join_samples=join_samples)]
    assert [chunk.size for chunk in got] == sizes
    assert np.array_equal(np.concatenate(got), np.concatenate(kept))


async def test_a_lone_chunk_before_its_end_is_passed_on_as_it_is() -> None:
    """A segment's last chunk, its end queued behind it: nothing joins it, so it reaches
    the speech path itself, not a copy (the same array object)."""
    sent, got = await handed_over_together(3, 2 * CHUNK)
    assert [chunk.size for chunk in got] == [2 * CHUNK, CHUNK]
    assert got[1] is sent[2]
    assert np.array_equal(np.concatenate(got), np.concatenate(sent))


class _Chunks:
    """An engine that interleaves and makes ``count`` chunks at once (free: a 1 s slice
    takes them all in one step), each a run of its index."""

    name = "chunks"
    sample_rate_hz = 24_000
    interleaves = True

    def __init__(self, count: int) -> None:
        self.count = count

    def synthesize(self, request: SynthesisRequest, should_stop: object) -> object:
        return iter(chunks(self.count))


async def test_a_steps_chunks_reach_the_job_as_one_and_each_late_one_is_a_miss() -> None:
    """The scheduler hands a row's chunks of one step over together (one item, the same
    samples in order), and counts a deadline miss for each chunk whose listener had run
    dry before it, as it did handing them over one by one."""
    loop = asyncio.get_running_loop()
    metrics, handoff = Metrics(), Handoff()
    engine = _Chunks(5)
    scheduler = Scheduler(
        Interleaver(engine, 1.0),  # type: ignore[arg-type]
        max_rows=4,
        rate_hz=24_000,
        policy=BatchSettings(max_batch=1, prefills_per_step=4),
        costs=StepCosts(),
        metrics=metrics,
        handoff=handoff,
        fallback=FallbackVoice(None, engine, metrics, handoff),  # type: ignore[arg-type]
        progress=lambda: None,
    )
    # Its listener is playing and ran dry 0.205 s ago: the first three chunks (0-0.3 s of
    # its audio, due 0.205, 0.105 and 0.005 s ago) come late, the last two in time
    # (unless this test stalls for ~0.1 s).
    job = Job(SynthesisRequest("一句话。", VoiceSpec(seed=1)), loop, handoff,
              deadline=time.monotonic() - 0.205, order=0, playing=True,
              on_end=lambda job: None)  # fmt: skip
    misses = metrics.deadline_misses._value.get()
    scheduler.add(job)
    while not scheduler.idle:
        scheduler.run_once()
    await hand_over(handoff)
    audio = [item for item in job.handed_over if isinstance(item, np.ndarray)]
    assert len(audio) == 1
    assert np.array_equal(audio[0], np.concatenate(chunks(5)))
    assert job.samples == 5 * CHUNK
    assert metrics.deadline_misses._value.get() - misses == 3
