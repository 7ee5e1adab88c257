"""Child processes started with ``posix_spawn``, never ``fork()``, with asyncio pipes.

Why not :func:`asyncio.create_subprocess_exec`: under uvloop (uvicorn's loop whenever it
is installed) that is libuv's ``uv_spawn``, which calls glibc's ``fork()``, and
``fork()`` runs every ``pthread_atfork`` handler in the process on the calling thread.
OpenBLAS (numpy's BLAS) registers one that shuts its worker pool down: if another
thread is inside a multi-threaded BLAS call at that moment, the work it queued for a
worker is overwritten by the shutdown marker and the call waits for it for ever, spinning
(seen in this server: the engine thread in ``exec_blas`` at 100 % CPU, OpenBLAS's
``blas_server_avail`` 0 and its queue slot at -1, after an ffmpeg start from the event
loop). glibc's ``posix_spawn`` (``clone(CLONE_VM | CLONE_VFORK)`` then ``exec``) runs no
fork handlers since glibc 2.24, nor Python's ``os.register_at_fork`` hooks, and does not
copy the parent's page tables, so it is also cheaper than ``fork()`` for a large server.

The child's exit is read from a pidfd (Linux 5.3+) watched by the event loop, so no
thread waits per child and no SIGCHLD handler is involved; where pidfds are missing, one
short-lived thread per child waits for it instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from collections.abc import Callable

__all__ = ["ChildProcess", "spawn"]

# What subprocess.Popen(restore_signals=True) resets: Python ignores these, and an
# ignored signal stays ignored across exec.
_RESTORED_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(signal, name)
)


class ChildProcess:
    """A running child with its stdin and stdout as asyncio streams (the subset of
    :class:`asyncio.subprocess.Process` this server uses). :meth:`aclose` ends it."""

    def __init__(self, pid: int, loop: asyncio.AbstractEventLoop) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.stdin: asyncio.StreamWriter | None = None
        self.stdout: asyncio.StreamReader | None = None
        self._stdout_transport: asyncio.BaseTransport | None = None
        self._exited: asyncio.Future[int] = loop.create_future()
        self._loop = loop

    def kill(self) -> None:
        """SIGKILL the child (if it still runs) and drop its output."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        self._close_pipes()

    def add_exit_callback(self, callback: Callable[[ChildProcess], object]) -> None:
        """Call ``callback(self)`` once the child has exited and been reaped."""
        self._exited.add_done_callback(lambda _: callback(self))

    async def wait(self) -> int:
        """The exit status (negative: the signal that ended it), once it has exited."""
        return await asyncio.shield(self._exited)

    async def aclose(self) -> None:
        """Kill the child unless it has exited, close both pipes, wait until it is reaped."""
        self.kill()
        await self.wait()

    def _close_pipes(self) -> None:
        if self.stdin is not None:
            self.stdin.close()
        if self._stdout_transport is not None:
            self._stdout_transport.close()

    def _exit(self, status: int) -> None:
        self.returncode = status
        if self.stdin is not None:
            self.stdin.close()  # nothing reads it any more; stdout may still hold output
        if not self._exited.done():
            self._exited.set_result(status)


async def spawn(args: tuple[str, ...]) -> ChildProcess:
    """Start ``args`` (looked up on PATH) with piped stdin and stdout, stderr to
    /dev/null (a pipe nobody reads would block the child once full)."""
    loop = asyncio.get_running_loop()
    # Python's descriptors are close-on-exec (PEP 446): the child gets only 0, 1 and 2.
    stdin_read, stdin_write = os.pipe()
    stdout_read, stdout_write = os.pipe()
    devnull = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    try:
        pid = os.posix_spawnp(
            args[0],
            list(args),
            os.environ,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, stdin_read, 0),
                (os.POSIX_SPAWN_DUP2, stdout_write, 1),
                (os.POSIX_SPAWN_DUP2, devnull, 2),
            ],
            setsigdef=_RESTORED_SIGNALS,
            setsigmask=(),
        )
    except BaseException:
        for fd in (stdin_write, stdout_read):
            os.close(fd)
        raise
    finally:
        for fd in (stdin_read, stdout_write, devnull):
            os.close(fd)
    child = ChildProcess(pid, loop)
    _watch_exit(child, loop)
    try:
        await _connect_pipes(child, loop, stdin_write, stdout_read)
    except BaseException:  # cancelled while connecting: the child must not outlive us
        child.kill()
        raise
    return child


async def _connect_pipes(
    child: ChildProcess, loop: asyncio.AbstractEventLoop, stdin_fd: int, stdout_fd: int
) -> None:
    stdin_file = os.fdopen(stdin_fd, "wb", buffering=0)
    stdout_file = os.fdopen(stdout_fd, "rb", buffering=0)
    try:
        reader = asyncio.StreamReader(loop=loop)
        child._stdout_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader, loop=loop), stdout_file
        )
        child.stdout = reader
        # FlowControlMixin gives StreamWriter.drain() its pause/resume on a full pipe.
        transport, protocol = await loop.connect_write_pipe(
            lambda: asyncio.streams.FlowControlMixin(loop=loop), stdin_file
        )
        child.stdin = asyncio.StreamWriter(transport, protocol, None, loop)
    except BaseException:
        if child._stdout_transport is None:
            stdout_file.close()
        if child.stdin is None:
            stdin_file.close()
        raise


def _watch_exit(child: ChildProcess, loop: asyncio.AbstractEventLoop) -> None:
    try:
        pidfd = os.pidfd_open(child.pid)
    except (AttributeError, OSError):  # no pidfds (Linux < 5.3): a thread waits instead
        threading.Thread(
            target=_wait_in_thread, args=(child, loop), name="child-wait", daemon=True
        ).start()
        return

    def exited() -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        child._exit(_reap(child.pid))

    loop.add_reader(pidfd, exited)


def _wait_in_thread(child: ChildProcess, loop: asyncio.AbstractEventLoop) -> None:
    status = _reap(child.pid, block=True)
    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
        loop.call_soon_threadsafe(child._exit, status)


def _reap(pid: int, *, block: bool = False) -> int:
    try:
        _, status = os.waitpid(pid, 0 if block else os.WNOHANG)
    except ChildProcessError:  # reaped by someone else: the status is lost
        return 255
    return os.waitstatus_to_exitcode(status)
