"""The phrase cache shared by a fleet through the voices store's real Redis: an entry one
replica made is a hit on another, and Redis going away only makes misses, never a
failed request."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
import redis

from server.config import Settings
from tests.conftest import fixed_length_chattts
from tests.fleet.fleet import REDIS, Store
from tests.live import TIMEOUT_S, LiveServer, run_live_server
from tests.server.test_phrase_cache import metrics

pytestmark = [
    pytest.mark.skipif(
        REDIS is None, reason="redis-server not installed (scripts/setup.sh --test)"
    ),
    pytest.mark.slow,
]

TEXT = "好的，请稍等。马上就好。"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store(tmp_path / "redis")
    store.start()
    try:
        yield store
    finally:
        store.kill()


def speak(server: LiveServer, seed: int) -> bytes:
    answer = httpx.post(
        server.base_url + "/v1/tts",
        json={"text": TEXT, "format": "pcm", "seed": seed},
        timeout=TIMEOUT_S * 4,
    )
    assert answer.status_code == 200, answer.text
    return answer.content


def written(store: Store, count: int) -> list[bytes]:
    """The phrase entries in Redis once there are ``count`` (bounded wait)."""
    client = redis.Redis.from_url(store.url)
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        keys: list[bytes] = client.keys("chattts-stream:phrases:*")
        if len(keys) >= count or time.monotonic() > deadline:
            return keys
        time.sleep(0.02)


def test_replicas_share_entries_and_survive_redis_going_away(
    store: Store, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """Replica B serves what replica A synthesised from Redis (a shared hit, no engine
    step, the same samples); with Redis killed both still speak (misses, errors counted)."""
    with ExitStack() as stack:
        one, two = (
            stack.enter_context(
                run_live_server(
                    Settings(
                        engine="chattts",
                        model_dir=tiny_checkpoint,
                        voices_store=store.url,
                        voices_dir=tmp_path / f"v{i}",
                    ),
                    engine=fixed_length_chattts(tiny_checkpoint),
                )
            )
            for i in (1, 2)
        )
        made = speak(one, seed=201)
        keys = written(store, 2)  # both segments, written in the background
        steps = metrics(two)["tts_engine_steps_total"]
        assert speak(two, seed=201) == made
        after = metrics(two)
        assert after["tts_phrase_cache_hits_total{tier=shared}"] == 2
        assert after["tts_engine_steps_total"] == steps
        ttl = redis.Redis.from_url(store.url).ttl(keys[0])
        assert 0 < ttl <= 86400

        store.kill()
        fresh = speak(two, seed=202)  # a miss: Redis is asked, fails, the engine speaks
        assert len(fresh) > 24_000
        assert speak(two, seed=202) == fresh  # now a local hit
        assert speak(one, seed=202) == fresh  # one never saw it: synthesised, the same
        errors = metrics(two)["tts_phrase_cache_store_errors_total"]
        assert errors >= 1


def test_a_mixed_voice_made_on_one_replica_speaks_on_another(
    store: Store, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """A mix is kept in the shared store like any voice: made through one replica, the
    other speaks it at once, with the same audio."""
    with ExitStack() as stack:
        one, two = (
            stack.enter_context(
                run_live_server(
                    Settings(engine="chattts", model_dir=tiny_checkpoint,
                             voices_store=store.url, voices_dir=tmp_path / f"v{i}"),
                    engine=fixed_length_chattts(tiny_checkpoint),
                )
            )
            for i in (1, 2)
        )  # fmt: skip
        body = {"name": "blend", "seed": 9,
                "mix": [{"voice": "nova", "weight": 2}, {"voice": "onyx", "weight": 1}]}  # fmt: skip
        made = httpx.post(one.base_url + "/v1/voices", json=body, timeout=TIMEOUT_S)
        assert made.status_code == 201, made.text
        record = redis.Redis.from_url(store.url).hget("chattts-stream:voices:chattts", "blend")
        assert record is not None and b"speaker" in record
        spoken = [
            httpx.post(
                server.base_url + "/v1/tts",
                json={"text": TEXT, "voice": "blend", "format": "pcm"},
                timeout=TIMEOUT_S * 4,
            )
            for server in (two, one)
        ]
        assert [answer.status_code for answer in spoken] == [200, 200]
        assert spoken[0].content == spoken[1].content
