"""Continuous batching on a CUDA GPU at ChatTTS's real dimensions: the ramp 1 -> 128.

For each batch size: ms per batched GPT step, vocoder ms per audio second, peak CUDA
memory (the memory curve), audio seconds made per wall second over whole utterances
(real-time streams at that size), and the time to first audio a joining stream would see
(prefill + the first chunk's steps at that step cost). Then the capacity the server's
admission control would derive from those step costs (``streaming.schedule.capacity``,
80 % headroom) and the TTFA at it. Float32 and bfloat16 GPT.

    python bench/gpu_batch.py --checkpoint checkpoints/full       # from bench/gpu_check.sh

Ends with one JSON line. Needs torch with CUDA and ChatTTS only (not the web stack).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from batch_step import VocoderClock, open_rows  # noqa: E402

from server.engines.chattts.batch import BatchedDecoder  # noqa: E402
from server.engines.chattts.checkpoint import load_chat, write_checkpoint  # noqa: E402
from server.engines.chattts.decoder import StreamingDecoder  # noqa: E402
from server.engines.chattts.options import ChatTTSOptions  # noqa: E402
from streaming.schedule import STEPS_PER_AUDIO_SECOND, StepCosts, capacity  # noqa: E402


def measure(decoder: StreamingDecoder, chat: Any, size: int, steps: int) -> dict[str, float]:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    batch = BatchedDecoder(decoder, max_batch=size, max_tokens=1024)
    clock = VocoderClock(batch)
    prefill_started = time.perf_counter()
    rows = open_rows(batch, chat, size, steps)
    torch.cuda.synchronize()
    prefill_s = (time.perf_counter() - prefill_started) / size
    clock.seconds = 0.0
    started = time.perf_counter()
    step_times: list[float] = []
    while live := [row for row in rows if not row.done]:
        before = clock.seconds
        t0 = time.perf_counter()
        batch.step(live)
        torch.cuda.synchronize()
        step_times.append(time.perf_counter() - t0 - (clock.seconds - before))
    wall = time.perf_counter() - started
    audio_s = sum(sum(c.size for c in batch.take_audio(row)) for row in rows) / 24000
    step_s = statistics.median(step_times)
    first_chunk = decoder.options.first_chunk_steps
    return {
        "step_ms": step_s * 1000,
        "vocoder_ms_per_audio_s": clock.seconds * 1000 / audio_s,
        "realtime_streams": audio_s / wall,
        "memory_mb": torch.cuda.max_memory_allocated() / 2**20,
        "ttfa_estimate_ms": (prefill_s + first_chunk * step_s) * 1000,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, default=ROOT / "checkpoints" / "full")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64, 128])
    parser.add_argument("--steps", type=int, default=96)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device")
        return 3
    if not (args.checkpoint / "asset").is_dir():
        write_checkpoint(args.checkpoint, size="full", seed=0)
    report: dict[str, Any] = {"bench": "gpu_batch", "device": torch.cuda.get_device_name()}
    for dtype in ("float32", "bfloat16"):
        chat = load_chat(args.checkpoint, device="cuda")
        decoder = StreamingDecoder(chat, ChatTTSOptions(device="cuda", gpt_dtype=dtype))
        measure(decoder, chat, 2, args.steps)  # warm-up
        costs = StepCosts(smoothing=1.0)
        rows: dict[int, dict[str, float]] = {}
        for size in args.batches:
            try:
                rows[size] = row = measure(decoder, chat, size, args.steps)
            except torch.OutOfMemoryError:
                print(f"{dtype} batch {size}: out of memory")
                break
            # A step as the server times it: the GPT and the chunks vocoded in it.
            costs.observe(
                size,
                (row["step_ms"] + row["vocoder_ms_per_audio_s"] / STEPS_PER_AUDIO_SECOND * size)
                / 1000,
            )
            print(
                f"{dtype:9} batch {size:4d}: {row['step_ms']:6.2f} ms/step, vocoder "
                f"{row['vocoder_ms_per_audio_s']:6.1f} ms/audio s, {row['realtime_streams']:6.1f} "
                f"real-time streams, {row['memory_mb']:7.0f} MB, TTFA ~{row['ttfa_estimate_ms']:.0f} ms",
                flush=True,
            )
        streams = capacity(costs, max(rows), headroom=0.8)
        at = min((s for s in rows if s >= (streams or 1)), default=max(rows))
        report[dtype] = {
            "by_batch": {s: {k: round(v, 2) for k, v in r.items()} for s, r in rows.items()},
            "capacity_streams": streams,
            "ttfa_ms_at_capacity": round(rows[at]["ttfa_estimate_ms"], 1),
        }
        print(
            f"{dtype}: capacity {streams} real-time streams (TTFA ~{rows[at]['ttfa_estimate_ms']:.0f} ms)"
        )
        chat.unload()
        del decoder, chat
        torch.cuda.empty_cache()
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
