"""Every setting of the ChatTTS engine, declared once (flags, variables and docs derive).

No torch here: the settings module imports this to build the command line.
"""

from __future__ import annotations

from dataclasses import dataclass

from server.declaration import bound_problems, choice_problems, option
from streaming.chunking import ChunkSchedule

__all__ = ["FRAMES_PER_STEP", "SAMPLES_PER_FRAME", "SAMPLES_PER_STEP", "ChatTTSSettings"]

#: Mel frames per GPT step and samples per mel frame (Vocos hop at 24 kHz).
FRAMES_PER_STEP = 2
SAMPLES_PER_FRAME = 256
SAMPLES_PER_STEP = FRAMES_PER_STEP * SAMPLES_PER_FRAME

_DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class ChatTTSSettings:
    """How ChatTTS is loaded, sampled, streamed and cached; see docs/streaming-decoder.md.

    Measured choices behind the defaults: ``lookahead_frames`` is what the seam SNR
    needs (23 / 31 / 45 / 88 / 128 dB for 0 / 2 / 4 / 8 / 16 frames, while 8, 24 or 48
    left frames give the same figure); the static cache and CUDA graphs stay off until
    measured on a GPU (on these CPUs the step is bound by reading the weights).
    """

    device: str = option("auto", "auto (CUDA when available), cpu, cuda, cuda:N", group="chattts")
    compile: bool = option(
        False, "torch.compile the ChatTTS GPT (the dynamic KV cache only)", group="chattts"
    )
    temperature: float = option(0.3, "ChatTTS sampling temperature", group="chattts", gt=0)
    top_p: float = option(0.7, "ChatTTS nucleus sampling threshold", group="chattts", gt=0, le=1)
    top_k: int = option(20, "ChatTTS top-k sampling", group="chattts", gt=0)
    max_new_token: int = option(
        2048,
        "GPT steps per segment at most (46.875 steps per second of audio)",
        group="chattts",
        gt=0,
    )
    decoder: str = option(
        "ours",
        "streaming decoder: ours, or chattts (ChatTTS's own stream)",
        group="chattts",
        choices=("ours", "chattts"),
    )
    first_chunk_steps: int = option(
        12, "GPT steps before the first audio chunk", group="chattts", gt=0
    )
    chunk_growth: float = option(
        2.0, "factor by which chunks grow after the first", group="chattts", ge=1
    )
    max_chunk_steps: int = option(96, "largest chunk, in GPT steps", group="chattts", gt=0)
    left_context_frames: int = option(
        16, "decoder frames of left context per chunk (16 frames = 0.17 s)", group="chattts", ge=0
    )
    lookahead_frames: int = option(
        8,
        "decoder frames held back for right context (8 frames = 85 ms of latency)",
        group="chattts",
        ge=0,
    )
    overlap_samples: int = option(
        512, "samples crossfaded at chunk joins (512 = 21 ms)", group="chattts", ge=0
    )
    gpt_dtype: str = option(
        "float32", "CUDA: precision of the GPT", group="chattts", choices=_DTYPES
    )
    decoder_dtype: str = option(
        "float32",
        "CUDA: precision of the Decoder (Vocos always runs float32)",
        group="chattts",
        choices=_DTYPES,
    )
    compile_vocoder: bool = option(
        False, "CUDA: torch.compile Decoder and Vocos; on failure, eager", group="chattts"
    )
    vocoder_backend: str = option(
        "torch",
        "run the vocoder in torch, or in ONNX Runtime (the onnx extra)",
        group="chattts",
        choices=("torch", "onnx"),
    )
    gpt_cache: str = option(
        "dynamic",
        "the GPT's KV cache: dynamic (transformers', as ChatTTS) or static (preallocated)",
        group="chattts",
        choices=("dynamic", "static"),
    )
    gpt_cache_tokens: int = option(
        2560,
        "KV cache positions per segment (prompt + max new tokens), in a batch's rows and in "
        "the static cache (where longer ones use the dynamic cache)",
        group="chattts",
        ge=2,
    )
    gpt_cache_slots: int = option(
        0,
        "static cache: segments cached at once (0: one per --max-active-segments)",
        group="chattts",
        ge=0,
        zero=" (0: max_active_segments)",
    )
    cuda_graphs: bool = option(
        False,
        "CUDA: replay each GPT step as a CUDA graph (needs --gpt-cache static)",
        group="chattts",
    )
    batch_attention: str = option(
        "auto",
        "batched steps: one masked attention call over all rows (masked), or one per row "
        "over its own prefix (rows); auto: masked",
        group="chattts",
        choices=("auto", "rows", "masked"),
    )
    batch_cuda_graphs: bool = option(
        False,
        "CUDA: capture the batched step as a CUDA graph per batch size bucket (1, 2, 4, ... "
        "--max-batch) and attention span, and replay it (docs/batching.md)",
        group="chattts",
    )
    batch_vocoder: bool = option(
        True,
        "batched steps: vocode the chunks due at one step with equal windows in one call",
        group="chattts",
    )
    gpt_quantization: str = option(
        "none",
        "weight-only INT8 for the GPT's linear layers (int8), or none; see docs/batching.md",
        group="chattts",
        choices=("none", "int8"),
    )
    vocoder_quantization: str = option(
        "none",
        "INT8 weights for the Decoder's and Vocos's linear layers (int8), or none: twice as "
        "fast on the CPU, at a cost in fidelity (docs/batching.md)",
        group="chattts",
        choices=("none", "int8"),
    )
    # Set by code only (tests, benchmarks): random weights end at random, so fixed-length
    # runs set min_new_token = max_new_token; ChatTTS's own stream's chunking.
    min_new_token: int = option(
        0,
        "EOS is forbidden before this many steps",
        group="chattts",
        ge=0,
        le="max_new_token",
        cli=False,
    )
    stream_batch: int = option(
        24, "decoder chattts: GPT steps per chunk", group="chattts", ge=1, cli=False
    )
    pass_first_n_batches: int = option(
        0, "decoder chattts: chunks held back at the start", group="chattts", ge=0, cli=False
    )

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def schedule(self) -> ChunkSchedule:
        """The chunk-size schedule these options describe."""
        return ChunkSchedule(self.first_chunk_steps, self.chunk_growth, self.max_chunk_steps)

    def problems(self) -> list[str]:
        """Each reason these options cannot work, naming the option."""
        problems = choice_problems(self) + bound_problems(self)
        if 0 < self.max_chunk_steps < self.first_chunk_steps:
            problems.append("max_chunk_steps must be at least first_chunk_steps")
        if self.overlap_samples > SAMPLES_PER_STEP * self.first_chunk_steps // 2:
            problems.append("overlap_samples must be in [0, half the first chunk]")
        if self.cuda_graphs and self.gpt_cache != "static":
            problems.append("cuda_graphs needs gpt_cache static")
        if self.gpt_cache == "static":
            if self.gpt_cache_tokens <= self.max_new_token:
                problems.append(
                    "gpt_cache_tokens must exceed max_new_token (a segment's prompt and its "
                    f"{self.max_new_token} new tokens must fit, or every segment falls back "
                    "to the dynamic cache)"
                )
            if self.decoder != "ours":
                problems.append("gpt_cache static needs decoder ours")
        if self.gpt_quantization != "none" and self.gpt_dtype != "float32":
            problems.append("gpt_quantization int8 needs gpt_dtype float32 (weights become int8)")
        if self.vocoder_quantization != "none" and (
            self.decoder_dtype != "float32" or self.vocoder_backend != "torch"
        ):
            problems.append(
                "vocoder_quantization int8 needs decoder_dtype float32 and the torch backend"
            )
        if self.cuda_graphs and self.device == "cpu":
            problems.append("cuda_graphs needs a CUDA device, not cpu")
        if self.batch_cuda_graphs and self.device == "cpu":
            problems.append("batch_cuda_graphs needs a CUDA device, not cpu")
        if self.batch_cuda_graphs and self.batch_attention == "rows":
            problems.append("batch_cuda_graphs needs batch_attention masked (or auto)")
        return problems
