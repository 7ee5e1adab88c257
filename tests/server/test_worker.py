"""The engine worker thread: idle memory release between bursts of work."""

from __future__ import annotations

import asyncio
import time

import pytest

from server.engines.base import SynthesisRequest, VoiceSpec
from server.metrics import Metrics
from server.runtime.worker import EngineWorker, WorkerSettings
from streaming.errors import SynthesisTimeout
from tests.live import TIMEOUT_S
from tests.scripted_engine import ScriptedEngine


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
    worker = EngineWorker(
        lambda: (engine, False, None), Metrics(), WorkerSettings(idle_release_s=0.1)
    )
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


async def collect(job_chunks: object, log: list[tuple[str, int]], name: str) -> int:
    total = 0
    async for chunk in job_chunks:  # type: ignore[attr-defined]
        if total == 0:
            log.append((name, 0))
        total += chunk.size
    log.append((name, total))
    return total


def scripted_worker(*, interleaves: bool) -> tuple[EngineWorker, ScriptedEngine]:
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.01, ms_per_char=500)
    engine.interleaves = interleaves  # type: ignore[misc]
    worker = EngineWorker(
        lambda: (engine, False, None), Metrics(), WorkerSettings(idle_release_s=60)
    )
    worker.start()
    return worker, engine


@pytest.mark.parametrize("interleaves", [True, False])
async def test_new_stream_does_not_wait_for_a_long_segment(interleaves: bool) -> None:
    """An interleaving engine starts a new stream's audio before a long segment ends; others wait."""
    worker, _engine = scripted_worker(interleaves=interleaves)
    try:
        assert await asyncio.to_thread(worker.wait_ready, TIMEOUT_S)
        log: list[tuple[str, int]] = []
        long = worker.submit(SynthesisRequest("很长的一段话" * 4, VoiceSpec(seed=1)))
        first = asyncio.create_task(collect(long.chunks(TIMEOUT_S), log, "long"))
        await wait_for(lambda: long.samples > 0)
        short = worker.submit(SynthesisRequest("短句", VoiceSpec(seed=2)))
        await asyncio.gather(first, collect(short.chunks(TIMEOUT_S), log, "short"))
    finally:
        await asyncio.to_thread(worker.stop)
    long_end = log.index(("long", long.samples))
    short_start = log.index(("short", 0))
    assert (short_start < long_end) is interleaves


async def test_waiting_jobs_run_earliest_deadline_first() -> None:
    """Behind a running job, a segment due now starts before one due in a minute."""
    worker, _engine = scripted_worker(interleaves=False)
    try:
        assert await asyncio.to_thread(worker.wait_ready, TIMEOUT_S)
        log: list[tuple[str, int]] = []
        running = worker.submit(SynthesisRequest("正在说的话", VoiceSpec(seed=1)))
        await wait_for(lambda: running.samples > 0)
        later = worker.submit(
            SynthesisRequest("不急", VoiceSpec(seed=2)), deadline=time.monotonic() + 60
        )
        urgent = worker.submit(SynthesisRequest("很急", VoiceSpec(seed=3)))
        await asyncio.gather(
            collect(running.chunks(TIMEOUT_S), log, "running"),
            collect(later.chunks(TIMEOUT_S), log, "later"),
            collect(urgent.chunks(TIMEOUT_S), log, "urgent"),
        )
    finally:
        await asyncio.to_thread(worker.stop)
    starts = [name for name, total in log if total == 0]
    assert starts == ["running", "urgent", "later"]


async def test_cancelled_job_leaves_at_once_even_when_not_due() -> None:
    """A cancelled job stops making audio at once, even while another job is more urgent."""
    worker, engine = scripted_worker(interleaves=True)
    try:
        assert await asyncio.to_thread(worker.wait_ready, TIMEOUT_S)
        relaxed = worker.submit(
            SynthesisRequest("时间充裕" * 4, VoiceSpec(seed=1)), deadline=time.monotonic() + 60
        )
        await wait_for(lambda: relaxed.samples > 0)
        busy = worker.submit(SynthesisRequest("抢先的一段话" * 4, VoiceSpec(seed=2)))
        await wait_for(lambda: busy.samples > 0)
        relaxed.cancel()
        produced = [chunk.size async for chunk in relaxed.chunks(TIMEOUT_S)]
        busy.cancel()
        [chunk async for chunk in busy.chunks(TIMEOUT_S)]
    finally:
        await asyncio.to_thread(worker.stop)
    assert sum(produced) < 24000 * 8  # far less than its 8 s of audio
    assert engine.stopped_early == 2


