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
for one that does not batch). A call and its answer are pickled into buffers both
processes map, each signalled by a semaphore (:class:`_Mailbox`): the engine thread lets
go of the GIL once a call, while it waits for the answer, where a pipe's reads and write
would each let go of it (and beside a busy loop wait for it again). What crosses:

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
import mmap
import multiprocessing
import multiprocessing.util
import os
import pickle
import secrets
import signal
import struct
import tempfile
import threading
import traceback
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
from streaming.errors import Unavailable

__all__ = ["EngineProcessLost", "RemoteEngine", "remote_factory"]

logger = logging.getLogger(__name__)

EngineFactory = Callable[[], tuple[Engine, bool, "str | None"]]

#: Voices the server remembers as accepted by the child's ``check_voice``.
CHECKED_VOICES = 4096
#: How long closing waits for the child to end before it is terminated.
CLOSE_TIMEOUT_S = 10.0


#: Bytes of the shared buffers a call and its answer are written to; a larger one (a
#: voice's clip, a step whose rows all bring back long chunks) goes over the pipe.
CALL_BUFFER_BYTES = 1 << 20
ANSWER_BUFFER_BYTES = 16 << 20
#: How often a side waiting for the other checks that it is still there.
POLL_S = 0.5
_SEMAPHORE = 1  # multiprocessing.synchronize.SEMAPHORE
_SEM_MAX = _multiprocessing.SemLock.SEM_VALUE_MAX


class EngineProcessLost(RuntimeError):
    """The engine's process ended while the server still needed it."""


class _Mailbox:
    """One direction of the calls: a buffer both processes map and a semaphore that says
    a message is in it. Posting a semaphore does not let go of the GIL and taking one
    that is already posted does not either, so a round trip lets go of it once, while
    the caller waits for the answer: beside a busy event loop it waits for the GIL once
    (a pipe's reads and writes each let go of it). A message larger than the buffer
    follows over ``pipe``."""

    _HEADER = struct.Struct("<q")

    def __init__(self, buffer: mmap.mmap, ready: Any, pipe: Connection) -> None:
        self.buffer = buffer
        self.ready = ready
        self.pipe = pipe

    def put(self, message: Any) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        size = len(data)
        header = self._HEADER.size
        if header + size <= len(self.buffer):
            self.buffer[header : header + size] = data
            self._HEADER.pack_into(self.buffer, 0, size)
            self.ready.release()
        else:
            self._HEADER.pack_into(self.buffer, 0, -1)
            self.ready.release()
            self.pipe.send_bytes(data)

    def get(self, there: Callable[[], bool]) -> Any:
        """The next message; EOFError once ``there()`` says the other side has gone."""
        while not self.ready.acquire(True, POLL_S):
            # A message larger than the buffer posts the semaphore before its bytes
            # reach the pipe: one last look before reading the pipe's news as an end.
            if not there() and not self.ready.acquire(False):
                raise EOFError
        (size,) = self._HEADER.unpack_from(self.buffer, 0)
        if size < 0:
            return pickle.loads(self.pipe.recv_bytes())
        header = self._HEADER.size
        with memoryview(self.buffer) as view:
            return pickle.loads(view[header : header + size])


def _shared_buffer(size: int) -> tuple[str, mmap.mmap]:
    """A file of ``size`` bytes in shared memory (/dev/shm where there is one), mapped."""
    folder = "/dev/shm" if os.path.isdir("/dev/shm") else None
    descriptor, path = tempfile.mkstemp(prefix=f"tts-engine-{os.getpid()}-", dir=folder)
    try:
        os.ftruncate(descriptor, size)
        return path, mmap.mmap(descriptor, size)
    finally:
        os.close(descriptor)


def _semaphore() -> tuple[str, Any]:
    """A named semaphore at 0, and its name: the child opens it by name, then the server
    unlinks the name (:func:`_start`), so nothing is left behind however either ends.
    (``_multiprocessing.SemLock`` is what ``multiprocessing.Semaphore`` wraps; the wrapper
    would register the name for unlinking at exit, which a process killed by a signal,
    as uvicorn re-raises one after shutting down, never does.)"""
    name = f"/tts-engine-{os.getpid()}-{secrets.token_hex(6)}"
    return name, _multiprocessing.SemLock(_SEMAPHORE, 0, _SEM_MAX, name, False)


