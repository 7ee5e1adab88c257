"""The scheduler: which segments the engine works on, one round at a time.

It owns the waiting jobs and the rows seated in the engine's batcher (a batching
engine's own, or an :class:`~server.engines.interleave.Interleaver` over one that does
not) and runs the policy of :mod:`streaming.policy` on them. A round
(:meth:`Scheduler.run_once`) reads as: let cancelled rows leave, seat waiting jobs
(most urgent first, up to ``max_rows``), prefill at most ``prefills_per_step`` joining
rows (their prompts in one forward when the batcher can: ``prefill_together``), step
the rows the plan picks, deliver what they made, and hand it all to the event loop in
one wake-up. Everything here runs on the engine thread.
"""

from __future__ import annotations

import collections
import heapq
import logging
import time
from collections.abc import Callable

import numpy as np

from server.engines.base import Batcher, BatchRow, WordMarks
from server.metrics import Metrics
from server.runtime.fallback import FallbackVoice
from server.runtime.jobs import Handoff, Job, engine_stopped
from streaming.policy import (
    BatchSettings,
    PromptCosts,
    StepCosts,
    first_by,
    planned_step,
    seat,
    urgency,
)

__all__ = ["Scheduler"]

logger = logging.getLogger(__name__)

#: Prompts ride along in a forward, whatever the budget, while doubling them would add
#: at most this share of the forward's fixed cost.
RIDE_ALONG_SHARE = 0.25


