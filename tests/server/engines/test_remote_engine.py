"""The engine in a process of its own (``--engine-process``, server.engines.remote).

Through a real server on a real socket: ChatTTS on the tiny checkpoint, built by the
production factory in a spawned child, sounds the same as in the server's own engine
thread, and checks voices there; the espeak voice (an engine that interleaves generators)
likewise; a killed engine process fails /health and ends the streams it was speaking;
shutting the server down ends the child. Directly: the child's failures arrive as the
engine's own exceptions, with its traceback, and fail only the rows they belong to.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from chattts_client import AudioFrame, NotReadyError, StreamClient

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from server.engines import remote
from server.engines.base import BatchRow, SynthesisRequest, VoiceSpec
from server.engines.chattts.settings import ChatTTSSettings
from server.engines.modelled import ModelledEngine, _ModelledBatcher
from server.engines.remote import EngineProcessLost, RemoteEngine, remote_factory
from streaming.errors import Unavailable
from tests.server.voices.test_voice_inputs import speech_like, wav
from tests.server.ws.test_stream import assert_complete

TEXTS = ["第一句话，很短。", "第二句话。还有一句。", "你好，世界。", "今天天气很好。"]
STEPS = 24


def _chattts(tiny_checkpoint: Path, voices: Path, *, process: bool) -> Settings:
    """The production engine choice (no factory given): ChatTTS on the tiny checkpoint,
    every segment ``STEPS`` long, in the engine thread or in a process of its own."""
    return Settings(
        engine="chattts",
        model_dir=tiny_checkpoint,
        voices_dir=voices,
        max_batch=8,
        max_streams=64,
        engine_process=process,
        chattts=ChatTTSSettings(device="cpu", max_new_token=STEPS, min_new_token=STEPS),
    )


async def _speak(live: LiveServer, texts: Sequence[str], **start: Any) -> list[np.ndarray]:
    """Each text a context on one socket, all at once: their PCM."""
    async with StreamClient.connect(live.ws_url) as client:
        for k, text in enumerate(texts):
            await client.start(f"c{k}", seed=20 + k, **start)
            await client.send_text(text, f"c{k}")
            await client.end(f"c{k}")
        results = [
            await client.collect(f"c{k}", timeout_s=TIMEOUT_S * 4) for k in range(len(texts))
        ]
    for text, result in zip(texts, results, strict=True):
        assert_complete(result, text)
    return [np.frombuffer(r.pcm, dtype=np.int16) for r in results]


async def _refusal(live: LiveServer, **start: Any) -> str:
    """The error a context started with ``start`` gets."""
    async with StreamClient.connect(live.ws_url) as client:
        await client.start("x", **start)
        await client.send_text("你好。", "x")
        await client.end("x")
        while True:
            event = await client.recv(TIMEOUT_S)
            if isinstance(event, dict) and event["type"] == "error":
                return f"{event['code']}: {event['message']}"


def metric(text: str, name: str) -> float:
    """A sample's value in a Prometheus text page."""
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert found, name
    return float(found.group(1))


async def _speaking(client: StreamClient, context: str, text: str) -> None:
    """``text`` started in ``context`` and ended, once its first audio has arrived."""
    await client.start(context, seed=3)
    await client.send_text(text, context)
    await client.end(context)
    for _ in range(1000):
        if isinstance(await client.recv(TIMEOUT_S), AudioFrame):
            return
    raise AssertionError("no audio")


def _engine(live: LiveServer) -> Any:
    return live.state.worker.engine  # type: ignore[attr-defined]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A child that ended and was not reaped yet is a zombie: gone all the same.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


def _make_voices(live: LiveServer) -> dict[str, Any]:
    """A voice mixed from two others and one made from a clip: what the store keeps."""
    made = {}
    bodies = {
        "blend": {"mix": [{"voice": "alloy", "weight": 0.7}, {"voice": "echo", "weight": 0.3}]},
        "cloned": {"clip": wav(speech_like(2, 0.3)), "transcript": "你好"},
    }
    for name, body in bodies.items():
        answer = httpx.post(
            live.base_url + "/v1/voices", json={"name": name, **body}, timeout=TIMEOUT_S * 4
        )
        assert answer.status_code == 201, answer.text
        voices = live.state.settings.voices_dir  # type: ignore[attr-defined]
        record = json.loads((voices / "chattts" / f"{name}.json").read_text())
        made[name] = {k: record.get(k) for k in ("speaker", "reference")}
    return made


