"""The phrase cache through a real server on the tiny ChatTTS checkpoint: a segment spoken
before comes from memory, sample for sample what the engine makes, never for an unfixed
seed, never across tokens unless shared, and with the same events as a synthesis."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from chattts_client import ContextResult, StreamClient
from prometheus_client.parser import text_string_to_metric_families

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from server.engines.base import SynthesisRequest, VoiceSpec, WordMarks
from server.metrics import Metrics
from server.runtime.phrase_cache import (
    CachedPhrase,
    PhraseCache,
    PhraseCacheSettings,
    partition_for,
    phrase_key,
)
from tests.conftest import fixed_length_chattts

TOKENS = ("token-a", "token-b")
TEXT = "你好，欢迎光临。今天天气很好。"


def _server(checkpoint: Path, **changes: object) -> Iterator[LiveServer]:
    settings = Settings(engine="chattts", model_dir=checkpoint, tokens=TOKENS, **changes)  # type: ignore[arg-type]
    with run_live_server(settings, engine=fixed_length_chattts(checkpoint)) as server:
        yield server


@pytest.fixture(scope="module")
def cached(tiny_checkpoint: Path) -> Iterator[LiveServer]:
    yield from _server(tiny_checkpoint)


@pytest.fixture(scope="module")
def uncached(tiny_checkpoint: Path) -> Iterator[LiveServer]:
    yield from _server(tiny_checkpoint, phrase_cache=PhraseCacheSettings(phrase_cache_mb=0))


def metrics(server: LiveServer) -> dict[str, float]:
    """Every sample of /metrics by name and labels (``name{k=v}``)."""
    text = httpx.get(server.base_url + "/metrics", timeout=TIMEOUT_S).text
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            found[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return found


def counts(server: LiveServer) -> tuple[float, float, float]:
    """(local hits, misses, engine steps) now."""
    found = metrics(server)
    return (
        found.get("tts_phrase_cache_hits_total{tier=local}", 0.0),
        found["tts_phrase_cache_misses_total"],
        found["tts_engine_steps_total"],
    )


def tts(server: LiveServer, token: str = TOKENS[0], **body: object) -> httpx.Response:
    answer = httpx.post(
        server.base_url + "/v1/tts",
        json={"text": TEXT, "format": "pcm", **body},
        headers={"Authorization": f"Bearer {token}"},
        timeout=TIMEOUT_S * 4,
    )
    assert answer.status_code == 200, answer.text
    return answer


async def speak(
    server: LiveServer, token: str = TOKENS[0], text: str = TEXT, **start: object
) -> ContextResult:
    async with StreamClient.connect(server.ws_url, token=token) as client:
        ctx = await client.start(**start)  # type: ignore[arg-type]
        for i in range(0, len(text), 3):
            await client.send_text(text[i : i + 3], ctx)
        await client.end(ctx)
        return await client.collect(ctx, timeout_s=TIMEOUT_S * 4)


@pytest.mark.live
def test_a_cached_segment_equals_its_uncached_synthesis(
    cached: LiveServer, uncached: LiveServer
) -> None:
    """A seeded text said again is served from the cache (hits, no engine steps), and its
    audio equals, sample for sample, the same request synthesised by a server without one."""
    first = tts(cached, seed=101)
    hits, misses, steps = counts(cached)
    again = tts(cached, seed=101)
    assert counts(cached) == (hits + 2, misses, steps)  # both segments, no engine step
    fresh = tts(uncached, seed=101)
    assert again.content == first.content == fresh.content
    assert len(again.content) > 24_000  # real audio, not an empty answer
    assert metrics(uncached)["tts_phrase_cache_misses_total"] == 0  # off: not even asked


@pytest.mark.live
def test_one_entry_serves_every_rate_and_volume(cached: LiveServer, uncached: LiveServer) -> None:
    """The cache holds the engine's audio: a hit at another sample rate and volume equals
    that request synthesised afresh (resampling and the limiter run after the cache)."""
    tts(cached, seed=102)
    hits, misses, steps = counts(cached)
    body = {"seed": 102, "sample_rate": 16000, "volume": 2.5}
    hit = tts(cached, **body)
    assert counts(cached) == (hits + 2, misses, steps)
    assert hit.content == tts(uncached, **body).content


@pytest.mark.live
async def test_an_unfixed_seed_is_never_served_from_the_cache(cached: LiveServer) -> None:
    """A context with no seed and no voice of its own gets a new seed each time: neither
    looked up nor kept, and each sounds new; a preset's own seed is fixed, so it is cached."""
    hits, misses, _ = counts(cached)
    one = await speak(cached)
    two = await speak(cached)
    assert counts(cached)[:2] == (hits, misses)
    assert one.pcm != two.pcm
    tts(cached, voice="alloy")  # HTTP, no seed, but the preset fixes one
    hits, misses, steps = counts(cached)
    tts(cached, voice="alloy")
    assert counts(cached) == (hits + 2, misses, steps)
    tts(cached, voice="alloy", seed=None, speed=1.0)  # seed null: the voice's own
    assert counts(cached)[0] == hits + 4


