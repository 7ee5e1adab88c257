"""Settings: one frozen object built once at start-up and passed down.

Every limit the server enforces is a field here, with a default meant for production,
declared once with its help, group and, for a number, its bounds
(:func:`server.declaration.option`): the flags, the ``TTS_*`` variables, the refusal of a
value out of bounds and docs/settings.md derive from the declarations. ChatTTS, the
phrase cache, the Wyoming listener and others keep theirs in bundles held here
(``Settings.chattts``, ...; flat flag names); the parts' bundles derive from it too.

Around it: :mod:`server.config_input` builds it (flags over ``TTS_*`` environment
variables over defaults), :mod:`server.config_checks` refuses what cannot work,
:mod:`server.config_reference` writes docs/settings.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from server.connection_guard import GuardSettings
from server.declaration import nested, option
from server.delivery import DeliverySettings
from server.engines.chattts.settings import ChatTTSSettings
from server.gil import GilSettings
from server.heap import HeapSettings
from server.runtime.admission import AdmissionSettings
from server.runtime.phrase_cache import PhraseCacheSettings
from server.runtime.worker_settings import WorkerSettings
from server.scheduling import SchedulingSettings
from server.wyoming_settings import WyomingSettings
from streaming.connection import ConnectionSettings
from streaming.policy import BatchSettings
from streaming.speech import SpeechSettings
from streaming.text import LexiconSettings

ENGINES = ("auto", "chattts", "espeak")


@dataclass(frozen=True)
class Settings:
    """Every setting of the server; each declared once (see :mod:`server.declaration`)."""

    host: str = option("127.0.0.1", "interface to bind", group="server")
    port: int = option(8000, "port to bind (0: any free port)", group="server", ge=0, le=65535)
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
        gt=0,
    )
    max_active_segments: int = option(
        8,
        "segments the engine works on at once, interleaved by playback deadline "
        "(engines that can interleave: our ChatTTS decoder, espeak); segments, not "
        "streams: how many streams are admitted comes from the engine's measured speed",
        group="engine",
        gt=0,
    )
    engine_stall_timeout_s: float = option(
        30.0,
        "work waiting while the engine thread makes no progress for this long: it is ended "
        "(engine_stalled), new work is refused and /health fails until the thread moves "
        "again (0: never)",
        group="engine",
        ge=0,
        zero=" (0: never)",
    )
    max_batch: int = option(
        16,
        "segments advanced together in one GPT step (engines that batch: ChatTTS with "
        "decoder ours); 1: no batching, segments interleave (--interleave-slice-ms)",
        group="engine",
        gt=0,
    )
    sit_out_ahead_s: float = option(
        2.0,
        "batching: a stream this far ahead of its listener sits out steps while another is "
        "closer to running dry (0: every stream steps every time)",
        group="engine",
        ge=0,
    )
    voices_dir: Path | None = option(
        None,
        "where named voices are kept (default: ~/.local/share/chattts-stream/voices)",
        group="voices",
    )
    voices_store: str | None = option(
        None,
        "keep named voices in Redis instead of --voices-dir, shared by every replica of a "
        "fleet: redis://[:password@]host:port/db (rediss:// for TLS); run Redis with "
        "appendonly yes and appendfsync always (docs/scaling.md)",
        group="voices",
    )
    voices_store_timeout_s: float = option(
        5.0,
        "how long one call to --voices-store may take, and how long start-up waits to reach "
        "it, before it counts as unreachable (start-up then exits with status 3)",
        group="voices",
        gt=0,
    )
    voices_store_check_timeout_ms: float = option(
        1000.0,
        "how long the speech path waits for --voices-store to confirm a created voice's "
        "name (one round trip per request or start that names one); past it, or with the "
        "store unreachable, the voices last seen are spoken until the store answers again",
        group="voices",
        gt=0,
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
    chattts: ChatTTSSettings = nested(ChatTTSSettings)
    phrase_cache: PhraseCacheSettings = nested(PhraseCacheSettings)
    wyoming: WyomingSettings = nested(WyomingSettings)
    heap: HeapSettings = nested(HeapSettings)
    gil: GilSettings = nested(GilSettings)
    delivery: DeliverySettings = nested(DeliverySettings)
    scheduling: SchedulingSettings = nested(SchedulingSettings)

    # Not an option (build_settings): --token-file / TTS_TOKEN_FILE, TTS_TOKENS; none: open.
    tokens: tuple[str, ...] = field(default=(), repr=False)

    # Limits
    max_connections: int = option(64, "WebSocket connections per server", group="connections", gt=0)
    ws_idle_timeout_s: float = option(
        120.0,
        "a WebSocket session with no open context is closed (1001, reason idle) after this "
        "long without a message from its client, giving its connection slot back (0: never)",
        group="connections",
        ge=0,
        zero=" (0: never)",
    )
    ws_ping_interval_s: float = option(
        10.0,
        "the server pings each WebSocket client this often, so a client gone without a "
        "close (a network cut, a frozen process) is found and its streams and slots let go "
        "(0: no pings)",
        group="connections",
        ge=0,
        zero=" (0: no pings)",
    )
    ws_ping_timeout_s: float = option(
        10.0,
        "a client whose pong has not come this long after a ping is closed (1011)",
        group="connections",
        gt=0,
    )
    header_timeout_s: float = option(
        10.0,
        "a connection must complete its request head (HTTP request line and headers, or "
        "WebSocket upgrade) this soon after it opens or after its previous response, or "
        "it is closed (408 if it sent part of one)",
        group="connections",
        gt=0,
    )
    max_preauth_connections: int = option(
        256,
        "connections waiting to send a request head, so not yet authenticated (idle "
        "kept-alive ones included); one more closes the one that has waited longest",
        group="connections",
        gt=0,
    )
    max_contexts: int = option(8, "open contexts per connection", group="limits", gt=0)
    max_message_bytes: int = option(
        64 * 1024,
        "largest client message accepted (frames over 4x are not read: close 1009)",
        group="limits",
        gt=0,
    )
    max_text_message_chars: int = option(4000, "largest text delta", group="limits", gt=0)
    max_buffered_chars: int = option(20000, "unspoken text held per context", group="limits", gt=0)
    max_http_text_chars: int = option(
        4096,
        "longest text for POST /v1/tts and /v1/audio/speech (OpenAI's: 4096)",
        group="limits",
        gt=0,
    )
    max_http_body_bytes: int = option(
        16 * 1024 * 1024,
        "largest HTTP request body (a reference clip in base64 is the largest there is)",
        group="limits",
        gt=0,
    )
    body_timeout_s: float = option(
        60.0,
        "an HTTP request body must arrive whole this soon after the server starts reading "
        "it (at once after its head), or the request is answered 408 and its connection "
        "closed (a body trickled a byte at a time held its connection for ever)",
        group="connections",
        gt=0,
    )
    http_stall_timeout_s: float = option(
        30.0,
        "a streamed HTTP response whose client reads nothing for this long is cut (its "
        "engine work stops, its slot is freed)",
        group="connections",
        gt=0,
    )
    max_voices: int = option(1000, "voices that can be created per engine", group="limits", gt=0)
    max_voice_clip_seconds: float = option(
        30.0, "longest reference clip a voice is made from (POST /v1/voices)", group="limits", gt=0
    )
    min_voice_clip_sound_s: float = option(
        0.5,
        "sound a reference clip must hold (20 ms blocks above -45 dBFS): silence, or a clip "
        "too quiet to hold a voice, is refused",
        group="limits",
        gt=0,
    )
    segment_timeout_s: float = option(
        60.0,
        "time a segment may wait for its audio (queueing and synthesis, not sending)",
        group="limits",
        gt=0,
    )
    http_timeout_s: float = option(
        120.0,
        "time an HTTP speech request may spend on its text and waiting for the engine "
        "(not the time the client takes to read a streamed body)",
        group="limits",
        gt=0,
    )
    max_streams: int = option(
        0,
        "contexts and HTTP requests speaking at once; beyond it new ones are busy "
        "(0: as many as the engine is measured to keep real time, see --admission-headroom)",
        group="limits",
        ge=0,
        zero=" (0: the measured capacity)",
    )
    admission_headroom: float = option(
        0.8,
        "share of the engine's measured real-time capacity admission fills (1: all of it)",
        group="limits",
        gt=0,
        le=1,
    )
    when_busy: str = option(
        "refuse",
        "a new context or request beyond capacity: refused as busy with a retry hint, or "
        "spoken by the fallback voice with a warning",
        group="limits",
        choices=("refuse", "fallback"),
    )
    busy_retry_after_ms: int = option(
        2000, "the retry hint sent with a busy refusal", group="limits", gt=0
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
        ge=0,
        zero=" (0: the OS default)",
    )
    coalesce_wakeups: bool = option(True, "a busy event loop is woken once for several engine "
                                    "rounds, not each", group="engine")  # fmt: skip
    engine_process: bool = option(False, "run the engine in a process of its own (its host work "
        "never waits on the event loop for the GIL); pays for a batching engine on a host with a "
        "core to spare (docs/gpu.md)", group="engine")  # fmt: skip
    ws_direct_send: bool = option(True, "frame and write WebSocket messages once a round "
                                  "(false: ASGI)", group="connections")  # fmt: skip
    drain_timeout_s: float = option(
        30.0,
        "on SIGTERM, refuse new work and let audio in progress finish for up to this long "
        "(0: close at once)",
        group="connections",
        ge=0,
    )

    # Segmentation and streaming
    segment_max_chars: int = option(80, "longest segment sent to the engine", group="audio", gt=0)
    first_segment_min_chars: int = option(
        3,
        "first segment may end at a clause mark once it holds this many chars, mark "
        "included: 3 lets 好的， go first (~300 ms sooner, bench/first_segment.py); 2 a lone "
        "嗯， too, which ChatTTS says poorly, as a phrase of its own",
        group="audio",
        ge=1,
        le="segment_max_chars",
    )
    idle_flush_ms: int = option(
        700, "speak a pending fragment after this much input silence", group="audio", gt=0
    )
    sentence_flush_ms: int = option(
        150,
        "speak a complete sentence held for lookahead after this much input silence",
        group="audio",
        gt=0,
    )
    frame_ms: int = option(100, "audio frame duration", group="audio", gt=0)
    first_frame_ms: int = option(
        40, "duration of the first frame of a segment", group="audio", gt=0
    )
    shape_joins: bool = option(
        True,
        "trim silence, insert punctuation pauses, fade joins and level loudness between "
        "segments (streaming/joins.py)",
        group="audio",
    )
    pause_scale: float = option(
        1.0, "multiplies the pause after each segment (0: no pauses)", group="audio", ge=0
    )
    min_audio_ms_per_char: float = option(
        40.0,
        "a segment's audio shorter than this per sounding character (at speed 1; speed 2 "
        "halves it) is implausibly short, as is no audio at all: made again once with a "
        "derived seed if none of it was sent yet, else reported (segment_without_audio); "
        "0: only no audio at all. Speech runs at 150-300 ms a Chinese character",
        group="audio",
        ge=0,
        zero=" (0: only no audio at all)",
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
        ge=0,
        zero=" (0: only on SIGHUP)",
    )
    max_lexicon_entries: int = option(10000, "entries in the lexicon file", group="text", gt=0)
    text_inline_max_chars: int = option(
        80,
        "segments up to this long with no digit or symbol are prepared on the event loop "
        "(~0.2 ms), not handed to the text front-end's thread (0: always the thread)",
        group="text",
        ge=0,
        zero=" (0: always the thread)",
    )
    max_request_lexicon_entries: int = option(
        100, "lexicon entries one request or one WebSocket context may bring", group="text", gt=0
    )
    max_lexicon_written_chars: int = option(
        64, "longest written form of a lexicon entry", group="text", gt=0
    )
    max_lexicon_spoken_chars: int = option(
        128, "longest spoken form of a lexicon entry", group="text", gt=0
    )

    @property
    def lexicon_limits(self) -> LexiconSettings:
        """How large the lexicon file's entries may be (streaming.text.lexicon)."""
        return LexiconSettings(
            self.max_lexicon_entries, self.max_lexicon_written_chars, self.max_lexicon_spoken_chars
        )

    @property
    def request_lexicon_limits(self) -> LexiconSettings:
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
            max_frame_ms=self.delivery.max_frame_ms,
            shape_joins=self.shape_joins,
            pause_scale=self.pause_scale,
            min_audio_ms_per_char=self.min_audio_ms_per_char,
        )

    @property
    def runtime(self) -> WorkerSettings:
        """How the engine worker runs the engine (server.runtime.worker)."""
        return WorkerSettings(
            warm_up=self.warm_up,
            idle_release_s=self.idle_release_s,
            max_active=self.max_active_segments,
            policy=self.batch_policy,
            headroom=self.admission_headroom,
            stall_timeout_s=self.engine_stall_timeout_s,
            coalesce_wakeups=self.coalesce_wakeups,
            interleave_slice_s=self.scheduling.interleave_slice_ms / 1000,
        )

    @property
    def admission(self) -> AdmissionSettings:
        """How new streams are admitted (server.runtime.admission)."""
        return AdmissionSettings(
            max_streams=self.max_streams,
            when_busy=self.when_busy,
            retry_after_ms=self.busy_retry_after_ms,
        )

    @property
    def batch_policy(self) -> BatchSettings:
        return BatchSettings(
            max_batch=self.max_batch,
            prefills_per_step=self.scheduling.prefills_per_step,
            prefill_together=self.scheduling.prefill_together,
            sit_out_ahead_s=self.sit_out_ahead_s,
        )

    @property
    def connection_limits(self) -> ConnectionSettings:
        """What one WebSocket connection may ask for (streaming.connection)."""
        return ConnectionSettings(
            max_message_bytes=self.max_message_bytes,
            max_text_message_chars=self.max_text_message_chars,
            max_buffered_chars=self.max_buffered_chars,
            max_contexts=self.max_contexts,
        )

    @property
    def connection_guard(self) -> GuardSettings:
        """What a connection may take before the app sees it (server.connection_guard)."""
        return GuardSettings(
            header_timeout_s=self.header_timeout_s, max_preauth=self.max_preauth_connections
        )

    @property
    def transport_max_bytes(self) -> int:
        """Frames above this are not even read: the connection closes with 1009."""
        return 4 * self.max_message_bytes

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)