def _opened_semaphore(name: str) -> Any:
    return _multiprocessing.SemLock._rebuild(0, _SEMAPHORE, _SEM_MAX, name)


def _mapped(path: str) -> mmap.mmap:
    descriptor = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(descriptor, 0)
    finally:
        os.close(descriptor)


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
    (asked_name, asked), (answered_name, answered) = _semaphore(), _semaphore()
    calls_path, calls = _shared_buffer(CALL_BUFFER_BYTES)
    answers_path, answers = _shared_buffer(ANSWER_BUFFER_BYTES)
    process = context.Process(
        target=_child_main,
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
        process, _Mailbox(calls, asked, main), _Mailbox(answers, answered, main), control, hello
    )
    # Before multiprocessing joins its children at exit (from atexit in the server, at
    # the end of a multiprocessing child's run): the child would wait for this pipe.
    multiprocessing.util.Finalize(
        engine, _end_child, args=(process, main, control), exitpriority=10
    )
    return engine, hello["degraded"], hello["detail"]


def _end_child(process: Any, main: Connection, control: Connection) -> None:
    """End the child: its pipes closed it reads end of file and returns; terminated if it
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
        calls: _Mailbox,
        answers: _Mailbox,
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


# --- the child ------------------------------------------------------------------------


def _portable(exc: BaseException) -> BaseException:
    """``exc`` with the child's traceback as a note (a traceback does not pickle), or a
    RuntimeError naming it when it does not pickle."""
    where = "".join(traceback.format_exception(exc)).rstrip()
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        exc = RuntimeError(f"{type(exc).__name__}: {exc}")
    exc.add_note(f"in the engine process:\n{where}")
    return exc


def _child_main(
    main: Connection,
    control: Connection,
    calls_at: tuple[str, str],
    answers_at: tuple[str, str],
    factory: EngineFactory,
    log_level: str,
    log_format: str,
) -> None:
    """The engine process: build the engine, then answer calls until told to close or
    until the server's end of the pipe closes."""
    # Ctrl-C in a terminal, or a service manager's SIGTERM to the whole group: the server
    # drains first, then closes the engine (or its pipe closes when it has gone).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    calls = _Mailbox(_mapped(calls_at[0]), _opened_semaphore(calls_at[1]), main)
    answers = _Mailbox(_mapped(answers_at[0]), _opened_semaphore(answers_at[1]), main)
    main.send("mapped")
    from server import blas, logs

    logs.configure(log_level, log_format)
    blas.limit_threads()  # as in the server (server.blas), whoever started it
    try:
        engine, degraded, detail = factory()
    except BaseException as exc:
        main.send(("err", _portable(exc)))
        return
    main.send(
        (
            "ok",
            {
                "name": engine.name,
                "sample_rate_hz": engine.sample_rate_hz,
                "interleaves": engine.interleaves,
                "speed_range": getattr(engine, "speed_range", None),
                "identity": getattr(engine, "identity", None),
                "mixes": callable(getattr(engine, "mix_speakers", None)),
                "degraded": degraded,
                "detail": detail,
            },
        )
    )
    threading.Thread(target=_answer_checks, args=(control, engine), daemon=True).start()
    served = _Served(engine)
    while True:
        try:
            # The server is there while its end of the pipe is open (nothing else comes
            # over it between calls).
            events, op, args = calls.get(lambda: not main.poll())
        except (EOFError, OSError):
            logger.warning("the server's end of the engine pipe closed: the engine process ends")
            break
        if op == "close":
            served.close()
            answers.put(("ok", None))
            break
        try:
            served.events(events)
            answer: tuple[str, Any] = ("ok", served.run(op, args))
        except Exception as exc:
            answer = ("err", _portable(exc))
        try:
            answers.put(answer)
        except Exception as exc:  # an answer that does not pickle
            answers.put(("err", _portable(exc)))


def _answer_checks(control: Connection, engine: Engine) -> None:
    """The child's second thread: ``check_voice`` for the event loop (read-only)."""
    while True:
        try:
            voice = control.recv()
        except (EOFError, OSError):
            return
        problem: tuple[str, str] | None = None
        try:
            engine.check_voice(voice)
        except ValueError as exc:
            problem = ("invalid", str(exc))
        except Exception as exc:
            problem = ("failed", f"{type(exc).__name__}: {exc}")
        control.send(problem)


