"""Prometheus metrics, on a registry owned by the app (no global collectors)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

_LATENCY_BUCKETS_S = (0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_STEP_BUCKETS_S = (0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0)
_RTF_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        declares = (self._traffic, self._streams, self._speech, self._engine, self._steps,
                    self._phrase_cache, self._process)  # fmt: skip
        for declare in declares:
            declare(self.registry)

    def _traffic(self, r: CollectorRegistry) -> None:
        """Requests and connections."""
        self.http_requests = Counter(
            "tts_http_requests_total",
            "HTTP requests by route and status",
            ["route", "status"],
            registry=r,
        )
        self.http_latency = Histogram(
            "tts_http_request_seconds",
            "POST /v1/tts latency",
            buckets=_LATENCY_BUCKETS_S,
            registry=r,
        )
        self.sessions = Counter("tts_ws_sessions_total", "WebSocket sessions opened", registry=r)
        self.sessions_refused = Counter(
            "tts_ws_sessions_refused_total", "WebSocket upgrades refused", ["reason"], registry=r
        )
        self.connections_closed = Counter(
            "tts_connections_closed_total",
            "connections the server closed because the client was too slow or idle: "
            "header_timeout, preauth_limit, idle_session",
            ["reason"],
            registry=r,
        )
        self.wyoming_requests = Counter(
            "tts_wyoming_requests_total",
            "Wyoming requests (--wyoming-port) by kind (synthesize: a whole text; stream: "
            "synthesize-start to synthesize-stop) and outcome",
            ["kind", "outcome"],
            registry=r,
        )
        self.active_sessions = Gauge(
            "tts_ws_sessions_active", "WebSocket sessions open now", registry=r
        )
        self.errors = Counter(
            "tts_errors_total",
            "errors by kind, and by fault: client (a bad request) or server (ours)",
            ["kind", "fault"],
            registry=r,
        )

    def _streams(self, r: CollectorRegistry) -> None:
        """Streams: how many speak, what admission allows, how soon they are heard."""
        self.active_streams = Gauge(
            "tts_active_streams", "contexts with text accepted and not yet done", registry=r
        )
        # Read when scraped (follow_admission): what a balancer or autoscaler compares.
        self.admitted_streams = Gauge(
            "tts_admitted_streams",
            "streams (WebSocket contexts and HTTP requests) speaking on the main engine now, "
            "as admission counts them against tts_stream_limit",
            registry=r,
        )
        self.stream_limit = Gauge(
            "tts_stream_limit",
            "streams admission takes on the main engine before new ones are busy: "
            "--max-streams, else the measured capacity at --admission-headroom (-1 while "
            "nothing bounds it: not yet measured)",
            registry=r,
        )
        self.ttfa = Histogram(
            "tts_time_to_first_audio_seconds",
            "first text of a context (or HTTP request) to its first audio",
            ["route"],
            buckets=_LATENCY_BUCKETS_S,
            registry=r,
        )
        self.contexts_refused = Counter(
            "tts_contexts_refused_total",
            "contexts and requests refused because the engine is at capacity",
            ["route"],
            registry=r,
        )
        self.contexts_degraded = Counter(
            "tts_contexts_degraded_total",
            "contexts and requests served by the fallback voice because the engine is at capacity",
            ["route"],
            registry=r,
        )

    def _speech(self, r: CollectorRegistry) -> None:
        """What was spoken."""
        self.fallback_segments = Counter(
            "tts_fallback_segments_total",
            "segments spoken by the fallback voice after the main engine failed on them",
            registry=r,
        )
        self.segments_without_audio = Counter(
            "tts_segments_without_audio_total",
            "segments whose audio was empty or implausibly short for their text "
            "(--min-audio-ms-per-char): retried (made again with a derived seed before any "
            "of it was sent) or reported (a warning to the client)",
            ["outcome"],
            registry=r,
        )
        for outcome in ("retried", "reported"):
            self.segments_without_audio.labels(outcome=outcome)
        self.segment_latency = Histogram(
            "tts_segment_synthesis_seconds",
            "engine time per segment",
            buckets=_LATENCY_BUCKETS_S,
            registry=r,
        )
        self.segment_rtf = Histogram(
            "tts_segment_rtf",
            "engine time / audio duration per segment",
            buckets=_RTF_BUCKETS,
            registry=r,
        )
        self.audio_seconds = Counter("tts_audio_seconds_total", "audio produced", registry=r)
        self.segments = Counter(
            "tts_segments_total", "segments spoken (phrase-cache hits included)", registry=r
        )
        self.characters = Counter("tts_characters_total", "characters spoken", registry=r)
        self.removed_characters = Counter(
            "tts_removed_characters_total",
            "characters that could not be spoken (reported)",
            registry=r,
        )

    def _engine(self, r: CollectorRegistry) -> None:
        """The engine thread's state and work."""
        self.jobs_cancelled = Counter(
            "tts_engine_jobs_cancelled_total",
            "segments the engine stopped early or skipped (cancel, disconnect, timeout)",
            registry=r,
        )
        self.queue_depth = Gauge(
            "tts_engine_queue_depth", "segments waiting for the engine", registry=r
        )
        self.engine_state = Gauge(
            "tts_engine_state",
            "1 for the engine's current state (loading, ready, failed, stalled, stopped), 0 for the others",
            ["state"],
            registry=r,
        )
        self.engine_degraded = Gauge(
            "tts_engine_degraded",
            "1 when serving the fallback voice because ChatTTS failed to load",
            registry=r,
        )
        self.engine_load_seconds = Gauge(
            "tts_engine_load_seconds", "time to load and warm up the engine", registry=r
        )
        self.engine_busy_seconds = Counter(
            "tts_engine_busy_seconds_total",
            "engine thread time spent on segments, cancelled and failed ones included",
            registry=r,
        )
        self.idle_releases = Counter(
            "tts_engine_idle_releases_total",
            "idle periods after which the engine released cached memory",
            registry=r,
        )
        self.draining = Gauge(
            "tts_draining", "1 while the server drains before shutdown", registry=r
        )
        self.engine_ready = Gauge(
            "tts_engine_ready", "1 when the engine is loaded and warm", ["engine"], registry=r
        )

    def _phrase_cache(self, r: CollectorRegistry) -> None:
        """The phrase cache (server.runtime.phrase_cache)."""
        self.phrase_hits = Counter(
            "tts_phrase_cache_hits_total",
            "segments served from the phrase cache instead of the engine, by where the "
            "entry was found (local: this process; shared: the fleet's Redis)",
            ["tier"],
            registry=r,
        )
        self.phrase_misses = Counter(
            "tts_phrase_cache_misses_total",
            "cacheable segments (fixed seed, deterministic engine) not found in the phrase "
            "cache: synthesised, then kept",
            registry=r,
        )
        self.phrase_bytes = Gauge(
            "tts_phrase_cache_bytes", "audio held by the phrase cache in this process", registry=r
        )
        self.phrase_entries = Gauge(
            "tts_phrase_cache_entries", "segments held by the phrase cache in this process",
            registry=r,
        )  # fmt: skip
        self.phrase_evictions = Counter(
            "tts_phrase_cache_evictions_total",
            "entries dropped to stay within --phrase-cache-mb",
            registry=r,
        )
        self.phrase_store_errors = Counter(
            "tts_phrase_cache_store_errors_total",
            "phrase-cache look-ups and writes in Redis that failed or took longer than "
            "--phrase-cache-store-timeout-ms (the segment was synthesised, or kept locally)",
            registry=r,
        )

    def _steps(self, r: CollectorRegistry) -> None:
        """The engine's steps: batch sizes, cost, capacity."""
        self.batch_size = Histogram(
            "tts_engine_batch_size",
            "segments advanced together in one batched engine step",
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.prefill_rows = Histogram(
            "tts_engine_prefill_rows",
            "joining segments whose prompts ran in one forward (--prefill-together; 1 each "
            "without it)",
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.engine_steps = Counter(
            "tts_engine_steps_total",
            "engine steps (a GPT step of the batch; for an engine that does not batch, a step of "
            "one segment: a chunk, or what it has ready within --interleave-slice-ms)",
            registry=r,
        )
        self.step_seconds = Histogram(
            "tts_engine_step_seconds",
            "wall time of one batched engine step (vocoding of the chunks due included)",
            buckets=_STEP_BUCKETS_S,
            registry=r,
        )
        self.deadline_misses = Counter(
            "tts_deadline_misses_total",
            "chunks made after their playing listener would have run out of audio",
            registry=r,
        )
        self.capacity_streams = Gauge(
            "tts_capacity_streams",
            "real-time streams the engine carries, as measured (admission holds new "
            "contexts to it; -1 until measured)",
            registry=r,
        )
        self.gpu_memory_bytes = Gauge(
            "tts_gpu_memory_bytes",
            "CUDA memory allocated at the end of the last step, by batch size",
            ["batch"],
            registry=r,
        )

    def observe_step(self, batch: int, seconds: float) -> None:
        """One batched engine step of ``batch`` segments."""
        self.engine_steps.inc()
        self.batch_size.observe(batch)
        self.step_seconds.observe(seconds)

    def follow_admission(self, streams: Callable[[], float], limit: Callable[[], float]) -> None:
        """Report admission's count and limit, read at each scrape."""
        self.admitted_streams.set_function(streams)
        self.stream_limit.set_function(limit)

    def _process(self, r: CollectorRegistry) -> None:
        """The server process itself."""
        self.gc_pause = Histogram(
            "tts_gc_pause_seconds",
            "time the whole process stood still in one garbage collection, by generation "
            "(2: a full collection; see --gc-young-threshold)",
            ["generation"],
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5),
            registry=r,
        )
        self.loop_lag = Histogram(
            "tts_event_loop_lag_seconds",
            "how late the event loop ran a timer due every 100 ms: while it is saturated "
            "(the process's ceiling, not the engine's) every stream's audio waits as long",
            buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0),
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def observe_segment(
        self, *, engine_seconds: float, audio_seconds: float, characters: int, cached: bool = False
    ) -> None:
        """One segment spoken (WebSocket or HTTP): volume, and, when the engine made it
        (not the phrase cache), its latency and real-time factor."""
        if audio_seconds <= 0:
            return
        self.segments.inc()
        self.characters.inc(characters)
        self.audio_seconds.inc(audio_seconds)
        if cached:
            return
        self.segment_latency.observe(engine_seconds)
        self.segment_rtf.observe(engine_seconds / audio_seconds)
