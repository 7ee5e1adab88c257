"""Settings: one frozen object built once at start-up and passed down.

Precedence: command-line flags over ``TTS_*`` environment variables over defaults. Every
limit the server enforces is a field here, with a default meant for production. Each
setting is declared once, with its help and group (:func:`server.options.option`); the
flags, the environment variables and docs/settings.md are derived from the declarations.
The ChatTTS engine's settings are its own dataclass (:class:`ChatTTSOptions`), held in
``Settings.chattts`` under the same flat flag and variable names.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from server.connection_guard import GuardOptions
from server.engines.chattts.options import ChatTTSOptions
from server.options import GROUPS, choice_problems, nested, option, reference_markdown, specs
from server.runtime.admission import AdmissionOptions
from server.runtime.options import WorkerOptions
from streaming.connection import ConnectionLimits
from streaming.policy import BatchPolicy
from streaming.speech import SpeechSettings
from streaming.text import Lexicon, LexiconError, LexiconLimits

ENGINES = ("auto", "chattts", "espeak")


@dataclass(frozen=True)
class Settings:
    """Every setting of the server; each declared once (see :mod:`server.options`)."""

    host: str = option("127.0.0.1", "interface to bind", group="server")
    port: int = option(8000, "port to bind (0: any free port)", group="server")
    cors_origins: str | None = option(
        None,
        "browser origins allowed to call the HTTP API from other sites (CORS), comma-separated, "
        "or * for any (none: same-origin only)",
        group="server",
    )
    log_level: str = option(
        "info",
        "the server log's threshold",
        group="observability",
        choices=("debug", "info", "warning", "error", "critical"),
    )
    log_format: str = option(
        "text",
        "text: one line per record for people; json: one JSON object per line, for a log "
        "pipeline (python-json-logger's fields plus request_id/session_id)",
        group="observability",
        choices=("text", "json"),
    )
    protect_metrics: bool = option(False, "require a token on /metrics too", group="observability")

    # Engine
    engine: str = option(
        "auto",
        "auto: chattts if --model-dir is set, else espeak (the fallback voice)",
        group="engine",
        choices=ENGINES,
    )
    model_dir: Path | None = option(
        None, "ChatTTS model directory (asset/ layout, see README)", group="engine"
    )
    warm_up: bool = option(True, "run a warm-up synthesis before /ready", group="engine")
    idle_release_s: float = option(
        60.0,
        "after this long without work the engine frees cached GPU memory",
        group="engine",
    )
    max_active_segments: int = option(
        8,
        "segments the engine works on at once, interleaved by playback deadline "
        "(engines that can interleave: our ChatTTS decoder, espeak); segments, not "
        "streams: how many streams are admitted comes from the engine's measured speed",
        group="engine",
    )
    engine_stall_timeout_s: float = option(
        30.0,
        "work waiting while the engine thread makes no progress for this long: it is ended "
        "(engine_stalled), new work is refused and /health fails until the thread moves "
        "again (0: never)",
        group="engine",
    )
    max_batch: int = option(
        16,
        "segments advanced together in one GPT step (engines that batch: ChatTTS with "
        "decoder ours); 1: no batching, segments interleave a chunk at a time",
        group="engine",
    )
    prefills_per_step: int = option(
        1,
        "batching: prompts of joining segments run between two steps at most",
        group="engine",
    )
    sit_out_ahead_s: float = option(
        2.0,
        "batching: a stream this far ahead of its listener sits out steps while another is "
        "closer to running dry (0: every stream steps every time)",
        group="engine",
    )
    voices_dir: Path | None = option(
        None,
        "where named voices are kept (default: ~/.local/share/chattts-stream/voices)",
        group="engine",
    )
    voices_store: str | None = option(
        None,
        "keep named voices in Redis instead of --voices-dir, shared by every replica of a "
        "fleet: redis://[:password@]host:port/db (rediss:// for TLS); run Redis with "
        "appendonly yes and appendfsync always (docs/scaling.md)",
        group="engine",
    )
    voices_store_timeout_s: float = option(
        5.0,
        "how long one call to --voices-store may take, and how long start-up waits to reach "
        "it, before it counts as unreachable (start-up then exits with status 3)",
        group="engine",
    )
    voices_store_check_timeout_ms: float = option(
        1000.0,
        "how long the speech path waits for --voices-store to confirm a created voice's "
        "name (one round trip per request or start that names one); past it, or with the "
        "store unreachable, the voices last seen are spoken until the store answers again",
        group="engine",
    )
    fallback_on_load_failure: bool = option(
        False,
        "when the named ChatTTS model fails to load, serve the fallback voice (degraded) "
        "instead of exiting with status 1",
        group="engine",
    )
    ready_when_degraded: bool = option(
        True,
        "while the fallback voice serves in place of a model that failed to load, /ready "
        "answers 200 (false: 503, so a load balancer sends it no traffic)",
        group="engine",
    )
    fallback_on_synthesis_failure: bool = option(
        True,
        "speak a segment ChatTTS failed on before any of its audio with the fallback voice "
        "(and warn) instead of skipping it",
        group="engine",
    )
    chattts: ChatTTSOptions = nested(ChatTTSOptions)

    # Auth: no tokens means open (with a warning in the log). Not an option: tokens come
    # from --token-file / TTS_TOKEN_FILE and TTS_TOKENS (see build_settings).
    tokens: tuple[str, ...] = field(default=(), repr=False)

    # Limits
    max_connections: int = option(64, "WebSocket connections per server", group="connections")
    ws_idle_timeout_s: float = option(
        120.0,
        "a WebSocket session with no open context is closed (1001, reason idle) after this "
        "long without a message from its client, giving its connection slot back (0: never)",
        group="connections",
    )
    ws_ping_interval_s: float = option(
        10.0,
        "the server pings each WebSocket client this often, so a client gone without a "
        "close (a network cut, a frozen process) is found and its streams and slots let go "
        "(0: no pings)",
        group="connections",
    )
    ws_ping_timeout_s: float = option(
        10.0,
        "a client whose pong has not come this long after a ping is closed (1011)",
        group="connections",
    )
    header_timeout_s: float = option(
        10.0,
        "a connection must complete its request head (HTTP request line and headers, or "
        "WebSocket upgrade) this soon after it opens or after its previous response, or "
        "it is closed (408 if it sent part of one)",
        group="connections",
    )
    max_preauth_connections: int = option(
        256,
        "connections waiting to send a request head, so not yet authenticated (idle "
        "kept-alive ones included); one more closes the one that has waited longest",
        group="connections",
    )
    max_contexts: int = option(8, "open contexts per connection", group="limits")
    max_message_bytes: int = option(
        64 * 1024,
        "largest client message accepted (frames over 4x are not read: close 1009)",
        group="limits",
    )
    max_text_message_chars: int = option(4000, "largest text delta", group="limits")
    max_buffered_chars: int = option(20000, "unspoken text held per context", group="limits")
    max_http_text_chars: int = option(
        4096, "longest text for POST /v1/tts and /v1/audio/speech (OpenAI's: 4096)", group="limits"
    )
    max_http_body_bytes: int = option(
        16 * 1024 * 1024,
        "largest HTTP request body (a reference clip in base64 is the largest there is)",
        group="limits",
    )
    body_timeout_s: float = option(
        60.0,
        "an HTTP request body must arrive whole this soon after the server starts reading "
        "it (at once after its head), or the request is answered 408 and its connection "
        "closed (a body trickled a byte at a time held its connection for ever)",
        group="connections",
    )
    http_stall_timeout_s: float = option(
        30.0,
        "a streamed HTTP response whose client reads nothing for this long is cut (its "
        "engine work stops, its slot is freed)",
        group="connections",
    )
    max_voices: int = option(1000, "voices that can be created per engine", group="limits")
    max_voice_clip_seconds: float = option(
        30.0, "longest reference clip a voice is made from (POST /v1/voices)", group="limits"
    )
    min_voice_clip_sound_s: float = option(
        0.5,
        "sound a reference clip must hold (20 ms blocks above -45 dBFS): silence, or a clip "
        "too quiet to hold a voice, is refused",
        group="limits",
    )
    segment_timeout_s: float = option(
        60.0,
        "time a segment may wait for its audio (queueing and synthesis, not sending)",
        group="limits",
    )
    http_timeout_s: float = option(
        120.0,
        "time an HTTP speech request may spend on its text and waiting for the engine "
        "(not the time the client takes to read a streamed body)",
        group="limits",
    )
    max_streams: int = option(
        0,
        "contexts and HTTP requests speaking at once; beyond it new ones are busy "
        "(0: as many as the engine is measured to keep real time, see --admission-headroom)",
        group="limits",
    )
    admission_headroom: float = option(
        0.8,
        "share of the engine's measured real-time capacity admission fills (1: all of it)",
        group="limits",
    )
    when_busy: str = option(
        "refuse",
        "a new context or request beyond capacity: refused as busy with a retry hint, or "
        "spoken by the fallback voice with a warning",
        group="limits",
        choices=("refuse", "fallback"),
    )
    busy_retry_after_ms: int = option(
        2000, "the retry hint sent with a busy refusal", group="limits"
    )
    busy_at_upgrade: bool = option(
        False,
        "while no new stream would be admitted, refuse a WebSocket upgrade with 503 busy "
        "instead of accepting it and refusing its start: behind a balancer that retries a "
        "503 on another replica (deploy/haproxy), the stream lands where there is room",
        group="limits",
    )
    ws_send_buffer_bytes: int = option(
        64 * 1024,
        "bytes a WebSocket connection may hold in its socket and transport buffers; beyond "
        "it audio waits where a cancel drops it. It also caps one connection's throughput "
        "near this much per round trip (0: the operating system's default, autotuned)",
        group="connections",
    )
    drain_timeout_s: float = option(
        30.0,
        "on SIGTERM, refuse new work and let audio in progress finish for up to this long "
        "(0: close at once)",
        group="connections",
    )

    # Segmentation and streaming
    segment_max_chars: int = option(80, "longest segment sent to the engine", group="audio")
    first_segment_min_chars: int = option(
        3,
        "first segment may end at a clause mark once it holds this many chars, mark "
        "included: 3 lets 好的， go first (~300 ms sooner, bench/first_segment.py); 2 a lone "
        "嗯， too, which ChatTTS says poorly, as a phrase of its own",
        group="audio",
    )
    idle_flush_ms: int = option(
        700, "speak a pending fragment after this much input silence", group="audio"
    )
    sentence_flush_ms: int = option(
        150,
        "speak a complete sentence held for lookahead after this much input silence",
        group="audio",
    )
    frame_ms: int = option(100, "audio frame duration", group="audio")
    first_frame_ms: int = option(40, "duration of the first frame of a segment", group="audio")
    shape_joins: bool = option(
        True,
        "trim silence, insert punctuation pauses, fade joins and level loudness between "
        "segments (streaming/joins.py)",
        group="audio",
    )
    pause_scale: float = option(
        1.0, "multiplies the pause after each segment (0: no pauses)", group="audio"
    )
    min_audio_ms_per_char: float = option(
        40.0,
        "a segment's audio shorter than this per sounding character (at speed 1; speed 2 "
        "halves it) is implausibly short, as is no audio at all: made again once with a "
        "derived seed if none of it was sent yet, else reported (segment_without_audio); "
        "0: only no audio at all. Speech runs at 150-300 ms a Chinese character",
        group="audio",
    )

    # Text
    allow_control_tags: bool = option(
        False,
        "pass ChatTTS control tags like [uv_break] [laugh] [break_N] to the engine "
        "(off: removed and reported)",
        group="text",
    )
    text_cache_dir: Path | None = option(
        None,
        "directory for the text normaliser's built transducers (default: the user cache, "
        "~/.cache/chattts-stream)",
        group="text",
    )
    lexicon: Path | None = option(
        None,
        "pronunciation lexicon file, one entry a line: written<TAB>spoken or written=spoken, "
        "# comments (docs/text.md); reloaded when it changes or on SIGHUP",
        group="text",
    )
    lexicon_check_s: float = option(
        2.0,
        "how often the lexicon file's modification time is checked (0: only on SIGHUP)",
        group="text",
    )
    max_lexicon_entries: int = option(10000, "entries in the lexicon file", group="text")
    max_request_lexicon_entries: int = option(
        100,
        "lexicon entries one request or one WebSocket context may bring",
        group="text",
    )
    max_lexicon_written_chars: int = option(
        64, "longest written form of a lexicon entry", group="text"
    )
    max_lexicon_spoken_chars: int = option(
        128, "longest spoken form of a lexicon entry", group="text"
    )

    @property
    def lexicon_limits(self) -> LexiconLimits:
        """How large the lexicon file's entries may be (streaming.text.lexicon)."""
        return LexiconLimits(
            self.max_lexicon_entries, self.max_lexicon_written_chars, self.max_lexicon_spoken_chars
        )

    @property
    def request_lexicon_limits(self) -> LexiconLimits:
        """How large a request's or a context's lexicon may be."""
        return dataclasses.replace(
            self.lexicon_limits, max_entries=self.max_request_lexicon_entries
        )

    @property
    def speech(self) -> SpeechSettings:
        """The speech policy every interface shares (streaming.speech)."""
        return SpeechSettings(
            segment_max_chars=self.segment_max_chars,
            first_segment_min_chars=self.first_segment_min_chars,
            frame_ms=self.frame_ms,
            first_frame_ms=self.first_frame_ms,
            shape_joins=self.shape_joins,
            pause_scale=self.pause_scale,
            min_audio_ms_per_char=self.min_audio_ms_per_char,
        )

    @property
    def runtime(self) -> WorkerOptions:
        """How the engine worker runs the engine (server.runtime.worker)."""
        return WorkerOptions(
            warm_up=self.warm_up,
            idle_release_s=self.idle_release_s,
            max_active=self.max_active_segments,
            policy=self.batch_policy,
            headroom=self.admission_headroom,
            stall_timeout_s=self.engine_stall_timeout_s,
        )

    @property
    def admission(self) -> AdmissionOptions:
        """How new streams are admitted (server.runtime.admission)."""
        return AdmissionOptions(
            max_streams=self.max_streams,
            when_busy=self.when_busy,
            retry_after_ms=self.busy_retry_after_ms,
        )

    @property
    def batch_policy(self) -> BatchPolicy:
        return BatchPolicy(
            max_batch=self.max_batch,
            prefills_per_step=self.prefills_per_step,
            sit_out_ahead_s=self.sit_out_ahead_s,
        )

    @property
    def connection_limits(self) -> ConnectionLimits:
        """What one WebSocket connection may ask for (streaming.connection)."""
        return ConnectionLimits(
            max_message_bytes=self.max_message_bytes,
            max_text_message_chars=self.max_text_message_chars,
            max_buffered_chars=self.max_buffered_chars,
            max_contexts=self.max_contexts,
        )

    @property
    def connection_guard(self) -> GuardOptions:
        """What a connection may take before its request reaches the app
        (server.connection_guard)."""
        return GuardOptions(
            header_timeout_s=self.header_timeout_s, max_preauth=self.max_preauth_connections
        )

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


