"""Benchmark: our streaming decoder against ChatTTS's own stream and non-stream infer.

    .venv/bin/python bench/stream_decoder.py --threads 1   # CPU, full dims, ~15 min on 2 cores
    python bench/stream_decoder.py --device cuda --lengths 10 30 --repeats 3   # GPU host
    .venv/bin/python bench/stream_decoder.py --smoke       # does it run? (tiny, seconds)

Runs on a random-weight checkpoint with ChatTTS's real dimensions (written once to
``checkpoints/full``, reused after), fixed-length utterances (min_new_token =
max_new_token), the same speaker and seeds for every contender, in one process so that
ratios compare like with like on a noisy machine. Prints figures as it goes and one
final JSON line:

- first audio: seconds and GPT steps to the first non-empty chunk, ChatTTS's
  ``infer(stream=True)`` with its defaults (stream_batch 24, pass_first_n_batches 2)
  against ours; goal ours / ChatTTS's <= 1/4.
- total compute for each length: our whole stream against ChatTTS's non-stream
  ``infer()`` (goal <= 1.05x).
- vocoder work: mel frames through the Decoder per frame emitted (goal <= 1.25), and
  ChatTTS's stream's figure beside it.
- seams: sample step and spectral flux at each chunk join over the median inside
  chunks (tests/seams.py), ours and ChatTTS's stream.
- SNR of our streamed audio against ChatTTS's one-shot decode of the same tokens (same
  seed, so the same tokens: pinned by tests/server/test_chattts_stream.py).
- GPT KV cache (``gpt_cache``): our generation alone (no vocoder) with transformers'
  dynamic cache (as ChatTTS), our static cache, and on CUDA the static cache replayed
  as CUDA graphs: milliseconds per GPT step, the ratio to the dynamic cache, and
  whether the tokens are the same as the dynamic cache's (same seed).
- ONNX (``--onnx``, on by default when onnxruntime imports): Decoder + Vocos backbone +
  head projection exported to ONNX and run with ONNX Runtime against torch, on one
  typical window; the ISTFT stays in torch (complex ops do not export).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from server.engines.chattts.checkpoint import (  # noqa: E402
    load_chat,
    read_manifest,
    write_checkpoint,
)
from server.engines.chattts.decoder import (  # noqa: E402
    SAMPLES_PER_FRAME,
    GenerationParams,
    StreamingDecoder,
)
from server.engines.chattts.settings import ChatTTSSettings  # noqa: E402
from server.engines.chattts.vocoding import (  # noqa: E402
    OnnxVocoder,
    StreamStats,
    VocoderFeatures,
    istft,
)
from tests.seams import measure_seams  # noqa: E402

TEXT = "今天天气很好，我们一起去公园散步吧。人工智能正在改变我们的生活方式。"
STEPS_PER_SECOND = 46.875
SEED = 7


class _FrameCounter:
    def __init__(self, module: torch.nn.Module) -> None:
        self.frames = 0
        self._handle = module.register_forward_hook(self._hook)

    def _hook(self, module: Any, args: Any, output: torch.Tensor) -> None:
        self.frames += int(output.size(-1))

    def close(self) -> None:
        self._handle.remove()


def emitted_frames(samples: int) -> float:
    """Emitted audio in mel frames (a window of n frames renders n - 1 of audio)."""
    return samples / SAMPLES_PER_FRAME + 1


def decode_ratio(stats: StreamStats) -> float:
    """Frames decoded per frame emitted: 1.0 would be one decode of every frame."""
    return (
        stats.decoded_frames / emitted_frames(stats.emitted_samples)
        if stats.emitted_samples
        else 0.0
    )


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _chattts_params(chat: Any, speaker: str, steps: int, **extra: Any) -> Any:
    return chat.InferCodeParams(
        prompt="[speed_5]",
        spk_emb=speaker,
        temperature=0.3,
        top_P=0.7,
        top_K=20,
        manual_seed=SEED,
        max_new_token=steps,
        min_new_token=steps,
        show_tqdm=False,
        **extra,
    )


def _chattts_infer(chat: Any, params: Any, stream: bool) -> Any:
    # stream=True: a generator of (1, n) arrays; False: a list of one array per text.
    return chat.infer(
        [TEXT],
        stream=stream,
        skip_refine_text=True,
        split_text=False,
        do_text_normalization=False,
        do_homophone_replacement=False,
        params_infer_code=params,
    )


def _ours_params(speaker: str, steps: int) -> GenerationParams:
    return GenerationParams(spk_emb=speaker, seed=SEED, max_new_token=steps, min_new_token=steps)


#: "cpu": time.process_time (CPU seconds of this process, all threads), the default on
#: CPU: other work on a shared machine inflates wall time, not this process's CPU time.
#: "wall": time.perf_counter, the default on CUDA (GPU time is not CPU time).
CLOCK = {"name": "cpu"}


def _timed(fn: Callable[[], Any], device: str) -> tuple[float, Any]:
    clock = time.process_time if CLOCK["name"] == "cpu" else time.perf_counter
    _sync(device)
    started = clock()
    result = fn()
    _sync(device)
    return clock() - started, result


def first_audio(
    chat: Any, ours: StreamingDecoder, speaker: str, repeats: int, device: str, steps: int
) -> dict[str, Any]:
    """Seconds and steps to the first non-empty chunk, ChatTTS's stream defaults vs ours
    (``steps``: the utterance's length, more than ChatTTS's 72 before its first chunk)."""
    chattts_s: list[float] = []
    ours_s: list[float] = []
    ours_steps = 0
    for _ in range(repeats):
        params = _chattts_params(chat, speaker, steps, stream_batch=24, pass_first_n_batches=2,
                                 stream_speed=1 << 30)  # fmt: skip

        def chattts_first(params: Any = params) -> int:
            chunks = _chattts_infer(chat, params, stream=True)
            try:
                for chunk in chunks:
                    if chunk.size:
                        return int(chunk.shape[-1])
            finally:
                chunks.close()  # type: ignore[attr-defined]
            return 0

        seconds, _ = _timed(chattts_first, device)
        chattts_s.append(seconds)

        def ours_first() -> int:
            chunks = ours.stream(TEXT, _ours_params(speaker, steps))
            try:
                return int(next(chunks).size)
            finally:
                chunks.close()  # type: ignore[attr-defined]

        seconds, _ = _timed(ours_first, device)
        ours_s.append(seconds)
        ours_steps = ours.last_stats.first_audio_step or 0
    chattts_median = statistics.median(chattts_s)
    ours_median = statistics.median(ours_s)
    figures = {
        "chattts_stream_s": round(chattts_median, 3),
        "chattts_stream_steps": 24 * 3,
        "ours_s": round(ours_median, 3),
        "ours_steps": ours_steps,
        "ratio_time": round(ours_median / chattts_median, 3),
        "ratio_steps": round(ours_steps / 72, 3),
        "goal_ratio": 0.25,
    }
    print(f"first audio: ChatTTS stream {chattts_median:.2f} s after 72 steps; ours "
          f"{ours_median:.2f} s after {ours_steps} steps -> {figures['ratio_time']:.3f}x time")  # fmt: skip
    return figures


def total_compute(chat: Any, ours: StreamingDecoder, speaker: str, seconds: float,
                  repeats: int, device: str, with_chattts_stream: bool) -> dict[str, Any]:  # fmt: skip
    """Our whole stream vs ChatTTS's non-stream infer for one length (+ vocoder work, SNR, seams)."""
    steps = round(seconds * STEPS_PER_SECOND)
    infer_s: list[float] = []
    ours_s: list[float] = []
    one_shot = np.zeros(0)
    streamed = np.zeros(0)
    ours_ratio = 0.0
    chunk_sizes: list[int] = []
    for repeat in range(repeats):
        params = _chattts_params(chat, speaker, steps)

        def run_infer(params: Any = params) -> None:
            infer_s.append(_timed(lambda: _chattts_infer(chat, params, stream=False), device)[0])

        if repeat % 2 == 0:
            run_infer()
        counter = _FrameCounter(chat.decoder)
        try:
            seconds_ours, chunks = _timed(
                lambda: list(ours.stream(TEXT, _ours_params(speaker, steps))), device
            )
        finally:
            counter.close()
        ours_s.append(seconds_ours)
        if repeat % 2 == 1:
            run_infer()
        streamed = np.concatenate(chunks)
        chunk_sizes = [c.size for c in chunks]
        # ChatTTS's infer() strips near-silent samples from its output, so the reference
        # is its own one-shot decode (_decode_to_wavs) of our steps' hidden states, which
        # are ChatTTS's own for this seed (tests pin that).
        assert ours.last_stats.hiddens is not None
        one_shot = chat._decode_to_wavs([ours.last_stats.hiddens.clone()], True)[0]
        ours_ratio = counter.frames / emitted_frames(ours.last_stats.emitted_samples)
    n = min(streamed.size, one_shot.size)
    error = streamed[:n] - one_shot[:n]
    snr_db = float(10 * np.log10(np.sum(one_shot[:n] ** 2) / max(np.sum(error**2), 1e-30)))
    joins = np.cumsum(chunk_sizes)[:-1].tolist()
    seams = measure_seams(streamed, joins)
    infer_median = statistics.median(infer_s)
    ours_median = statistics.median(ours_s)
    figures: dict[str, Any] = {
        "steps": steps,
        "audio_s": round(streamed.size / 24_000, 2),
        "chattts_infer_s": round(infer_median, 3),
        "ours_stream_s": round(ours_median, 3),
        "ratio": round(ours_median / infer_median, 3),
        "goal_ratio": 1.05,
        "ours_decoded_per_emitted_frame": round(ours_ratio, 3),
        "goal_decoded_per_emitted": 1.25,
        "ours_chunks": len(chunk_sizes),
        "same_length_as_one_shot": streamed.size == one_shot.size,
        "snr_db_vs_one_shot": round(snr_db, 1),
        "ours_seams": _seam_dict(seams),
        "repeats": repeats,
    }
    print(f"{seconds:g} s ({steps} steps): ChatTTS infer {infer_median:.2f} s, ours stream "
          f"{ours_median:.2f} s -> {figures['ratio']:.3f}x; decoded/emitted frames "
          f"{ours_ratio:.3f}; SNR vs one-shot {snr_db:.1f} dB; seams {figures['ours_seams']}")  # fmt: skip
    if with_chattts_stream:
        params = _chattts_params(chat, speaker, steps, stream_batch=24, pass_first_n_batches=0,
                                 stream_speed=1 << 30)  # fmt: skip
        counter = _FrameCounter(chat.decoder)
        try:
            seconds_stream, chunks = _timed(
                lambda: [c[0] for c in _chattts_infer(chat, params, True)], device
            )
        finally:
            counter.close()
        chunks = [c for c in chunks if c.size]
        theirs = np.concatenate(chunks)
        theirs_frames = emitted_frames(theirs.size)
        their_seams = measure_seams(theirs, np.cumsum([c.size for c in chunks])[:-1].tolist())
        m = min(theirs.size, one_shot.size)
        their_error = theirs[:m] - one_shot[:m]
        their_snr = float(
            10 * np.log10(np.sum(one_shot[:m] ** 2) / max(np.sum(their_error**2), 1e-30))
        )
        assert ours.last_stats.hiddens is not None
        figures["context_sweep"] = context_sweep(chat, ours, ours.last_stats.hiddens.clone())
        figures["chattts_stream"] = {
            "total_s": round(seconds_stream, 3),
            "decoded_per_emitted_frame": round(counter.frames / theirs_frames, 3),
            "chunks": len(chunks),
            "snr_db_vs_one_shot": round(their_snr, 1),
            "seams": _seam_dict(their_seams),
        }
        print(f"  ChatTTS stream: {seconds_stream:.2f} s total, decoded/emitted frames "
              f"{figures['chattts_stream']['decoded_per_emitted_frame']:.2f}, SNR {their_snr:.1f} dB, "
              f"seams {figures['chattts_stream']['seams']}")  # fmt: skip
    return figures


