"""The engine worker's own host work per round, by batch size: what the scheduler spends
around a step (leave, seat, plan, deliver every row's chunk, hand over to the loop).

The batcher here costs nothing and gives every row a chunk of audio at every step (the
worst case for delivery), or with ``--chunk-every N`` once every N steps, the rows taking
turns (a real decoder gives a row a chunk once every 12 to 96 steps), so what is
measured is the worker's Python: ``Scheduler.run_once`` minus the batcher's own time.
The hand-offs to the event loop are counted (``call_soon_threadsafe`` calls per round):
one per round for all rows, not one per chunk (and, when the loop has not yet taken the
last round's, none: the next round's audio goes with it).

    .venv/bin/python bench/scheduler_overhead.py            # batches 1, 8, 32, 64, 128
    .venv/bin/python bench/scheduler_overhead.py --batches 100 300 --chunk-every 12
    .venv/bin/python bench/scheduler_overhead.py --smoke    # a few rounds

Ends with one JSON line: microseconds per round by batch size, the fitted a + b*batch
(b: microseconds per row), hand-offs per round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from server.engines.base import BatchRow, SynthesisRequest, VoiceSpec
from server.metrics import Metrics
from server.runtime.fallback import FallbackVoice
from server.runtime.jobs import Handoff, Job
from server.runtime.scheduler import Scheduler
from streaming.policy import BatchSettings, StepCosts

ROOT = Path(__file__).resolve().parent.parent

RATE_HZ = 24_000
CHUNK = np.zeros(512, np.float32)  # one GPT step of audio


class FreeBatcher:
    """Steps cost nothing; a row gets a chunk every ``chunk_every`` steps (the rows
    opened one after another taking turns); its own time is counted."""

    def __init__(self, max_batch: int, chunk_every: int = 1) -> None:
        self.max_batch = max_batch
        self.chunk_every = chunk_every
        self.seconds = 0.0
        self._opened = 0

    def open(self, request: SynthesisRequest) -> BatchRow:
        self._opened += 1
        return BatchRow(request, state=[self._opened % self.chunk_every])

    def prefill(self, row: BatchRow) -> None:
        pass

    def step(self, rows: Sequence[BatchRow]) -> None:
        started = time.perf_counter()
        every = self.chunk_every
        for row in rows:
            steps = row.state
            steps[0] += 1
            if steps[0] % every == 0:
                row.chunks.append(CHUNK)
        self.seconds += time.perf_counter() - started

    def close(self, row: BatchRow) -> None:
        pass

    def memory_bytes(self) -> int | None:
        return None


def _never_ends(job: Job) -> None:
    """The rows here never end (steady state)."""


class _Stub:
    name = "none"
    sample_rate_hz = RATE_HZ


def measure(batch: int, rounds: int, chunk_every: int = 1) -> tuple[float, float]:
    """(median microseconds of scheduler work per round, hand-offs per round)."""
    loop = asyncio.new_event_loop()
    wakeups = 0
    schedule = loop.call_soon_threadsafe

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal wakeups
        wakeups += 1
        return schedule(*args, **kwargs)

    loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
    handoff = Handoff()
    metrics = Metrics()
    batcher = FreeBatcher(batch, chunk_every)
    scheduler = Scheduler(
        batcher,
        max_rows=batch,
        rate_hz=RATE_HZ,
        policy=BatchSettings(max_batch=batch, prefills_per_step=batch),
        costs=StepCosts(),
        metrics=metrics,
        handoff=handoff,
        fallback=FallbackVoice(None, _Stub(), metrics, handoff),  # type: ignore[arg-type]
        progress=lambda: None,
    )
    request = SynthesisRequest("一句话。", VoiceSpec(seed=1))
    now = time.monotonic()
    for order in range(batch):
        scheduler.add(
            Job(
                request, loop, handoff, deadline=now, order=order, playing=False, on_end=_never_ends
            )
        )
    scheduler.run_once()  # seat and prefill
    # The loop takes that round's audio too: a hand-over still pending would carry the
    # next round's with it (coalesced), one wake-up short.
    loop.run_until_complete(asyncio.sleep(0))
    wakeups = 0
    samples = []
    for _ in range(rounds):
        batcher.seconds = 0.0
        started = time.perf_counter()
        scheduler.run_once()
        samples.append(time.perf_counter() - started - batcher.seconds)
        loop.run_until_complete(asyncio.sleep(0))  # the loop takes what was handed over
    loop.close()
    return statistics.median(samples) * 1e6, wakeups / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 64, 128])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--chunk-every", type=int, default=1,
                        help="a row gets a chunk every N steps (1: every step)")  # fmt: skip
    parser.add_argument("--smoke", action="store_true", help="batches 1 and 8, a few rounds")
    args = parser.parse_args()
    if args.chunk_every < 1:
        parser.error("--chunk-every must be at least 1")
    batches, rounds = ([1, 8], 20) if args.smoke else (args.batches, args.rounds)
    per_round: dict[int, float] = {}
    handoffs: dict[int, float] = {}
    for batch in batches:
        per_round[batch], handoffs[batch] = measure(batch, rounds, args.chunk_every)
        print(
            f"batch {batch:4d}: {per_round[batch]:8.1f} us per round "
            f"({per_round[batch] / batch:6.2f} us per row), "
            f"{handoffs[batch]:.2f} hand-offs per round"
        )
    slope, intercept = np.polyfit(batches, [per_round[b] for b in batches], 1)
    print(f"fit: {intercept:.1f} us + {slope:.2f} us per row")
    print(
        json.dumps(
            {
                "bench": "scheduler_overhead",
                "smoke": args.smoke,
                "chunk_every": args.chunk_every,
                "us_per_round": {str(b): round(per_round[b], 1) for b in batches},
                "fit": {"a_us": round(float(intercept), 1), "b_us_per_row": round(float(slope), 2)},
                "handoffs_per_round": {str(b): handoffs[b] for b in batches},
            }
        )
    )


if __name__ == "__main__":
    main()
