"""The engine process's side (server.engines.remote): build the engine, then answer the
server's calls until it closes the engine or its end of the pipe closes."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from server.engines.base import Batcher, BatchRow, Engine, WordMarks
from server.engines.remote_wire import Mailbox, mapped_buffer, opened_semaphore, portable
from server.engines.select import EngineFactory

__all__ = ["child_main"]

logger = logging.getLogger(__name__)


def child_main(
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
    calls = Mailbox(mapped_buffer(calls_at[0]), opened_semaphore(calls_at[1]), main)
    answers = Mailbox(mapped_buffer(answers_at[0]), opened_semaphore(answers_at[1]), main)
    main.send("mapped")
    from server import blas, logs

    logs.configure(log_level, log_format)
    blas.limit_threads()  # as in the server (server.blas), whoever started it
    try:
        engine, degraded, detail = factory()
    except BaseException as exc:
        main.send(("err", portable(exc)))
        return
    main.send(("ok", _hello(engine, degraded, detail)))
    threading.Thread(target=_answer_checks, args=(control, engine), daemon=True).start()
    _serve(_Served(engine), calls, answers, main)


def _hello(engine: Engine, degraded: bool, detail: str | None) -> dict[str, Any]:
    """What the server's RemoteEngine knows of the engine without asking."""
    return {
        "name": engine.name,
        "sample_rate_hz": engine.sample_rate_hz,
        "interleaves": engine.interleaves,
        "speed_range": getattr(engine, "speed_range", None),
        "identity": getattr(engine, "identity", None),
        "mixes": callable(getattr(engine, "mix_speakers", None)),
        "degraded": degraded,
        "detail": detail,
    }


def _serve(served: _Served, calls: Mailbox, answers: Mailbox, main: Connection) -> None:
    """Answer calls until told to close or until the server's end of the pipe closes."""
    while True:
        try:
            # The server is there while its end of the pipe is open (nothing else comes
            # over it between calls).
            events, op, args = calls.get(lambda: not main.poll())
        except (EOFError, OSError):
            logger.warning("the server's end of the engine pipe closed: the engine process ends")
            return
        if op == "close":
            served.close()
            answers.put(("ok", None))
            return
        try:
            served.events(events)
            answer: tuple[str, Any] = ("ok", served.run(op, args))
        except Exception as exc:
            answer = ("err", portable(exc))
        try:
            answers.put(answer)
        except Exception as exc:  # an answer that does not pickle
            answers.put(("err", portable(exc)))


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
                    self.failed[key] = portable(exc)
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
                    self.generators[key] = _raising(portable(exc))
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
                failure = portable(exc)
            if op == "step":
                memory = batcher.memory_bytes()
        updates: list[tuple[Any, ...]] = [(key, [], False, exc) for key, exc in self.failed.items()]
        self.failed.clear()
        for key, row in keyed:
            if row.chunks or row.done or row.error is not None:
                error = None if row.error is None else portable(row.error)
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
