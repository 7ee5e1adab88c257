"""Settings: one frozen object built once at start-up and passed down.

Precedence: command-line flags over ``TTS_*`` environment variables over defaults. Every
limit the server enforces is a field here, with a default meant for production.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENGINES = ("auto", "chattts", "espeak")


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    log_level: str = "info"

    # Engine
    engine: str = "auto"  # auto: chattts when model_dir is set, else the espeak fallback
    model_dir: Path | None = None
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    compile: bool = False
    warm_up: bool = True
    # After this long without work the engine frees cached GPU memory (torch.cuda.empty_cache).
    idle_release_s: float = 60.0
    # Segments one engine synthesises at once, interleaved a chunk at a time by playback
    # deadline (engines that can interleave: our ChatTTS decoder, espeak).
    max_active_segments: int = 8
    # When ChatTTS fails to load, serve the fallback voice (degraded) instead of exiting.
    fallback_on_load_failure: bool = True
    # When ChatTTS fails on a segment before any of its audio, speak it with the fallback
    # voice (and warn) rather than skip it.
    fallback_on_synthesis_failure: bool = True

    # ChatTTS sampling (the voice's character; same for every segment of a context).
    temperature: float = 0.3
    top_p: float = 0.7
    top_k: int = 20
    max_new_token: int = 2048  # GPT steps per segment at most (46.875 steps per second of audio)
    # ChatTTS streaming decoder (docs/streaming-decoder.md): "ours" or ChatTTS's own stream.
    decoder: str = "ours"
    first_chunk_steps: int = 12
    chunk_growth: float = 2.0
    max_chunk_steps: int = 96
    left_context_frames: int = 16
    lookahead_frames: int = 8
    overlap_samples: int = 512
    # CUDA only: half precision for the GPT / the Decoder, torch.compile of the vocoder.
    gpt_dtype: str = "float32"
    decoder_dtype: str = "float32"
    compile_vocoder: bool = False
    vocoder_backend: str = "torch"  # or "onnx" (ONNX Runtime; needs the onnx extra)
    # The GPT's KV cache: "dynamic" (transformers', as ChatTTS) or "static" (preallocated
    # per segment slot; gpt_cache_slots 0 = max_active_segments). cuda_graphs: replay
    # each GPT step as a CUDA graph (CUDA, static cache).
    gpt_cache: str = "dynamic"
    gpt_cache_tokens: int = 2560
    gpt_cache_slots: int = 0
    cuda_graphs: bool = False

    # Auth: no tokens means open (with a warning in the log).
    tokens: tuple[str, ...] = field(default=(), repr=False)
    protect_metrics: bool = False

    # Limits
    max_connections: int = 64
    max_contexts: int = 8
    max_message_bytes: int = 64 * 1024
    max_text_message_chars: int = 4000
    max_buffered_chars: int = 20000
    max_http_text_chars: int = 2000
    segment_timeout_s: float = 60.0
    # On SIGTERM: refuse new work (/ready 503) and let audio in progress finish, up to
    # this long, before closing connections. 0 closes at once.
    drain_timeout_s: float = 30.0
    http_timeout_s: float = 120.0

    # Segmentation and streaming
    segment_max_chars: int = 80
    first_segment_min_chars: int = 6
    idle_flush_ms: int = 700
    sentence_flush_ms: int = 150
    frame_ms: int = 100
    first_frame_ms: int = 40
    # Segment joins (streaming/joins.py): trim the engine's silence, insert a pause that
    # follows the punctuation, fade every join to zero, keep one loudness per context.
    shape_joins: bool = True
    # Multiplies every pause of the table in streaming/joins.py (0: no pauses).
    pause_scale: float = 1.0

    # Text: pass ChatTTS control tags ([uv_break], [laugh], [break_N]...) written in the
    # text to the engine; off, they are removed and reported like any dropped text.
    allow_control_tags: bool = False
    # Where the text normaliser's built transducers are kept (built once, ~4 s); None: the
    # user cache (~/.cache/chattts-stream). Images prebuild them into a fixed directory.
    text_cache_dir: Path | None = None

    @property
    def transport_max_bytes(self) -> int:
        """Frames above this are not even read: the connection closes with 1009."""
        return 4 * self.max_message_bytes

    def resolved_engine(self) -> str:
        if self.engine != "auto":
            return self.engine
        return "chattts" if self.model_dir is not None else "espeak"

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)


def _env_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {value!r}")


def read_token_file(path: Path) -> tuple[str, ...]:
    """One token per line; blank lines and lines starting with '#' are ignored."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return tuple(
        line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")
    )