def context_sweep(chat: Any, ours: StreamingDecoder, hiddens: torch.Tensor) -> dict[str, Any]:
    """SNR of windowed vs one-shot decoding of the same hidden states, per left context and lookahead.

    Twice: with the generated Decoder (its ConvNeXt layer scales sit at their 1e-6
    initialisation, so its blocks barely reach across frames) and with those scales
    set to 0.125 (Vocos's own initial value), a stand-in for trained weights whose
    Decoder context matters. The GPT is not involved.
    """
    blocks = chat.decoder.decoder.decoder_block
    saved = [block.weight.detach().clone() for block in blocks]
    results: dict[str, Any] = {}
    try:
        for label, scale in (("generated_decoder", None), ("decoder_layer_scale_0.125", 0.125)):
            if scale is not None:
                for block in blocks:
                    block.weight.data.fill_(scale)
            one_shot = chat._decode_to_wavs([hiddens.clone()], True)[0]
            row: dict[str, Any] = {}
            for context, lookahead in (
                (8, 4),
                (24, 4),
                (48, 4),
                (24, 0),
                (24, 2),
                (24, 8),
                (24, 16),
            ):
                decoder = StreamingDecoder(
                    chat,
                    dataclasses.replace(
                        ours.options,
                        left_context_frames=context,
                        lookahead_frames=lookahead,
                        compile_vocoder=False,
                        vocoder_backend="torch",
                    ),
                )
                streamed = np.concatenate(list(decoder.vocode_stream(hiddens)))
                error = streamed - one_shot
                snr = float(10 * np.log10(np.sum(one_shot**2) / max(np.sum(error**2), 1e-30)))
                row[f"left_{context}_lookahead_{lookahead}"] = {
                    "snr_db": round(snr, 1),
                    "decoded_per_emitted_frame": round(decode_ratio(decoder.last_stats), 3),
                }
            results[label] = row
    finally:
        for block, weight in zip(blocks, saved, strict=True):
            block.weight.data.copy_(weight)
    print(f"  context sweep (SNR vs one-shot): {results}")
    return results


