"""A batched step beside a saturated event loop: in the engine thread, and in the engine's
own process (``--engine-process``).

In one process the engine thread shares the GIL with the event loop. A step dispatches
many small operations (an eager GPU step launches hundreds of kernels); each lets go of
the GIL and, on return, waits for a busy loop to yield it, up to the switch interval
(5 ms: bench/gil_convoy.py). In a process of its own the step's operations wait for
nobody; the server's engine thread makes one round trip a step over a pipe and waits for
the GIL once, when the answer arrives.

Measured with an engine whose step makes ``--ops`` small PyTorch operations on the CPU
(standing for a GPU step's launches) for ``--rows`` rows and hands back their audio on
ChatTTS's chunk schedule, and a thread busy in Python standing for a saturated loop:

- mean wall time of a step: alone, and beside the busy thread, for the engine in the
  server's thread and in its own process (same run, alternating);
- what the busy thread got done beside each (iterations per second: the loop's share);
- the round trip of an empty step (the pipe's own cost) and the audio a step brings back.

    .venv/bin/python bench/engine_process.py
    .venv/bin/python bench/engine_process.py --smoke    # a few steps (a test)
    python3 bench/engine_process.py --device cuda       # kernel launches (gpu_check.sh)

Ends with one JSON line. On this 2-core VM the busy thread takes one core and the engine
process the other; on a host with cores to spare the process has one of its own.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench.gil_convoy import Busy
from server.engines.base import BatchRow, Engine, SynthesisRequest, VoiceSpec
from server.engines.modelled import ModelledEngine, _ModelledBatcher
from server.engines.remote import remote_factory

#: A text long enough that no row ends during a run (10.4 steps a character).
TEXT = "长" * 400


class HostBound(ModelledEngine):
    """A modelled engine whose step is ``ops`` small PyTorch operations on ``device``
    (no sleeps)."""

    def __init__(self, ops: int, device: str = "cpu") -> None:
        super().__init__(step_a_s=0.0, step_b_s=0.0)
        self.ops = ops
        self.device = device

    def batcher(self, max_batch: int) -> _HostBoundBatcher:
        return _HostBoundBatcher(self, max_batch)


class _HostBoundBatcher(_ModelledBatcher):
    engine: HostBound

    def __init__(self, engine: HostBound, max_batch: int) -> None:
        import torch

        super().__init__(engine, max_batch)
        self._state = torch.zeros(max_batch, 64, device=engine.device)

    def step(self, rows: Sequence[BatchRow]) -> None:
        import torch

        state = self._state
        for _ in range(self.engine.ops):
            state.add_(1.0)
        if state.is_cuda:
            torch.cuda.synchronize()  # the step's audio is read back: wait for it
        super().step(rows)


def host_bound(ops: int, device: str = "cpu") -> tuple[HostBound, bool, None]:
    """The factory (it pickles: the engine process builds its own)."""
    import torch

    torch.set_num_threads(1)
    return HostBound(ops, device), False, None


def step_ms(engine: Engine, rows: int, steps: int, busy: bool) -> tuple[float, float]:
    """Mean wall time of a step of ``rows`` rows over ``steps`` steps, ms, and the busy
    thread's iterations per second meanwhile (0 when alone)."""
    batcher = engine.batcher(rows)
    assert batcher is not None
    opened = [batcher.open(SynthesisRequest(TEXT, VoiceSpec(seed=k))) for k in range(rows)]
    for row in opened:
        batcher.prefill(row)
    batcher.step(opened)  # warm
    rate = 0.0
    if busy:
        with Busy() as loop:
            before, started = loop.iterations, time.perf_counter()
            for _ in range(steps):
                batcher.step(opened)
            elapsed = time.perf_counter() - started
            rate = (loop.iterations - before) / elapsed
    else:
        started = time.perf_counter()
        for _ in range(steps):
            batcher.step(opened)
        elapsed = time.perf_counter() - started
    for row in opened:
        batcher.close(row)
    return elapsed / steps * 1000, rate


def round_trip_us(engine: Engine, calls: int) -> float:
    """An empty step's round trip (no rows), microseconds, median of ``calls``."""
    batcher = engine.batcher(1)
    assert batcher is not None
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        batcher.step([])
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def measure(args: argparse.Namespace) -> dict[str, Any]:
    factory = functools.partial(host_bound, args.ops, args.device)
    engines: dict[str, Engine] = {
        "thread": factory()[0],
        "process": remote_factory(factory, log_level="warning")()[0],
    }
    figures: dict[str, Any] = {name: {"alone_ms": [], "busy_ms": [], "busy_rate": []}
                               for name in engines}  # fmt: skip
    try:
        for _ in range(args.rounds):
            for name, engine in engines.items():
                for busy in (False, True):
                    ms, rate = step_ms(engine, args.rows, args.steps, busy)
                    figures[name]["busy_ms" if busy else "alone_ms"].append(ms)
                    if busy:
                        figures[name]["busy_rate"].append(rate)
        trip = round_trip_us(engines["process"], args.steps * 4)
    finally:
        for engine in engines.values():
            engine.close()
    result: dict[str, Any] = {}
    for name, row in figures.items():
        result[name] = {
            "alone_ms": round(statistics.median(row["alone_ms"]), 3),
            "busy_ms": round(statistics.median(row["busy_ms"]), 3),
            "busy_iterations_per_s": round(statistics.median(row["busy_rate"])),
        }
    result["round_trip_us"] = round(trip, 1)
    # The audio a step of these rows brings back: every row a 12-step chunk per 12 steps.
    result["audio_bytes_per_step"] = args.rows * 512 * 4
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=200, help="PyTorch operations a step")
    parser.add_argument("--rows", type=int, default=64, help="rows a step takes")
    parser.add_argument("--steps", type=int, default=10, help="steps timed per case")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (median)")
    parser.add_argument(
        "--device", default="cpu", help="where the operations run (cuda: kernel launches)"
    )
    parser.add_argument("--smoke", action="store_true", help="a few small steps (a test)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.ops, args.rows, args.steps, args.rounds = 20, 4, 4, 1
    import torch

    torch.set_num_threads(1)
    result = measure(args)
    thread, process = result["thread"], result["process"]
    print(f"a step of {args.rows} rows, {args.ops} PyTorch operations on {args.device} (ms, mean):")
    print(f"{'engine':10} {'alone':>8} {'beside a busy loop':>20} {'loop iterations/s':>18}")
    for name in ("thread", "process"):
        row = result[name]
        print(f"{name:10} {row['alone_ms']:>8} {row['busy_ms']:>20} "
              f"{row['busy_iterations_per_s']:>18}")  # fmt: skip
    busy_ratio = round(thread["busy_ms"] / process["busy_ms"], 2) if process["busy_ms"] else None
    loop_ratio = (
        round(process["busy_iterations_per_s"] / thread["busy_iterations_per_s"], 2)
        if thread["busy_iterations_per_s"]
        else None
    )
    print(f"beside a busy loop, a step in the thread takes {busy_ratio}x the process's; the loop "
          f"gets {loop_ratio}x the work done beside the process")  # fmt: skip
    print(f"an empty step's round trip: {result['round_trip_us']} us")
    print(
        json.dumps(
            {
                "bench": "engine_process",
                "smoke": args.smoke,
                "ops": args.ops,
                "device": args.device,
                "rows": args.rows,
                "steps": args.steps,
                "rounds": args.rounds,
                "figures": result,
                "busy_step_thread_vs_process": busy_ratio,
                "loop_work_process_vs_thread": loop_ratio,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