@pytest.mark.live
async def test_chattts_in_its_own_process_sounds_as_in_the_engine_thread(
    tiny_checkpoint: Path, speaker: str, tmp_path: Path
) -> None:
    """Four contexts batched together: the same PCM from a ChatTTS built and run in a
    child process as from the server's own engine thread (to a PCM step); the engine is
    not in the server's process; a voice is checked by the child (a good one accepted,
    a corrupt one refused with the engine's own words); voices mixed and made from a
    clip there are the ones made at home."""
    with run_live_server(_chattts(tiny_checkpoint, tmp_path / "a", process=False)) as here:
        at_home = await _speak(here, TEXTS)
        voices_at_home = _make_voices(here)
    with run_live_server(_chattts(tiny_checkpoint, tmp_path / "b", process=True)) as live:
        engine = _engine(live)
        assert isinstance(engine, RemoteEngine) and engine.name == "chattts"
        assert engine.pid != os.getpid() and not engine.lost
        remote = await _speak(live, TEXTS)
        metrics = httpx.get(live.base_url + "/metrics", timeout=TIMEOUT_S).text
        steps = metric(metrics, "tts_engine_batch_size_count")
        assert steps > 0 and metric(metrics, "tts_engine_batch_size_sum") / steps > 1.5
        voiced = await _speak(live, TEXTS[:1], voice=speaker)
        assert voiced[0].size > 0
        assert _make_voices(live) == voices_at_home
        assert voices_at_home["blend"]["speaker"] and voices_at_home["cloned"]["reference"]
        assert "not a ChatTTS speaker string" in await _refusal(live, voice=speaker[:30])
        pid = engine.pid
    for k, (ours, theirs) in enumerate(zip(remote, at_home, strict=True)):
        assert ours.size == theirs.size and ours.size > 0, k
        assert np.abs(ours.astype(np.int32) - theirs).max() <= 2, k
    deadline = time.monotonic() + TIMEOUT_S
    while not _gone(pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert _gone(pid), "the engine process outlived the server"
    # Its shared buffers and semaphores (named after this process, which served) were
    # unlinked once both sides had them open.
    if os.path.isdir("/dev/shm"):
        assert not [n for n in os.listdir("/dev/shm") if f"tts-engine-{os.getpid()}-" in n]


@pytest.mark.live
async def test_the_espeak_voice_in_its_own_process_speaks_as_at_home() -> None:
    """An engine without a batcher (its ``synthesize`` generators interleave, a round
    trip a chunk) speaks the same audio from a child process."""
    settings = Settings(engine="espeak", max_streams=16)
    with run_live_server(settings) as here:
        at_home = await _speak(here, TEXTS[:2])
    with run_live_server(settings.replace(engine_process=True)) as live:
        assert isinstance(_engine(live), RemoteEngine)
        remote = await _speak(live, TEXTS[:2])
        # A context cancelled mid-speech: its generator in the child is closed, and the
        # next context speaks as before.
        async with StreamClient.connect(live.ws_url) as client:
            await _speaking(client, "long", "这是一段很长的话，" * 20)
            await client.cancel("long")
            cancelled = await client.collect("long", timeout_s=TIMEOUT_S)
        assert cancelled.done is not None and cancelled.done["cancelled"] is True
        again = await _speak(live, TEXTS[:1])
    for ours, theirs in zip([*remote, *again], [*at_home, at_home[0]], strict=True):
        assert np.array_equal(ours, theirs)


def slow_modelled() -> tuple[ModelledEngine, bool, None]:
    """A modelled engine slow enough that a stream is mid-speech for seconds."""
    return ModelledEngine(step_a_s=0.01, step_b_s=0.0), False, None


@pytest.mark.live
async def test_an_engine_process_that_dies_while_idle_stops_the_server_being_ready() -> None:
    """Nothing in flight when the child is killed: within the watchdog's second /ready
    and /health answer 503 and a new context is refused, before any job fails on it."""
    settings = Settings(engine="espeak", engine_process=True, max_batch=8, max_streams=16)
    with run_live_server(settings, engine=slow_modelled) as live:
        os.kill(_engine(live).pid, signal.SIGKILL)
        for _ in range(int(TIMEOUT_S / 0.05)):
            ready = httpx.get(live.base_url + "/ready", timeout=TIMEOUT_S)
            if ready.status_code == 503:
                break
            await asyncio.sleep(0.05)
        assert ready.status_code == 503 and ready.json()["state"] == "stopped"
        health = httpx.get(live.base_url + "/health", timeout=TIMEOUT_S)
        assert (health.status_code, health.json()) == (503, {"status": "engine process ended"})
        with pytest.raises(NotReadyError):
            await _refusal(live, seed=2)


@pytest.mark.live
async def test_a_killed_engine_process_fails_health_and_ends_its_streams() -> None:
    """SIGKILL to the engine's process mid-stream: the stream ends (an error, no hang),
    /health answers 503 naming the engine process, new work is refused."""
    settings = Settings(
        engine="espeak",
        engine_process=True,
        max_batch=8,
        fallback_on_synthesis_failure=False,
        max_streams=16,
    )
    with run_live_server(settings, engine=slow_modelled) as live:
        engine = _engine(live)
        assert httpx.get(live.base_url + "/health", timeout=TIMEOUT_S).status_code == 200
        async with StreamClient.connect(live.ws_url) as client:
            await _speaking(client, "a", "这是一段很长的话，" * 6)
            os.kill(engine.pid, signal.SIGKILL)
            result = await client.collect("a", timeout_s=TIMEOUT_S)
        # It ends: the segment being spoken cut short and said so (no fallback voice
        # here), the segments after it refused: the engine has stopped.
        assert result.done is not None
        codes = [e["code"] for e in result.errors]
        assert codes[0] == "synthesis_failed" and set(codes[1:]) <= {"not_ready"}, codes
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            health = httpx.get(live.base_url + "/health", timeout=TIMEOUT_S)
            if health.status_code == 503:
                break
            await asyncio.sleep(0.05)
        assert health.status_code == 503
        assert health.json() == {"status": "engine process ended"}
        with pytest.raises(NotReadyError, match="the engine is stopped"):
            await _refusal(live, seed=2)


# --- the boundary itself -----------------------------------------------------------------


class _Picky(ModelledEngine):
    """Fails where told: a row whose text starts with "open!" cannot open, one starting
    with "row!" fails alone at its first step, and a step of exactly three rows fails
    whole."""

    def batcher(self, max_batch: int) -> _PickyBatcher:
        return _PickyBatcher(self, max_batch)


class _PickyBatcher(_ModelledBatcher):
    def open(self, request: SynthesisRequest) -> BatchRow:
        if request.text.startswith("open!"):
            raise ValueError("this row cannot open")
        return super().open(request)

    def step(self, rows: Sequence[BatchRow]) -> None:
        if len(rows) == 3:
            raise MemoryError("three rows do not fit")
        super().step(rows)
        for row in rows:
            if row.request.text.startswith("row!"):
                row.error = KeyError("this row alone")


def picky() -> tuple[_Picky, bool, None]:
    return _Picky(step_a_s=0.0, step_b_s=0.0), False, None


def broken() -> tuple[ModelledEngine, bool, None]:
    raise FileNotFoundError("no model in /nowhere")


def _request(text: str) -> SynthesisRequest:
    return SynthesisRequest(text, VoiceSpec(seed=1))


@pytest.mark.parametrize("buffer_bytes", [None, 4096])
def test_failures_cross_as_the_engine_raised_them_and_stay_with_their_rows(
    buffer_bytes: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows that cannot open, a row failing alone and a step failing whole, each where it
    belongs; with 4 kB buffers every chunk (24 kB) and the opening call (long texts) go
    over the pipe instead, with the same result."""
    if buffer_bytes is not None:
        monkeypatch.setattr(remote, "CALL_BUFFER_BYTES", buffer_bytes)
        monkeypatch.setattr(remote, "ANSWER_BUFFER_BYTES", buffer_bytes)
    engine, degraded, detail = remote_factory(picky)()
    try:
        assert isinstance(engine, RemoteEngine) and (degraded, detail) == (False, None)
        batcher = engine.batcher(8)
        assert batcher is not None and batcher.max_batch == 8
        texts = ("好的。", "row!" + "长" * 3000, "open!")
        good, lone, unopened = (batcher.open(_request(t)) for t in texts)
        batcher.prefill_many([good, lone, unopened])  # type: ignore[attr-defined]
        assert isinstance(unopened.error, ValueError) and "cannot open" in str(unopened.error)
        assert good.error is None and lone.error is None
        batcher.step([good, lone])
        assert isinstance(lone.error, KeyError) and good.error is None
        for _ in range(100):  # the first chunk's steps
            if good.chunks:
                break
            batcher.step([good])
        assert all(isinstance(c, np.ndarray) and c.dtype == np.float32 for c in good.chunks)
        third = batcher.open(_request("第三。"))
        batcher.prefill(third)
        with pytest.raises(MemoryError, match="three rows") as failed:
            batcher.step([good, lone, third])
        # The child's traceback comes along as a note.
        assert any("in the engine process" in note for note in failed.value.__notes__)
        batcher.close(lone)
        batcher.close(unopened)
        for _ in range(1000):
            if good.done:
                break
            batcher.step([good, third])
        assert sum(c.size for c in good.chunks) == engine_steps("好的。") * 512
    finally:
        engine.close()
    assert engine.lost and _gone(engine.pid)
    with pytest.raises(EngineProcessLost):
        engine.warm_up()


def engine_steps(text: str) -> int:
    return ModelledEngine(step_a_s=0, step_b_s=0)._steps(_request(text))


def test_a_load_failure_in_the_child_is_raised_as_itself() -> None:
    with pytest.raises(FileNotFoundError, match="no model in /nowhere"):
        remote_factory(broken)()


def test_a_factory_that_cannot_cross_is_refused_at_once() -> None:
    with pytest.raises(Exception, match=r"pickle|local"):
        remote_factory(lambda: picky())


def test_voices_are_checked_by_the_child_once() -> None:
    engine, _, _ = remote_factory(functools.partial(_checked_engine))()
    try:
        engine.check_voice("fine")
        with pytest.raises(ValueError, match="no such voice: bad"):
            engine.check_voice("bad")
        engine._control.close()  # the child cannot be asked any more
        engine.check_voice("fine")  # remembered
        with pytest.raises(Unavailable):
            engine.check_voice("other")
    finally:
        engine.close()


class _Checking(ModelledEngine):
    def check_voice(self, voice: str) -> None:
        if voice == "bad":
            raise ValueError(f"no such voice: {voice}")


def _checked_engine() -> tuple[_Checking, bool, None]:
    return _Checking(step_a_s=0.0, step_b_s=0.0), False, None