def read_token_file(path: Path) -> tuple[str, ...]:
    """One token per line; blank lines and lines starting with '#' are ignored."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return tuple(
        line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")
    )


def add_arguments(parser: argparse.ArgumentParser, only: Collection[str] | None = None) -> None:
    """Add every setting as a flag, in its group (``only``: just these settings, by
    name, and no --token-file); defaults are resolved in :func:`build_settings`."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for spec in specs(Settings):
        if only is not None and spec.name not in only:
            continue
        group = groups.get(spec.group)
        if group is None:
            group = groups[spec.group] = parser.add_argument_group(GROUPS[spec.group])
        group.add_argument(
            spec.flag,
            dest=spec.name,
            type=spec.parse,
            default=None,
            metavar=spec.metavar,
            help=f"{spec.help} [{spec.default_text}]",
        )
    if only is not None:
        return
    parser.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help="file with one bearer token per line [env TTS_TOKEN_FILE; TTS_TOKENS takes a comma-separated list]",
    )


#: TTS_* variables that are not settings but are read: tokens here, scripts/setup.sh's.
_OTHER_VARIABLES = ("TTS_TOKEN_FILE", "TTS_TOKENS", "TTS_TORCH_SPEC", "TTS_PYTHON", "TTS_SKIP_APT")
# What Kubernetes injects for a Service whose name starts with "tts" (service links).
_SERVICE_LINK = re.compile(r"TTS_\w*(_SERVICE_HOST|_SERVICE_PORT\w*|_PORT_\d+_(TCP|UDP)\w*)")


