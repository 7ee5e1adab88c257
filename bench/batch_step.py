"""Batched GPT steps and vocoding at ChatTTS's real dimensions on this CPU, float32 and INT8.

For each setting (float32; INT8 GPT; INT8 GPT and vocoder) and batch size (1, 2, 4, 8, 16) it runs the real batched decoder
(``server.engines.chattts.batch``) on a random-weight checkpoint with ChatTTS's real
dimensions (speed depends on the architecture, not on the weight values) and reports:

- ms per GPT step (batched forward, heads, every row's sampling; vocoding excluded);
- ms of vocoding per second of audio;
- audio seconds produced per wall second over whole utterances (steps + vocoding): the
  number of real-time streams that setting carries (``realtime_streams_best`` per
  setting); ``realtime_streams`` is the best of all;
- the fitted step cost ``a + b * batch`` (the ``cpu`` preset of bench/capacity.py);
- INT8's numerical effect: logits of the quantised GPT against the float one on the same
  tokens (teacher-forced): mean cosine and top-1 agreement per codebook, over
  ``--compare-steps`` steps;
- the INT8 vocoder (``vocoder_quantization``): its audio's SNR against the float one;
- batched vocoding: equal windows vocoded in one call against one by one;
- attention row by row against one masked call.

    .venv/bin/python bench/batch_step.py                 # about 10 minutes
    .venv/bin/python bench/batch_step.py --quick         # batches 1, 4, 16; fewer steps
    .venv/bin/python bench/batch_step.py --smoke         # tiny checkpoint (a test)

Ends with one JSON line of the headline figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from server.engines.chattts.batch import BatchedDecoder  # noqa: E402
from server.engines.chattts.checkpoint import load_chat, write_checkpoint  # noqa: E402
from server.engines.chattts.decoder import GenerationParams, StreamingDecoder  # noqa: E402
from server.engines.chattts.settings import ChatTTSSettings  # noqa: E402

TEXTS = [
    "今天天气很好，我们一起去公园散步吧。",
    "欢迎使用流式语音合成服务。",
    "人工智能正在改变我们的生活方式。",
    "请在听到提示音之后留言。",
    "这是一段用于测试的句子。",
    "明天上午九点开会，请准时参加。",
    "火车将在十分钟后到达终点站。",
    "谢谢你的耐心等待。",
]
SAMPLES_PER_STEP = 512
#: Settings measured: name -> (gpt_quantization, vocoder_quantization).
CONFIGS = {"float32": ("none", "none"), "int8": ("int8", "none"), "int8+vocoder": ("int8", "int8")}


def speaker(chat: Any, seed: int) -> str:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        voice: str = chat.sample_random_speaker()
    return voice


class VocoderClock:
    """Time spent vocoding, by wrapping the batch's one vocoding call."""

    def __init__(self, batch: BatchedDecoder) -> None:
        self.seconds = 0.0
        inner = batch._vocode

        def timed(*args: Any) -> None:
            started = time.perf_counter()
            try:
                inner(*args)
            finally:
                self.seconds += time.perf_counter() - started

        batch._vocode = timed  # type: ignore[method-assign]


def open_rows(batch: BatchedDecoder, chat: Any, size: int, steps: int) -> list[Any]:
    rows = []
    for i in range(size):
        p = GenerationParams(
            spk_emb=speaker(chat, i), seed=i, max_new_token=steps, min_new_token=steps
        )
        row, embeds = batch.open(TEXTS[i % len(TEXTS)], p)
        assert batch.prefill(row, embeds)
        rows.append(row)
    return rows


def measure(
    decoder: StreamingDecoder, chat: Any, size: int, steps: int, attention: str
) -> dict[str, float]:
    """Whole fixed-length utterances for ``size`` rows: step and vocoder costs, throughput."""
    batch = BatchedDecoder(decoder, max_batch=size, max_tokens=512, attention=attention)
    clock = VocoderClock(batch)
    rows = open_rows(batch, chat, size, steps)
    clock.seconds = 0.0
    started = time.perf_counter()
    step_times: list[float] = []
    while live := [row for row in rows if not row.done]:
        before_vocoder = clock.seconds
        t0 = time.perf_counter()
        batch.step(live)
        step_times.append(time.perf_counter() - t0 - (clock.seconds - before_vocoder))
    wall = time.perf_counter() - started
    audio_s = sum(sum(c.size for c in batch.take_audio(row)) for row in rows) / 24000
    return {
        "step_ms": statistics.median(step_times) * 1000,
        "vocoder_ms_per_audio_s": clock.seconds * 1000 / audio_s,
        "realtime_streams": audio_s / wall,
    }


