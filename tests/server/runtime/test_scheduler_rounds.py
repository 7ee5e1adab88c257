"""A scheduler round makes no pass over every row: the rows joining and speaking are kept
as they come and go, cancels are queued by the job, and an engine that steps one row at
a time finds the most urgent through a heap. These tests hold it to what the passes
chose: the row stepped is the most urgent speaking one, and a cancel from any thread,
before or after the job is seated, ends it at the next round."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Iterator, Sequence

import pytest

from server.engines.base import BatchRow, SynthesisRequest, VoiceSpec
from server.engines.modelled import ModelledEngine
from server.metrics import Metrics
from server.runtime.fallback import FallbackVoice
from server.runtime.jobs import Handoff, Job
from server.runtime.scheduler import Scheduler
from streaming.policy import BatchSettings, StepCosts, plan_step

RATE_HZ = 24_000


class _Stub:
    name = "none"
    sample_rate_hz = RATE_HZ


class _Rig:
    def __init__(self, loop: asyncio.AbstractEventLoop, max_batch: int) -> None:
        engine = ModelledEngine(step_a_s=0.0, step_b_s=0.0, prefill_s=0.0)
        batcher = engine.batcher(64)
        assert batcher is not None
        self.loop, self.metrics, self.handoff = loop, Metrics(), Handoff()
        self.policy = BatchSettings(max_batch=max_batch, prefills_per_step=4)
        self.scheduler = Scheduler(
            batcher,
            max_rows=64,
            rate_hz=RATE_HZ,
            policy=self.policy,
            costs=StepCosts(),
            metrics=self.metrics,
            handoff=self.handoff,
            fallback=FallbackVoice(None, _Stub(), self.metrics, self.handoff),  # type: ignore[arg-type]
            progress=lambda: None,
        )
        self.ended: list[Job] = []
        self.stepped: list[tuple[list[Job], list[Job]]] = []  # (stepped, plan_step's)
        step = batcher.step

        def recording_step(rows: Sequence[BatchRow]) -> None:
            by_row = {id(row): job for job, row in self.scheduler.active.items()}
            speaking = [
                job for job, row in self.scheduler.active.items()
                if row.prefilled and not row.done and row.error is None
            ]  # fmt: skip
            expected = plan_step(speaking, time.monotonic(), RATE_HZ, self.policy)
            self.stepped.append(([by_row[id(row)] for row in rows], expected))
            step(rows)

        batcher.step = recording_step  # type: ignore[method-assign]

    def add(self, text: str, deadline: float, order: int) -> Job:
        job = Job(SynthesisRequest(text, VoiceSpec(seed=order)), self.loop, self.handoff,
                  deadline=deadline, order=order, playing=False, on_end=self.ended.append)  # fmt: skip
        self.scheduler.add(job)
        return job

    def rounds(self, limit: int = 10_000) -> Iterator[int]:
        for count in range(limit):
            if self.scheduler.idle:
                return
            self.scheduler.run_once()
            yield count
        raise AssertionError("the scheduler never went idle")


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.mark.parametrize("seed", range(5))
def test_one_row_at_a_time_steps_the_most_urgent_speaking_row(
    loop: asyncio.AbstractEventLoop, seed: int
) -> None:
    """Rows of different lengths and deadlines, joining while others speak and leaving as
    they end: every step takes the row plan_step would take out of all speaking rows."""
    rng = random.Random(seed)
    rig = _Rig(loop, max_batch=1)
    jobs: list[Job] = []

    def add() -> None:
        text = "一句话，" * rng.randint(1, 6)
        jobs.append(rig.add(text, deadline=rng.uniform(0.0, 5.0), order=len(jobs)))

    add()
    for count in rig.rounds():
        if count % 3 == 0 and len(jobs) < 24:
            add()
        if count == 40 and jobs:
            rng.choice(jobs).cancel()
    assert len(rig.stepped) > 100
    for stepped, expected in rig.stepped:
        assert len(stepped) == 1
        assert stepped == expected
    assert sorted(job.order for job in rig.ended) == list(range(24))


def test_batched_steps_take_every_speaking_row(loop: asyncio.AbstractEventLoop) -> None:
    rig = _Rig(loop, max_batch=8)
    for order in range(20):
        rig.add("一句话，" * (1 + order % 4), deadline=order * 0.1, order=order)
    list(rig.rounds())
    assert rig.stepped
    for stepped, expected in rig.stepped:
        assert stepped == expected and len(stepped) <= 8
    assert len(rig.ended) == 20


@pytest.mark.parametrize("max_batch", [1, 8])
def test_a_cancel_from_any_thread_ends_the_job_at_the_next_round(
    loop: asyncio.AbstractEventLoop, max_batch: int
) -> None:
    rig = _Rig(loop, max_batch=max_batch)
    long = "很长的一句话，说了很久很久。" * 20
    waiting = rig.add(long, deadline=0.0, order=0)
    waiting.cancel()  # before it is seated
    speaking = rig.add(long, deadline=0.0, order=1)
    other = rig.add(long, deadline=0.0, order=2)
    for _ in range(3):
        rig.scheduler.run_once()
    assert waiting in rig.ended and waiting not in rig.scheduler.active
    assert speaking in rig.scheduler.active and rig.scheduler.active[speaking].prefilled
    thread = threading.Thread(target=speaking.cancel)
    thread.start()
    thread.join()
    rig.scheduler.run_once()
    assert speaking in rig.ended and speaking not in rig.scheduler.active
    assert other in rig.scheduler.active and other not in rig.ended
    assert rig.metrics.jobs_cancelled._value.get() == 2
    list(rig.rounds())
    assert other in rig.ended
    other.cancel()  # after it left: nothing to this scheduler
    assert not rig.scheduler._cancels


def test_each_step_counts_the_audio_its_rows_made_and_only_it(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """The step-cost fit learns how much audio a row-step makes: each step reports
    exactly the samples its rows made in it (most rows make none in a step; rows end
    and others join meanwhile)."""
    rig = _Rig(loop, max_batch=8)
    made: list[int] = []
    step = rig.scheduler.batcher.step

    def counting_step(rows: Sequence[BatchRow]) -> None:
        step(rows)
        made.append(sum(chunk.size for row in rows for chunk in row.chunks))

    rig.scheduler.batcher.step = counting_step  # type: ignore[method-assign]
    observed: list[float] = []
    observe = rig.scheduler.costs.observe

    def recording(batch: int, seconds: float, *, audio_s: float) -> None:
        observed.append(audio_s)
        observe(batch, seconds, audio_s=audio_s)

    rig.scheduler.costs.observe = recording  # type: ignore[method-assign]
    for order in range(12):
        rig.add("一句话，" * (1 + order % 5), deadline=order * 0.1, order=order)
    list(rig.rounds())
    assert len(observed) == len(made) > 20 and sum(made) > 0
    assert observed == [samples / RATE_HZ for samples in made]
    assert len(rig.ended) == 12
