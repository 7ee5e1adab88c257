"""The engine worker: the one thread that may touch the engine, and how the event loop
talks to it.

The thread loads the engine, warms it up, then serves: jobs submitted from the event loop
(:meth:`EngineWorker.submit`) go to the :class:`~server.runtime.scheduler.Scheduler`,
which runs every engine through one batch interface (a batching engine's own batcher,
or an :class:`~server.engines.interleave.Interleaver` over one that does not); functions
passed to :meth:`EngineWorker.call` run between two rounds. The event loop never runs
torch; audio comes back through the :class:`~server.runtime.jobs.Handoff`, one wake-up
of the loop per round.

A watchdog on the event loop (:meth:`EngineWorker.watch`) notices an engine thread that
has made no progress on work in flight for ``stall_timeout_s``: it ends that work with
``engine_stalled`` (so requests end and give their admission slots back), refuses new
work, and fails /health until the thread moves again.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from server.engines.base import Engine, SynthesisRequest
from server.engines.interleave import Interleaver
from server.metrics import Metrics
from server.runtime.fallback import FallbackVoice
from server.runtime.jobs import Call, Handoff, Job, engine_stopped
from server.runtime.scheduler import Scheduler
from streaming.errors import SynthesisTimeout, Unavailable
from streaming.schedule import BatchPolicy, StepCosts, capacity

__all__ = ["EngineStatus", "EngineWorker", "Job", "WorkerOptions"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
STATES = ("loading", "ready", "failed", "stalled", "stopped")


@dataclass(frozen=True)
class WorkerOptions:
    """How the engine worker runs its engine (from the settings' engine group)."""

    warm_up: bool = True
    #: After this long without work the engine frees cached memory.
    idle_release_s: float = 60.0
    #: Segments in flight at once on an engine that interleaves (not streams: a stream
    #: has one segment in flight at a time, and fast engines finish theirs in moments).
    max_active: int = 8
    #: The batching policy; max_batch 1 turns batching off (segments interleave).
    policy: BatchPolicy = field(default_factory=lambda: BatchPolicy(max_batch=1))
    #: Fraction of the engine's measured capacity that admission fills.
    headroom: float = 0.8
    #: Work in flight with no progress for this long means the engine is stuck (0: never).
    stall_timeout_s: float = 30.0


@dataclass
class EngineStatus:
    state: str  # one of STATES
    engine: str | None = None
    degraded: bool = False
    detail: str | None = None
    load_seconds: float | None = None


def _publish(metrics: Metrics, status: EngineStatus) -> None:
    for state in STATES:
        metrics.engine_state.labels(state=state).set(int(state == status.state))
    metrics.engine_degraded.set(int(status.degraded))
    if status.load_seconds is not None:
        metrics.engine_load_seconds.set(status.load_seconds)


class EngineWorker:
    """Owns the engine and the one thread that may touch it."""

    def __init__(
        self,
        factory: Callable[[], tuple[Engine, bool, str | None]],
        metrics: Metrics,
        options: WorkerOptions | None = None,
        *,
        fallback: Callable[[], Engine] | None = None,
    ) -> None:
        """``factory`` runs on the engine thread and returns (engine, degraded, detail).

        ``fallback`` builds, on first need, the engine that speaks a segment the main
        engine failed on before producing any audio (never one it half-spoke).
        """
        self._factory = factory
        self._fallback_factory = fallback
        self.options = options or WorkerOptions()
        self._metrics = metrics
        #: What a step costs (learnt on the engine thread, read by admission).
        self.step_costs = StepCosts()
        #: The engine batches (known once it is loaded); otherwise its steps time-share.
        self.batches = False
        self._step_rows = 1
        self._submitted = itertools.count()
        self._inbox: queue.SimpleQueue[Job | Call | None] = queue.SimpleQueue()
        self._in_flight: set[Job | Call] = set()
        self._in_flight_lock = threading.Lock()
        self._handoff = Handoff()
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self._loaded = threading.Event()
        self._stopping = False
        self._progress_at = time.monotonic()
        self._stalled_progress_at = 0.0
        self.engine: Engine | None = None
        self.status = EngineStatus(state="loading")
        _publish(metrics, self.status)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        """False when the engine thread died or is stuck (not loading, not stopped)."""
        if self._stopping or not self._loaded.is_set() or self.status.state == "failed":
            return True  # loading, shutting down, or a load failure (/ready reports those)
        return self._thread.is_alive() and self.status.state != "stalled"

    @property
    def ready(self) -> bool:
        return self.status.state == "ready"

    @property
    def sample_rate_hz(self) -> int:
        if self.engine is None:
            raise Unavailable("the engine is not loaded yet", code="not_ready")
        return self.engine.sample_rate_hz

    @property
    def busy(self) -> bool:
        """True while a segment is queued or being synthesised."""
        return bool(self._in_flight)

    def capacity(self) -> int | None:
        """How many real-time streams the engine carries, from what its steps measured;
        None until it has measured any (:func:`streaming.schedule.capacity`)."""
        return capacity(
            self.step_costs,
            self._step_rows,
            self.options.headroom,
            time_shared=not self.batches,
        )

    def check_voice(self, voice: str) -> None:
        """Raise ValueError, naming what is accepted, when the engine cannot use ``voice``."""
        if self.engine is None:
            raise Unavailable("the engine is not loaded yet", code="not_ready")
        self.engine.check_voice(voice)

    def wait_ready(self, timeout_s: float | None = None) -> bool:
        """Block until the engine is ready or failed (for the CLI and tests)."""
        self._loaded.wait(timeout_s)
        return self.ready

    def submit(self, request: SynthesisRequest, *, deadline: float | None = None) -> Job:
        """Queue a segment; call from the event loop.

        ``deadline`` (``time.monotonic()``) is when the listener's playback reaches this
        segment's audio; ``None`` means now (nothing buffered: most urgent).
        """
        if not self.ready:
            raise Unavailable(f"the engine is {self.status.state}", code="not_ready")
        now = time.monotonic()
        job = Job(
            request,
            asyncio.get_running_loop(),
            self._handoff,
            deadline=now if deadline is None else deadline,
            order=next(self._submitted),
            playing=deadline is not None and deadline > now,
            on_end=self._ended,
        )
        self._enqueue(job)
        return job

    async def call(self, fn: Callable[[Engine], T], *, timeout_s: float = 120.0) -> T:
        """Run ``fn(engine)`` on the engine thread, between two rounds, and return its
        result (or raise what it raised). For work that needs the model but is not a
        segment: a voice made from a reference clip. Unavailable when the engine is not
        running or stops first; SynthesisTimeout after ``timeout_s``."""
        if not self.ready or self._stopping:
            raise Unavailable(f"the engine is {self.status.state}", code="not_ready")
        call = Call(fn, asyncio.get_running_loop())
        self._enqueue(call)
        try:
            result: T = await asyncio.wait_for(call.future, timeout_s)
        except TimeoutError:
            raise SynthesisTimeout(
                f"the engine did not get to it within {timeout_s:g} s", code="timeout"
            ) from None
        finally:
            self._ended(call)
        return result

    def watch(self) -> None:
        """The watchdog (on the event loop, every second or so): see the module docstring."""
        limit_s = self.options.stall_timeout_s
        if limit_s <= 0:
            return
        if self.status.state == "stalled":
            if self._progress_at != self._stalled_progress_at:  # the thread moved again
                logger.warning("the engine thread moves again: serving")
                self._set_state(replace(self.status, state="ready", detail=None))
            return
        with self._in_flight_lock:
            waiting = list(self._in_flight)
        stalled_s = time.monotonic() - self._progress_at
        if self.status.state != "ready" or not waiting or stalled_s < limit_s:
            return
        logger.critical(
            "the engine thread has made no progress for %.0f s with %d jobs in flight: "
            "ending them, refusing new work, /health fails until it moves",
            stalled_s,
            len(waiting),
        )
        self._stalled_progress_at = self._progress_at
        self._set_state(
            replace(self.status, state="stalled", detail=f"no progress for {stalled_s:.0f} s")
        )
        error = Unavailable("the engine is stuck; try again later", code="engine_stalled")
        for item in waiting:
            if isinstance(item, Job):
                item.cancel()
            item.end(error)
        self._handoff.flush()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Cancel the jobs in flight (at their next step), refuse the queued ones, release
        the engine."""
        self._stopping = True
        self._inbox.put(None)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            logger.warning("engine thread did not stop within %.1f s", timeout_s)
        self._refuse_queued()

    # --- both sides -------------------------------------------------------------------

    def _enqueue(self, item: Job | Call) -> None:
        with self._in_flight_lock:
            if not self._in_flight:
                self._progress_at = time.monotonic()  # the stall clock starts with work
            self._in_flight.add(item)
        self._inbox.put(item)
        if self._stopping:  # stop() may have emptied the inbox just before the put
            self._refuse_queued()

    def _ended(self, item: Job | Call) -> None:
        with self._in_flight_lock:
            self._in_flight.discard(item)

    def _refuse_queued(self) -> None:
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item.end(engine_stopped())
        self._handoff.flush()

    def _set_state(self, status: EngineStatus) -> None:
        self.status = status
        _publish(self._metrics, status)

    def _progress(self) -> None:
        self._progress_at = time.monotonic()

    # --- engine thread ----------------------------------------------------------------

    def _run(self) -> None:
        started = time.perf_counter()
        try:
            engine, degraded, detail = self._factory()
            if self.options.warm_up:
                engine.warm_up()
        except Exception as exc:
            logger.exception("engine failed to load")
            self._set_state(EngineStatus(state="failed", detail=f"{type(exc).__name__}: {exc}"))
            self._loaded.set()
            self._refuse_queued()
            return
        self.engine = engine
        load_s = round(time.perf_counter() - started, 3)
        self._set_state(EngineStatus("ready", engine.name, degraded, detail, load_s))
        self._metrics.engine_ready.labels(engine=engine.name).set(1)
        logger.info(
            "engine %s ready in %.2f s%s",
            engine.name,
            load_s,
            f" (degraded: {detail})" if degraded else "",
        )
        fallback = FallbackVoice(self._fallback_factory, engine, self._metrics, self._handoff)
        self._loaded.set()
        try:
            self._serve(engine, fallback)
        finally:
            self._set_state(EngineStatus(state="stopped", engine=engine.name))
            self._metrics.engine_ready.labels(engine=engine.name).set(0)
            self._refuse_queued()
            for closing in (engine, fallback):
                try:
                    closing.close()
                except Exception:
                    logger.exception("engine close failed")

    def _serve(self, engine: Engine, fallback: FallbackVoice) -> None:
        """Rounds of the scheduler until ``stop()``; calls between rounds."""
        policy = self.options.policy
        batcher = engine.batcher(policy.max_batch) if policy.max_batch > 1 else None
        if batcher is not None:
            logger.info("batching up to %d segments per step", batcher.max_batch)
            self.batches, rows = True, batcher.max_batch
        else:
            # Steps of one row that take turns; rows open at once: as many as the engine's
            # generators can interleave.
            rows = self.options.max_active if engine.interleaves else 1
            batcher = Interleaver(engine)
            policy = replace(policy, max_batch=1, prefills_per_step=rows)
        self._step_rows = batcher.max_batch
        scheduler = Scheduler(
            batcher,
            max_rows=rows,
            rate_hz=engine.sample_rate_hz,
            policy=policy,
            costs=self.step_costs,
            metrics=self._metrics,
            handoff=self._handoff,
            fallback=fallback,
            progress=self._progress,
        )
        try:
            while not self._take(engine, scheduler):
                scheduler.run_once()
                self._progress()
        except BaseException:
            logger.exception("the engine thread failed; ending every job in flight")
            raise
        finally:
            scheduler.stop()

    def _take(self, engine: Engine, scheduler: Scheduler) -> bool:
        """Move submitted jobs to the scheduler and run calls; True when ``stop()`` was
        called.

        With nothing to do it blocks, and after ``idle_release_s`` lets the engine free
        memory (``Engine.release_idle_memory``: ChatTTS on CUDA empties the allocator
        cache, as the seed article advises for idle periods), once per idle period, on
        this thread, so it never races a synthesis.
        """
        block = scheduler.idle
        while True:
            try:
                if block:
                    item = self._inbox.get(timeout=self.options.idle_release_s)
                else:
                    item = self._inbox.get_nowait()
            except queue.Empty:
                if not block:
                    return False
                try:
                    engine.release_idle_memory()
                except Exception:
                    logger.exception("releasing idle memory failed")
                self._metrics.idle_releases.inc()
                item = self._inbox.get()
            block = False
            self._progress()
            if item is None:
                return True
            if isinstance(item, Call):
                item.run(engine)
                self._ended(item)
            else:
                scheduler.add(item)
