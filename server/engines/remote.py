"""The engine in a process of its own (``--engine-process``).

One Python process has one GIL, shared by the event loop (sockets, framing, the speech
pipeline) and the engine thread's host work (dispatching a step's operations, reading its
audio back). A NumPy or PyTorch call lets go of the GIL while it runs and on return waits
until a busy loop yields it, up to the switch interval (5 ms): beside a saturated loop
every one of a step's calls may wait (bench/gil_convoy.py). vLLM V1 moved its engine core
out of the API server's process for this reason.

:func:`remote_factory` wraps an engine factory so that the engine is built and run in a
child process (started with ``spawn``: no state of the server's copied into it) and the
engine thread holds a :class:`RemoteEngine` that speaks for it. The scheduler, its policy,
jobs, deadlines, metrics and the fallback voice stay in the server; only the engine's
calls cross, one message each way per call: a batched step is one round trip however many
rows it takes (rows opened and closed since the last call travel with it), a
``synthesize`` generator one per chunk (so it pays for a batching engine; the server warns
for one that does not batch). A call and its answer go through shared buffers
(:mod:`server.engines.remote_wire`: the engine thread lets go of the GIL once a call).
What crosses:

- rows: the request when a row opens, its id and ``hurry`` for a step; back the rows
  that made audio, ended or failed, with their chunks (float32 arrays, pickled);
- whole-call failures come back as the exception the engine raised (as ``RuntimeError``
  naming its type when it cannot be pickled), so the scheduler rescues rows as it would
  in one process;
- ``check_voice``, which the event loop calls, goes over a second pipe answered by a
  thread of the child (read-only, as the contract allows), and a voice accepted once is
  not asked again;
- voice making (``voice_from_clip``, ``mix_speakers``), warm-up, idle release and close.

If the child dies (killed, out of memory), the call in progress raises
:class:`EngineProcessLost`, the engine thread ends (:mod:`server.runtime.engine_thread`)
and /health fails, so a supervisor restarts the server. The child ends when the server
closes the engine or when its pipe closes (the server died); it ignores SIGINT and SIGTERM
(Ctrl-C in a terminal, a service manager signalling the whole group), so the server
drains first.

A ``synthesize`` generator's ``should_stop`` is polled in the server between chunks: an
engine that makes a segment whole in one chunk (ChatTTS with ``--decoder chattts``) is
not stopped inside it.
"""

from __future__ import annotations

import _multiprocessing
import functools
import itertools
import logging
import multiprocessing
import multiprocessing.util
import os
import pickle
import threading
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from server.engines.base import (
    DEFAULT_SPEED_RANGE,
    Batcher,
    BatchRow,
    Engine,
    SynthesisRequest,
    VoiceSpec,
    WordMarks,
)
from server.engines.remote_child import child_main
from server.engines.remote_wire import Mailbox, semaphore, shared_buffer
from server.engines.select import EngineFactory
from streaming.errors import Unavailable

__all__ = ["EngineProcessLost", "RemoteEngine", "remote_factory"]

logger = logging.getLogger(__name__)

#: Voices the server remembers as accepted by the child's ``check_voice``.
CHECKED_VOICES = 4096
#: How long closing waits for the child to end before it is killed.
CLOSE_TIMEOUT_S = 10.0
#: Bytes of the shared buffers a call and its answer are written to; a larger one (a
#: voice's clip, a step whose rows all bring back long chunks) goes over the pipe.
CALL_BUFFER_BYTES = 1 << 20
ANSWER_BUFFER_BYTES = 16 << 20


class EngineProcessLost(RuntimeError):
    """The engine's process ended while the server still needed it."""


def remote_factory(
    factory: EngineFactory, *, log_level: str = "info", log_format: str = "text"
) -> EngineFactory:
    """``factory`` run in a child process: a factory (for the engine thread) that starts
    the child, waits for its engine to load, and returns a :class:`RemoteEngine`.
    ``factory`` must pickle (a module-level function, or a ``functools.partial`` of one);
    the child logs at ``log_level`` in ``log_format`` like the server."""
    pickle.dumps(factory)  # fail at start-up, in the caller's words, not in the child
    return functools.partial(_start, factory, log_level, log_format)


