"""Continuous batching on a CUDA GPU at ChatTTS's real dimensions: the ramp 1 -> 128.

For each batch size: ms per batched GPT step, vocoder ms per audio second, peak CUDA
memory (the memory curve), audio seconds made per wall second over whole utterances
(real-time streams at that size), and the time to first audio a joining stream would see
(prefill + the first chunk's steps at that step cost). Then the capacity the server's
admission control would derive from those step costs (``streaming.policy.capacity``,
80 % headroom) and the TTFA at it; and what starting 1, 8 and 32 joining rows costs,
their prompts a forward each against one forward together (the server's
``--prefill-together``). Float32 and bfloat16 GPT.

    python bench/gpu_batch.py --checkpoint checkpoints/full       # from bench/gpu_check.sh
    .venv/bin/python bench/gpu_batch.py --smoke   # does it run? (tiny, batches 1 and 2;
                                                  # on the CPU when there is no CUDA)

The same measurement runs on the CPU with ``--device cpu`` (float32 only: half
precision is for CUDA; no memory curve). Ends with one JSON line. Needs torch and
ChatTTS only (not the web stack).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from streaming.policy import STEPS_PER_AUDIO_SECOND, StepCosts, capacity

ROOT = Path(__file__).resolve().parent.parent

if TYPE_CHECKING:
    from server.engines.chattts.decoder import StreamingDecoder

# ChatTTS and the engine are imported where they are used: without CUDA, main() says so
# after importing torch alone.

#: GPT precisions measured on each kind of device (half precision is CUDA only).
DTYPES = {"cuda": ("float32", "bfloat16"), "cpu": ("float32",)}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(
    decoder: StreamingDecoder,
    chat: Any,
    size: int,
    steps: int,
    cuda_graphs: bool = False,
    max_tokens: int = 1024,
) -> dict[str, float]:
    """Whole fixed-length utterances for ``size`` rows: step and vocoder costs, throughput
    (with ``cuda_graphs``, the step replayed from graphs captured per bucket first)."""
    from bench.batch_step import VocoderClock, open_rows
    from server.engines.chattts.batch import BatchedDecoder

    device = torch.device(chat.device)
    _sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    batch = BatchedDecoder(decoder, max_batch=size, max_tokens=max_tokens, cuda_graphs=cuda_graphs)
    capture_started = time.perf_counter()
    batch.prepare()
    capture_s = time.perf_counter() - capture_started
    if cuda_graphs and batch.graphs is None:
        raise RuntimeError("CUDA graph capture failed (see the log above)")
    clock = VocoderClock(batch)
    prefill_started = time.perf_counter()
    rows = open_rows(batch, chat, size, steps)
    _sync(device)
    prefill_s = (time.perf_counter() - prefill_started) / size
    clock.seconds = 0.0
    started = time.perf_counter()
    step_times: list[float] = []
    while live := [row for row in rows if not row.done]:
        before = clock.seconds
        t0 = time.perf_counter()
        batch.step(live)
        _sync(device)
        step_times.append(time.perf_counter() - t0 - (clock.seconds - before))
    wall = time.perf_counter() - started
    audio_s = sum(sum(c.size for c in batch.take_audio(row)) for row in rows) / 24000
    step_s = statistics.median(step_times)
    first_chunk = decoder.options.first_chunk_steps
    figures = {
        "step_ms": step_s * 1000,
        "vocoder_ms_per_audio_s": clock.seconds * 1000 / audio_s,
        "realtime_streams": audio_s / wall,
        "ttfa_estimate_ms": (prefill_s + first_chunk * step_s) * 1000,
    }
    if cuda_graphs:
        figures["capture_s"] = capture_s
    if device.type == "cuda":
        figures["memory_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return figures


def prompts(
    decoder: StreamingDecoder, chat: Any, sizes: list[int], repeats: int = 3
) -> dict[int, dict[str, float]]:
    """Wall ms (synchronised) to start ``k`` joining rows: their prompts a forward each
    (``prefill``) against one forward together (``prefill_many``), median of ``repeats``."""
    from bench.batch_step import TEXTS, speaker
    from server.engines.chattts.batch import BatchedDecoder
    from server.engines.chattts.decoder import GenerationParams

    device = torch.device(chat.device)
    batch = BatchedDecoder(decoder, max_batch=max(sizes), max_tokens=512)
    voices = [speaker(chat, i) for i in range(max(sizes))]

    def start(k: int, together: bool) -> float:
        opened = [
            batch.open(
                TEXTS[i % len(TEXTS)],
                GenerationParams(spk_emb=voices[i], seed=i, max_new_token=8, min_new_token=8),
            )
            for i in range(k)
        ]
        rows, embeds = [row for row, _ in opened], [e for _, e in opened]
        _sync(device)
        began = time.perf_counter()
        if together:
            assert all(batch.prefill_many(rows, embeds))
        else:
            assert all(batch.prefill(row, e) for row, e in zip(rows, embeds, strict=True))
        _sync(device)
        spent = (time.perf_counter() - began) * 1000
        for row in rows:
            batch.close(row)
        return spent

    results: dict[int, dict[str, float]] = {}
    for k in sizes:
        start(k, True)  # warm
        alone = statistics.median(start(k, False) for _ in range(repeats))
        together = statistics.median(start(k, True) for _ in range(repeats))
        results[k] = {"alone_ms": alone, "together_ms": together, "ratio": together / alone}
        print(
            f"  {k:3d} joining rows: {alone:7.2f} ms a prompt at a time, {together:7.2f} ms "
            f"together ({together / alone:.2f}x)",
            flush=True,
        )
    return results


def ramp(
    checkpoint: Path,
    device: str,
    dtype: str,
    batches: list[int],
    steps: int,
    warm_up: bool,
    cuda_graphs: bool = False,
    max_tokens: int = 1024,
    prompt_sizes: tuple[int, ...] = (1, 8, 32),
) -> dict[str, Any]:
    """The batch sizes in turn on a fresh model with a ``dtype`` GPT, then the capacity."""
    from server.engines.chattts.checkpoint import load_chat
    from server.engines.chattts.decoder import StreamingDecoder
    from server.engines.chattts.settings import ChatTTSSettings

    chat = load_chat(checkpoint, device=device)
    decoder = StreamingDecoder(chat, ChatTTSSettings(device=device, gpt_dtype=dtype))
    if warm_up:
        measure(decoder, chat, 2, steps, cuda_graphs, max_tokens)
    costs = StepCosts(smoothing=1.0)
    rows: dict[int, dict[str, float]] = {}
    for size in batches:
        try:
            rows[size] = row = measure(decoder, chat, size, steps, cuda_graphs, max_tokens)
        except torch.OutOfMemoryError:
            print(f"{dtype} batch {size}: out of memory")
            break
        # A step as the server times it: the GPT and the chunks vocoded in it.
        vocoder_s = row["vocoder_ms_per_audio_s"] / STEPS_PER_AUDIO_SECOND * size
        costs.observe(size, (row["step_ms"] + vocoder_s) / 1000)
        memory = f", {row['memory_mb']:7.0f} MB" if "memory_mb" in row else ""
        print(
            f"{dtype:9} batch {size:4d}: {row['step_ms']:6.2f} ms/step, vocoder "
            f"{row['vocoder_ms_per_audio_s']:6.1f} ms/audio s, {row['realtime_streams']:6.1f} "
            f"real-time streams{memory}, TTFA ~{row['ttfa_estimate_ms']:.0f} ms",
            flush=True,
        )
    print(f"{dtype}: starting joining rows (prompts):")
    started = prompts(decoder, chat, list(prompt_sizes))
    streams = capacity(costs, max(rows), headroom=0.8)
    at = min((s for s in rows if s >= (streams or 1)), default=max(rows))
    print(
        f"{dtype}: capacity {streams} real-time streams (TTFA ~{rows[at]['ttfa_estimate_ms']:.0f} ms)"
    )
    chat.unload()
    del decoder, chat
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return {
        "by_batch": {s: {k: round(v, 2) for k, v in r.items()} for s, r in rows.items()},
        "capacity_streams": streams,
        "ttfa_ms_at_capacity": round(rows[at]["ttfa_estimate_ms"], 1),
        "prompts": {k: {n: round(v, 2) for n, v in r.items()} for k, r in started.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="default: checkpoints/full (a temporary tiny one with --smoke)")  # fmt: skip
    parser.add_argument(
        "--device", default=None, help="default: cuda (cpu with --smoke and no CUDA)"
    )
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64, 128])
    parser.add_argument("--steps", type=int, default=96)
    parser.add_argument("--max-tokens", type=int, default=1024,
                        help="positions per row of the key/value store (the server's "
                        "--gpt-cache-tokens, 2560 by default; allocated whole with "
                        "--cuda-graphs, so it sets the memory measured)")  # fmt: skip
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="replay the batched step from CUDA graphs captured per bucket "
                        "(the server's --batch-cuda-graphs), capture time reported")  # fmt: skip
    parser.add_argument("--dtypes", nargs="+", default=None,
                        help="GPT precisions to ramp (default: float32 and bfloat16 on CUDA)")  # fmt: skip
    parser.add_argument("--smoke", action="store_true",
                        help="batches 1 and 2, 16 steps, no warm-up, a tiny checkpoint: checks "
                        "it runs (the suite runs it), on CUDA when there is one, else on the CPU")  # fmt: skip
    args = parser.parse_args(argv)
    device = args.device or ("cpu" if args.smoke and not torch.cuda.is_available() else "cuda")
    if device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device: run on a GPU host, or pass --device cpu (or --smoke)")
        return 3
    if args.smoke:
        args.batches, args.steps = [1, 2], 16
    report: dict[str, Any] = {
        "bench": "gpu_batch",
        "smoke": args.smoke,
        "device": torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu",
        "cuda_graphs": args.cuda_graphs,
        "max_tokens": args.max_tokens,
    }
    with tempfile.TemporaryDirectory() as scratch:
        checkpoint = args.checkpoint or (
            Path(scratch) / "tiny" if args.smoke else ROOT / "checkpoints" / "full"
        )
        if not (checkpoint / "asset").is_dir():
            from server.engines.chattts.checkpoint import write_checkpoint

            write_checkpoint(checkpoint, size="tiny" if args.smoke else "full", seed=0)
        for dtype in args.dtypes or DTYPES["cuda" if device.startswith("cuda") else "cpu"]:
            report[dtype] = ramp(
                checkpoint, device, dtype, args.batches, args.steps,
                warm_up=not args.smoke, cuda_graphs=args.cuda_graphs,
                max_tokens=args.max_tokens,
                prompt_sizes=(1, 2) if args.smoke else (1, 8, 32),
            )  # fmt: skip
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