def unknown_variables(environ: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """The ``TTS_*`` variables of ``environ`` that nothing reads (misspelt, most likely:
    ``TTS_MAX_STREAM``), each with the closest variable that is a setting, if one is
    close. Names only: values may be secrets."""
    known = [spec.env for spec in specs(Settings)] + list(_OTHER_VARIABLES)
    unknown = []
    for name in sorted(environ):
        if not name.startswith("TTS_") or name in known or _SERVICE_LINK.fullmatch(name):
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
        unknown.append((name, close[0] if close else None))
    return unknown


def build_settings(
    args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Flags over ``TTS_*`` environment variables over defaults; tokens from file and env."""
    environ = os.environ if environ is None else environ
    values: dict[tuple[str, ...], Any] = {}
    for spec in specs(Settings):
        raw_env = environ.get(spec.env)
        if raw_env is not None and raw_env != "":
            try:
                values[spec.path] = spec.parse(raw_env)
            except ValueError as exc:
                raise SystemExit(f"invalid {spec.env}={raw_env!r} ({spec.flag}): {exc}") from None
        flag_value = getattr(args, spec.name, None) if args is not None else None
        if flag_value is not None:
            values[spec.path] = flag_value
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
    try:
        chattts = ChatTTSOptions(
            **{path[1]: value for path, value in values.items() if path[0] == "chattts"}
        )
    except ValueError as exc:
        raise SystemExit(refusal(str(exc).split("; "))) from None
    top = {path[0]: value for path, value in values.items() if len(path) == 1}
    settings = Settings(**top, chattts=chattts, tokens=tuple(dict.fromkeys(tokens)))
    validate(settings)
    return settings


#: A setting's name in a problem: any name with an underscore, or a one-word name that
#: starts the problem or follows "needs" ("gpt_cache static needs decoder ours").
_SETTING_NAME = re.compile(r"(?:^|(?<=needs ))[a-z]+\b|\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")


def refusal(problems: list[str]) -> str:
    """The start-up refusal for ``problems`` (each naming settings by field name), each
    followed by the flag and the variable of every setting it names."""
    by_name = {spec.name: spec for spec in specs(Settings)}
    named_problems = []
    for problem in problems:
        names = dict.fromkeys(m.group() for m in _SETTING_NAME.finditer(problem))
        named = [by_name[n] for n in names if n in by_name]
        if named and "--" not in problem:  # a problem that names its flags stays as it is
            problem += " (" + "; ".join(f"{spec.flag}, {spec.env}" for spec in named) + ")"
        named_problems.append(problem)
    return "invalid settings: " + "; ".join(named_problems)


#: Settings that must be above zero.
_POSITIVE = (
    "max_connections",
    "header_timeout_s",
    "max_preauth_connections",
    "max_contexts",
    "max_message_bytes",
    "max_text_message_chars",
    "max_buffered_chars",
    "max_http_text_chars",
    "segment_timeout_s",
    "idle_release_s",
    "max_active_segments",
    "max_batch",
    "prefills_per_step",
    "busy_retry_after_ms",
    "http_timeout_s",
    "max_voice_clip_seconds",
    "min_voice_clip_sound_s",
    "max_http_body_bytes",
    "http_stall_timeout_s",
    "body_timeout_s",
    "ws_ping_timeout_s",
    "max_voices",
    "voices_store_timeout_s",
    "voices_store_check_timeout_ms",
    "segment_max_chars",
    "frame_ms",
    "first_frame_ms",
    "idle_flush_ms",
    "sentence_flush_ms",
    "max_lexicon_entries",
    "max_request_lexicon_entries",
    "max_lexicon_written_chars",
    "max_lexicon_spoken_chars",
)
#: Settings that must not be negative, with what 0 means where it means something.
_NOT_NEGATIVE = {
    "pause_scale": "",
    "min_audio_ms_per_char": " (0: only no audio at all)",
    "drain_timeout_s": "",
    "ws_idle_timeout_s": " (0: never)",
    "ws_ping_interval_s": " (0: no pings)",
    "engine_stall_timeout_s": " (0: never)",
    "max_streams": " (0: the measured capacity)",
    "sit_out_ahead_s": "",
    "ws_send_buffer_bytes": " (0: the OS default)",
    "lexicon_check_s": " (0: only on SIGHUP)",
}


def validate(settings: Settings) -> None:
    """Refuse settings that cannot work, with a message naming the setting.

    The ChatTTS options check themselves when they are built (:class:`ChatTTSOptions`).
    """
    problems = choice_problems(settings)
    problems += [f"{name} must be positive" for name in _POSITIVE if getattr(settings, name) <= 0]
    problems += [
        f"{name} must not be negative{zero}"
        for name, zero in _NOT_NEGATIVE.items()
        if getattr(settings, name) < 0
    ]
    problems += _combination_problems(settings)
    if problems:
        raise SystemExit(refusal(problems))


def _combination_problems(settings: Settings) -> list[str]:
    """What is wrong with settings together, or with a range of their own."""
    problems = []
    if settings.engine == "chattts" and settings.model_dir is None:
        problems.append("engine chattts needs --model-dir (or TTS_MODEL_DIR)")
    chattts = settings.chattts
    batching = settings.max_batch > 1 and chattts.decoder == "ours"
    if batching and chattts.gpt_cache == "static":
        problems.append(
            "gpt_cache static is the unbatched decoder's cache, and max_batch above 1 turns "
            "batching on, whose decoder keeps its own cache: set max_batch 1 for the static "
            "cache (and cuda_graphs), or keep batching and leave gpt_cache dynamic "
            "(batch_cuda_graphs is batching's CUDA-graph option)"
        )
    if batching and chattts.gpt_cache_tokens <= chattts.max_new_token:
        problems.append(
            f"gpt_cache_tokens must exceed max_new_token with max_batch above 1 (a batch row "
            f"holds a segment's prompt and its {chattts.max_new_token} new tokens)"
        )
    if not 0 < settings.admission_headroom <= 1:
        problems.append("admission_headroom must be in (0, 1]")
    if not 1 <= settings.first_segment_min_chars <= settings.segment_max_chars:
        problems.append("first_segment_min_chars must be between 1 and segment_max_chars")
    if settings.voices_store is not None and not settings.voices_store.startswith(
        ("redis://", "rediss://", "unix://")
    ):
        problems.append("voices_store must be a redis://, rediss:// or unix:// URL")
    if not 0 <= settings.port <= 65535:
        problems.append("port must be in 0..65535")
    if settings.lexicon is not None:
        problems += lexicon_problems(settings)
    return problems


def lexicon_problems(settings: Settings) -> list[str]:
    """What is wrong with the lexicon file (the first bad line, named), if anything."""
    assert settings.lexicon is not None
    try:
        text = settings.lexicon.read_text(encoding="utf-8")
        Lexicon.parse(text, source=str(settings.lexicon), limits=settings.lexicon_limits)
    except (OSError, UnicodeDecodeError) as exc:
        return [f"lexicon: cannot read {settings.lexicon}: {exc} (--lexicon, TTS_LEXICON)"]
    except LexiconError as exc:
        return [f"lexicon: {exc} (--lexicon, TTS_LEXICON)"]
    return []


if __name__ == "__main__":
    # docs/settings.md: python -m server.config > docs/settings.md
    print(reference_markdown(Settings), end="")