class Scheduler:
    """Waiting jobs and active rows of one engine's batcher (see the module docstring)."""

    def __init__(
        self,
        batcher: Batcher,
        *,
        max_rows: int,
        rate_hz: int,
        policy: BatchSettings,
        costs: StepCosts,
        metrics: Metrics,
        handoff: Handoff,
        fallback: FallbackVoice,
        progress: Callable[[], None],
    ) -> None:
        self.batcher = batcher
        self.max_rows = max_rows
        self.rate_hz = rate_hz
        self.policy = policy
        self.costs = costs
        self.metrics = metrics
        self.handoff = handoff
        self.fallback = fallback
        self._progress = progress
        self.waiting: list[Job] = []
        #: Jobs seated in the batcher, each with its row there.
        self.active: dict[Job, BatchRow] = {}
        # The active jobs not prefilled yet, and those prefilled (they step), in the order
        # they got there; kept as rows come and go, so a round makes no pass over all.
        self._joining: dict[Job, None] = {}
        self._speaking: dict[Job, None] = {}
        # Jobs cancelled since the last round (appended from any thread).
        self._cancels: collections.deque[Job] = collections.deque()
        # An engine that steps one row at a time: the speaking rows by urgency, a heap
        # whose keys only grow (audio made), each fixed when it comes to the top.
        self._by_urgency: list[tuple[float, int, Job]] = []
        # Joining rows whose prompts run together next (prefill_together): adapted to
        # what the last rounds' prompts cost against the budget.
        self._together = 1
        self._prompt_costs = PromptCosts()

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.active

    def add(self, job: Job) -> None:
        job.on_cancel = self._cancels.append
        self.waiting.append(job)

    def run_once(self) -> None:
        """One round: leave, seat, prefill, step, deliver, hand over."""
        self._leave_cancelled()
        for job in seat(self.waiting, len(self.active), self.max_rows):
            self._open(job)
        self.metrics.queue_depth.set(len(self.waiting))
        self._prefill()
        if self._speaking:
            if self.policy.max_batch == 1:
                # plan_step's choice for one row, without a pass over every row.
                job = self._most_urgent()
                self._step([job], [self.policy.hurries(job, time.monotonic(), self.rate_hz)])
            else:
                ready = list(self._speaking)
                self._step(*planned_step(ready, time.monotonic(), self.rate_hz, self.policy))
        self.handoff.flush()

    def _most_urgent(self) -> Job:
        """The speaking job whose listener needs audio soonest (``urgency``)."""
        heap = self._by_urgency
        while True:
            key, order, job = heap[0]
            if job not in self._speaking:
                heapq.heappop(heap)  # it left
                continue
            now = urgency(job, self.rate_hz)[0]
            if now == key:
                return job
            heapq.heapreplace(heap, (now, order, job))  # it made audio since

    def stop(self) -> None:
        """End every job: the engine is stopping."""
        for job in self.active:
            self._close(job)
            job.end(None if job.cancelled else engine_stopped())
            job.cancel()
        for job in self.waiting:
            job.end(engine_stopped())
        self.active.clear()
        self.waiting.clear()
        self._joining.clear()
        self._speaking.clear()
        self._by_urgency.clear()
        self.handoff.flush()

    # --- a round's parts --------------------------------------------------------------

    def _open(self, job: Job) -> None:
        if job.request.fallback:  # a context the server degraded: not this engine's work
            job.on_cancel = None
            self.fallback.speak(job)
            return
        try:
            row = self.batcher.open(job.request)
        except Exception:
            logger.exception("synthesis failed to start for %r", job.request.text[:40])
            self.fallback.rescue(job)
            return
        row.should_stop = job.is_cancelled
        self.active[job] = row
        self._joining[job] = None
        if job.cancelled:  # before it was seated: it leaves at the next round
            self._cancels.append(job)

    def _prefill(self) -> None:
        """Start joining rows, the most urgent first: one, then more (up to
        ``prefills_per_step``) while the round, its prefills (the next one taken to cost
        what the earlier ones did on average) and its step, stays within the audio a step
        makes, so that rows already speaking do not fall behind real time."""
        joining = list(self._joining)
        if not joining:
            return
        budget_s = self._prefill_budget_s()
        together = getattr(self.batcher, "prefill_many", None)
        if together is not None and self.policy.prefill_together:
            self._prefill_together(joining, budget_s, together)
            return
        spent_s = 0.0
        first = first_by(joining, self.policy.prefills_per_step, urgency)
        for count, job in enumerate(first):
            if count and spent_s * (count + 1) / count > budget_s:
                break
            row = self.active[job]
            started = time.perf_counter()
            self.metrics.prefill_rows.observe(1)
            try:
                self.batcher.prefill(row)
                self._joined(job, row)
            except Exception as exc:
                logger.exception("synthesis failed to start for %r", job.request.text[:40])
                row.error = exc
            elapsed_s = time.perf_counter() - started
            job.engine_seconds += elapsed_s
            spent_s += elapsed_s
            self._progress()
            self._collect(job)

    def _prefill_together(
        self,
        joining: list[Job],
        budget_s: float,
        prefill_many: Callable[[list[BatchRow]], None],
    ) -> None:
        """The most urgent joining rows' prompts in one forward: as many as the last
        rounds showed fit (twice as many as the largest that did, half as many after one
        that did not; always one, at most ``prefills_per_step``).

        A forward fits when the round stays within the budget, or when prompts ride
        along nearly free: the cost a prompt adds (:class:`~streaming.policy.PromptCosts`,
        from recent forwards of neighbouring sizes) times the prompts a doubling would
        add stays within :data:`RIDE_ALONG_SHARE` of the forward's fixed cost. The first
        prompt runs whatever the budget; prompts that add little to its forward (on a
        GPU, where a forward of short prompts costs its launches) delay the speaking rows
        little more. Each size's cost is kept so that timing noise (which only adds)
        does not read as dear prompts, and one slow forward (a cold first one) is
        outweighed by the next of its size or forgotten."""
        first = first_by(joining, min(self._together, self.policy.prefills_per_step), urgency)
        rows = [self.active[job] for job in first]
        started = time.perf_counter()
        failed: Exception | None = None
        try:
            prefill_many(rows)
        except Exception as exc:
            failed = exc
        spent_s = time.perf_counter() - started
        self.metrics.prefill_rows.observe(len(rows))
        if failed is None:
            self._prompt_costs.observe(len(rows), spent_s)
            rides = self._prompt_costs.ride_along(len(rows), RIDE_ALONG_SHARE)
        else:
            # A failed forward may have stopped at once: it says nothing of what prompts
            # cost, and its prompts do not count as riding along.
            logger.error("the prompts of %d joining segments failed", len(rows), exc_info=failed)
            for row in rows:
                row.error = failed
            rides = False
        if spent_s <= budget_s or rides:
            self._together = min(self.policy.prefills_per_step, max(self._together, 2 * len(rows)))
        else:
            self._together = max(1, len(rows) // 2)
        for job, row in zip(first, rows, strict=True):
            job.engine_seconds += spent_s / len(rows)
            if row.error is None:
                self._joined(job, row)
        self._progress()
        for job in first:
            self._collect(job)

    def _joined(self, job: Job, row: BatchRow) -> None:
        """``job``'s row is prefilled: it speaks from the next step on."""
        row.prefilled = True
        del self._joining[job]
        self._speaking[job] = None
        if self.policy.max_batch == 1:
            heapq.heappush(self._by_urgency, (*urgency(job, self.rate_hz), job))

    def _prefill_budget_s(self) -> float:
        """The time a round may spend on prefills: what a step's audio lasts, less what
        the next step of the rows speaking is expected to take."""
        speaking = len(self._speaking)
        step_s = self.costs.estimate(speaking) if speaking else 0.0
        return self.costs.audio_per_row_step() - (step_s or 0.0)

    def _step(self, plan: list[Job], hurry: list[bool]) -> None:
        """One step for the jobs of ``plan`` (``hurry``: whose listeners are short of
        audio), timed and shared out among them."""
        active = self.active
        rows = [active[job] for job in plan]
        for row, hurried in zip(rows, hurry, strict=True):
            row.hurry = hurried
        started = time.perf_counter()
        try:
            self.batcher.step(rows)
        except Exception as exc:
            logger.exception("a batched step of %d segments failed", len(plan))
            for row in rows:
                row.error = exc
        elapsed = time.perf_counter() - started
        self._progress()
        self.metrics.observe_step(len(plan), elapsed)
        memory = self.batcher.memory_bytes()
        if memory is not None:
            self.metrics.gpu_memory_bytes.labels(batch=str(len(plan))).set(memory)
        share = elapsed / len(plan)
        made = 0
        # Most rows of a step make no chunk and go on: only the others are collected
        # (a few hundred rows a step, on the engine thread under the GIL).
        for job, row in zip(plan, rows, strict=True):
            job.engine_seconds += share
            if row.chunks or row.done or row.error is not None:
                before = job.samples
                self._collect(job)
                made += job.samples - before
        self.costs.observe(len(plan), elapsed, audio_s=made / self.rate_hz)

    def _collect(self, job: Job) -> None:
        """Deliver what the job's row made; let it leave when it ended or failed."""
        row = self.active[job]
        audio: list[np.ndarray] = []
        for chunk in row.chunks:
            if isinstance(chunk, WordMarks):
                job.marks = chunk  # read by the loop once the job has ended
            elif chunk.size:
                audio.append(chunk)
        if audio:
            self._deliver(job, audio)
        row.chunks.clear()
        if row.error is not None:
            self._leave(job)
            self.fallback.rescue(job)
            self._finish(job)
        elif row.done:
            self._leave(job)
            self._finish(job)

    def _deliver(self, job: Job, chunks: list[np.ndarray]) -> None:
        """A step's chunks of one row (not empty), handed over as one: an engine that
        makes several a step (an interleaved one within its slice) costs both threads
        one hand-over, not one a chunk. Each chunk its listener needed before it came is
        a deadline miss, as were they handed over one by one."""
        if job.cancelled:
            return
        if job.playing:
            now, due = time.monotonic(), job.deadline + job.samples / self.rate_hz
            for chunk in chunks:
                if now > due:
                    self.metrics.deadline_misses.inc()  # its listener ran dry before it
                due += chunk.size / self.rate_hz
        job.add_audio(chunks[0] if len(chunks) == 1 else np.concatenate(chunks))

    def _leave_cancelled(self) -> None:
        # A cancelled job leaves at once, not when its deadline comes up.
        while self._cancels:
            job = self._cancels.popleft()
            if job in self.active:
                self._leave(job)
                self._finish(job)

    def _leave(self, job: Job) -> None:
        self._close(job)
        del self.active[job]
        self._joining.pop(job, None)
        self._speaking.pop(job, None)

    def _close(self, job: Job) -> None:
        try:
            self.batcher.close(self.active[job])
        except Exception:
            # A row whose cleanup fails must not take the engine thread down.
            logger.exception("leaving the batch failed for %r", job.request.text[:40])

    def _finish(self, job: Job) -> None:
        job.on_cancel = None  # a cancel after it left is nothing to this scheduler
        self.metrics.engine_busy_seconds.inc(job.engine_seconds)
        if job.cancelled:
            self.metrics.jobs_cancelled.inc()
        job.end()
