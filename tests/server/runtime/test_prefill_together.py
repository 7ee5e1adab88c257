"""Prompts of joining rows in one forward (``prefill_together``): as many a round as the
last rounds showed fit a step's audio, the most urgent first; a row that cannot join
fails alone.

The scheduler's clock for what work costs is a fake one that the batcher below moves
by what its forwards and steps are given to cost: the decisions are tested exactly,
however busy the machine that runs them."""

from __future__ import annotations

import asyncio
import time
import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from server.engines.base import BatchRow, SynthesisRequest, VoiceSpec
from server.engines.modelled import ModelledEngine
from server.metrics import Metrics
from server.runtime.fallback import FallbackVoice
from server.runtime.jobs import Handoff, Job
from server.runtime.scheduler import Scheduler
from streaming.policy import BatchSettings, StepCosts

RATE_HZ = 24_000
TEXT = "一句很长的话，说了很久很久。" * 4


class _Stub:
    name = "none"
    sample_rate_hz = RATE_HZ


class Clock:
    """``perf_counter`` for the scheduler: seconds moved on by the work done."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class Batcher:
    """The modelled engine's batcher on a :class:`Clock`: a step costs 1 ms, a forward of
    n prompts ``prefill_s + per_prompt_s * n``; each call to ``prefill`` and
    ``prefill_many`` recorded (the rows' orders), and rows of some orders refused."""

    def __init__(
        self,
        prefill_s: float,
        per_prompt_s: float = 0.0,
        refuse: Sequence[int] = (),
        fail: bool = False,
    ) -> None:
        engine = ModelledEngine(step_a_s=0.001, step_b_s=0.0, prefill_s=prefill_s)
        #: A forward of n prompts costs prefill_s + per_prompt_s * n.
        self.prefill_s, self.per_prompt_s = prefill_s, per_prompt_s
        inner = engine.batcher(64)
        assert inner is not None
        self.inner = inner
        self.max_batch = 64
        self.refuse = set(refuse)
        self.fail = fail
        self.together: list[list[int]] = []
        self.alone: list[int] = []
        self.closed: list[int] = []
        #: Seconds added to the next forward only (a cold first one).
        self.once_s = 0.0
        #: Seconds added to each forward in turn, over and over (a busy host's waits).
        self.noise_s: Sequence[float] = (0.0,)
        self._forwards = 0
        self.clock = Clock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def close(self, row: BatchRow) -> None:
        self.closed.append(row.request.voice.seed or 0)

    def prefill(self, row: BatchRow) -> None:
        self.alone.append(row.request.voice.seed or 0)
        self.clock.now += self.prefill_s + self.per_prompt_s
        self.inner._advance([row])

    def step(self, rows: Sequence[BatchRow]) -> None:
        self.clock.now += 0.001
        self.inner._advance(rows)

    def prefill_many(self, rows: list[BatchRow]) -> None:
        self.together.append([row.request.voice.seed or 0 for row in rows])
        if self.fail:
            raise RuntimeError("the forward failed")
        noise_s = self.noise_s[self._forwards % len(self.noise_s)]
        self._forwards += 1
        self.clock.now += self.prefill_s + self.per_prompt_s * len(rows) + self.once_s + noise_s
        self.once_s = 0.0
        for row in rows:
            if row.request.voice.seed in self.refuse:
                row.error = RuntimeError("no room in the batch's KV cache for this segment")
        self.inner._advance([row for row in rows if row.error is None])


@contextmanager
def scheduler(batcher: Batcher, *, together: bool = True, limit: int = 8) -> Iterator[Any]:
    loop = asyncio.new_event_loop()
    clock = types.SimpleNamespace(perf_counter=batcher.clock.perf_counter, monotonic=time.monotonic)
    patch = pytest.MonkeyPatch()
    patch.setattr("server.runtime.scheduler.time", clock)
    try:
        metrics, handoff = Metrics(), Handoff()
        policy = BatchSettings(max_batch=64, prefills_per_step=limit, prefill_together=together)
        made = Scheduler(
            batcher,  # type: ignore[arg-type]
            max_rows=64,
            rate_hz=RATE_HZ,
            policy=policy,
            costs=StepCosts(),
            metrics=metrics,
            handoff=handoff,
            fallback=FallbackVoice(None, _Stub(), metrics, handoff),  # type: ignore[arg-type]
            progress=lambda: None,
        )
        jobs: list[Job] = []

        def add(order: int, deadline: float = 0.0) -> Job:
            job = Job(SynthesisRequest(TEXT, VoiceSpec(seed=order)), loop, handoff,
                      deadline=deadline, order=order, playing=False, on_end=lambda job: None)  # fmt: skip
            made.add(job)
            jobs.append(job)
            return job

        made.add_job = add
        made.jobs = jobs
        yield made
    finally:
        patch.undo()
        loop.close()


def forwards(s: Any, batcher: Batcher, jobs: int = 0, rounds: int = 0) -> list[int]:
    """Add ``jobs`` joining rows, run ``rounds`` rounds: the size of every forward so far."""
    for order in range(len(s.jobs), len(s.jobs) + jobs):
        s.add_job(order)
    for _ in range(rounds):
        s.run_once()
    return [len(call) for call in batcher.together]


def test_a_burst_joins_in_growing_forwards_up_to_the_limit() -> None:
    """Twenty rows joining at once, prompts cheap beside a step's audio: one forward a
    round of 1, 2, 4, then 8 (prefills_per_step), never one prompt alone after the first."""
    batcher = Batcher(prefill_s=0.0005)
    with scheduler(batcher) as s:
        assert forwards(s, batcher, jobs=20, rounds=5) == [1, 2, 4, 8, 5]
        assert batcher.alone == []
        assert sorted(seed for call in batcher.together for seed in call) == list(range(20))
        assert all(row.prefilled for row in s.active.values())


def test_the_most_urgent_rows_join_first() -> None:
    """Rows whose listeners need audio sooner (earlier deadlines) are in the first forwards."""
    batcher = Batcher(prefill_s=0.0005)
    with scheduler(batcher, limit=4) as s:
        for order in range(8):
            s.add_job(order, deadline=100.0 - order)  # the last added is the most urgent
        for _ in range(4):
            s.run_once()
        joined = [seed for call in batcher.together for seed in call]
        assert joined[:3] == [7, 6, 5] and sorted(joined) == list(range(8))


def test_a_forward_that_costs_what_a_lone_prompt_does_grows_past_the_budget() -> None:
    """Forwards of 30 ms whatever their rows (a step makes 21.3 ms of audio: over budget
    from the first), as on a GPU: the first prompt runs anyway and the others ride along,
    so the size still grows to the limit."""
    batcher = Batcher(prefill_s=0.03)
    with scheduler(batcher) as s:
        assert forwards(s, batcher, jobs=16, rounds=5) == [1, 2, 4, 8, 1]


def test_forwards_whose_prompts_each_cost_shrink() -> None:
    """Prompts of 12 ms each in a forward (as on a CPU): one fits the round's 20 ms,
    two do not, so the size goes back to one after each try of two; after cheap forwards
    grew it to 8, forwards that cost by the prompt halve it each round back to one."""
    batcher = Batcher(prefill_s=0.0, per_prompt_s=0.012)
    with scheduler(batcher) as s:
        assert forwards(s, batcher, jobs=8, rounds=5) == [1, 2, 1, 2, 1]
    batcher = Batcher(prefill_s=0.0005)
    with scheduler(batcher) as s:
        forwards(s, batcher, jobs=40, rounds=3)
        batcher.prefill_s, batcher.per_prompt_s = 0.0, 0.012
        assert forwards(s, batcher, rounds=4) == [1, 2, 4, 8, 4, 2, 1]


def test_one_slow_forward_does_not_let_dear_prompts_pile_up() -> None:
    """A cold first forward of 150 ms, then prompts of 12 ms each: the cold size's cost
    gives way to the next larger size's (a smaller forward dearer than a larger one says
    nothing of what a prompt adds), so the size never climbs past what the next ones
    cost (no forward of 8 prompts, 96 ms, against a round of 20 ms)."""
    batcher = Batcher(prefill_s=0.0, per_prompt_s=0.012)
    batcher.once_s = 0.15
    with scheduler(batcher) as s:
        sizes = forwards(s, batcher, jobs=24, rounds=8)
    assert max(sizes) <= 4 and sizes[-4:].count(1) >= 2, sizes


#: Milliseconds a busy host adds to forwards, in turn: waits for the GIL or for a core.
WAITS_MS = (0, 4, 1, 6, 0, 3, 8, 2, 0, 5, 1, 0, 7, 2, 0, 3)


@pytest.mark.parametrize(("prefill_ms", "arriving"), [(25, 6), (25, 7), (30, 7)])
def test_timing_noise_does_not_read_as_dear_prompts(prefill_ms: float, arriving: int) -> None:
    """Forwards over the round's budget whatever they hold (prompts nearly free, as on a
    GPU), timed with up to 8 ms of waits on a busy host, and a burst of 6 or 7 rows
    joining each round for 60 rounds (each leaving once it spoke): forwards grow to
    keep up, and every row joins. Judging from single forwards read a wait as prompts
    costing milliseconds and held forwards at one to four while the burst piled up."""
    batcher = Batcher(prefill_s=prefill_ms / 1000, per_prompt_s=0.00002)
    batcher.noise_s = [ms / 1000 for ms in WAITS_MS]
    with scheduler(batcher) as s:
        for _ in range(60):
            sizes = forwards(s, batcher, jobs=arriving, rounds=1)
            for job in list(s._speaking):
                job.cancel()  # its segment said: the row leaves at the next round
        behind = len(s.waiting) + len(s._joining)
        assert behind <= 8, (behind, sizes)  # at most one forward's worth left
        joined = [seed for call in batcher.together for seed in call]
        assert len(joined) == len(set(joined)) == 60 * arriving - behind
        assert max(sizes) == 8


def test_off_the_prompts_run_one_at_a_time() -> None:
    """prefill_together off: the batcher's prefill, one row each, even though it could."""
    batcher = Batcher(prefill_s=0.0005)
    with scheduler(batcher, together=False, limit=4) as s:
        for order in range(4):
            s.add_job(order)
        s.run_once()
        assert batcher.together == [] and batcher.alone == [0, 1, 2, 3]


@pytest.mark.parametrize("fail", [False, True])
def test_a_row_that_cannot_join_fails_alone(fail: bool) -> None:
    """A row refused by the batcher (no room) leaves, ended with its error, while the
    other of its forward joins; a forward that fails as a whole fails each of its rows,
    and none of the rows already speaking."""
    batcher = Batcher(prefill_s=0.0005, refuse=[1])
    with scheduler(batcher) as s:
        first = s.add_job(0)
        s.run_once()  # a forward of one row: it speaks
        others = [s.add_job(order) for order in (1, 2)]
        batcher.fail = fail
        s.run_once()  # a forward of the two others
        assert batcher.together == [[0], [1, 2]]
        # A forward that failed (at once, here) says nothing of what prompts cost.
        assert (2 in s._prompt_costs.seconds) is not fail
        assert others[0] not in s.active and others[0]._ended
        assert batcher.closed == ([1, 2] if fail else [1])  # their rows given back
        assert (others[1] in s.active) is not fail
        assert first in s.active and s.active[first].prefilled and not first._ended
