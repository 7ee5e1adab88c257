"""Jobs: one segment's synthesis as the event loop sees it, and the hand-off that brings
its audio over from the engine thread.

A :class:`Job` is made on the event loop (:meth:`EngineWorker.submit`) and iterated there
(:meth:`Job.chunks`); the engine thread delivers into it through the worker's
:class:`Handoff`, which wakes each event loop once per engine step for every job that got
something, not once per chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np

from server.engines.base import Engine, SynthesisRequest, WordMarks
from streaming.errors import SynthesisTimeout, Unavailable

__all__ = ["FELL_BACK", "Call", "Handoff", "Inbox", "Job", "engine_stopped"]

#: Ends a job's iteration.
_END = object()
#: Ends a job's iteration with SynthesisTimeout: its waits used up their budget.
_TIMED_OUT = object()
#: Delivered before the fallback engine's chunks when the main engine failed a segment.
FELL_BACK = object()


def engine_stopped() -> Unavailable:
    return Unavailable("the engine stopped", code="not_ready")


class Handoff:
    """Items for jobs, gathered on the engine thread and handed to their event loops in
    one wake-up each per :meth:`flush`.

    With ``coalesce`` (the default), a loop that has not yet run its last wake-up is not
    woken again: what later rounds flush joins the hand-over already scheduled (in
    order), so an engine whose rounds outpace the loop costs the loop one wake-up (a
    ``call_soon_threadsafe``: a lock, a pipe write, a callback) per turn of the loop,
    not one per round. Without it, every flush schedules its own hand-over.
    """

    def __init__(self, *, coalesce: bool = True) -> None:
        self.coalesce = coalesce
        self._items: list[tuple[Job, object]] = []
        #: Items flushed, per loop, that its scheduled hand-over has not taken yet.
        self._flushed: dict[asyncio.AbstractEventLoop, list[tuple[Job, object]]] = {}
        self._lock = threading.Lock()
        #: Hand-overs scheduled on the loops so far (wake-ups).
        self.wakeups = 0

    def put(self, job: Job, item: object) -> None:
        with self._lock:
            self._items.append((job, item))

    def flush(self) -> None:
        """Wake the loops of every job that got something since the last flush."""
        with self._lock:
            items, self._items = self._items, []
            if not items:
                return
            loops = {job.loop for job, _ in items}
            wake: list[tuple[asyncio.AbstractEventLoop, list[tuple[Job, object]] | None]] = []
            for loop in loops:
                mine = items if len(loops) == 1 else [(j, i) for j, i in items if j.loop is loop]
                if not self.coalesce:
                    wake.append((loop, mine))
                elif loop in self._flushed:  # its hand-over is scheduled and not yet run
                    self._flushed[loop] += mine
                else:
                    self._flushed[loop] = mine
                    wake.append((loop, None))
            self.wakeups += len(wake)
        for loop, given in wake:
            try:
                if given is not None:
                    loop.call_soon_threadsafe(_hand_over, given)
                else:
                    loop.call_soon_threadsafe(self._hand_over_flushed, loop)
            except RuntimeError:  # the loop has closed at shutdown: nobody will take them
                with self._lock:
                    self._flushed.pop(loop, None)

    def _hand_over_flushed(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            items = self._flushed.pop(loop, [])
        _hand_over(items)


def _hand_over(items: list[tuple[Job, object]]) -> None:
    for job, item in items:
        job.receive(item)


class Job:
    """One segment's synthesis; iterate :meth:`chunks` on the event loop for its audio."""

    def __init__(
        self,
        request: SynthesisRequest,
        loop: asyncio.AbstractEventLoop,
        handoff: Handoff,
        *,
        deadline: float,
        order: int,
        playing: bool,
        on_end: Callable[[Job], None],
    ) -> None:
        self.request = request
        self.deadline = deadline  # time.monotonic() when playback reaches this audio
        self.order = order  # submission order: ties go to the earlier job
        #: The deadline came from a stream already playing (not "now, nothing buffered"):
        #: audio later than it is an underrun at the listener.
        self.playing = playing
        self.loop = loop
        self._handoff = handoff
        self._on_end = on_end
        # What the engine handed over, not yet taken, and the one wait for more: a deque
        # and a future, not an asyncio.Queue (a chunk through it 0.4 us against 0.08).
        self._ready: deque[object] = deque()
        self._waiter: asyncio.Future[None] | None = None
        # What chunks() may wait in all, what it has waited, since when it waits now,
        # and the one timer that checks (_wait).
        self._wait_budget_s = 0.0
        self._waited_s = 0.0
        self._waiting_since: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        # A flag, not a threading.Event (a lock and a condition made for every segment):
        # set from any thread, read by the engine's polls; nothing waits on it.
        self._cancelled = False
        self._ended = False
        self.engine_seconds = 0.0
        self.samples = 0
        self.fell_back = False  # spoken by the fallback engine after the main one failed
        #: Where the engine said the segment's words start, if it did (espeak-ng).
        self.marks: WordMarks | None = None
        #: Told of a cancel, from the thread that cancels (the scheduler's queue of them).
        self.on_cancel: Callable[[Job], None] | None = None

    # --- any thread -------------------------------------------------------------------

    def cancel(self) -> None:
        """Ask the engine to stop at its next step; safe from any thread."""
        self._cancelled = True
        if self.on_cancel is not None:
            self.on_cancel(self)

    def is_cancelled(self) -> bool:
        """The ``should_stop`` the engine polls; safe from any thread."""
        return self._cancelled

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    # --- engine thread ----------------------------------------------------------------

    def deliver(self, item: np.ndarray | BaseException | object) -> None:
        """Queue ``item`` (audio, an error, :data:`FELL_BACK`) for the consumer; it
        reaches the loop at the worker's next flush."""
        self._handoff.put(self, item)

    def add_audio(self, chunk: np.ndarray) -> None:
        """Count and deliver one chunk of audio (empty or cancelled: nothing)."""
        if not chunk.size or self.cancelled:
            return
        self.samples += int(chunk.size)
        self.deliver(np.ascontiguousarray(chunk, dtype=np.float32))

    def end(self, error: BaseException | None = None) -> None:
        """The job is over (after ``error``, when given); once, from any thread."""
        if self._ended:
            return
        self._ended = True
        if error is not None:
            self.deliver(error)
        self.deliver(_END)
        self._on_end(self)

    # --- event loop -------------------------------------------------------------------

    def receive(self, item: object) -> None:
        self._ready.append(item)
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    @property
    def handed_over(self) -> list[object]:
        """What was handed over and not yet taken, in order (for tests and debugging)."""
        return list(self._ready)

    def abandon(self) -> None:
        """Cancel, and end the consumer's iteration now rather than at the engine's next
        step. Call on the event loop; what the engine still delivers is ignored."""
        self.cancel()
        self.receive(_END)

    async def chunks(self, timeout_s: float, *, join_samples: int = 0) -> AsyncIterator[np.ndarray]:
        """Yield the chunks as they are made; raise on engine failure or timeout.

        ``timeout_s`` bounds the time spent waiting for this segment's audio, queueing
        included, but not the time the caller spends between chunks (sending them to a
        slow client is not slow synthesis); on expiry the job is cancelled so the
        engine moves on. Chunks already handed over when one is taken are yielded with
        it as one, until that holds ``join_samples`` or more (the last chunk taken may
        pass it; 0: never joined): an engine ahead of the loop costs it one pass down
        the speech path, not one a chunk.
        """
        self._wait_budget_s = timeout_s
        self._waited_s = 0.0
        held: object = None  # taken while joining, not audio: the next item
        ready = self._ready
        try:
            while True:
                if held is not None:
                    item, held = held, None
                elif ready:  # handed over already: no wait
                    item = ready.popleft()
                else:
                    item = await self._wait()
                if item is _END:
                    return
                if item is _TIMED_OUT:
                    self.cancel()
                    raise SynthesisTimeout(f"segment not synthesised within {timeout_s:g} s")
                if item is FELL_BACK:
                    self.fell_back = True
                    continue
                if isinstance(item, BaseException):
                    raise item
                assert isinstance(item, np.ndarray)
                if join_samples and ready and item.size < join_samples:
                    item, held = _join_ready(item, ready, join_samples)
                yield item
        finally:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    async def _wait(self) -> object:
        """The next item, the time waited counted against :meth:`chunks`' budget.

        One timer a job, not one a wait: armed at a wait when none is, for when the
        budget would run out were the job waiting from now on; when it fires it looks
        (:meth:`_wait_checked`) and either ends the wait or is armed again for what is
        left. A segment's chunks are a few wake-ups apart and its budget tens of
        seconds, so most waits arm nothing."""
        since = self.loop.time()
        if self._timer is None:
            left_s = max(self._wait_budget_s - self._waited_s, 0.0)
            self._timer = self.loop.call_at(since + left_s, self._wait_checked)
        self._waiting_since = since
        try:
            while not self._ready:
                self._waiter = self.loop.create_future()
                await self._waiter
            return self._ready.popleft()
        finally:
            self._waiter = None
            self._waiting_since = None
            self._waited_s += self.loop.time() - since

    def _wait_checked(self) -> None:
        """The timer of :meth:`_wait`: the budget is spent if the job is waiting still
        (nothing queued for it) and has waited it all."""
        self._timer = None
        since = self._waiting_since
        if since is None or self._ready:
            return  # not waiting (or its wait is over): the next wait arms it again
        now = self.loop.time()
        left_s = self._wait_budget_s - self._waited_s - (now - since)
        if left_s > 0:
            self._timer = self.loop.call_at(now + left_s, self._wait_checked)
        else:
            self.receive(_TIMED_OUT)