@torch.inference_mode()
def teacher_forced_logits(
    decoder: StreamingDecoder, chat: Any, tokens: torch.Tensor
) -> list[torch.Tensor]:
    """Logits of every step when the GPT is fed ``tokens`` (steps, num_vq) after the prompt."""
    batch = BatchedDecoder(decoder, max_batch=1, max_tokens=1024)
    p = GenerationParams(spk_emb=speaker(chat, 0), seed=0, max_new_token=tokens.size(0))
    row, embeds = batch.open(TEXTS[0], p)
    slot = batch.gpt.acquire(row.prompt_tokens + tokens.size(0))
    assert slot == 0  # a step covers rows 0 .. n - 1
    states = batch.gpt.prefill(slot, embeds).float()
    out = [decoder.head_logits(states)[0]]
    for k in range(tokens.size(0) - 1):
        embed = decoder.code_embeds(tokens[k].view(1, 1, -1))
        position = row.prompt_tokens + k
        batch.gpt.reserve(position + 1)
        state = batch.gpt.step(embed, torch.tensor([position]), position + 1).float()
        out.append(decoder.head_logits(state)[0])
    return out


def int8_effect(
    reference: StreamingDecoder, quantised: StreamingDecoder, chat: Any, steps: int
) -> dict[str, float]:
    p = GenerationParams(spk_emb=speaker(chat, 0), seed=0, max_new_token=steps, min_new_token=steps)
    list(reference.stream(TEXTS[0], p))
    tokens = torch.tensor(reference.last_stats.token_ids)
    ref = teacher_forced_logits(reference, chat, tokens)
    quant = teacher_forced_logits(quantised, chat, tokens)
    cosines, agree = [], []
    for a, b in zip(ref, quant, strict=True):
        cosines.append(float(torch.nn.functional.cosine_similarity(a, b, dim=-1).mean()))
        agree.append(float((a.argmax(-1) == b.argmax(-1)).float().mean()))
    return {"logit_cosine": statistics.mean(cosines), "top1_agreement": statistics.mean(agree)}


def vocoder_batching(
    decoder: StreamingDecoder, chat: Any, windows: int, repeats: int
) -> dict[str, float]:
    hidden = int(chat.config.gpt.hidden_size)
    states = [torch.randn(96 + 8, hidden) * 0.3 for _ in range(windows)]
    decoder.vocode_many(states[:2])  # warm
    one = []
    many = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for s in states:
            decoder.vocode(s)
        one.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        decoder.vocode_many(states)
        many.append(time.perf_counter() - t0)
    return {"one_by_one_ms": min(one) * 1000, "one_call_ms": min(many) * 1000}


def vocoder_int8_snr(reference: StreamingDecoder, quantised: StreamingDecoder) -> float:
    """SNR of the INT8 vocoder's audio against the float one's, on the same GPT states."""
    torch.manual_seed(1)
    states = torch.randn(120, int(reference.chat.config.gpt.hidden_size)) * 0.5
    ref, quant = reference.vocode(states), quantised.vocode(states)
    return float(10 * np.log10(np.sum(ref**2) / np.sum((ref - quant) ** 2)))


