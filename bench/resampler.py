"""The resampler's CPU per second of audio, and whether its output depends on the cuts.

A stream at 16, 8 or 48 kHz (or a voice clip at another rate) goes through
``streaming.audio.Resampler``, whose block products run in float64 so that a stream cut
into other chunks (a phrase-cache hit's joined chunks against a synthesis's) gives the
same samples. Measured in the same run against the same resampler with float32 products
(what it had before), for 24 kHz to each rate:

- CPU ms per second of audio (the thread's CPU time; median of ``--repeats``) in 40 ms
  chunks (the engine's and a listener's scale) and in 1 s chunks;
- samples that differ between the stream fed whole and in 40 ms chunks (0 is the
  promise), for each.

    .venv/bin/python bench/resampler.py
    .venv/bin/python bench/resampler.py --smoke    # one repeat (a test)

Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

from streaming.audio import Resampler

RATE_HZ = 24_000
OUT_RATES_HZ = (16_000, 8_000, 48_000)
CHUNKS_MS = (40, 1000)


class Float32Resampler(Resampler):
    """The same resampler with its block products in float32 (before)."""

    PRODUCT_DTYPE = np.float32


def fed(kind: type[Resampler], out_hz: int, audio: np.ndarray, chunk: int) -> np.ndarray:
    resampler = kind(RATE_HZ, out_hz)
    pieces = [resampler.process(audio[i : i + chunk]) for i in range(0, audio.size, chunk)]
    return np.concatenate([*pieces, resampler.flush()])


def cpu_ms_per_s(
    kind: type[Resampler], out_hz: int, audio: np.ndarray, chunk: int, repeats: int
) -> float:
    times = []
    for _ in range(repeats):
        started = time.thread_time()
        fed(kind, out_hz, audio, chunk)
        times.append(time.thread_time() - started)
    return statistics.median(times) * 1000 / (audio.size / RATE_HZ)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="audio per measurement")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="one repeat of 1 s (a test)")
    args = parser.parse_args(argv)
    seconds, repeats = (1.0, 1) if args.smoke else (args.seconds, args.repeats)
    audio = np.random.default_rng(0).normal(0, 0.3, round(seconds * RATE_HZ)).astype(np.float32)
    figures: dict[str, dict[str, float]] = {}
    print(f"24 kHz to each rate, {seconds:g} s of audio; CPU ms per second of audio")
    print(f"{'to':>8} {'chunks':>7} {'float64 (ours)':>15} {'float32':>8}")
    for out_hz in OUT_RATES_HZ:
        row: dict[str, float] = {}
        for kind, name in ((Resampler, "float64"), (Float32Resampler, "float32")):
            whole = fed(kind, out_hz, audio, audio.size)
            cut = fed(kind, out_hz, audio, RATE_HZ * CHUNKS_MS[0] // 1000)
            row[f"{name}_samples_differing"] = int(np.count_nonzero(whole != cut))
            for chunk_ms in CHUNKS_MS:
                chunk = RATE_HZ * chunk_ms // 1000
                row[f"{name}_{chunk_ms}ms_cpu_ms_per_s"] = round(
                    cpu_ms_per_s(kind, out_hz, audio, chunk, repeats), 3
                )
        for chunk_ms in CHUNKS_MS:
            print(
                f"{out_hz:>8} {chunk_ms:>5}ms {row[f'float64_{chunk_ms}ms_cpu_ms_per_s']:>15} "
                f"{row[f'float32_{chunk_ms}ms_cpu_ms_per_s']:>8}"
            )
        print(
            f"{'':>8} samples differing fed whole / in 40 ms chunks: "
            f"{row['float64_samples_differing']} / {row['float32_samples_differing']}"
        )
        figures[str(out_hz)] = row
    print(
        json.dumps(
            {"bench": "resampler", "smoke": args.smoke, "seconds": seconds, "figures": figures}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
