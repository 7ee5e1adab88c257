"""What a busy event loop costs the engine thread beside it in one process (the GIL).

The engine thread's work is calls into NumPy and PyTorch. Such a call lets go of the GIL
while it runs; when it returns, the thread must take the GIL back, and if the event loop's
thread is busy in Python it holds on until the interpreter's switch interval
(``sys.getswitchinterval()``, 5 ms by default) makes it yield. A call of microseconds can
cost milliseconds: the convoy effect. Pure Python work, which never lets go of the GIL
by itself, only shares the core.

Measured here with a thread that stands for a saturated event loop (Python busy work, no
waits) and, beside it, a thread making calls one after another, as the engine thread does:

- each kind of call (Python only; NumPy: the engine model's tone of a 12-step chunk; a
  small PyTorch operation, on ``--device``), mean wall time per call alone and beside the
  busy thread;
- the same with a shorter switch interval (``--short-interval-ms``, 0.5), and what the
  busy thread then gets done (its iterations per second against alone-with-the-caller at
  the default interval), since a shorter interval makes it yield more often.

    .venv/bin/python bench/gil_convoy.py
    .venv/bin/python bench/gil_convoy.py --smoke    # a few calls (a test)
    python3 bench/gil_convoy.py --device cuda       # a GPU's kernel launch (gpu_check.sh)

Ends with one JSON line. The engine in a process of its own (docs/gpu.md) has no loop to
wait for.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable

import torch

from server.engines.modelled import ModelledEngine

#: The busy thread's work is counted over at least this long, the calls going on.
MIN_WINDOW_S = 0.2


def calls(device: str) -> dict[str, Callable[[], object]]:
    """The kinds of call measured, by name (the PyTorch one on ``device``)."""
    engine = ModelledEngine(step_a_s=0.0, step_b_s=0.0)
    small = torch.ones(1024, device=device)

    def python_only() -> object:
        return sum(range(300))

    def numpy_tone() -> object:
        return engine._tone(5, 12, 7)

    def torch_add() -> object:
        return torch.add(small, 1.0)

    return {"python": python_only, "numpy": numpy_tone, "torch": torch_add}


class Busy:
    """A thread busy in Python until stopped, counting its iterations (a saturated loop)."""

    def __init__(self) -> None:
        self.iterations = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        count = 0
        while not self._stop.is_set():
            for _ in range(100):
                count += 1
            self.iterations = count

    def __enter__(self) -> Busy:
        self._thread.start()
        time.sleep(0.02)  # running before the first call
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def per_call_us(call: Callable[[], object], n: int) -> float:
    """Mean wall time of ``n`` calls made one after another, microseconds: what a step
    made of such calls pays (the waits are uneven, many calls none and some a whole
    interval, so a median would hide them)."""
    started = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - started) / n * 1e6


def measure(n: int, short_s: float, device: str) -> dict[str, dict[str, float]]:
    default_s = sys.getswitchinterval()
    figures: dict[str, dict[str, float]] = {}
    rates: dict[float, float] = {}
    try:
        for name, call in calls(device).items():
            call()  # warm
            row = {"alone_us": per_call_us(call, n)}
            for label, interval_s in (("busy_default_us", default_s), ("busy_short_us", short_s)):
                sys.setswitchinterval(interval_s)
                with Busy() as busy:
                    before, started = busy.iterations, time.perf_counter()
                    row[label] = per_call_us(call, n)
                    while time.perf_counter() - started < MIN_WINDOW_S:  # a rate to tell
                        call()
                    rate = (busy.iterations - before) / (time.perf_counter() - started)
                if name == "numpy":
                    rates[interval_s] = rate
                sys.setswitchinterval(default_s)
            figures[name] = {key: round(value, 1) for key, value in row.items()}
    finally:
        sys.setswitchinterval(default_s)
    figures["busy_thread"] = {
        "short_vs_default_iterations": round(rates[short_s] / rates[default_s], 2)
        if rates.get(default_s)
        else 0.0
    }
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="calls of each kind per case")
    parser.add_argument("--short-interval-ms", type=float, default=0.5)
    parser.add_argument(
        "--device", default="cpu", help="where the PyTorch call runs (cuda: a kernel launch)"
    )
    parser.add_argument("--smoke", action="store_true", help="a few calls (a test)")
    args = parser.parse_args(argv)
    n = 5 if args.smoke else args.calls
    torch.set_num_threads(1)
    default_ms = sys.getswitchinterval() * 1000
    figures = measure(n, args.short_interval_ms / 1000, args.device)
    print(f"switch interval {default_ms:g} ms (default) and {args.short_interval_ms:g} ms")
    print(f"{'call':8} {'alone':>10} {'beside busy':>14} {'beside busy, short':>20}  (us, mean)")
    for name in ("python", "numpy", "torch"):
        row = figures[name]
        print(
            f"{name:8} {row['alone_us']:>10} {row['busy_default_us']:>14} "
            f"{row['busy_short_us']:>20}"
        )
    ratio = figures["busy_thread"]["short_vs_default_iterations"]
    print(f"the busy thread's work with the short interval: {ratio}x the default's")
    print(
        json.dumps(
            {
                "bench": "gil_convoy",
                "smoke": args.smoke,
                "switch_interval_ms": default_ms,
                "short_interval_ms": args.short_interval_ms,
                "calls": n,
                "device": args.device,
                "figures": figures,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