def _start(
    factory: EngineFactory, log_level: str, log_format: str
) -> tuple[Engine, bool, str | None]:
    context = multiprocessing.get_context("spawn")
    main, main_child = context.Pipe()
    control, control_child = context.Pipe()
    (asked_name, asked), (answered_name, answered) = semaphore(), semaphore()
    calls_path, calls = shared_buffer(CALL_BUFFER_BYTES)
    answers_path, answers = shared_buffer(ANSWER_BUFFER_BYTES)
    process = context.Process(
        target=child_main,
        args=(main_child, control_child, (calls_path, asked_name),
              (answers_path, answered_name), factory, log_level, log_format),
        name="tts-engine",
        # Not a daemon: an engine may start processes of its own (torch.compile's
        # workers). It ends with the server all the same (_end_child at exit).
        daemon=False,
    )  # fmt: skip
    try:
        try:
            process.start()
            # Only the child holds its ends now: its death reads as end of file here.
            main_child.close()
            control_child.close()
            main.recv()  # the child has mapped the buffers: their names can go
        finally:
            for path in (calls_path, answers_path):
                os.unlink(path)
            for name in (asked_name, answered_name):
                _multiprocessing.sem_unlink(name)
        status, value = main.recv()
    except (EOFError, OSError):
        if process.pid is None:  # it never started
            raise
        process.join(CLOSE_TIMEOUT_S)
        raise EngineProcessLost(
            f"the engine process (pid {process.pid}) ended while loading "
            f"(exit code {process.exitcode})"
        ) from None
    if status == "err":
        process.join(CLOSE_TIMEOUT_S)
        raise value
    hello: dict[str, Any] = value
    logger.info("the %s engine runs in process %d", hello["name"], process.pid)
    engine = RemoteEngine(
        process, Mailbox(calls, asked, main), Mailbox(answers, answered, main), control, hello
    )
    # Before multiprocessing joins its children at exit (from atexit in the server, at
    # the end of a multiprocessing child's run): the child would wait for this pipe.
    multiprocessing.util.Finalize(
        engine, _end_child, args=(process, main, control), exitpriority=10
    )
    return engine, hello["degraded"], hello["detail"]


def _end_child(process: Any, main: Connection, control: Connection) -> None:
    """End the child: its pipes closed it reads end of file and returns; killed if it
    does not within :data:`CLOSE_TIMEOUT_S`."""
    main.close()
    control.close()
    process.join(CLOSE_TIMEOUT_S)
    if process.is_alive():
        logger.warning("the engine process did not end within %.0f s: killing it", CLOSE_TIMEOUT_S)
        process.kill()  # it ignores SIGTERM
        process.join(CLOSE_TIMEOUT_S)


