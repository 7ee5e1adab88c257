"""The batch interface over an engine that does not batch.

:class:`Interleaver` turns an engine's ``synthesize()`` generators into a
:class:`~server.engines.base.Batcher`, so the worker runs one loop for every engine: a
row's generator starts at :meth:`~Interleaver.prefill`, and a step advances the rows
it is given by one chunk each. Its steps take one row (``max_batch`` 1): the scheduler
gives the step to the most urgent row, so segments in flight interleave chunk by chunk
by playback deadline, as far as the engine's generators are independent
(``Engine.interleaves``; otherwise the worker keeps one row open at a time).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import numpy as np

from server.engines.base import Cancelled, Engine, SynthesisRequest, Utterance, WordMarks

__all__ = ["Interleaver"]

logger = logging.getLogger(__name__)


class Interleaver:
    """A :class:`~server.engines.base.Batcher` that advances ``synthesize()`` generators."""

    max_batch = 1

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def open(self, request: SynthesisRequest) -> Utterance:
        return Utterance(request)

    def prefill(self, utterance: Utterance) -> None:
        """Start the generator (nothing is made until the row's first step)."""
        utterance.state = self._engine.synthesize(utterance.request, utterance.should_stop)

    def step(self, utterances: Sequence[Utterance]) -> None:
        for utterance in utterances:
            _advance(utterance)

    def close(self, utterance: Utterance) -> None:
        chunks: Iterator[np.ndarray | WordMarks] | None = utterance.state
        utterance.state = None
        close = getattr(chunks, "close", None)
        if close is not None:
            close()  # the caller logs what a failing cleanup raises

    def memory_bytes(self) -> int | None:
        return None


def _advance(utterance: Utterance) -> None:
    """One chunk of ``utterance`` (word marks ride along with the chunk after them)."""
    chunks: Iterator[np.ndarray | WordMarks] = utterance.state
    try:
        while True:
            chunk = next(chunks)
            utterance.chunks.append(chunk)
            if not isinstance(chunk, WordMarks):
                return
    except (StopIteration, Cancelled):
        utterance.done = True
    except Exception as exc:
        logger.exception("synthesis failed for %r", utterance.request.text[:40])
        utterance.error = exc