@pytest.mark.live
def test_entries_are_kept_per_token(cached: LiveServer, tiny_checkpoint: Path) -> None:
    """One token's entries are not another's (a hit would tell what the first said),
    unless --phrase-cache-shared says so."""
    tts(cached, seed=103)
    hits, misses, _ = counts(cached)
    tts(cached, token=TOKENS[1], seed=103)
    assert counts(cached)[:2] == (hits, misses + 2)
    for server in _server(
        tiny_checkpoint, phrase_cache=PhraseCacheSettings(phrase_cache_shared=True)
    ):
        first = tts(server, seed=104)
        hits, misses, steps = counts(server)
        other = tts(server, token=TOKENS[1], seed=104)
        assert counts(server) == (hits + 2, misses, steps)
        assert other.content == first.content


@pytest.mark.live
async def test_a_hit_sends_the_same_events_timestamps_and_frames(cached: LiveServer) -> None:
    """Over the WebSocket a hit's segment events, timestamps, audio (segment by segment)
    and done equal the synthesis's; it takes no engine step and no batch row. (How the
    audio is cut into frames may differ: frames are joined while the listener is ahead.)"""
    first = await speak(cached, context_id="c", seed=105, timestamps=True)
    before = metrics(cached)
    again = await speak(cached, context_id="c", seed=105, timestamps=True)
    after = metrics(cached)
    assert after["tts_engine_steps_total"] == before["tts_engine_steps_total"]
    assert after["tts_engine_batch_size_count"] == before["tts_engine_batch_size_count"]
    assert after["tts_phrase_cache_hits_total{tier=local}"] == (
        before["tts_phrase_cache_hits_total{tier=local}"] + len(first.segments)
    )
    assert after["tts_segments_total"] == before["tts_segments_total"] + len(first.segments)
    assert again.segments == first.segments and len(first.segments) >= 2
    assert again.timestamps == first.timestamps and first.timestamps

    def per_segment(frames: list[Any]) -> dict[int, int]:
        samples: dict[int, int] = {}
        for frame in frames:
            samples[frame.segment] = samples.get(frame.segment, 0) + frame.samples
        return samples

    assert per_segment(again.frames) == per_segment(first.frames)
    assert len(per_segment(first.frames)) >= 2
    assert again.pcm == first.pcm
    assert again.done is not None and first.done is not None
    assert again.done["audio_samples"] == first.done["audio_samples"]


def _phrase(seconds: float) -> CachedPhrase:
    return CachedPhrase((np.zeros(int(24000 * seconds), np.float32),), WordMarks(((0, 0),)))