class _Served:
    """The child's engine, its batcher, rows and generators."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.batcher: Batcher | None = None
        self.rows: dict[int, BatchRow] = {}
        #: Rows whose open failed, told with the next answer.
        self.failed: dict[int, BaseException] = {}
        self.generators: dict[int, Iterator[np.ndarray | WordMarks]] = {}

    def events(self, events: list[tuple[Any, ...]]) -> None:
        for event in events:
            kind, key = event[0], event[1]
            if kind == "open":
                try:
                    assert self.batcher is not None
                    self.rows[key] = self.batcher.open(event[2])
                except Exception as exc:
                    logger.exception("synthesis failed to start for %r", event[2].text[:40])
                    self.failed[key] = _portable(exc)
            elif kind == "close":
                self.failed.pop(key, None)
                row = self.rows.pop(key, None)
                if row is not None and self.batcher is not None:
                    try:
                        self.batcher.close(row)
                    except Exception:
                        logger.exception("leaving the batch failed for %r", row.request.text[:40])
            elif kind == "generate":
                try:
                    self.generators[key] = iter(self.engine.synthesize(event[2], _never))
                except Exception as exc:
                    self.generators[key] = _raising(_portable(exc))
            elif kind == "forget":
                _close_generator(self.generators.pop(key, None))

    def run(self, op: str, args: tuple[Any, ...]) -> Any:
        if op == "rows":
            return self._rows(*args)
        if op == "next":
            return self._next(*args)
        if op == "call":
            name, call_args = args
            return getattr(self.engine, name)(*call_args)
        if op == "batcher":
            self.batcher = self.engine.batcher(*args)
            if self.batcher is None:
                return None
            return self.batcher.max_batch, callable(getattr(self.batcher, "prefill_many", None))
        raise ValueError(f"unknown engine call {op!r}")

    def _rows(
        self, op: str, asked: list[tuple[int, bool]]
    ) -> tuple[list[tuple[Any, ...]], int | None, BaseException | None]:
        batcher = self.batcher
        assert batcher is not None
        keyed = []
        for key, hurry in asked:
            row = self.rows.get(key)
            if row is not None:
                row.hurry = hurry
                keyed.append((key, row))
            elif key not in self.failed:  # its open never arrived (a call that failed)
                self.failed[key] = RuntimeError("the engine process has no such row")
        rows = [row for _, row in keyed]
        failure: BaseException | None = None
        memory = None
        if rows:
            try:
                if op == "step":
                    batcher.step(rows)
                elif op == "prefill_many":
                    batcher.prefill_many(rows)  # type: ignore[attr-defined]
                else:
                    for row in rows:
                        batcher.prefill(row)
            except Exception as exc:
                failure = _portable(exc)
            if op == "step":
                memory = batcher.memory_bytes()
        updates: list[tuple[Any, ...]] = [(key, [], False, exc) for key, exc in self.failed.items()]
        self.failed.clear()
        for key, row in keyed:
            if row.chunks or row.done or row.error is not None:
                error = None if row.error is None else _portable(row.error)
                updates.append((key, list(row.chunks), row.done, error))
                row.chunks.clear()
        return updates, memory, failure

    def _next(self, key: int) -> tuple[list[np.ndarray | WordMarks], bool]:
        generator = self.generators[key]
        try:
            return [next(generator)], False
        except StopIteration:
            return [], True

    def close(self) -> None:
        for generator in self.generators.values():
            _close_generator(generator)
        self.generators.clear()
        self.engine.close()


def _never() -> bool:
    return False


def _raising(exc: BaseException) -> Iterator[Any]:
    """A generator that raises ``exc`` when first asked (a ``synthesize`` that failed at
    once fails its own segment's first chunk, not the call it arrived with)."""
    raise exc
    yield  # a generator


def _close_generator(generator: Iterator[Any] | None) -> None:
    close = getattr(generator, "close", None)
    if close is None:
        return
    try:
        close()
    except Exception:
        logger.exception("closing a synthesis generator failed")
