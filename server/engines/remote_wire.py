"""The wire between the server and its engine process (server.engines.remote): a call and
its answer pickled into a buffer both processes map, each signalled by a named semaphore.

Posting a semaphore does not let go of the GIL and taking one that is already posted does
not either, so a round trip lets go of it once, while the caller waits for the answer:
beside a busy event loop it waits for the GIL once (a pipe's reads and writes each let go
of it). A message larger than its buffer follows over the pipe. The buffers' files and the
semaphores' names are unlinked as soon as both sides have opened them.
"""

from __future__ import annotations

import _multiprocessing
import mmap
import os
import pickle
import secrets
import struct
import tempfile
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["POLL_S", "Mailbox", "mapped_buffer", "opened_semaphore", "portable", "semaphore",
           "shared_buffer"]  # fmt: skip

#: How often a side waiting for the other checks that it is still there.
POLL_S = 0.5
_SEMAPHORE = 1  # multiprocessing.synchronize.SEMAPHORE
_SEM_MAX = _multiprocessing.SemLock.SEM_VALUE_MAX
_WHERE = "in the engine process:"


class Mailbox:
    """One direction of the calls: a buffer both processes map and a semaphore that says
    a message is in it (see the module docstring); a message larger than the buffer
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


def shared_buffer(size: int) -> tuple[str, mmap.mmap]:
    """A file of ``size`` bytes in shared memory (/dev/shm where there is one), mapped."""
    folder = "/dev/shm" if os.path.isdir("/dev/shm") else None
    descriptor, path = tempfile.mkstemp(prefix=f"tts-engine-{os.getpid()}-", dir=folder)
    try:
        os.ftruncate(descriptor, size)
        return path, mmap.mmap(descriptor, size)
    finally:
        os.close(descriptor)


def semaphore() -> tuple[str, Any]:
    """A named semaphore at 0, and its name: the child opens it by name, then the server
    unlinks the name (``server.engines.remote._start``), so nothing is left behind however
    either ends.
    (``_multiprocessing.SemLock`` is what ``multiprocessing.Semaphore`` wraps; the wrapper
    would register the name for unlinking at exit, which a process killed by a signal,
    as uvicorn re-raises one after shutting down, never does.)"""
    name = f"/tts-engine-{os.getpid()}-{secrets.token_hex(6)}"
    return name, _multiprocessing.SemLock(_SEMAPHORE, 0, _SEM_MAX, name, False)


def opened_semaphore(name: str) -> Any:
    return _multiprocessing.SemLock._rebuild(0, _SEMAPHORE, _SEM_MAX, name)


def mapped_buffer(path: str) -> mmap.mmap:
    descriptor = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(descriptor, 0)
    finally:
        os.close(descriptor)


def portable(exc: BaseException) -> BaseException:
    """``exc`` with the child's traceback as a note (a traceback does not pickle), or a
    RuntimeError naming it when it does not pickle; once (a row's error is told with each
    answer until the row leaves)."""
    if any(note.startswith(_WHERE) for note in getattr(exc, "__notes__", ())):
        return exc
    where = "".join(traceback.format_exception(exc)).rstrip()
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        exc = RuntimeError(f"{type(exc).__name__}: {exc}")
    exc.add_note(f"{_WHERE}\n{where}")
    return exc