def test_the_cache_drops_least_recently_used_entries_beyond_its_size() -> None:
    """LRU by bytes: beyond --phrase-cache-mb the entry used longest ago goes; a segment
    longer than --phrase-cache-entry-kb is not kept; the gauges follow."""
    metrics = Metrics()
    cache = PhraseCache(
        PhraseCacheSettings(phrase_cache_mb=0.25, phrase_cache_entry_kb=120), metrics
    )
    one_s = _phrase(1.0)  # 96,000 bytes
    cache.keep("a", one_s)
    cache.keep("b", one_s)
    found = asyncio.run(cache.find("a"))  # a is now the most recent
    assert found is not None and found.marks == one_s.marks
    assert not found.chunks[0].flags.writeable  # an entry cannot be changed by a consumer
    cache.keep("c", one_s)  # 288,000 > 262,144: b goes
    assert asyncio.run(cache.find("b")) is None
    assert asyncio.run(cache.find("a")) is not None and asyncio.run(cache.find("c")) is not None
    assert (len(cache), cache.bytes) == (2, 192_000)
    cache.keep("long", _phrase(2.0))  # 192,000 bytes > 120 KB
    assert asyncio.run(cache.find("long")) is None
    assert metrics.phrase_bytes._value.get() == 192_000  # the exported figures
    assert metrics.phrase_evictions._value.get() == 1


def test_the_key_covers_every_input_and_the_caller() -> None:
    """Any field of the request (text, each voice field, fallback), the engine's identity
    and the caller's partition change the key; the same inputs give the same key."""
    base = SynthesisRequest("你好。", VoiceSpec(voice="spk", seed=1))
    key = phrase_key("engine", "", base)
    assert key == phrase_key(
        "engine", "", SynthesisRequest("你好。", VoiceSpec(voice="spk", seed=1))
    )
    variants = [
        phrase_key("other engine", "", base),
        phrase_key("engine", "caller", base),
        phrase_key("engine", "", SynthesisRequest("你好！", base.voice)),
        phrase_key("engine", "", SynthesisRequest("你好。", base.voice, fallback=True)),
    ]
    changes = {"voice": "spk2", "seed": 2, "speed": 1.2, "speaker_seed": 3, "reference": "r",
               "transcript": "t", "temperature": 0.5, "top_p": 0.5, "top_k": 5}  # fmt: skip
    for name, value in changes.items():
        voice = VoiceSpec(**{"voice": "spk", "seed": 1, name: value})  # type: ignore[arg-type]
        variants.append(phrase_key("engine", "", SynthesisRequest("你好。", voice)))
    assert len({key, *variants}) == len(variants) + 1
    assert partition_for("t", tokens_on=True, shared=False) != partition_for(
        "u", tokens_on=True, shared=False
    )
    assert partition_for("t", tokens_on=True, shared=True) == ""
    assert partition_for("t", tokens_on=False, shared=False) == ""


@pytest.mark.live
async def test_a_hit_keeps_the_engines_word_marks() -> None:
    """The fallback voice (espeak-ng) says where its words start: a hit carries those
    marks, so its timestamps are the engine's (not estimates) and equal the synthesis's."""
    with run_live_server(Settings(engine="espeak", tokens=TOKENS)) as server:
        first = await speak(server, context_id="c", seed=3, timestamps=True)
        hits = counts(server)[0]
        again = await speak(server, context_id="c", seed=3, timestamps=True)
        assert counts(server)[0] == hits + len(first.segments)
    assert first.timestamps and not any(t["estimated"] for t in first.timestamps)
    assert again.timestamps == first.timestamps
    assert again.pcm == first.pcm


@pytest.mark.live
async def test_a_segment_made_again_is_replayed_with_its_retry(tiny_checkpoint: Path) -> None:
    """A segment whose first try made too little audio (12 GPT steps for a long clause)
    is retried with a derived seed; said again, both tries come from the cache: the same
    warnings, the same audio, no engine step."""
    factory = fixed_length_chattts(tiny_checkpoint, steps=12)
    settings = Settings(engine="chattts", model_dir=tiny_checkpoint, tokens=TOKENS)
    with run_live_server(settings, engine=factory) as server:
        long = "你好。今天天气很好我们一起去公园散步吧。"
        first = await speak(server, text=long, context_id="c", seed=106)
        hits, _, steps = counts(server)
        again = await speak(server, text=long, context_id="c", seed=106)
        after = counts(server)
    codes = [w["code"] for w in first.warnings]
    assert "segment_retried" in codes  # the case under test happened
    assert again.warnings == first.warnings
    assert again.pcm == first.pcm
    assert after[2] == steps  # no engine step: every try was a hit
    assert after[0] - hits == len(first.segments) + codes.count("segment_retried")