def _join_ready(
    first: np.ndarray, ready: deque[object], join_samples: int
) -> tuple[np.ndarray, object]:
    """``first`` and the audio chunks queued after it, joined up to ``join_samples``;
    and the item taken that is not audio (an end, an error), if one was. ``first``
    itself when nothing joined it (a segment's last chunk, its end queued behind it)."""
    parts, size = [first], first.size
    held: object = None
    while size < join_samples and ready:
        item = ready.popleft()
        if not isinstance(item, np.ndarray):
            held = item
            break
        parts.append(item)
        size += item.size
    return (np.concatenate(parts) if len(parts) > 1 else first), held


class Call:
    """A function to run on the engine thread between steps (:meth:`EngineWorker.call`)."""

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

    def end(self, error: BaseException | None = None) -> None:
        self._settle(None, error or Unavailable("the engine has stopped", code="not_ready"))

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


class Inbox:
    """Work for the engine thread (jobs, calls; None asks it to stop), and what of it is
    still in flight: put on the event loop, taken on the engine thread."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Job | Call | None] = queue.SimpleQueue()
        self._in_flight: set[Job | Call] = set()
        self._lock = threading.Lock()

    def put(self, item: Job | Call | None) -> bool:
        """Queue ``item``; True when nothing else was in flight (the engine was idle)."""
        with self._lock:
            idle = not self._in_flight
            if item is not None:
                self._in_flight.add(item)
        self._queue.put(item)
        return idle

    def get(self, timeout_s: float | None = None, *, block: bool = True) -> Job | Call | None:
        """The next item; raises :class:`queue.Empty` after ``timeout_s`` (or at once when
        not ``block``)."""
        if not block:
            return self._queue.get_nowait()
        return self._queue.get(timeout=timeout_s)

    def ended(self, item: Job | Call) -> None:
        with self._lock:
            self._in_flight.discard(item)

    def in_flight(self) -> list[Job | Call]:
        with self._lock:
            return list(self._in_flight)

    def refuse_queued(self, handoff: Handoff) -> None:
        """End everything still queued (the engine stopped or never started)."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item.end(engine_stopped())
        handoff.flush()