def fit(points: dict[int, float]) -> tuple[float, float]:
    xs, ys = list(points), list(points.values())
    mx, my = statistics.mean(xs), statistics.mean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return my - b * mx, b


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, default=ROOT / "checkpoints" / "full")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--steps", type=int, default=120, help="steps per utterance")
    parser.add_argument("--compare-steps", type=int, default=300)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--smoke", action="store_true", help="a tiny checkpoint and a few steps (a test)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.batches, args.steps, args.compare_steps = [1, 4, 16], 48, 100
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        if args.smoke:
            args.checkpoint = Path(tmp) / "tiny"
            args.batches, args.steps, args.compare_steps = [1, 2], 14, 8
            write_checkpoint(args.checkpoint, size="tiny", seed=0)
        elif not (args.checkpoint / "asset").is_dir():
            print(f"writing a real-dims random checkpoint to {args.checkpoint} (~1.1 GB)")
            write_checkpoint(args.checkpoint, size="full", seed=0)
        summary = run(args)
    print(json.dumps(summary))
    return 0


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every measurement in turn; the summary of the final JSON line."""
    results, decoders = ramp(args)
    extras = comparisons(args, decoders)
    best_precision, best_batch = max(
        ((p, b) for p in results for b in results[p]),
        key=lambda pb: results[pb[0]][pb[1]]["realtime_streams"],
    )
    best = results[best_precision][best_batch]
    a32, b32 = fit({b: r["step_ms"] for b, r in results["float32"].items()})
    a8, b8 = fit({b: r["step_ms"] for b, r in results["int8"].items()})
    print(
        f"step cost fit: float32 {a32:.1f} + {b32:.2f} x batch ms; int8 {a8:.1f} + {b8:.2f} x batch ms"
    )
    print(
        f"best: {best_precision} at batch {best_batch}: {best['realtime_streams']:.2f} real-time streams"
    )

    def each(key: str, digits: int) -> dict[str, dict[int, float]]:
        return {
            p: {b: round(r[key], digits) for b, r in rows.items()} for p, rows in results.items()
        }

    return {
        "bench": "batch_step",
        "smoke": args.smoke,
        "threads": args.threads,
        "step_ms": each("step_ms", 1),
        "vocoder_ms_per_audio_s": each("vocoder_ms_per_audio_s", 1),
        "realtime_streams_by_setting": each("realtime_streams", 2),
        # The best batch of each setting: float32, INT8 GPT, INT8 GPT and vocoder.
        "realtime_streams_best": {
            p: round(max(r["realtime_streams"] for r in rows.values()), 2)
            for p, rows in results.items()
        },
        "realtime_streams": round(best["realtime_streams"], 2),
        "best": {"precision": best_precision, "batch": best_batch},
        "step_fit_ms": {
            "float32": [round(a32, 1), round(b32, 2)],
            "int8": [round(a8, 1), round(b8, 2)],
        },
        **extras,
    }


def ramp(
    args: argparse.Namespace,
) -> tuple[dict[str, dict[int, dict[str, float]]], dict[str, tuple[StreamingDecoder, Any]]]:
    """Each setting at each batch size (the server's default attention)."""
    results: dict[str, dict[int, dict[str, float]]] = {}
    decoders: dict[str, tuple[StreamingDecoder, Any]] = {}
    for precision, (gpt_q, vocoder_q) in CONFIGS.items():
        chat = load_chat(args.checkpoint, device="cpu")
        options = ChatTTSSettings(gpt_quantization=gpt_q, vocoder_quantization=vocoder_q)
        decoder = StreamingDecoder(chat, options)
        decoders[precision] = (decoder, chat)
        results[precision] = {}
        # Warm-up: every window length of the schedule (oneDNN builds a kernel per shape).
        measure(decoder, chat, 2, args.steps, "auto")
        for size in args.batches:
            row = measure(decoder, chat, size, args.steps, "auto")
            results[precision][size] = row
            print(
                f"{precision:12} batch {size:3d}: {row['step_ms']:7.1f} ms/step, vocoder "
                f"{row['vocoder_ms_per_audio_s']:6.1f} ms per audio s, "
                f"{row['realtime_streams']:5.2f} real-time streams",
                flush=True,
            )
    return results, decoders


def comparisons(
    args: argparse.Namespace, decoders: dict[str, tuple[StreamingDecoder, Any]]
) -> dict[str, Any]:
    """Attention modes, batched and INT8 vocoding, INT8's effect on the logits."""
    attention = {}
    for size in [b for b in args.batches if b >= 4][-1:]:
        decoder, chat = decoders["float32"]
        masked = measure(decoder, chat, size, 24, "masked")["step_ms"]
        rows = measure(decoder, chat, size, 24, "rows")["step_ms"]
        attention = {"batch": size, "rows_ms": rows, "masked_ms": masked}
        print(f"attention at batch {size}: rows {rows:.1f} ms/step, masked {masked:.1f} ms/step")
    vocoder = vocoder_batching(*decoders["float32"], windows=8, repeats=3)
    vocoder_snr = vocoder_int8_snr(decoders["float32"][0], decoders["int8+vocoder"][0])
    print(f"INT8 vocoder against float32: SNR {vocoder_snr:.1f} dB")
    print(
        f"vocoding 8 windows of 104 steps: one by one {vocoder['one_by_one_ms']:.0f} ms, "
        f"one call {vocoder['one_call_ms']:.0f} ms"
    )
    effect = int8_effect(
        decoders["float32"][0], decoders["int8"][0], decoders["int8"][1], args.compare_steps
    )
    print(
        f"INT8 against float32 over {args.compare_steps} steps: logit cosine "
        f"{effect['logit_cosine']:.4f}, top-1 agreement {effect['top1_agreement']:.3f}"
    )
    return {
        "int8": {k: round(v, 4) for k, v in effect.items()},
        "vocoder_batching_ms": {k: round(v, 1) for k, v in vocoder.items()},
        "vocoder_int8_snr_db": round(vocoder_snr, 1),
        "attention_ms": {k: round(v, 1) for k, v in attention.items()},
    }


if __name__ == "__main__":
    sys.exit(main())
