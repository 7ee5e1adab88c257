"""The engine worker: one dedicated thread per model instance, fed from the event loop.

The thread loads the engine, warms it up, then schedules synthesis jobs. The event loop
never runs torch; chunks come back through ``loop.call_soon_threadsafe`` into a per-job
asyncio queue.

Scheduling is the policy of :mod:`streaming.schedule` (earliest playback deadline first)
at chunk granularity. When the engine can interleave (its ``synthesize`` generators are
independent, ``Engine.interleaves``), up to ``max_active`` jobs are in flight and the
thread advances the most urgent one by one chunk: a new stream gets its first audio
after one chunk of the others, not after their whole segments. Other engines run one job
at a time, still picked by deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from server.engines.base import (
    Batcher,
    Cancelled,
    Engine,
    SynthesisRequest,
    Utterance,
    WordMarks,
)
from server.metrics import Metrics
from streaming.errors import SynthesisError, SynthesisTimeout, Unavailable
from streaming.schedule import (
    BatchPolicy,
    StepCosts,
    admit,
    capacity,
    most_urgent,
    plan_step,
    urgency,
)

logger = logging.getLogger(__name__)

_END = object()
#: Delivered before the fallback engine's chunks when the main engine failed a segment.
_FELL_BACK = object()


def _engine_stopped() -> Unavailable:
    return Unavailable("the engine stopped", code="not_ready")


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


@dataclass
class EngineStatus:
    state: str  # loading | ready | failed | stopped
    engine: str | None = None
    degraded: bool = False
    detail: str | None = None
    load_seconds: float | None = None


class Job:
    """One segment's synthesis; iterate it on the event loop to receive its chunks."""

    def __init__(
        self,
        request: SynthesisRequest,
        loop: asyncio.AbstractEventLoop,
        *,
        deadline: float,
        order: int,
    ) -> None:
        self.request = request
        self.deadline = deadline  # time.monotonic() when playback reaches this audio
        self.order = order  # submission order: ties go to the earlier job
        self._loop = loop
        self._chunks: asyncio.Queue[object] = asyncio.Queue()
        self._handoff: list[object] = []  # from the engine thread, not yet on the loop
        self._handoff_lock = threading.Lock()
        self._wake_pending = False
        self._cancelled = threading.Event()
        self.engine_seconds = 0.0
        self.samples = 0
        self.fell_back = False  # spoken by the fallback engine after the main one failed
        #: Where the engine said the segment's words start, if it did (espeak-ng).
        self.marks: WordMarks | None = None
        #: The deadline came from a stream already playing (not "now, nothing buffered"):
        #: audio later than it is an underrun at the listener.
        self.playing = False

    def cancel(self) -> None:
        """Ask the engine to stop at its next step; safe from any thread."""
        self._cancelled.set()

    def abandon(self) -> None:
        """Cancel, and end the consumer's iteration now rather than at the engine's next step.

        Call on the event loop. Chunks the engine still delivers afterwards are ignored.
        """
        self.cancel()
        self._chunks.put_nowait(_END)

    def is_cancelled(self) -> bool:
        """The ``should_stop`` the engine polls; safe from any thread."""
        return self._cancelled.is_set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def _end_stopped(self) -> None:
        """End the consumer's iteration with ``not_ready``: the engine stopped (any thread)."""
        self._deliver(_engine_stopped())
        self._deliver(_END)

    def _deliver(self, item: object) -> None:
        """Hand ``item`` to the consumer (from the engine thread).

        Items wait in a thread-safe list; the loop is woken once for all that arrive
        before it runs (one wake-up, not one per chunk, when the engine runs ahead).
        """
        with self._handoff_lock:
            self._handoff.append(item)
            if self._wake_pending:
                return
            self._wake_pending = True
        # The loop may already be closed at shutdown.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._take_handoff)

    def _take_handoff(self) -> None:
        with self._handoff_lock:
            items, self._handoff = self._handoff, []
            self._wake_pending = False
        for item in items:
            self._chunks.put_nowait(item)

    async def chunks(self, timeout_s: float) -> AsyncIterator[np.ndarray]:
        """Yield the chunks as they are made; raise on engine failure or timeout.

        ``timeout_s`` bounds the time spent waiting for this segment's audio, queueing
        included, but not the time the caller spends between chunks (sending them to a
        slow client is not slow synthesis); on expiry the job is cancelled so the
        engine moves on.
        """
        remaining = timeout_s
        while True:
            waiting_since = self._loop.time()
            try:
                async with asyncio.timeout(max(remaining, 0)):
                    item = await self._chunks.get()
            except TimeoutError:
                self.cancel()
                raise SynthesisTimeout(f"segment not synthesised within {timeout_s:g} s") from None
            remaining -= self._loop.time() - waiting_since
            if item is _END:
                return
            if item is _FELL_BACK:
                self.fell_back = True
                continue
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, np.ndarray)
            yield item


