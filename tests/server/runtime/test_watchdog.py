"""The engine watchdog: a stuck engine thread is seen, its work ends, and it recovers."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import numpy as np
import pytest

from harness.live import TIMEOUT_S, run_live_server
from server.config import Settings
from server.engines.base import SynthesisRequest
from tests.scripted_engine import ScriptedEngine

pytestmark = pytest.mark.live

STALL_S = 1.0


class WedgingEngine(ScriptedEngine):
    """Blocks inside a synthesis of a text holding 卡 until ``release`` is set, as a
    thread stuck in a native library would."""

    def __init__(self) -> None:
        super().__init__(chunk_ms=100, chunk_delay_s=0.005, ms_per_char=100)
        self.release = threading.Event()
        self.wedged = threading.Event()

    def synthesize(
        self, request: SynthesisRequest, should_stop: Callable[[], bool]
    ) -> Iterator[np.ndarray]:
        if "卡" in request.text:
            self.wedged.set()
            self.release.wait(TIMEOUT_S * 4)
        yield from super().synthesize(request, should_stop)


def _settings() -> Settings:
    return Settings(
        engine="espeak",
        engine_stall_timeout_s=STALL_S,
        max_streams=1,
        http_timeout_s=TIMEOUT_S * 4,
    )


async def _speak(client: httpx.AsyncClient, text: str) -> httpx.Response:
    return await client.post("/v1/tts", json={"text": text, "format": "pcm"})


async def test_a_stuck_engine_fails_health_ends_its_work_and_recovers() -> None:
    """No progress for the stall bound: /health 503, the stuck request ends with
    engine_stalled and frees its slot, /ready refuses; once the thread moves, all is well."""
    engine = WedgingEngine()
    with run_live_server(_settings(), engine=lambda: (engine, False, None)) as live:
        async with httpx.AsyncClient(base_url=live.base_url, timeout=TIMEOUT_S) as client:
            assert (await client.get("/health")).status_code == 200
            stuck = asyncio.create_task(_speak(client, "这一句会卡住。"))
            await asyncio.to_thread(engine.wedged.wait, TIMEOUT_S)
            started = time.monotonic()
            response = await asyncio.wait_for(stuck, TIMEOUT_S)
            waited_s = time.monotonic() - started
            assert response.status_code == 503
            assert response.json()["error"]["code"] == "engine_stalled"
            assert STALL_S * 0.5 < waited_s < STALL_S + 5
            health = await client.get("/health")
            assert health.status_code == 503 and "stalled" in health.json()["status"]
            assert (await client.get("/ready")).status_code == 503
            assert live.state.admission.streams == 0  # type: ignore[attr-defined]
            refused = await _speak(client, "现在不行。")
            assert refused.status_code == 503 and refused.json()["error"]["code"] == "not_ready"

            engine.release.set()  # the thread moves again
            deadline = time.monotonic() + TIMEOUT_S
            while (await client.get("/health")).status_code != 200:
                assert time.monotonic() < deadline, "the worker never recovered"
                await asyncio.sleep(0.1)
            assert (await client.get("/ready")).status_code == 200
            spoken = await _speak(client, "又好了。")
            assert spoken.status_code == 200 and len(spoken.content) > 0


async def test_a_busy_engine_is_not_mistaken_for_a_stuck_one() -> None:
    """An engine making steady progress on long work never trips the watchdog."""
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.05, ms_per_char=400)
    with run_live_server(_settings(), engine=lambda: (engine, False, None)) as live:
        async with httpx.AsyncClient(base_url=live.base_url, timeout=TIMEOUT_S) as client:
            request = asyncio.create_task(_speak(client, "一句慢慢说完的话。"))
            while not request.done():
                assert (await client.get("/health")).status_code == 200
                await asyncio.sleep(0.2)
            assert request.result().status_code == 200