def gpt_cache(chat: Any, ours: StreamingDecoder, speaker: str, steps: int, repeats: int,
              device: str) -> dict[str, Any]:  # fmt: skip
    """GPT steps alone on each KV cache: ms per step, ratio to the dynamic cache, same tokens?"""
    variants = [("dynamic", {"gpt_cache": "dynamic", "cuda_graphs": False}),
                ("static", {"gpt_cache": "static", "cuda_graphs": False})]  # fmt: skip
    if device.startswith("cuda"):
        variants.append(("static_cuda_graphs", {"gpt_cache": "static", "cuda_graphs": True}))
    params = _ours_params(speaker, steps)
    results: dict[str, Any] = {"steps": steps, "repeats": repeats}
    reference: torch.Tensor | None = None
    reference_hidden: torch.Tensor | None = None
    for label, overrides in variants:
        settings = dataclasses.replace(
            ours.options, compile_vocoder=False, vocoder_backend="torch", gpt_cache_slots=1,
            gpt_cache_tokens=max(ours.options.gpt_cache_tokens, steps + 512), **overrides,
        )  # fmt: skip
        try:
            decoder = StreamingDecoder(chat, settings)
            list(decoder.generate(TEXT, _ours_params(speaker, 8)))  # warm-up (graph capture)
            times: list[float] = []
            ids: list[torch.Tensor] = []
            hidden: list[torch.Tensor] = []
            for _ in range(repeats):
                seconds, outputs = _timed(lambda d=decoder: list(d.generate(TEXT, params)), device)
                times.append(seconds)
                ids = [o.ids for o in outputs]
                hidden = [o.hidden for o in outputs]
        except Exception as exc:  # report a variant that cannot run, keep the others
            results[label] = {"failed": f"{type(exc).__name__}: {exc}"[:300]}
            print(f"GPT cache {label}: failed: {results[label]['failed']}")
            continue
        static = decoder.static_gpt
        if overrides["cuda_graphs"] and (static is None or not static.cuda_graphs):
            # StaticGPT serves on without graphs when a capture fails: say so, do not
            # report eager timings under this label.
            results[label] = {"failed": "the CUDA graph capture failed (see the log above)"}
            print(f"GPT cache {label}: failed: the capture failed, graphs are off")
            continue
        tokens = torch.stack(ids).cpu()
        states = torch.stack(hidden).float().cpu()
        if reference is None or reference_hidden is None:
            reference, reference_hidden = tokens, states
        # Where the tokens first differ from the dynamic cache's (sampling amplifies the
        # last bits), and how far the hidden states are apart before that.
        n = min(len(tokens), len(reference))
        differs = (tokens[:n] != reference[:n]).any(dim=1).nonzero()
        same_until = int(differs[0]) if differs.numel() else n
        gap = (states[: same_until + 1] - reference_hidden[: same_until + 1]).abs().max()
        ms_per_step = 1000 * statistics.median(times) / max(len(ids), 1)
        results[label] = {
            "ms_per_step": round(ms_per_step, 3),
            "steps_done": len(ids),
            "fell_back_to_dynamic": static.fallbacks if static is not None else None,
            "graph_replays": sum(slot.replays for slot in static._slots) if static else None,
            "same_tokens_as_dynamic": bool(torch.equal(tokens, reference)),
            "same_tokens_for_steps": same_until,
            "hidden_max_abs_diff_until_then": float(gap),
        }
        if "dynamic" in results and "ms_per_step" in results["dynamic"]:
            results[label]["ratio_to_dynamic"] = round(
                ms_per_step / results["dynamic"]["ms_per_step"], 3
            )
        print(f"GPT cache {label}: {ms_per_step:.2f} ms per step over {len(ids)} steps "
              f"{results[label]}")  # fmt: skip
    return results