T = TypeVar("T")


class _Call:
    """A function to run on the engine thread between steps (``EngineWorker.call``)."""

    def __init__(self, fn: Callable[[Engine], Any], loop: asyncio.AbstractEventLoop) -> None:
        self.fn = fn
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()

    def run(self, engine: Engine) -> None:
        try:
            result = self.fn(engine)
        except BaseException as exc:  # handed to the caller, whatever it is
            self._settle(None, exc)
        else:
            self._settle(result, None)

    def _end_stopped(self) -> None:
        self._settle(None, Unavailable("the engine has stopped", code="not_ready"))

    def _settle(self, result: Any, error: BaseException | None) -> None:
        def settle() -> None:
            if self.future.done():
                return
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(result)

        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
            self.loop.call_soon_threadsafe(settle)


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
        options = options or WorkerOptions()
        warm_up = options.warm_up
        idle_release_s = options.idle_release_s
        max_active = options.max_active
        policy = options.policy
        headroom = options.headroom
        self._factory = factory
        self._fallback_factory = fallback
        self._idle_release_s = idle_release_s
        self._max_active = max_active
        #: The batching policy; max_batch 1 turns batching off (segments interleave).
        self.policy = policy or BatchPolicy(max_batch=1)
        self._headroom = headroom
        #: What a batched step costs (learnt on the engine thread, read by admission).
        self.step_costs = StepCosts()
        self._rtf: float | None = None  # engine seconds per audio second, interleaved jobs
        self._batching = False
        self._submitted = itertools.count()
        self._fallback: Engine | None = None
        self._metrics = metrics
        self._warm_up = warm_up
        self._jobs: queue.SimpleQueue[Job | _Call | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self._ready = threading.Event()
        self._stopping = False
        self.engine: Engine | None = None
        self.status = EngineStatus(state="loading")
        self._pending = 0
        self._active = 0
        self._pending_lock = threading.Lock()
        self._set_state(self.status)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        """False when the engine thread has died on its own (not loading, not stopped)."""
        if self._stopping or not self._ready.is_set() or self.status.state == "failed":
            return True  # loading, shutting down, or a load failure (/ready reports those)
        return self._thread.is_alive()

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
            return self._pending > 0 or self._active > 0

    def _set_state(self, status: EngineStatus) -> None:
        self.status = status
        for state in ("loading", "ready", "failed", "stopped"):
            self._metrics.engine_state.labels(state=state).set(int(state == status.state))
        self._metrics.engine_degraded.set(int(status.degraded))
        if status.load_seconds is not None:
            self._metrics.engine_load_seconds.set(status.load_seconds)

    @property
    def batches(self) -> bool:
        """The engine runs batched steps (known once it is loaded)."""
        return self._batching

    def capacity(self) -> int | None:
        """How many real-time streams the engine carries, from what it has measured; None
        until it has (batched: step costs by batch size; otherwise: each segment's
        engine time per second of audio)."""
        if self._batching:
            return capacity(self.step_costs, self.policy.max_batch, self._headroom)
        if self._rtf is None or self._rtf <= 0:
            return None
        return min(self._max_active, int(self._headroom / self._rtf))

    def check_voice(self, voice: str) -> None:
        """Raise ValueError, naming what is accepted, when the engine cannot use ``voice``."""
        if self.engine is None:
            raise Unavailable("the engine is not loaded yet", code="not_ready")
        self.engine.check_voice(voice)

    def wait_ready(self, timeout_s: float | None = None) -> bool:
        """Block until the engine is ready or failed (for the CLI and tests)."""
        self._ready.wait(timeout_s)
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
            deadline=now if deadline is None else deadline,
            order=next(self._submitted),
        )
        job.playing = deadline is not None and deadline > now
        with self._pending_lock:
            self._pending += 1
            self._metrics.queue_depth.set(self._pending)
        self._jobs.put(job)
        return job

    async def call(self, fn: Callable[[Engine], T], *, timeout_s: float = 120.0) -> T:
        """Run ``fn(engine)`` on the engine thread, between two steps, and return its
        result (or raise what it raised). For work that needs the model but is not a
        segment: a voice made from a reference clip. Unavailable when the engine is not
        running or stops first; SynthesisTimeout after ``timeout_s``."""
        if not self.ready or self._stopping:
            raise Unavailable(f"the engine is {self.status.state}", code="not_ready")
        call = _Call(fn, asyncio.get_running_loop())
        self._jobs.put(call)
        if self._stopping:  # stop() may have drained the queue just before the put
            self._drain_failed()
        try:
            result: T = await asyncio.wait_for(call.future, timeout_s)
        except TimeoutError:
            raise SynthesisTimeout(
                f"the engine did not get to it within {timeout_s:g} s", code="timeout"
            ) from None
        return result

    def stop(self, timeout_s: float = 10.0) -> None:
        """Cancel the jobs in flight (at their next step), refuse the queued ones, release
        the engine."""
        self._stopping = True
        self._jobs.put(None)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            logger.warning("engine thread did not stop within %.1f s", timeout_s)
        else:
            self._drain_failed()  # jobs submitted while the thread was stopping

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
            self._schedule(engine)
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

    def _schedule(self, engine: Engine) -> None:
        """Run jobs until ``stop()``: batched steps when the engine batches, else the most
        urgent job advanced a chunk at a time."""
        limit = self._max_active if engine.interleaves else 1
        waiting: list[Job] = []
        active: list[_Running] = []
        batcher = engine.batcher(self.policy.max_batch) if self.policy.max_batch > 1 else None
        self._batching = batcher is not None
        if batcher is not None:
            logger.info("batching up to %d segments per step", batcher.max_batch)
        try:
            if batcher is not None:
                self._batched_loop(engine, batcher, waiting, active)
            else:
                self._schedule_loop(engine, limit, waiting, active)
        except BaseException:
            logger.exception("the engine thread failed; ending every job in flight")
            for job in [*waiting, *(running.job for running in active)]:
                job._end_stopped()
            raise

    def _schedule_loop(
        self, engine: Engine, limit: int, waiting: list[Job], active: list[_Running]
    ) -> None:
        while True:
            if self._take_jobs(engine, waiting, block=not waiting and not active):
                self._stop_all(active, waiting)
                return
            self._leave_cancelled(active)
            for job in admit(waiting, len(active), limit):
                self._count_admitted()
                admitted = self._begin(engine, job)
                if admitted is not None:
                    active.append(admitted)
            if not active:
                continue
            running = most_urgent(active, engine.sample_rate_hz)
            if not self._advance(engine, running):
                active.remove(running)
                self._finish(running)

    def _batched_loop(
        self, engine: Engine, batcher: Batcher, waiting: list[Job], active: list[_Running]
    ) -> None:
        rate = engine.sample_rate_hz
        while True:
            if self._take_jobs(engine, waiting, block=not waiting and not active):
                self._stop_all(active, waiting)
                return
            self._leave_cancelled(active)
            for job in admit(waiting, len(active), batcher.max_batch):
                self._count_admitted()
                joined = self._join(engine, batcher, job)
                if joined is not None:
                    active.append(joined)
            self._prefill(engine, batcher, active, rate)
            ready = [r for r in active if r.utterance_ready]
            if ready:
                self._step(
                    engine, batcher, active, plan_step(ready, time.monotonic(), rate, self.policy)
                )

    def _join(self, engine: Engine, batcher: Batcher, job: Job) -> _Running | None:
        if job.request.fallback:
            self._speak_on_fallback(engine, job)
            self._finish(_Running(job, iter(())))
            return None
        try:
            return _Running(job, iter(()), batcher.open(job.request), batcher)
        except Exception:
            logger.exception("synthesis failed to start for %r", job.request.text[:40])
            self._fall_back(engine, job)
            self._finish(_Running(job, iter(())))
            return None

    def _prefill(self, engine: Engine, batcher: Batcher, active: list[_Running], rate: int) -> None:
        """Start at most ``prefills_per_step`` joining utterances, the most urgent first."""
        joining = [r for r in active if r.utterance is not None and not r.utterance.prefilled]
        for running in sorted(joining, key=urgency)[: self.policy.prefills_per_step]:
            assert running.utterance is not None
            started = time.perf_counter()
            try:
                batcher.prefill(running.utterance)
                running.utterance.prefilled = True
            except Exception:
                logger.exception("synthesis failed to start for %r", running.job.request.text[:40])
                running.utterance.error = RuntimeError("prefill failed")
            running.job.engine_seconds += time.perf_counter() - started
            self._after_batch_call(engine, running, active, rate)

    def _step(
        self, engine: Engine, batcher: Batcher, active: list[_Running], plan: list[_Running]
    ) -> None:
        """One batched step for the rows of ``plan``, timed and shared out among them."""
        now = time.monotonic()
        utterances = []
        for running in plan:
            assert running.utterance is not None
            running.utterance.hurry = self.policy.hurries(running, now, engine.sample_rate_hz)
            utterances.append(running.utterance)
        started = time.perf_counter()
        try:
            batcher.step(utterances)
        except Exception:
            logger.exception("a batched step of %d segments failed", len(plan))
            for utterance in utterances:
                utterance.error = RuntimeError("batched step failed")
        elapsed = time.perf_counter() - started
        self.step_costs.observe(len(plan), elapsed)
        self._metrics.observe_step(len(plan), elapsed)
        memory = batcher.memory_bytes()
        if memory is not None:
            self._metrics.gpu_memory_bytes.labels(batch=str(len(plan))).set(memory)
        for running in plan:
            running.job.engine_seconds += elapsed / len(plan)
            self._after_batch_call(engine, running, active, engine.sample_rate_hz)

    def _after_batch_call(
        self, engine: Engine, running: _Running, active: list[_Running], rate: int
    ) -> None:
        """Deliver what the utterance made; let it leave when it ended or failed."""
        utterance = running.utterance
        assert utterance is not None
        for chunk in utterance.chunks:
            self._deliver_chunk(running.job, chunk, rate)
        utterance.chunks.clear()
        if utterance.error is not None:
            active.remove(running)
            running.close()
            self._fall_back(engine, running.job)
            self._finish(running)
        elif utterance.done:
            active.remove(running)
            self._finish(running)

    def _leave_cancelled(self, active: list[_Running]) -> None:
        # A cancelled job leaves at once, not when its deadline comes up.
        for running in [r for r in active if r.job.cancelled]:
            active.remove(running)
            self._finish(running)

    def _count_admitted(self) -> None:
        with self._pending_lock:
            self._pending -= 1
            self._active += 1
            self._metrics.queue_depth.set(self._pending)

    def _stop_all(self, active: list[_Running], waiting: list[Job]) -> None:
        for running in active:
            if not running.job.cancelled:  # still awaited: say why its audio ends
                running.job._deliver(_engine_stopped())
            running.job.cancel()
            self._finish(running)
        for job in waiting:
            job._end_stopped()
        with self._pending_lock:
            self._pending -= len(waiting)
        waiting.clear()

    def _deliver_chunk(self, job: Job, chunk: np.ndarray | WordMarks, rate: int) -> None:
        if isinstance(chunk, WordMarks):
            job.marks = chunk  # read by the loop once the job has ended
            return
        if not chunk.size or job.cancelled:
            return
        if job.playing and time.monotonic() > job.deadline + job.samples / rate:
            self._metrics.deadline_misses.inc()  # its listener ran dry before this audio
        job.samples += int(chunk.size)
        job._deliver(np.ascontiguousarray(chunk, dtype=np.float32))

    def _begin(self, engine: Engine, job: Job) -> _Running | None:
        if job.request.fallback:
            self._speak_on_fallback(engine, job)
            self._finish(_Running(job, iter(())))
            return None
        try:
            return _Running(job, engine.synthesize(job.request, job.is_cancelled))
        except Exception:
            logger.exception("synthesis failed to start for %r", job.request.text[:40])
            self._fall_back(engine, job)
            self._finish(_Running(job, iter(())))
            return None
        except BaseException:
            job._end_stopped()
            raise

    def _take_jobs(self, engine: Engine, waiting: list[Job], *, block: bool) -> bool:
        """Move submitted jobs into ``waiting``; True when ``stop()`` was called.

        With nothing to do it blocks, and after ``idle_release_s`` lets the engine free
        memory (``Engine.release_idle_memory``: ChatTTS on CUDA empties the allocator
        cache, as the seed article advises for idle periods), once per idle period, on
        this thread, so it never races a synthesis.
        """
        while True:
            try:
                if block:
                    job = self._jobs.get(timeout=self._idle_release_s)
                    block = False
                else:
                    job = self._jobs.get_nowait()
            except queue.Empty:
                if not block:
                    return False
                self._release_idle_memory(engine)
                job = self._jobs.get()
                block = False
            if job is None:
                return True
            if isinstance(job, _Call):
                job.run(engine)
                continue
            waiting.append(job)

    def _release_idle_memory(self, engine: Engine) -> None:
        try:
            engine.release_idle_memory()
        except Exception:
            logger.exception("releasing idle memory failed")
        self._metrics.idle_releases.inc()

    def _advance(self, engine: Engine, running: _Running) -> bool:
        """Produce one chunk of ``running``; False once the job is over."""
        job = running.job
        if job.cancelled:
            return False
        started = time.perf_counter()
        try:
            chunk = next(running.chunks)
        except StopIteration:
            return False
        except Cancelled:
            return False
        except Exception:
            logger.exception("synthesis failed for %r", job.request.text[:40])
            running.close()
            self._fall_back(engine, job)
            return False
        finally:
            job.engine_seconds += time.perf_counter() - started
        self._deliver_chunk(job, chunk, engine.sample_rate_hz)
        return True

    def _finish(self, running: _Running) -> None:
        job = running.job
        # A cancelled job's generator is closed here, on the engine thread, not whenever
        # it happens to be garbage-collected.
        running.close()
        with self._pending_lock:
            self._active -= 1
        self._metrics.engine_busy_seconds.inc(job.engine_seconds)
        if job.cancelled:
            self._metrics.jobs_cancelled.inc()
        elif job.samples and self.engine is not None and not job.fell_back:
            rtf = job.engine_seconds / (job.samples / self.engine.sample_rate_hz)
            self._rtf = rtf if self._rtf is None else self._rtf + 0.1 * (rtf - self._rtf)
        job._deliver(_END)

    def _stream(self, engine: Engine, job: Job) -> None:
        """Run a whole synthesis at once (the fallback path)."""
        chunks = engine.synthesize(job.request, job.is_cancelled)
        try:
            for chunk in chunks:
                if job.cancelled:
                    break
                if isinstance(chunk, WordMarks):
                    job.marks = chunk
                elif chunk.size:
                    job.samples += int(chunk.size)
                    job._deliver(np.ascontiguousarray(chunk, dtype=np.float32))
        finally:
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
        self._speak_on(fallback, job)

    def _speak_on_fallback(self, engine: Engine, job: Job) -> None:
        """A segment of a context the server degraded (busy): the fallback voice speaks it."""
        fallback = self._fallback_engine(engine)
        if fallback is None:
            job._deliver(SynthesisError("the fallback voice is not available"))
            return
        self._speak_on(fallback, job)

    def _speak_on(self, fallback: Engine, job: Job) -> None:
        try:
            self._stream(fallback, job)
        except Cancelled:
            pass
        except Exception:
            logger.exception("the fallback engine failed too for %r", job.request.text[:40])
            job._deliver(SynthesisError("the engine failed on this segment"))

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
                job._end_stopped()


class _Running:
    """A job admitted to the engine: its chunk generator, advanced a chunk at a time, or
    its utterance in the batch."""

    def __init__(
        self,
        job: Job,
        chunks: Iterator[np.ndarray | WordMarks],
        utterance: Utterance | None = None,
        batcher: Batcher | None = None,
    ) -> None:
        self.job = job
        self.chunks = chunks
        self.utterance = utterance
        self._batcher = batcher

    @property
    def utterance_ready(self) -> bool:
        """In the batch, prefilled and not finished: it takes part in the next step."""
        u = self.utterance
        return u is not None and u.prefilled and not u.done and u.error is None

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

    def close(self) -> None:
        if self._batcher is not None and self.utterance is not None:
            batcher, self._batcher = self._batcher, None  # once: it gives the row back
            try:
                batcher.close(self.utterance)
            except Exception:
                logger.exception("leaving the batch failed for %r", self.job.request.text[:40])
            return
        close = getattr(self.chunks, "close", None)
        if close is None:
            return
        try:
            close()
        except Exception:
            # A generator whose cleanup fails must not take the engine thread down.
            logger.exception("closing the synthesis of %r failed", self.job.request.text[:40])
