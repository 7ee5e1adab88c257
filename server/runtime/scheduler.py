"""The scheduler: which segments the engine works on, one round at a time.

It owns the waiting jobs and the rows admitted to the engine's batcher (a batching
engine's own, or an :class:`~server.engines.interleave.Interleaver` over one that does
not) and runs the policy of :mod:`streaming.schedule` on them. A round
(:meth:`Scheduler.run_once`) reads as: let cancelled rows leave, admit waiting jobs
(most urgent first, up to ``max_rows``), prefill at most ``prefills_per_step`` joining
rows, step the rows the plan picks, deliver what they made, and hand it all to the event
loop in one wake-up. Everything here runs on the engine thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np

from server.engines.base import Batcher, Utterance, WordMarks
from server.metrics import Metrics
from server.runtime.fallback import FallbackVoice
from server.runtime.jobs import Handoff, Job, engine_stopped
from streaming.schedule import BatchPolicy, StepCosts, admit, plan_step, urgency

__all__ = ["Row", "Scheduler"]

logger = logging.getLogger(__name__)


class Row:
    """A job admitted to the batcher: its utterance in the batch."""

    __slots__ = ("job", "utterance")

    def __init__(self, job: Job, utterance: Utterance) -> None:
        self.job = job
        self.utterance = utterance

    @property
    def ready(self) -> bool:
        """Prefilled and not finished: it takes part in the next step."""
        u = self.utterance
        return u.prefilled and not u.done and u.error is None

    # What streaming.schedule reads (Scheduled): the job's.
    @property
    def deadline(self) -> float:
        return self.job.deadline

    @property
    def samples(self) -> int:
        return self.job.samples

    @property
    def order(self) -> int:
        return self.job.order


class Scheduler:
    """Waiting jobs and active rows of one engine's batcher (see the module docstring)."""

    def __init__(
        self,
        batcher: Batcher,
        *,
        max_rows: int,
        rate_hz: int,
        policy: BatchPolicy,
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
        self.active: list[Row] = []

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.active

    def add(self, job: Job) -> None:
        self.waiting.append(job)

    def run_once(self) -> None:
        """One round: leave, admit, prefill, step, deliver, hand over."""
        self._leave_cancelled()
        for job in admit(self.waiting, len(self.active), self.max_rows):
            self._open(job)
        self.metrics.queue_depth.set(len(self.waiting))
        self._prefill()
        ready = [row for row in self.active if row.ready]
        if ready:
            self._step(plan_step(ready, time.monotonic(), self.rate_hz, self.policy))
        self.handoff.flush()

    def stop(self) -> None:
        """End every job: the engine is stopping."""
        for row in self.active:
            self._close(row)
            row.job.end(None if row.job.cancelled else engine_stopped())
            row.job.cancel()
        for job in self.waiting:
            job.end(engine_stopped())
        self.active.clear()
        self.waiting.clear()
        self.handoff.flush()

    # --- a round's parts --------------------------------------------------------------

    def _open(self, job: Job) -> None:
        if job.request.fallback:  # a context the server degraded: not this engine's work
            self.fallback.speak(job)
            return
        try:
            utterance = self.batcher.open(job.request)
        except Exception:
            logger.exception("synthesis failed to start for %r", job.request.text[:40])
            self.fallback.rescue(job)
            return
        utterance.should_stop = job.is_cancelled
        self.active.append(Row(job, utterance))

    def _prefill(self) -> None:
        """Start at most ``prefills_per_step`` joining rows, the most urgent first."""
        joining = [row for row in self.active if not row.utterance.prefilled]
        for row in sorted(joining, key=urgency)[: self.policy.prefills_per_step]:
            started = time.perf_counter()
            try:
                self.batcher.prefill(row.utterance)
                row.utterance.prefilled = True
            except Exception as exc:
                logger.exception("synthesis failed to start for %r", row.job.request.text[:40])
                row.utterance.error = exc
            row.job.engine_seconds += time.perf_counter() - started
            self._progress()
            self._collect(row)

    def _step(self, plan: list[Row]) -> None:
        """One step for the rows of ``plan``, timed and shared out among them."""
        now = time.monotonic()
        utterances = []
        for row in plan:
            row.utterance.hurry = self.policy.hurries(row, now, self.rate_hz)
            utterances.append(row.utterance)
        made_before = sum(row.job.samples for row in plan)
        started = time.perf_counter()
        try:
            self.batcher.step(utterances)
        except Exception as exc:
            logger.exception("a batched step of %d segments failed", len(plan))
            for utterance in utterances:
                utterance.error = exc
        elapsed = time.perf_counter() - started
        self._progress()
        self.metrics.observe_step(len(plan), elapsed)
        memory = self.batcher.memory_bytes()
        if memory is not None:
            self.metrics.gpu_memory_bytes.labels(batch=str(len(plan))).set(memory)
        share = elapsed / len(plan)
        for row in plan:
            row.job.engine_seconds += share
            self._collect(row)
        made_s = (sum(row.job.samples for row in plan) - made_before) / self.rate_hz
        self.costs.observe(len(plan), elapsed, audio_s=made_s)

    def _collect(self, row: Row) -> None:
        """Deliver what the row made; let it leave when it ended or failed."""
        utterance = row.utterance
        for chunk in utterance.chunks:
            if isinstance(chunk, WordMarks):
                row.job.marks = chunk  # read by the loop once the job has ended
            else:
                self._deliver(row.job, chunk)
        utterance.chunks.clear()
        if utterance.error is not None:
            self.active.remove(row)
            self._close(row)
            self.fallback.rescue(row.job)
            self._finish(row.job)
        elif utterance.done:
            self.active.remove(row)
            self._close(row)
            self._finish(row.job)

    def _deliver(self, job: Job, chunk: np.ndarray) -> None:
        if not chunk.size or job.cancelled:
            return
        if job.playing and time.monotonic() > job.deadline + job.samples / self.rate_hz:
            self.metrics.deadline_misses.inc()  # its listener ran dry before this audio
        job.add_audio(chunk)

    def _leave_cancelled(self) -> None:
        # A cancelled job leaves at once, not when its deadline comes up.
        for row in [r for r in self.active if r.job.cancelled]:
            self.active.remove(row)
            self._close(row)
            self._finish(row.job)

    def _close(self, row: Row) -> None:
        try:
            self.batcher.close(row.utterance)
        except Exception:
            # A row whose cleanup fails must not take the engine thread down.
            logger.exception("leaving the batch failed for %r", row.job.request.text[:40])

    def _finish(self, job: Job) -> None:
        self.metrics.engine_busy_seconds.inc(job.engine_seconds)
        if job.cancelled:
            self.metrics.jobs_cancelled.inc()
        job.end()
