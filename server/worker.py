"""The engine worker: one dedicated thread per model instance, fed from the event loop.

The thread loads the engine, warms it up, then runs synthesis jobs one at a time in
submission order. Each session submits at most one segment per context at a time, so
FIFO order here is round-robin across contexts and connections: a long text on one
socket never starves another. The event loop never runs torch; chunks come back through
``loop.call_soon_threadsafe`` into a per-job asyncio queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import numpy as np

from server.engines.base import Cancelled, Engine, SynthesisRequest
from server.errors import SynthesisError, SynthesisTimeout, Unavailable
from server.metrics import Metrics

logger = logging.getLogger(__name__)

_END = object()
#: Delivered before the fallback engine's chunks when the main engine failed a segment.
_FELL_BACK = object()


@dataclass
class EngineStatus:
    state: str  # loading | ready | failed | stopped
    engine: str | None = None
    degraded: bool = False
    detail: str | None = None
    load_seconds: float | None = None


class Job:
    """One segment's synthesis; iterate it on the event loop to receive its chunks."""

    def __init__(self, request: SynthesisRequest, loop: asyncio.AbstractEventLoop) -> None:
        self.request = request
        self._loop = loop
        self._chunks: asyncio.Queue[object] = asyncio.Queue()
        self._cancelled = threading.Event()
        self.engine_seconds = 0.0
        self.samples = 0
        self.fell_back = False  # spoken by the fallback engine after the main one failed

    def cancel(self) -> None:
        """Ask the engine to stop at its next step; safe from any thread."""
        self._cancelled.set()

    def abandon(self) -> None:
        """Cancel, and end the consumer's iteration now rather than at the engine's next step.

        Call on the event loop. Chunks the engine still delivers afterwards are ignored.
        """
        self.cancel()
        self._chunks.put_nowait(_END)

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def _deliver(self, item: object) -> None:
        # Called on the engine thread; the loop may already be closed at shutdown.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._chunks.put_nowait, item)

    async def chunks(self, timeout_s: float) -> AsyncIterator[np.ndarray]:
        """Yield the chunks as they are made; raise on engine failure or timeout.

        ``timeout_s`` bounds the whole segment, queueing included; on expiry the job is
        cancelled so the engine moves on.
        """
        deadline = self._loop.time() + timeout_s
        while True:
            remaining = deadline - self._loop.time()
            try:
                async with asyncio.timeout(max(remaining, 0)):
                    item = await self._chunks.get()
            except TimeoutError:
                self.cancel()
                raise SynthesisTimeout(f"segment not synthesised within {timeout_s:g} s") from None
            if item is _END:
                return
            if item is _FELL_BACK:
                self.fell_back = True
                continue
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, np.ndarray)
            yield item