class _Fatal(BaseException):
    """Escapes every ``except Exception``: stands for a crash of the engine thread."""


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
async def test_dead_engine_thread_ends_jobs_and_fails_liveness() -> None:
    """If the engine thread dies, its jobs end at once and /health turns 503 (restart me)."""
    import httpx

    from server.config import Settings
    from tests.live import run_live_server

    engine = ScriptedEngine(chunk_delay_s=0.0, ms_per_char=20)

    def crash(request: SynthesisRequest, should_stop: object) -> object:
        raise _Fatal

    engine.synthesize = crash  # type: ignore[assignment, method-assign]
    with run_live_server(Settings(engine="espeak"), engine=lambda: (engine, False, None)) as live:
        assert httpx.get(live.base_url + "/health", timeout=TIMEOUT_S).status_code == 200
        worker = live.state.worker  # type: ignore[attr-defined]
        job = worker.submit(SynthesisRequest("一句话。", VoiceSpec(seed=1)))
        with pytest.raises(Exception, match="engine stopped"):
            [chunk async for chunk in job.chunks(TIMEOUT_S)]
        await wait_for(lambda: not worker.alive)
        health = httpx.get(live.base_url + "/health", timeout=TIMEOUT_S)
        assert health.status_code == 503


async def test_segment_timeout_does_not_count_time_spent_between_chunks() -> None:
    """The timeout bounds waiting for audio, not the caller's time between chunks (a slow
    send to the client): a caller that stalls 1 s after the first chunk, on an engine
    that makes a chunk every 100 ms, gets all 15 chunks within a 1 s timeout (it waits
    ~0.5 s in all), and a 0.3 s timeout still ends a segment the engine needs 1.5 s for."""
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.1, ms_per_char=500)
    worker = EngineWorker(
        lambda: (engine, False, None), Metrics(), WorkerSettings(idle_release_s=60)
    )
    worker.start()
    try:
        assert await asyncio.to_thread(worker.wait_ready, TIMEOUT_S)
        # 3 characters at 500 ms each, in 100 ms chunks: 15 chunks, 1.5 s of engine time.
        job = worker.submit(SynthesisRequest("一二。", VoiceSpec(seed=1)))
        chunks = 0
        async for _ in job.chunks(1.0):
            chunks += 1
            if chunks == 1:
                await asyncio.sleep(1.0)
        assert chunks == 15
        slow = worker.submit(SynthesisRequest("一二。", VoiceSpec(seed=1)))
        with pytest.raises(SynthesisTimeout):
            async for _ in slow.chunks(0.3):
                pass
    finally:
        await asyncio.to_thread(worker.stop)


async def test_call_runs_on_the_engine_thread_between_segments_and_ends_at_stop() -> None:
    """EngineWorker.call: the engine's own thread, while segments are in flight; its
    errors reach the caller; after stop() it is refused instead of hanging."""
    import threading

    from streaming.errors import Unavailable

    worker, engine = scripted_worker(interleaves=True)
    try:
        assert await asyncio.to_thread(worker.wait_ready, TIMEOUT_S)
        speaking = asyncio.ensure_future(speak_once(worker))
        thread = await worker.call(lambda e: (e is engine, threading.current_thread().name))
        assert thread == (True, "engine")

        def fails(_: object) -> None:
            raise ValueError("no clips")

        with pytest.raises(ValueError, match="no clips"):
            await worker.call(fails)
        assert await speaking > 0
    finally:
        await asyncio.to_thread(worker.stop)
    with pytest.raises(Unavailable):
        await worker.call(lambda e: None)