class RemoteEngine:
    """An :class:`~server.engines.base.Engine` whose calls run in the child process
    (see the module docstring). Every method but :meth:`check_voice` is called from the
    engine thread only, as the engine contract says."""

    def __init__(
        self,
        process: Any,
        calls: Mailbox,
        answers: Mailbox,
        control: Connection,
        hello: dict[str, Any],
    ) -> None:
        self.process = process
        self.pid: int = process.pid
        self._calls = calls
        self._answers = answers
        self._control = control
        self._control_lock = threading.Lock()
        self.name: str = hello["name"]
        self.sample_rate_hz: int = hello["sample_rate_hz"]
        self._interleaves: bool = hello["interleaves"]
        self.speed_range: tuple[float, float] = hello["speed_range"] or DEFAULT_SPEED_RANGE
        self.identity: str | None = hello["identity"]
        #: What server.voices.mix looks for: None when the child's engine cannot mix.
        self.mix_speakers: Callable[[Sequence[tuple[VoiceSpec, float]]], str] | None = (
            self._mix_speakers if hello["mixes"] else None
        )
        self._lost = False
        self._checked: dict[str, None] = {}
        #: Row and generator events not sent yet; they travel with the next call.
        self._events: list[tuple[Any, ...]] = []
        self._ids = itertools.count()

    @property
    def lost(self) -> bool:
        """The child has ended (read from any thread: /health asks)."""
        return self._lost or not self.process.is_alive()

    # --- the engine contract ----------------------------------------------------------

    @property
    def interleaves(self) -> bool:
        return self._interleaves

    def warm_up(self) -> None:
        self._call("call", "warm_up", ())

    def release_idle_memory(self) -> None:
        self._call("call", "release_idle_memory", ())

    def voice_from_clip(self, audio: np.ndarray, sample_rate_hz: int) -> str:
        voice: str = self._call("call", "voice_from_clip", (audio, sample_rate_hz))
        return voice

    def _mix_speakers(self, specs: Sequence[tuple[VoiceSpec, float]]) -> str:
        voice: str = self._call("call", "mix_speakers", (list(specs),))
        return voice

    def check_voice(self, voice: str) -> None:
        """Asked of the child once per voice it accepts (from the event loop: its engine
        thread is not involved)."""
        if voice in self._checked:
            return
        if self.lost:
            raise Unavailable("the engine process ended", code="not_ready")
        with self._control_lock:
            try:
                self._control.send(voice)
                problem: tuple[str, str] | None = self._control.recv()
            except (EOFError, OSError):
                raise Unavailable("the engine process ended", code="not_ready") from None
        if problem is not None:
            kind, message = problem
            if kind == "invalid":
                raise ValueError(message)
            raise Unavailable(f"the engine could not check the voice: {message}",
                              code="not_ready")  # fmt: skip
        if len(self._checked) >= CHECKED_VOICES:
            self._checked.pop(next(iter(self._checked)))
        self._checked[voice] = None

    def synthesize(
        self, request: SynthesisRequest, should_stop: Callable[[], bool]
    ) -> Iterator[np.ndarray | WordMarks]:
        key = next(self._ids)
        self._events.append(("generate", key, request))
        try:
            while not should_stop():
                items, finished = self._call("next", key)
                yield from items
                if finished:
                    return
        finally:
            self._events.append(("forget", key))

    def batcher(self, max_batch: int) -> Batcher | None:
        found: tuple[int, bool] | None = self._call("batcher", max_batch)
        if found is None:
            logger.warning(
                "the %s engine does not batch (--max-batch %d): in a process of its own each "
                "chunk is a round trip to it; --engine-process pays for a batching engine "
                "(ChatTTS, --max-batch above 1) on a host with a core to spare",
                self.name,
                max_batch,
            )
            return None
        rows, together = found
        return _TogetherBatcher(self, rows) if together else _RemoteBatcher(self, rows)

    def close(self) -> None:
        process = self.process
        if not self.lost:
            try:
                self._call("close")
            except Exception:
                logger.exception("the engine process did not close cleanly")
        _end_child(process, self._calls.pipe, self._control)

    # --- the wire ---------------------------------------------------------------------

    def _call(self, op: str, *args: Any) -> Any:
        """Send ``op`` (with the events gathered since the last call) and return what the
        child answered, raising what it raised."""
        if self._lost:
            raise EngineProcessLost(f"the engine process (pid {self.pid}) has ended")
        events, self._events = self._events, []
        try:
            self._calls.put((events, op, args))
            status, value = self._answers.get(self.process.is_alive)
        except (EOFError, OSError):
            self._lost = True
            self.process.join(1.0)
            raise EngineProcessLost(
                f"the engine process (pid {self.pid}) ended (exit code {self.process.exitcode})"
            ) from None
        if status == "err":
            raise value
        return value


class _RemoteBatcher:
    """The child's batcher, spoken for: rows are ids there."""

    def __init__(self, engine: RemoteEngine, max_batch: int) -> None:
        self._engine = engine
        self._max_batch = max_batch
        self._rows: dict[int, BatchRow] = {}
        self._memory: int | None = None

    @property
    def max_batch(self) -> int:
        return self._max_batch

    def open(self, request: SynthesisRequest) -> BatchRow:
        key = next(self._engine._ids)
        row = BatchRow(request, state=key)
        self._rows[key] = row
        self._engine._events.append(("open", key, request))
        return row

    def close(self, row: BatchRow) -> None:
        self._rows.pop(row.state, None)
        self._engine._events.append(("close", row.state))

    def prefill(self, row: BatchRow) -> None:
        self._run("prefill", [row])

    def step(self, rows: Sequence[BatchRow]) -> None:
        self._run("step", rows)

    def memory_bytes(self) -> int | None:
        return self._memory

    def _run(self, op: str, rows: Sequence[BatchRow]) -> None:
        """One call for ``rows``; what each row made lands on it; a failure of the whole
        call raises after the rows' own news is in."""
        asked = [(row.state, row.hurry) for row in rows]
        updates, memory, failure = self._engine._call("rows", op, asked)
        self._memory = memory
        for key, chunks, done, error in updates:
            row = self._rows.get(key)
            if row is None:
                continue
            row.chunks.extend(chunks)
            row.done = done
            if error is not None:
                row.error = error
        if failure is not None:
            raise failure


class _TogetherBatcher(_RemoteBatcher):
    """A child's batcher that prefills several rows in one forward."""

    def prefill_many(self, rows: Sequence[BatchRow]) -> None:
        self._run("prefill_many", rows)
