"""The batch interface over an engine that does not batch.

:class:`Interleaver` turns an engine's ``synthesize()`` generators into a
:class:`~server.engines.base.Batcher`, so the worker runs one loop for every engine: a
row's generator starts at :meth:`~Interleaver.prefill`, and a step advances the rows
it is given by a chunk each (or more, within a time slice: below). Its steps take one
row (``max_batch`` 1): the scheduler gives the step to the most urgent row, so segments
in flight interleave by playback deadline, as far as the engine's generators are
independent (``Engine.interleaves``; otherwise the worker keeps one row open at a time).

With a time slice (``slice_s``, ``--interleave-slice-ms``), a step goes on taking the
row's next chunks while it has run for less than the slice: a generator whose chunks are
ready (espeak makes a segment whole, then yields it in 100 ms slices) hands its segment
over in one step, one scheduler round, one hand-over to the event loop, not one per
slice. A generator whose chunks cost more than the slice (ChatTTS's decoder: GPT steps
for each) still gives one a step; a step runs at most one chunk past its slice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence

import numpy as np

from server.engines.base import BatchRow, Cancelled, Engine, SynthesisRequest, WordMarks

__all__ = ["Interleaver"]

logger = logging.getLogger(__name__)


class Interleaver:
    """A :class:`~server.engines.base.Batcher` that advances ``synthesize()`` generators."""

    max_batch = 1

    def __init__(self, engine: Engine, slice_s: float = 0.0) -> None:
        if slice_s < 0:
            raise ValueError(f"slice_s must not be negative, got {slice_s}")
        self._engine = engine
        #: A step takes a row's chunks while it has run less than this (0: one chunk).
        self.slice_s = slice_s

    def open(self, request: SynthesisRequest) -> BatchRow:
        return BatchRow(request)

    def prefill(self, row: BatchRow) -> None:
        """Start the generator (nothing is made until the row's first step)."""
        row.state = self._engine.synthesize(row.request, row.should_stop)

    def step(self, rows: Sequence[BatchRow]) -> None:
        """A chunk of each row; more of each while its part of the step is within the slice."""
        for row in rows:
            until = time.perf_counter() + self.slice_s
            _advance(row)
            while (
                not row.done
                and row.error is None
                and time.perf_counter() < until
                and not row.should_stop()
            ):
                _advance(row)

    def close(self, row: BatchRow) -> None:
        chunks: Iterator[np.ndarray | WordMarks] | None = row.state
        row.state = None
        close = getattr(chunks, "close", None)
        if close is not None:
            close()  # the caller logs what a failing cleanup raises

    def memory_bytes(self) -> int | None:
        return None


def _advance(row: BatchRow) -> None:
    """One chunk of ``row`` (word marks ride along with the chunk after them)."""
    chunks: Iterator[np.ndarray | WordMarks] = row.state
    try:
        while True:
            chunk = next(chunks)
            row.chunks.append(chunk)
            if not isinstance(chunk, WordMarks):
                return
    except (StopIteration, Cancelled):
        row.done = True
    except Exception as exc:
        logger.exception("synthesis failed for %r", row.request.text[:40])
        row.error = exc
