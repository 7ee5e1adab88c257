"""The fallback voice on the engine thread: it speaks a segment the main engine failed on
before making any audio, and the segments of contexts the server degraded (busy)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from server.engines.base import Cancelled, Engine, WordMarks
from server.metrics import Metrics
from server.runtime.jobs import FELL_BACK, Handoff, Job
from streaming.errors import SynthesisError

__all__ = ["FallbackVoice"]

logger = logging.getLogger(__name__)


class FallbackVoice:
    """The fallback engine, built on first need, on the engine thread."""

    def __init__(
        self,
        factory: Callable[[], Engine] | None,
        main: Engine,
        metrics: Metrics,
        handoff: Handoff,
    ) -> None:
        self._factory = factory
        self._main = main
        self._metrics = metrics
        self._handoff = handoff
        self._engine: Engine | None = None

    def _get(self) -> Engine | None:
        if self._engine is None and self._factory is not None:
            factory, self._factory = self._factory, None
            try:
                candidate = factory()
            except Exception:
                logger.exception("the fallback engine failed to load; failed segments get an error")
                return None
            same = candidate.name == self._main.name
            if candidate.sample_rate_hz != self._main.sample_rate_hz or same:
                candidate.close()
                return None
            self._engine = candidate
        return self._engine

    def rescue(self, job: Job) -> None:
        """The main engine failed on ``job``: speak it on the fallback voice if none of it
        was heard yet, else end it with the failure."""
        fallback = self._get()
        if fallback is None or job.samples or job.cancelled:
            job.end(SynthesisError("the engine failed on this segment"))
            return
        job.deliver(FELL_BACK)
        self._metrics.fallback_segments.inc()
        self._speak(fallback, job)

    def speak(self, job: Job) -> None:
        """A segment of a context the server degraded (busy): the fallback voice speaks it."""
        fallback = self._get()
        if fallback is None:
            job.end(SynthesisError("the fallback voice is not available"))
            return
        self._speak(fallback, job)

    def _speak(self, engine: Engine, job: Job) -> None:
        chunks = engine.synthesize(job.request, job.is_cancelled)
        error: BaseException | None = None
        try:
            for chunk in chunks:
                if job.cancelled:
                    break
                if isinstance(chunk, WordMarks):
                    job.marks = chunk
                else:
                    job.add_audio(chunk)
                    self._handoff.flush()  # streamed, not held until the segment ends
        except Cancelled:
            pass
        except Exception:
            logger.exception("the fallback engine failed too for %r", job.request.text[:40])
            error = SynthesisError("the engine failed on this segment")
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        job.end(error)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
