"""Admission control: a new stream starts only while the engine keeps every stream real time.

Before a context (WebSocket ``start``, or the implicit ``default`` one) or an HTTP
request begins speaking, :meth:`Admission.start` compares the streams speaking now with
what the engine carries: ``--max-streams`` when set, else the capacity the engine worker
has measured (:meth:`server.runtime.worker.EngineWorker.capacity`: a batched step's cost by
batch size, or each segment's engine time per second of audio), filled to
``--admission-headroom``. Beyond it, the new stream is refused as ``busy`` with a retry
hint, or, with ``--when-busy fallback``, spoken by the fallback voice (which costs the
main engine nothing) with a warning. Streams already speaking are never touched. At
least one stream is always admitted: an engine slower than real time for even one
stream still serves, late, rather than nobody.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from server.metrics import Metrics
from server.runtime.worker import EngineWorker
from streaming.errors import Unavailable

__all__ = ["Admission", "AdmissionSettings"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AdmissionSettings:
    """How new streams are admitted (from the settings' admission group)."""

    #: A fixed limit of streams (0: the engine's measured capacity).
    max_streams: int = 0
    #: busy: refuse with a retry hint; fallback: speak on the fallback voice.
    when_busy: str = "refuse"
    retry_after_ms: int = 2000


class Admission:
    """Counts the streams speaking on the main engine and decides on new ones."""

    def __init__(
        self,
        worker: EngineWorker,
        metrics: Metrics,
        options: AdmissionSettings | None = None,
        *,
        has_fallback: bool = False,
    ) -> None:
        options = options or AdmissionSettings()
        self._worker = worker
        self._metrics = metrics
        self._max_streams = options.max_streams
        self._degrade = options.when_busy == "fallback" and has_fallback
        self._retry_after_ms = options.retry_after_ms
        self._lock = threading.Lock()
        self._warned_slow = False
        #: Streams speaking on the main engine now.
        self.streams = 0

    def limit(self) -> int:
        """Streams the main engine takes now."""
        if self._max_streams:
            return self._max_streams
        measured = self._worker.capacity()
        self._metrics.capacity_streams.set(-1 if measured is None else measured)
        if measured is None:  # nothing measured yet: what the engine can hold at once
            return self._worker.options.policy.max_batch if self._worker.batches else 1 << 30
        if measured == 0 and not self._warned_slow:
            self._warned_slow = True
            logger.warning("the engine is slower than real time even for one stream")
        return max(1, measured)

    def start(self, route: str, context_id: str | None = None) -> bool:
        """Admit a new stream: False on the main engine, True on the fallback voice.

        Raises :class:`Unavailable` (``busy``, with ``retry_after_ms``) when the engine is
        at capacity and degrading is not configured.
        """
        limit = self.limit()
        with self._lock:
            if self.streams < limit:
                self.streams += 1
                return False
        if self._degrade:
            self._metrics.contexts_degraded.labels(route=route).inc()
            return True
        self._metrics.contexts_refused.labels(route=route).inc()
        raise self._busy(limit, context_id)

    def refusal(self) -> Unavailable | None:
        """The refusal a new stream would get now (None: it would be admitted, on the
        main engine or on the fallback voice); nothing is counted or taken."""
        limit = self.limit()
        if self.streams < limit or self._degrade:
            return None
        return self._busy(limit)

    def _busy(self, limit: int, context_id: str | None = None) -> Unavailable:
        """The one refusal of a stream for want of capacity."""
        return Unavailable(
            f"the engine is at capacity ({limit} real-time streams); try again later",
            code="busy",
            context_id=context_id,
            retry_after_ms=self._retry_after_ms,
        )

    def finish(self) -> None:
        """A stream admitted on the main engine ended."""
        with self._lock:
            self.streams -= 1