def _seam_dict(report: Any) -> dict[str, Any]:
    names = ("step_ratio_median", "step_ratio_max", "flux_ratio_median", "flux_ratio_max")
    # No joins (one chunk): no ratios, null rather than NaN (which is not JSON).
    return {"joins": report.joins} | {
        name: round(getattr(report, name), 2) if report.joins else None for name in names
    }


def onnx_vocoder(chat: Any, device: str, window_steps: int, repeats: int) -> dict[str, Any]:
    """Time one window of Decoder + Vocos in torch and in ONNX Runtime (ISTFT in torch both ways)."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        return {"skipped": f"onnxruntime not importable: {exc}"}
    hidden = int(chat.config.gpt.hidden_size)
    x = torch.randn(1, hidden, window_steps, device=device)
    module = VocoderFeatures(chat).eval()
    started = time.perf_counter()
    try:
        vocoder = OnnxVocoder(chat)
    except Exception as exc:
        return {"skipped": f"export failed: {type(exc).__name__}: {exc}"[:300]}
    export_s = time.perf_counter() - started

    def run_torch() -> torch.Tensor:
        with torch.inference_mode():
            return istft(chat, module(x))

    def run_onnx() -> torch.Tensor:
        return vocoder(x)

    reference = run_torch()
    candidate = run_onnx()
    error = (candidate - reference).float()
    snr = float(10 * torch.log10(reference.pow(2).sum() / error.pow(2).sum().clamp_min(1e-30)))
    torch_s: list[float] = []
    onnx_s: list[float] = []
    for _ in range(repeats):
        torch_s.append(_timed(run_torch, device)[0])
        onnx_s.append(_timed(run_onnx, device)[0])
    used = vocoder.provider
    figures = {
        "window_steps": window_steps,
        "provider": used,
        "export_s": round(export_s, 2),
        "torch_ms": round(1000 * statistics.median(torch_s), 2),
        "onnxruntime_ms": round(1000 * statistics.median(onnx_s), 2),
        "ratio_onnx_over_torch": round(statistics.median(onnx_s) / statistics.median(torch_s), 3),
        "snr_db_onnx_vs_torch": round(snr, 1),
    }
    print(f"ONNX vocoder, {window_steps}-step window on {used}: torch {figures['torch_ms']} ms, "
          f"ONNX Runtime {figures['onnxruntime_ms']} ms -> {figures['ratio_onnx_over_torch']}x "
          f"(SNR {snr:.1f} dB)")  # fmt: skip
    return figures


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true",
                        help="a quick run that checks every part works (the suite runs it): a "
                        "tiny checkpoint, 0.5 s utterances, few steps; its figures mean nothing")  # fmt: skip
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="default: checkpoints/SIZE (a temporary directory with --smoke)")  # fmt: skip
    parser.add_argument("--size", choices=["full", "tiny"], default="full",
                        help="the random-weight checkpoint written when there is none")  # fmt: skip
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--lengths", type=float, nargs="+", default=[10.0, 30.0],
                        help="utterance lengths in seconds of audio")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=1, help="repeats for short runs")
    parser.add_argument("--long-repeats", type=int, default=1, help="repeats for runs >= 20 s")
    parser.add_argument("--first-audio-repeats", type=int, default=2)
    parser.add_argument("--first-chunk-steps", type=int, default=ChatTTSSettings.first_chunk_steps)
    parser.add_argument("--gpt-dtype", default="float32")
    parser.add_argument("--decoder-dtype", default="float32")
    parser.add_argument("--compile-vocoder", action="store_true")
    parser.add_argument("--no-onnx", action="store_true")
    parser.add_argument("--gpt-cache", choices=["dynamic", "static"], default="dynamic",
                        help="our decoder's KV cache in the stream figures")  # fmt: skip
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="our decoder replays the GPT step as a CUDA graph (static cache)")  # fmt: skip
    parser.add_argument("--gpt-cache-steps", type=int, default=469,
                        help="GPT steps per run of the KV-cache comparison (0: skip it)")  # fmt: skip
    parser.add_argument("--only-gpt-cache", action="store_true",
                        help="run only the KV-cache comparison")  # fmt: skip
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--clock", choices=["cpu", "wall"], default=None,
                        help="what to time with (default: cpu on CPU, wall on CUDA)")  # fmt: skip
    return parser


#: What --smoke changes: every part runs, on the least work that still exercises it
#: (ChatTTS's stream reaches its first chunk at step 72, and has a join at 1 s).
SMOKE = {"size": "tiny", "lengths": [1.0], "repeats": 1, "long_repeats": 1,
         "first_audio_repeats": 1, "gpt_cache_steps": 16}  # fmt: skip
FIRST_AUDIO_STEPS = {"full": 200, "smoke": 80}
ONNX_REPEATS = {"full": 7, "smoke": 1}


def _open_checkpoint(args: argparse.Namespace, scratch: Path) -> tuple[Any, str]:
    """The loaded ``Chat`` and its checkpoint's size, writing the checkpoint if missing."""
    checkpoint = args.checkpoint or (
        scratch / "tiny" if args.smoke else ROOT / "checkpoints" / args.size
    )
    manifest = read_manifest(checkpoint) if checkpoint.is_dir() else None
    if manifest is None:
        print(f"writing a {args.size} random-weight checkpoint to {checkpoint} ...")
        write_checkpoint(checkpoint, size=args.size)
        manifest = read_manifest(checkpoint)
    assert manifest is not None
    return load_chat(checkpoint, device=args.device), str(manifest["size"])