class EngineWorker:
    """Owns the engine and the one thread that may touch it."""

    def __init__(
        self,
        factory: Callable[[], tuple[Engine, bool, str | None]],
        metrics: Metrics,
        *,
        warm_up: bool = True,
        fallback: Callable[[], Engine] | None = None,
        idle_release_s: float = 60.0,
    ) -> None:
        """``factory`` runs on the engine thread and returns (engine, degraded, detail).

        ``fallback`` builds, on first need, the engine that speaks a segment the main
        engine failed on before producing any audio (never one it half-spoke).
        """
        self._factory = factory
        self._fallback_factory = fallback
        self._idle_release_s = idle_release_s
        self._fallback: Engine | None = None
        self._metrics = metrics
        self._warm_up = warm_up
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self._ready = threading.Event()
        self.engine: Engine | None = None
        self.status = EngineStatus(state="loading")
        self._pending = 0
        self._running = False
        self._pending_lock = threading.Lock()
        self._set_state(self.status)

    def start(self) -> None:
        self._thread.start()

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
        with self._pending_lock:
            return self._pending > 0 or self._running

    def _set_state(self, status: EngineStatus) -> None:
        self.status = status
        for state in ("loading", "ready", "failed", "stopped"):
            self._metrics.engine_state.labels(state=state).set(int(state == status.state))
        self._metrics.engine_degraded.set(int(status.degraded))
        if status.load_seconds is not None:
            self._metrics.engine_load_seconds.set(status.load_seconds)

    def wait_ready(self, timeout_s: float | None = None) -> bool:
        """Block until the engine is ready or failed (for the CLI and tests)."""
        self._ready.wait(timeout_s)
        return self.ready

    def submit(self, request: SynthesisRequest) -> Job:
        """Queue a segment; call from the event loop."""
        if not self.ready:
            raise Unavailable(f"the engine is {self.status.state}", code="not_ready")
        job = Job(request, asyncio.get_running_loop())
        with self._pending_lock:
            self._pending += 1
            self._metrics.queue_depth.set(self._pending)
        self._jobs.put(job)
        return job

    def stop(self, timeout_s: float = 10.0) -> None:
        """Finish the job in progress, drop the rest, release the engine."""
        self._jobs.put(None)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            logger.warning("engine thread did not stop within %.1f s", timeout_s)

    # --- engine thread ----------------------------------------------------------------

    def _run(self) -> None:
        started = time.perf_counter()
        try:
            engine, degraded, detail = self._factory()
            if self._warm_up:
                engine.warm_up()
        except Exception as exc:
            logger.exception("engine failed to load")
            self._set_state(EngineStatus(state="failed", detail=f"{type(exc).__name__}: {exc}"))
            self._ready.set()
            self._drain_failed()
            return
        self.engine = engine
        self._set_state(
            EngineStatus(
                state="ready",
                engine=engine.name,
                degraded=degraded,
                detail=detail,
                load_seconds=round(time.perf_counter() - started, 3),
            )
        )
        self._metrics.engine_ready.labels(engine=engine.name).set(1)
        logger.info(
            "engine %s ready in %.2f s%s",
            engine.name,
            self.status.load_seconds,
            f" (degraded: {detail})" if degraded else "",
        )
        self._ready.set()
        try:
            while (job := self._next_job(engine)) is not None:
                self._run_job(engine, job)
        finally:
            self._set_state(EngineStatus(state="stopped", engine=engine.name))
            self._metrics.engine_ready.labels(engine=engine.name).set(0)
            self._drain_failed()
            for closing in (engine, self._fallback):
                try:
                    if closing is not None:
                        closing.close()
                except Exception:
                    logger.exception("engine close failed")

    def _next_job(self, engine: Engine) -> Job | None:
        """The next job; after ``idle_release_s`` without one, let the engine free memory.

        ``release_idle_memory`` is optional on engines (ChatTTS on CUDA empties the
        allocator cache, as the seed article advises for idle periods); it runs once per
        idle period, on this thread, so it never races a synthesis.
        """
        try:
            return self._jobs.get(timeout=self._idle_release_s)
        except queue.Empty:
            release = getattr(engine, "release_idle_memory", None)
            if release is not None:
                try:
                    release()
                except Exception:
                    logger.exception("releasing idle memory failed")
            self._metrics.idle_releases.inc()
            return self._jobs.get()

    def _run_job(self, engine: Engine, job: Job) -> None:
        with self._pending_lock:
            self._pending -= 1
            self._running = True
            self._metrics.queue_depth.set(self._pending)
        try:
            self._run_job_now(engine, job)
        finally:
            with self._pending_lock:
                self._running = False

    def _run_job_now(self, engine: Engine, job: Job) -> None:
        if job.cancelled:
            self._metrics.jobs_cancelled.inc()
            job._deliver(_END)
            return
        started = time.perf_counter()
        try:
            self._stream(engine, job)
        except Cancelled:
            pass
        except Exception:
            logger.exception("synthesis failed for %r", job.request.text[:40])
            self._fall_back(engine, job)
        finally:
            job.engine_seconds = time.perf_counter() - started
            self._metrics.engine_busy_seconds.inc(job.engine_seconds)
            if job.cancelled:
                self._metrics.jobs_cancelled.inc()
            job._deliver(_END)

    def _stream(self, engine: Engine, job: Job) -> None:
        chunks = engine.synthesize(job.request, lambda: job.cancelled)
        try:
            for chunk in chunks:
                if job.cancelled:
                    break
                if chunk.size:
                    job.samples += int(chunk.size)
                    job._deliver(np.ascontiguousarray(chunk, dtype=np.float32))
        finally:
            # A cancelled job's generator is closed here, on the engine thread, not
            # whenever it happens to be garbage-collected.
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    def _fall_back(self, engine: Engine, job: Job) -> None:
        failed = SynthesisError("the engine failed on this segment")
        fallback = self._fallback_engine(engine)
        if fallback is None or job.samples or job.cancelled:
            job._deliver(failed)
            return
        job._deliver(_FELL_BACK)
        self._metrics.fallback_segments.inc()
        try:
            self._stream(fallback, job)
        except Cancelled:
            pass
        except Exception:
            logger.exception("the fallback engine failed too for %r", job.request.text[:40])
            job._deliver(failed)

    def _fallback_engine(self, engine: Engine) -> Engine | None:
        if self._fallback is None and self._fallback_factory is not None:
            factory, self._fallback_factory = self._fallback_factory, None
            try:
                candidate = factory()
            except Exception:
                logger.exception("the fallback engine failed to load; failed segments get an error")
                return None
            if candidate.sample_rate_hz != engine.sample_rate_hz or candidate.name == engine.name:
                candidate.close()
                return None
            self._fallback = candidate
        return self._fallback

    def _drain_failed(self) -> None:
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                job._deliver(Unavailable("the engine stopped", code="not_ready"))
                job._deliver(_END)
