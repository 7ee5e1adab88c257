"""The engine worker thread: idle memory release between bursts of work."""

from __future__ import annotations

import asyncio
import time

from server.engines.base import SynthesisRequest, VoiceSpec
from server.engines.fake import ScriptedEngine
from server.metrics import Metrics
from server.worker import EngineWorker
from tests.live import TIMEOUT_S


async def speak_once(worker: EngineWorker) -> int:
    job = worker.submit(SynthesisRequest("一句话。", VoiceSpec(seed=1)))
    return sum([chunk.size async for chunk in job.chunks(TIMEOUT_S)])


async def wait_for(condition: object, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_engine_releases_memory_once_per_idle_period() -> None:
    """After idle_release_s without work the engine frees memory once, not on every tick."""
    engine = ScriptedEngine(chunk_delay_s=0.0, ms_per_char=20)
    worker = EngineWorker(lambda: (engine, False, None), Metrics(), idle_release_s=0.1)
    worker.start()
    try:
        assert await asyncio.to_thread(worker.wait_ready, TIMEOUT_S)
        await wait_for(lambda: engine.idle_releases == 1)  # idle after the warm-up
        assert await speak_once(worker) > 0
        await wait_for(lambda: engine.idle_releases == 2)
        await asyncio.sleep(0.4)  # several idle periods' worth, still no new work
        assert engine.idle_releases == 2
        assert await speak_once(worker) > 0
        await wait_for(lambda: engine.idle_releases == 3)
    finally:
        await asyncio.to_thread(worker.stop)