def _header(args: argparse.Namespace, ours: StreamingDecoder, size: str) -> dict[str, Any]:
    device_name = (
        torch.cuda.get_device_name(0)
        if args.device.startswith("cuda")
        else platform.processor() or platform.machine()
    )
    results = {
        "bench": "stream_decoder",
        "smoke": args.smoke,
        "device": args.device,
        "device_name": device_name,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "clock": CLOCK["name"],
        "checkpoint": size,
        "settings": {k: getattr(ours.options, k) for k in (
            "first_chunk_steps", "chunk_growth", "max_chunk_steps", "left_context_frames",
            "lookahead_frames", "overlap_samples", "gpt_dtype", "decoder_dtype",
            "compile_vocoder", "vocoder_backend", "gpt_cache", "cuda_graphs")},
    }  # fmt: skip
    if ours.static_gpt is not None:
        # Whether the stream figures below ran on graphs (a failed capture turns them off).
        results["cuda_graphs_active"] = ours.static_gpt.cuda_graphs
    return results


def _warm_decoder(args: argparse.Namespace, chat: Any, speaker: str) -> StreamingDecoder:
    """Our decoder as the flags set it up, both contenders warmed up."""
    # ChatTTS's own paths run first where dtypes could matter, and ours casts the GPT in
    # place: with half precision, ChatTTS's paths then run in it too (its generate()
    # converts inputs to the GPT's dtype), which keeps the comparison like for like.
    ours = StreamingDecoder(
        chat,
        ChatTTSSettings(
            first_chunk_steps=args.first_chunk_steps,
            gpt_dtype=args.gpt_dtype,
            decoder_dtype=args.decoder_dtype,
            compile_vocoder=args.compile_vocoder,
            gpt_cache="static" if args.cuda_graphs else args.gpt_cache,
            cuda_graphs=args.cuda_graphs,
        ),
    )
    if args.decoder_dtype != "float32":
        print("note: half-precision Decoder: ChatTTS's own paths are not timed with it")
    # Warm-up: first calls pay lazy initialisation (allocator, kernels, compile).
    list(ours.stream(TEXT, _ours_params(speaker, 40)))
    if args.decoder_dtype == "float32":
        list(_chattts_infer(chat, _chattts_params(chat, speaker, 40), stream=False))
    return ours


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.smoke:
        for name, value in SMOKE.items():
            setattr(args, name, value)
    mode = "smoke" if args.smoke else "full"
    CLOCK["name"] = args.clock or ("wall" if args.device.startswith("cuda") else "cpu")
    logging.basicConfig(level=logging.ERROR)
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as scratch:
        chat, size = _open_checkpoint(args, Path(scratch))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        speaker = chat.sample_random_speaker()
    ours = _warm_decoder(args, chat, speaker)
    results = _header(args, ours, size)
    if args.gpt_cache_steps:
        results["gpt_cache"] = gpt_cache(
            chat, ours, speaker, args.gpt_cache_steps, max(args.repeats, 1), args.device
        )
    if args.only_gpt_cache:
        print(json.dumps(results, ensure_ascii=False))
        return 0
    if args.decoder_dtype == "float32":
        results["first_audio"] = first_audio(
            chat, ours, speaker, args.first_audio_repeats, args.device, FIRST_AUDIO_STEPS[mode]
        )
        results["lengths"] = {}
        for index, seconds in enumerate(args.lengths):
            repeats = args.long_repeats if seconds >= 20 else args.repeats
            results["lengths"][f"{seconds:g}s"] = total_compute(
                chat, ours, speaker, seconds, repeats, args.device, with_chattts_stream=index == 0
            )
    if not args.no_onnx:
        results["onnx"] = onnx_vocoder(
            chat, args.device, window_steps=96 + 14, repeats=ONNX_REPEATS[mode]
        )
    print(json.dumps(results, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
