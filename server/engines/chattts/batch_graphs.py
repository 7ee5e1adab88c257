"""CUDA graphs of the batched step, one per shape bucket, as vLLM and SGLang capture them.

The batched step (:meth:`BatchedDecoder._advance`) is a fixed-shape function of
preallocated tensors once its row count and attention span are fixed: every input it
reads (last tokens, positions, steps, sampling settings, which rows step) and every
output it writes (histories, the end flags) lives at a fixed address. So it is captured
once per bucket (rows rounded up to a power of two, the span to a power of two of
positions, and the sampler's candidate count) and replayed: one launch per step instead
of a thousand kernel launches from Python. Rows past the live ones in a bucket are
padding: they compute, but nothing of theirs is kept.

Warm-up and capture run with no row active, so they change nothing that is kept (the
keys a padded row writes are at its own current position, which its next real step
writes again before reading). All graphs share one memory pool: they never run at the
same time and keep nothing in it between replays.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

logger = logging.getLogger(__name__)

__all__ = ["StepGraphs", "bucket", "buckets"]

#: The smallest attention span captured (positions); spans double from it.
MIN_SPAN = 64


def bucket(value: int, smallest: int, largest: int) -> int:
    """``value`` rounded up to a power of two times ``smallest``, at most ``largest``."""
    size = smallest
    while size < value:
        size *= 2
    return min(size, largest)


def buckets(smallest: int, largest: int) -> list[int]:
    """Every value :func:`bucket` rounds to between ``smallest`` and ``largest``."""
    sizes = [smallest]
    while sizes[-1] < largest:
        sizes.append(min(2 * sizes[-1], largest))
    return sizes


class StepGraphs:
    """Captures ``step(rows, span)`` per ``(rows, span, candidates)`` key and replays it.

    ``active`` is the step's input mask of rows that step (cleared while capturing).
    """

    def __init__(
        self,
        step: Callable[[int, int], torch.Tensor],
        active: Callable[[], torch.Tensor],
        device: torch.device,
    ) -> None:
        if device.type != "cuda":
            raise ValueError("CUDA graphs need the GPT on a CUDA device")
        self._step = step
        self._active = active
        self.device = device
        self._graphs: dict[tuple[int, int, int], tuple[Any, torch.Tensor]] = {}
        self._pool: Any = None
        self._stream: Any = None
        #: Replays so far, and the keys captured (for tests and logs).
        self.replays = 0

    @property
    def captured(self) -> list[tuple[int, int, int]]:
        return sorted(self._graphs)

    def clear(self) -> None:
        """Forget every graph (the tensors they read moved, or their shapes changed)."""
        self._graphs.clear()

    def run(self, rows: int, span: int, candidates: int) -> torch.Tensor:
        """The step's output for this bucket, from its graph (captured on first use)."""
        graph, output = self.capture(rows, span, candidates)
        graph.replay()
        self.replays += 1
        return output

    def capture(self, rows: int, span: int, candidates: int) -> tuple[Any, torch.Tensor]:
        """This bucket's graph and output, captured now unless it was already."""
        key = (rows, span, candidates)
        entry = self._graphs.get(key)
        if entry is None:
            entry = self._graphs[key] = self._capture(rows, span)
        return entry

    def _capture(self, rows: int, span: int) -> tuple[Any, torch.Tensor]:
        if self._stream is None:
            # Warm-up and capture on a stream of the GPT's device (the default capture
            # stream belongs to the current device, which need not be it).
            self._stream = torch.cuda.Stream(self.device)
            self._pool = torch.cuda.graph_pool_handle()
        active = self._active()
        saved = active.clone()
        active.zero_()
        try:
            with torch.cuda.device(self.device):
                self._stream.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(self._stream):
                    for _ in range(2):  # kernel selection, lazy inits: not in the capture
                        self._step(rows, span)
                torch.cuda.current_stream(self.device).wait_stream(self._stream)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(
                    graph, pool=self._pool, stream=self._stream, capture_error_mode="thread_local"
                ):
                    output = self._step(rows, span)
        finally:
            active.copy_(saved)
        logger.info("captured the batched step as a CUDA graph: %d rows, span %d", rows, span)
        return graph, output
