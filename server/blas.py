"""numpy's BLAS thread pool, set once for the server process: one thread.

OpenBLAS (numpy's BLAS in the PyPI wheels) starts a pool of worker threads, one per
core, and registers a ``pthread_atfork`` handler that shuts the pool down before every
``fork()`` in the process. If another thread is inside a multi-threaded BLAS call at that
moment, the work it queued for a worker is overwritten by the shutdown marker and the
call waits for it for ever, spinning: this wedged the engine thread for good when ffmpeg
was started (by fork, from the event loop) while the engine resampled audio
(:mod:`server.child_process` now starts children without fork; this closes the hazard
for any other fork in the process, by any library).

A pool buys nothing here: the server's numpy work is small arrays (the resampler's block
products, PCM framing), a few hundred microseconds each, where handing work to other
threads costs about what it saves, and the engine thread is the only one doing it. torch
has its own intra-op pool (OpenMP and its bundled MKL, ``torch.set_num_threads``), which
this leaves alone.

Two steps, because numpy may or may not be loaded already: :func:`set_environment` at
the command line's entry, before anything imports numpy (OpenBLAS then starts no pool at
all), and :func:`limit_threads` where the app is built (in-process servers, tests), which
makes a loaded OpenBLAS compute on the calling thread from then on.
"""

from __future__ import annotations

from collections.abc import MutableMapping

__all__ = ["BLAS_THREADS", "limit_threads", "set_environment"]

BLAS_THREADS = 1


def set_environment(environ: MutableMapping[str, str]) -> None:
    """Before numpy is imported: OpenBLAS reads this once, when it loads."""
    environ["OPENBLAS_NUM_THREADS"] = str(BLAS_THREADS)


def limit_threads() -> None:
    """numpy's BLAS, if loaded, computes on the calling thread from now on (torch's
    OpenMP pool is a different user API and keeps its size)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=BLAS_THREADS, user_api="blas")
