"""The engine thread's body: load the engine, then serve rounds until asked to stop.

:class:`EngineThread` runs on the one thread that may touch the engine
(:class:`~server.runtime.worker.EngineWorker` starts it): it loads and warms the engine,
publishes the worker's status, then alternates between taking what the event loop sent
(jobs for the scheduler, calls to run at once) and one scheduler round. With nothing to
do it blocks, and after ``idle_release_s`` lets the engine free memory once per idle
period (``Engine.release_idle_memory``: ChatTTS on CUDA empties the allocator cache, as
the seed article advises for idle periods), on this thread, so it never races a
synthesis.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from server.engines.base import Engine
from server.engines.interleave import Interleaver
from server.metrics import Metrics
from server.runtime.fallback import FallbackVoice
from server.runtime.jobs import Call, Handoff, Inbox
from server.runtime.scheduler import Scheduler
from server.runtime.watchdog import Watchdog
from server.runtime.worker_settings import WorkerSettings
from streaming.policy import StepCosts

__all__ = ["EngineThread"]

logger = logging.getLogger(__name__)


class Owner(Protocol):
    """What the engine thread shares with its worker (server.runtime.worker.EngineWorker)."""

    options: WorkerSettings
    metrics: Metrics
    inbox: Inbox
    handoff: Handoff
    step_costs: StepCosts
    watchdog: Watchdog
    batches: bool
    step_rows: int

    @property
    def engine_lost(self) -> bool: ...

    def loaded(
        self,
        state: str,
        engine: Engine | None,
        *,
        degraded: bool = False,
        detail: str | None = None,
        load_s: float | None = None,
        engine_name: str | None = None,
    ) -> None: ...


class EngineThread:
    """What the engine thread runs for ``worker`` (see the module docstring)."""

    def __init__(
        self,
        worker: Owner,
        factory: Callable[[], tuple[Engine, bool, str | None]],
        fallback: Callable[[], Engine] | None,
    ) -> None:
        self.worker = worker
        self._factory = factory
        self._fallback_factory = fallback

    def run(self) -> None:
        worker = self.worker
        started = time.perf_counter()
        engine: Engine | None = None
        try:
            engine, degraded, detail = self._factory()
            if worker.options.warm_up:
                engine.warm_up()
            fallback = FallbackVoice(self._fallback_factory, engine, worker.metrics, worker.handoff)
            # The batcher too before /ready: its memory (KV cache, CUDA graphs) is part
            # of loading, and a failure there a load failure.
            scheduler = self._scheduler(engine, fallback)
        except Exception as exc:
            # An operator's problem (a missing or damaged model, too little memory),
            # told in one line; the traceback only at debug level.
            logger.error("the engine failed to load: %s: %s", type(exc).__name__, exc)
            logger.debug("engine load failure", exc_info=True)
            if engine is not None:
                _close(engine)
            worker.loaded("failed", None, detail=f"{type(exc).__name__}: {exc}")
            worker.inbox.refuse_queued(worker.handoff)
            return
        load_s = round(time.perf_counter() - started, 3)
        worker.loaded("ready", engine, degraded=degraded, detail=detail, load_s=load_s)
        try:
            self._serve(engine, scheduler)
        finally:
            worker.loaded("stopped", None, engine_name=engine.name)
            worker.inbox.refuse_queued(worker.handoff)
            _close(engine)
            _close(fallback)

    def _scheduler(self, engine: Engine, fallback: FallbackVoice) -> Scheduler:
        """The scheduler over the engine's batcher, or over an Interleaver when it has none."""
        worker = self.worker
        policy = worker.options.policy
        batcher = engine.batcher(policy.max_batch) if policy.max_batch > 1 else None
        if batcher is not None:
            logger.info("batching up to %d segments per step", batcher.max_batch)
            rows = batcher.max_batch
        else:
            # Steps of one row that take turns; rows open at once: as many as the engine's
            # generators can interleave.
            rows = worker.options.max_active if engine.interleaves else 1
            batcher = Interleaver(engine, worker.options.interleave_slice_s)
            policy = replace(policy, max_batch=1, prefills_per_step=rows)
        worker.batches = not isinstance(batcher, Interleaver)
        worker.step_rows = batcher.max_batch
        return Scheduler(
            batcher,
            max_rows=rows,
            rate_hz=engine.sample_rate_hz,
            policy=policy,
            costs=worker.step_costs,
            metrics=worker.metrics,
            handoff=worker.handoff,
            fallback=fallback,
            progress=worker.watchdog.progress,
        )

    def _serve(self, engine: Engine, scheduler: Scheduler) -> None:
        """Rounds of the scheduler until ``stop()``; calls between rounds."""
        try:
            while not self._take(engine, scheduler):
                scheduler.run_once()
                self.worker.watchdog.progress()
                if self.worker.engine_lost:
                    logger.critical(
                        "the engine's process has ended: the engine thread stops and /health "
                        "fails (restart the server)"
                    )
                    return
        except BaseException:
            logger.exception("the engine thread failed; ending every job in flight")
            raise
        finally:
            scheduler.stop()

    def _take(self, engine: Engine, scheduler: Scheduler) -> bool:
        """Move what was sent to the scheduler, running calls at once; True when
        ``stop()`` was called. Blocks while there is nothing to do."""
        worker = self.worker
        block = scheduler.idle
        while True:
            try:
                item = worker.inbox.get(worker.options.idle_release_s, block=block)
            except queue.Empty:
                if not block:
                    return False
                try:
                    engine.release_idle_memory()
                except Exception:
                    logger.exception("releasing idle memory failed")
                worker.metrics.idle_releases.inc()
                item = worker.inbox.get()
            block = False
            worker.watchdog.progress()
            if item is None:
                return True
            if isinstance(item, Call):
                item.run(engine)
                worker.inbox.ended(item)
            else:
                scheduler.add(item)


def _close(closing: Engine | FallbackVoice) -> None:
    try:
        closing.close()
    except Exception:
        logger.exception("engine close failed")