# (flag, field, type, help) for every setting exposed on the command line.
_FLAGS: tuple[tuple[str, str, Any, str], ...] = (
    ("--host", "host", str, "interface to bind"),
    ("--port", "port", int, "port to bind (0: any free port)"),
    ("--log-level", "log_level", str, "debug, info, warning, error"),
    (
        "--engine",
        "engine",
        str,
        "auto (chattts if --model-dir is set, else espeak), chattts, espeak",
    ),
    ("--model-dir", "model_dir", Path, "ChatTTS model directory (asset/ layout, see README)"),
    ("--device", "device", str, "auto (CUDA when available), cpu, cuda, cuda:N"),
    ("--compile", "compile", _env_bool, "torch.compile the ChatTTS GPT (true/false)"),
    ("--warm-up", "warm_up", _env_bool, "run a warm-up synthesis before /ready (true/false)"),
    ("--idle-release-s", "idle_release_s", float, "free cached GPU memory after this long idle"),
    (
        "--max-active-segments",
        "max_active_segments",
        int,
        "segments the engine works on at once, interleaved by playback deadline",
    ),
    ("--temperature", "temperature", float, "ChatTTS sampling temperature"),
    ("--top-p", "top_p", float, "ChatTTS nucleus sampling threshold"),
    ("--top-k", "top_k", int, "ChatTTS top-k sampling"),
    ("--max-new-token", "max_new_token", int, "GPT steps per segment at most"),
    ("--decoder", "decoder", str, "ChatTTS streaming decoder: ours or chattts (ChatTTS's own)"),
    ("--first-chunk-steps", "first_chunk_steps", int, "GPT steps before the first audio chunk"),
    ("--chunk-growth", "chunk_growth", float, "factor by which chunks grow after the first"),
    ("--max-chunk-steps", "max_chunk_steps", int, "largest chunk, in GPT steps"),
    (
        "--left-context-frames",
        "left_context_frames",
        int,
        "decoder frames of left context per chunk",
    ),
    ("--lookahead-frames", "lookahead_frames", int, "decoder frames held back for right context"),
    ("--overlap-samples", "overlap_samples", int, "samples crossfaded at chunk joins"),
    ("--gpt-dtype", "gpt_dtype", str, "CUDA: float32, float16 or bfloat16 for the GPT"),
    ("--decoder-dtype", "decoder_dtype", str, "CUDA: float32, float16 or bfloat16 for the Decoder"),
    (
        "--compile-vocoder",
        "compile_vocoder",
        _env_bool,
        "CUDA: torch.compile the vocoder (true/false)",
    ),
    ("--vocoder-backend", "vocoder_backend", str, "torch, or onnx (ONNX Runtime, the onnx extra)"),
    ("--gpt-cache", "gpt_cache", str, "the GPT's KV cache: dynamic or static (preallocated)"),
    (
        "--gpt-cache-tokens",
        "gpt_cache_tokens",
        int,
        "static cache: positions per segment (prompt + max new tokens); longer ones use dynamic",
    ),
    (
        "--gpt-cache-slots",
        "gpt_cache_slots",
        int,
        "static cache: segments cached at once (0: --max-active-segments)",
    ),
    (
        "--cuda-graphs",
        "cuda_graphs",
        _env_bool,
        "CUDA: replay each GPT step as a CUDA graph (needs --gpt-cache static)",
    ),
    (
        "--fallback-on-load-failure",
        "fallback_on_load_failure",
        _env_bool,
        "serve espeak if ChatTTS fails to load",
    ),
    (
        "--fallback-on-synthesis-failure",
        "fallback_on_synthesis_failure",
        _env_bool,
        "speak a segment ChatTTS failed on with espeak (and warn) instead of skipping it",
    ),
    ("--protect-metrics", "protect_metrics", _env_bool, "require a token on /metrics too"),
    ("--max-connections", "max_connections", int, "WebSocket connections per server"),
    ("--max-contexts", "max_contexts", int, "open contexts per connection"),
    ("--max-message-bytes", "max_message_bytes", int, "largest client message accepted"),
    ("--max-text-message-chars", "max_text_message_chars", int, "largest text delta"),
    ("--max-buffered-chars", "max_buffered_chars", int, "unspoken text held per context"),
    ("--max-http-text-chars", "max_http_text_chars", int, "longest text for POST /v1/tts"),
    (
        "--drain-timeout-s",
        "drain_timeout_s",
        float,
        "on SIGTERM, let audio in progress finish for up to this long (0: close at once)",
    ),
    (
        "--segment-timeout-s",
        "segment_timeout_s",
        float,
        "time a segment may wait for its audio (queueing and synthesis, not sending)",
    ),
    ("--http-timeout-s", "http_timeout_s", float, "synthesis time allowed per POST /v1/tts"),
    ("--segment-max-chars", "segment_max_chars", int, "longest segment sent to the engine"),
    (
        "--first-segment-min-chars",
        "first_segment_min_chars",
        int,
        "first segment may cut at a comma after this many chars",
    ),
    (
        "--idle-flush-ms",
        "idle_flush_ms",
        int,
        "speak a pending fragment after this much input silence",
    ),
    (
        "--sentence-flush-ms",
        "sentence_flush_ms",
        int,
        "speak a complete sentence held for lookahead after this much input silence",
    ),
    ("--frame-ms", "frame_ms", int, "audio frame duration"),
    ("--first-frame-ms", "first_frame_ms", int, "duration of the first frame of a segment"),
    (
        "--shape-joins",
        "shape_joins",
        _env_bool,
        "trim silence, insert punctuation pauses, fade joins and level loudness between segments",
    ),
    ("--pause-scale", "pause_scale", float, "multiplies the pause after each segment"),
    (
        "--allow-control-tags",
        "allow_control_tags",
        _env_bool,
        "pass ChatTTS control tags like [uv_break] [laugh] [break_N] to the engine (true/false)",
    ),
    (
        "--text-cache-dir",
        "text_cache_dir",
        Path,
        "directory for the text normaliser's built transducers (default: the user cache)",
    ),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every setting as a flag; defaults are resolved later in :func:`build_settings`."""
    defaults = Settings()
    for flag, name, kind, help_text in _FLAGS:
        env = "TTS_" + name.upper()
        parser.add_argument(
            flag,
            dest=name,
            type=kind,
            default=None,
            metavar="BOOL" if kind is _env_bool else None,
            help=f"{help_text} [default {getattr(defaults, name)}; env {env}]",
        )
    parser.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help="file with one bearer token per line [env TTS_TOKEN_FILE; TTS_TOKENS takes a comma-separated list]",
    )


def build_settings(
    args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Flags over ``TTS_*`` environment variables over defaults; tokens from file and env."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for _flag, name, kind, _help in _FLAGS:
        raw_env = environ.get("TTS_" + name.upper())
        if raw_env is not None and raw_env != "":
            try:
                values[name] = kind(raw_env)
            except ValueError as exc:
                raise SystemExit(f"invalid TTS_{name.upper()}={raw_env!r}: {exc}") from None
        flag_value = getattr(args, name, None) if args is not None else None
        if flag_value is not None:
            values[name] = flag_value
    tokens: list[str] = []
    token_file = getattr(args, "token_file", None) if args is not None else None
    if token_file is None and environ.get("TTS_TOKEN_FILE"):
        token_file = Path(environ["TTS_TOKEN_FILE"])
    if token_file is not None:
        try:
            tokens.extend(read_token_file(token_file))
        except OSError as exc:
            raise SystemExit(f"cannot read token file {token_file}: {exc}") from None
    if environ.get("TTS_TOKENS"):
        tokens.extend(t.strip() for t in environ["TTS_TOKENS"].split(",") if t.strip())
    values["tokens"] = tuple(dict.fromkeys(tokens))
    settings = Settings(**values)
    validate(settings)
    return settings


def validate(settings: Settings) -> None:
    """Refuse settings that cannot work, with a message naming the setting."""
    problems: list[str] = []
    if settings.engine not in ENGINES:
        problems.append(f"engine must be one of {', '.join(ENGINES)}, not {settings.engine!r}")
    if settings.decoder not in ("ours", "chattts"):
        problems.append(f"decoder must be ours or chattts, not {settings.decoder!r}")
    for name in ("gpt_dtype", "decoder_dtype"):
        if getattr(settings, name) not in ("float32", "float16", "bfloat16"):
            problems.append(f"{name} must be float32, float16 or bfloat16")
    if settings.vocoder_backend not in ("torch", "onnx"):
        problems.append("vocoder_backend must be torch or onnx")
    if settings.gpt_cache not in ("dynamic", "static"):
        problems.append(f"gpt_cache must be dynamic or static, not {settings.gpt_cache!r}")
    if settings.cuda_graphs and settings.gpt_cache != "static":
        problems.append("cuda_graphs needs gpt_cache static")
    if settings.gpt_cache_tokens < 2:
        problems.append("gpt_cache_tokens must be at least 2")
    if settings.gpt_cache == "static":
        if settings.gpt_cache_tokens <= settings.max_new_token:
            problems.append(
                "gpt_cache_tokens must exceed max_new_token (a segment's prompt and its "
                f"{settings.max_new_token} new tokens must fit, or every segment falls back "
                "to the dynamic cache)"
            )
        if settings.decoder != "ours":
            problems.append("gpt_cache static needs decoder ours")
    if settings.cuda_graphs and settings.device == "cpu":
        problems.append("cuda_graphs needs a CUDA device, not cpu")
    if settings.gpt_cache_slots < 0:
        problems.append("gpt_cache_slots must not be negative (0: max_active_segments)")
    if settings.chunk_growth < 1:
        problems.append("chunk_growth must be at least 1")
    if settings.engine == "chattts" and settings.model_dir is None:
        problems.append("engine chattts needs --model-dir (or TTS_MODEL_DIR)")
    positive = (
        "max_connections",
        "max_contexts",
        "max_message_bytes",
        "max_text_message_chars",
        "max_buffered_chars",
        "max_http_text_chars",
        "segment_timeout_s",
        "idle_release_s",
        "max_active_segments",
        "temperature",
        "max_new_token",
        "first_chunk_steps",
        "max_chunk_steps",
        "http_timeout_s",
        "segment_max_chars",
        "frame_ms",
        "first_frame_ms",
        "idle_flush_ms",
        "sentence_flush_ms",
    )
    if settings.pause_scale < 0:
        problems.append("pause_scale must not be negative")
    if settings.drain_timeout_s < 0:
        problems.append("drain_timeout_s must not be negative")
    problems += [f"{name} must be positive" for name in positive if getattr(settings, name) <= 0]
    if (
        settings.first_segment_min_chars < 1
        or settings.first_segment_min_chars > settings.segment_max_chars
    ):
        problems.append("first_segment_min_chars must be between 1 and segment_max_chars")
    if not 0 <= settings.port <= 65535:
        problems.append("port must be in 0..65535")
    if problems:
        raise SystemExit("invalid settings: " + "; ".join(problems))


def parse_settings(argv: Sequence[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return build_settings(parser.parse_args(argv))
