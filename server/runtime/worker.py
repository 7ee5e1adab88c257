"""The engine worker: the one thread that may touch the engine, and how the event loop
talks to it.

The thread (:class:`~server.runtime.engine_thread.EngineThread`) loads the engine, warms
it up, then serves: jobs submitted from the event loop (:meth:`EngineWorker.submit`) go
to the :class:`~server.runtime.scheduler.Scheduler`, which runs every engine through one
batch interface (a batching engine's own batcher, or an
:class:`~server.engines.interleave.Interleaver` over one that does not); functions passed
to :meth:`EngineWorker.call` run between two rounds. The event loop never runs
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
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from server.engines.base import Engine, SynthesisRequest
from server.metrics import Metrics
from server.runtime.engine_thread import EngineThread
from server.runtime.jobs import Call, Handoff, Inbox, Job
from server.runtime.watchdog import Watchdog
from server.runtime.worker_settings import WorkerSettings
from streaming.errors import SynthesisTimeout, Unavailable
from streaming.policy import StepCosts, capacity

__all__ = ["EngineStatus", "EngineWorker", "Job", "WorkerSettings"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
STATES = ("loading", "ready", "failed", "stalled", "stopped")


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
        options: WorkerSettings | None = None,
        *,
        fallback: Callable[[], Engine] | None = None,
    ) -> None:
        """``factory`` runs on the engine thread and returns (engine, degraded, detail).

        ``fallback`` builds, on first need, the engine that speaks a segment the main
        engine failed on before producing any audio (never one it half-spoke).
        """
        self.options = options or WorkerSettings()
        self.metrics = metrics
        #: What a step costs (learnt on the engine thread, read by admission).
        self.step_costs = StepCosts()
        #: The engine batches (known once it is loaded); otherwise its steps time-share.
        self.batches = False
        #: Rows one step takes.
        self.step_rows = 1
        self.inbox = Inbox()
        self.handoff = Handoff(coalesce=self.options.coalesce_wakeups)
        self.watchdog = Watchdog(self.options.stall_timeout_s)
        self._submitted = itertools.count()
        body = EngineThread(self, factory, fallback)
        self._thread = threading.Thread(target=body.run, name="engine", daemon=True)
        self._loaded = threading.Event()
        self._stopping = False
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
        if self.engine_lost:
            return False
        return self._thread.is_alive() and self.status.state != "stalled"

    @property
    def engine_lost(self) -> bool:
        """Whether the engine's own process ended (``--engine-process``); an engine in
        this process (no ``lost`` of its own) never is."""
        return bool(getattr(self.engine, "lost", False))

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
        return bool(self.inbox.in_flight())

    def capacity(self) -> int | None:
        """How many real-time streams the engine carries, from what its steps measured;
        None until it has measured any (:func:`streaming.policy.capacity`)."""
        return capacity(
            self.step_costs, self.step_rows, self.options.headroom, time_shared=not self.batches
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
            self.handoff,
            deadline=now if deadline is None else deadline,
            order=next(self._submitted),
            playing=deadline is not None and deadline > now,
            on_end=self.inbox.ended,
        )
        self._send(job)
        return job

    async def call(self, fn: Callable[[Engine], T], *, timeout_s: float = 120.0) -> T:
        """Run ``fn(engine)`` on the engine thread, between two rounds, and return its
        result (or raise what it raised). For work that needs the model but is not a
        segment: a voice made from a reference clip. Unavailable when the engine is not
        running or stops first; SynthesisTimeout after ``timeout_s``."""
        if not self.ready or self._stopping:
            raise Unavailable(f"the engine is {self.status.state}", code="not_ready")
        call = Call(fn, asyncio.get_running_loop())
        self._send(call)
        try:
            result: T = await asyncio.wait_for(call.future, timeout_s)
        except TimeoutError:
            raise SynthesisTimeout(
                f"the engine did not get to it within {timeout_s:g} s", code="timeout"
            ) from None
        finally:
            self.inbox.ended(call)
        return result

    def watch(self) -> None:
        """The watchdog (on the event loop, every second or so): see the module docstring.
        An engine whose process ended (``--engine-process``) stops the worker at once,
        idle or not: /ready and new work see it before any job fails on it."""
        if self.status.state not in ("ready", "stalled"):
            return
        if self.engine_lost:
            logger.critical(
                "the engine's process has ended: refusing new work, /health fails "
                "(restart the server)"
            )
            self.status = replace(self.status, state="stopped", detail="the engine process ended")
            _publish(self.metrics, self.status)
            self.inbox.put(None)  # the engine thread ends its jobs and stops
            return
        waiting = self.inbox.in_flight()
        verdict = self.watchdog.verdict(busy=bool(waiting))
        if verdict == "recovered":
            logger.warning("the engine thread moves again: serving")
            self.status = replace(self.status, state="ready", detail=None)
            _publish(self.metrics, self.status)
        elif verdict == "stalled":
            silent_s = self.watchdog.silent_s()
            logger.critical(
                "the engine thread has made no progress for %.0f s with %d jobs in flight: "
                "ending them, refusing new work, /health fails until it moves",
                silent_s,
                len(waiting),
            )
            self.status = replace(
                self.status, state="stalled", detail=f"no progress for {silent_s:.0f} s"
            )
            _publish(self.metrics, self.status)
            error = Unavailable("the engine is stuck; try again later", code="engine_stalled")
            for item in waiting:
                if isinstance(item, Job):
                    item.cancel()
                item.end(error)
            self.handoff.flush()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Cancel the jobs in flight (at their next step), refuse the queued ones, release
        the engine."""
        self._stopping = True
        self.inbox.put(None)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            logger.warning("engine thread did not stop within %.1f s", timeout_s)
        self.inbox.refuse_queued(self.handoff)

    def loaded(
        self,
        state: str,
        engine: Engine | None,
        *,
        degraded: bool = False,
        detail: str | None = None,
        load_s: float | None = None,
        engine_name: str | None = None,
    ) -> None:
        """The engine thread's news (on that thread): the engine is ready, failed to load,
        or stopped."""
        name = engine.name if engine is not None else engine_name
        if state == "ready":
            self.engine = engine
        self.status = EngineStatus(state, name, degraded, detail, load_s)
        _publish(self.metrics, self.status)
        if name is not None:
            self.metrics.engine_ready.labels(engine=name).set(int(state == "ready"))
        if state == "ready":
            logger.log(
                logging.WARNING if degraded else logging.INFO,
                "serving with the %s engine (ready in %.2f s)%s",
                name,
                load_s,
                f", degraded: {detail}" if degraded else "",
            )
        self._loaded.set()

    def _send(self, item: Job | Call) -> None:
        if self.inbox.put(item):
            self.watchdog.work_arrived()
        if self._stopping:  # stop() may have emptied the inbox just before the put
            self.inbox.refuse_queued(self.handoff)
