"""Python's garbage collector, set for a server that keeps thousands of streams' objects.

CPython's cyclic collector runs its youngest generation every 700 new container objects
and, now and then, a full collection that walks every object the process holds: the
modules, FastAPI's routes, the engine's, and each open stream's. With 1,000 streams open
a full collection held the event loop for 73 ms, and the collections took 0.2 s of the
server's 3 s of CPU (bench/server_overhead.py). Once start-up is over
(:func:`settle_heap`), what it made is frozen out of every later collection
(``gc.freeze``) and the youngest generation is collected every ``gc_young_threshold``
new objects instead of 700: measured, no full collection during the 1,000 streams, 40 ms of
collections in all, the longest 18 ms (docs/performance.md).
"""

from __future__ import annotations

import gc
import logging
import time
from dataclasses import dataclass
from typing import Any

from server.declaration import bound_problems, option

__all__ = ["CollectionTimer", "HeapSettings", "settle_heap"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HeapSettings:
    """How the garbage collector runs once the server has started."""

    gc_young_threshold: int = option(
        10_000,
        "start-up's objects are frozen out of garbage collection (before serving, and once "
        "the engine has loaded) and the youngest generation is collected every this many new "
        "objects (Python's default: 700; 0: Python's collector left as it is, nothing frozen)",
        group="server",
        ge=0,
        zero=" (0: Python's defaults)",
    )

    def __post_init__(self) -> None:
        problems = bound_problems(self)
        if problems:
            raise ValueError("; ".join(problems))


def settle_heap(settings: HeapSettings, *, when: str, collect: int = 2) -> bool:
    """Collect up to generation ``collect`` (2: a full collection), freeze what the
    process holds then and raise the young threshold; ``when`` says which point of
    start-up, for the log. False (nothing done) when ``gc_young_threshold`` is 0.

    The server settles before it accepts connections (the full collection, tens of ms,
    holds up no stream), and again once the engine and the text front-end have loaded,
    after a young collection only (the garbage of loading is young; a young collection
    is what the server runs every 10,000 new objects anyway)."""
    if not settings.gc_young_threshold:
        return False
    started = time.perf_counter()
    gc.collect(collect)
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(settings.gc_young_threshold, middle, old)
    logger.info(
        "garbage collection: %d objects frozen %s (%.1f ms); the youngest generation every "
        "%d new objects",
        gc.get_freeze_count(),
        when,
        (time.perf_counter() - started) * 1000,
        settings.gc_young_threshold,
    )
    return True


class CollectionTimer:
    """Times every garbage collection of the process into ``histogram`` (labelled by
    generation) between :meth:`install` and :meth:`remove`."""

    def __init__(self, histogram: Any) -> None:
        self._by_generation = [histogram.labels(generation=str(g)) for g in range(3)]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        # Collections do not overlap: each holds the GIL from its start to its stop.
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self._by_generation[info["generation"]].observe(time.perf_counter() - self._started)

    def install(self) -> CollectionTimer:
        gc.callbacks.append(self)
        return self

    def remove(self) -> None:
        gc.callbacks.remove(self)
