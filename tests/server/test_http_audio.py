"""The HTTP audio encoders: headers, ffmpeg processes started ahead."""

from __future__ import annotations

import asyncio
import io
import wave
from collections.abc import AsyncGenerator

import numpy as np
import pytest

from server.child_process import ChildProcess
from server.encoding import Encoders
from server.http import audio as http_audio
from tests.live import child_pids


def test_a_streamed_wav_header_says_unknown_length_and_filling_it_gives_exact_sizes() -> None:
    pcm = np.arange(100, dtype="<i2").tobytes()
    streamed = http_audio.streaming_wav_header(16000) + pcm
    assert streamed[4:8] == streamed[40:44] == b"\xff\xff\xff\xff"
    whole = http_audio.fill_wav_sizes(streamed)
    with wave.open(io.BytesIO(whole)) as w:
        assert (w.getframerate(), w.getnframes(), w.getsampwidth()) == (16000, 100, 2)
        assert w.readframes(100) == pcm


async def tone(seconds: float, rate: int = 24000) -> AsyncGenerator[np.ndarray]:
    t = np.arange(int(seconds * rate)) / rate
    audio = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    for start in range(0, audio.size, 2400):
        yield audio[start : start + 2400]


async def test_an_encoder_process_is_started_ahead_and_killed_at_close() -> None:
    encoders = Encoders()
    first = b"".join(
        [c async for c in http_audio.encode(tone(0.5), "mp3", 24000, encoders=encoders)]
    )
    assert first[:3] == b"ID3" and len(first) > 1000
    (spare_task,) = encoders._spares.values()
    spare = await spare_task
    assert spare.returncode is None  # started, waiting for the next request
    second = await encoders.process("mp3", 24000)
    assert second.pid == spare.pid
    second.kill()
    await second.wait()
    (next_spare,) = [await task for task in encoders._spares.values()]
    await encoders.close()
    assert next_spare.returncode is not None and encoders._spares == {}


async def test_closing_the_stream_midway_kills_ffmpeg_and_closes_the_frames(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    closed = asyncio.Event()
    started: list[ChildProcess] = []
    spawn = http_audio.spawn

    async def recorded(args: tuple[str, ...]) -> ChildProcess:
        started.append(await spawn(args))
        return started[-1]

    monkeypatch.setattr(http_audio, "spawn", recorded)

    async def endless() -> AsyncGenerator[np.ndarray]:
        try:
            while True:
                yield np.zeros(2400, np.float32)
                await asyncio.sleep(0)
        finally:
            closed.set()

    stream = http_audio.encode(endless(), "flac", 24000)
    assert (await anext(stream))[:4] == b"fLaC"
    await stream.aclose()
    assert closed.is_set()
    (process,) = started
    assert process.returncode is not None  # killed and reaped, not left running


async def test_concurrent_requests_for_one_encoding_leave_one_spare() -> None:
    """Twelve requests for mp3 at once each get their own ffmpeg, and once they are done
    exactly one spare waits: none is started and forgotten."""
    before = child_pids("ffmpeg")
    encoders = Encoders()
    processes = await asyncio.gather(*(encoders.process("mp3", 24000) for _ in range(12)))
    assert len({p.pid for p in processes}) == 12
    await asyncio.gather(*(p.aclose() for p in processes))
    await asyncio.gather(*encoders._spares.values())
    assert len(child_pids("ffmpeg") - before) == 1
    await encoders.close()
    assert child_pids("ffmpeg") - before == set()


async def test_a_request_that_leaves_while_its_encoder_starts_leaves_no_process() -> None:
    """A caller cancelled while waiting for the spare it took (the client left) leaves no
    ffmpeg behind but the next spare, and close() reaps that and any child handed out."""
    before = child_pids("ffmpeg")
    encoders = Encoders()
    first = asyncio.ensure_future(encoders.process("flac", 24000))  # starts a spare
    second = asyncio.ensure_future(encoders.process("flac", 24000))  # takes it
    await asyncio.sleep(0)
    assert not second.done()
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    process = await first
    (spare,) = [await task for task in encoders._spares.values()]
    deadline = asyncio.get_running_loop().time() + 5
    while child_pids("ffmpeg") - before != {process.pid, spare.pid}:
        assert asyncio.get_running_loop().time() < deadline, "the abandoned spare was left"
        await asyncio.sleep(0.02)
    await encoders.close()
    assert process.returncode is not None and spare.returncode is not None
    assert child_pids("ffmpeg") - before == set()
