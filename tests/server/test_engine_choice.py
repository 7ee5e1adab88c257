"""Which engine serves, and what the server says about it: a named model that fails to
load, a degraded server behind a balancer, random weights, a fast engine's capacity."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from chattts_client import StreamClient

from server.config import Settings
from server.engines.chattts.manifest import MANIFEST_NAME
from server.engines.chattts.settings import ChatTTSSettings
from server.engines.modelled import ModelledEngine
from server.engines.select import RANDOM_WEIGHTS_MAX_NEW_TOKEN
from server.state import engine_choice
from tests.live import TIMEOUT_S, run_live_server
from tests.scripted_engine import ScriptedEngine

SERVE = [sys.executable, "-m", "server", "serve", "--port", "0"]


def test_a_named_model_that_fails_to_load_exits_with_one_clear_line(tmp_path: Path) -> None:
    """--model-dir naming nothing loadable: exit status 1, the reason in one line, no
    traceback, and a hint at the setting that would serve the fallback voice instead."""
    done = subprocess.run(
        [*SERVE, "--model-dir", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S * 4,
        check=False,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    exit_lines = [line for line in done.stderr.splitlines() if "exiting" in line]
    assert len(exit_lines) == 1
    assert str(tmp_path / "missing") in exit_lines[0]
    assert "--fallback-on-load-failure true" in exit_lines[0]


def test_the_log_names_the_engine_actually_serving(tmp_path: Path) -> None:
    """A model that failed to load with the fallback allowed: the log says the espeak
    engine serves, degraded, and never that ChatTTS does."""
    command = [*SERVE, "--model-dir", str(tmp_path), "--fallback-on-load-failure", "true"]
    lines: list[str] = []
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True) as process:
        deadline = threading.Timer(TIMEOUT_S * 4, process.kill)  # bounds the read below
        deadline.start()
        try:
            assert process.stderr is not None
            for line in process.stderr:
                lines.append(line)
                if "serving with" in line:
                    break
        finally:
            deadline.cancel()
            process.terminate()
            process.wait(TIMEOUT_S)
    serving = lines[-1]
    assert "serving with the espeak engine" in serving and "degraded" in serving
    assert not any("serving with the chattts" in line for line in lines)


def test_ready_can_refuse_a_degraded_server(tmp_path: Path) -> None:
    """--ready-when-degraded false: /ready answers 503 (degraded) so a balancer sends no
    traffic, while the fallback voice still answers requests sent to it directly."""
    settings = Settings(
        engine="chattts",
        model_dir=tmp_path,
        fallback_on_load_failure=True,
        ready_when_degraded=False,
    )
    with (
        run_live_server(settings) as live,
        httpx.Client(base_url=live.base_url, timeout=TIMEOUT_S) as http,
    ):
        ready = http.get("/ready")
        assert ready.status_code == 503
        assert ready.json()["degraded"] is True and ready.json()["engine"] == "espeak"
        assert http.post("/v1/tts", json={"text": "你好。"}).status_code == 200


def test_ready_and_the_log_say_the_model_has_random_weights(tiny_checkpoint: Path) -> None:
    """A generated checkpoint: /ready says random_weights, and its segments are held to a
    short max_new_token unless the setting was changed."""
    settings = Settings(
        engine="chattts", model_dir=tiny_checkpoint, chattts=ChatTTSSettings(device="cpu")
    )
    assert engine_choice(settings).chattts.max_new_token == RANDOM_WEIGHTS_MAX_NEW_TOKEN
    chosen = Settings(
        engine="chattts",
        model_dir=tiny_checkpoint,
        chattts=ChatTTSSettings(device="cpu", max_new_token=96, min_new_token=96),
    )
    assert engine_choice(chosen).chattts.max_new_token == 96
    with (
        run_live_server(settings.replace(chattts=chosen.chattts)) as live,
        httpx.Client(base_url=live.base_url, timeout=TIMEOUT_S) as http,
    ):
        body = http.get("/ready").json()
        assert body["random_weights"] is True and body["engine"] == "chattts"
    with (
        run_live_server(Settings(engine="espeak")) as live,
        httpx.Client(base_url=live.base_url, timeout=TIMEOUT_S) as http,
    ):
        assert http.get("/ready").json()["random_weights"] is False


#: Paths opened while a test listens (an audit hook cannot be removed: it stays idle).
_OPENED: list[str] | None = None


def _record_opens(event: str, args: tuple[object, ...]) -> None:
    if _OPENED is not None and event == "open" and isinstance(args[0], (str, os.PathLike)):
        _OPENED.append(os.fspath(args[0]))


sys.addaudithook(_record_opens)


def test_start_up_reads_the_model_manifest_once(tiny_checkpoint: Path) -> None:
    """From the settings to a loaded, ready ChatTTS engine the manifest of a generated
    checkpoint is opened once: start-up decides the engine and learns about random
    weights from the same reading the load uses."""
    global _OPENED
    settings = Settings(
        engine="chattts",
        model_dir=tiny_checkpoint,
        chattts=ChatTTSSettings(device="cpu", max_new_token=96, min_new_token=96),
    )
    _OPENED = []
    try:
        with (
            run_live_server(settings) as live,
            httpx.Client(base_url=live.base_url, timeout=TIMEOUT_S) as http,
        ):
            body = http.get("/ready").json()
            opened = list(_OPENED)
    finally:
        _OPENED = None
    assert body["engine"] == "chattts" and body["random_weights"] is True
    manifest = str(tiny_checkpoint / MANIFEST_NAME)
    assert [path for path in opened if path == manifest] == [manifest]


async def test_a_fast_engine_takes_more_streams_than_segments_in_flight() -> None:
    """An engine much faster than real time (20 ms of work per 100 ms chunk): once its
    speed is measured, admission holds streams to its throughput, not to
    --max-active-segments, and more concurrent streams than that are all admitted."""
    streams = 6  # three times --max-active-segments, well inside the measured capacity
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.002, ms_per_char=100)
    settings = Settings(engine="espeak", max_active_segments=2)
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        async with StreamClient.connect(live.ws_url) as warm:  # measure the engine first
            first = await warm.open()
            await warm.send_text("先说一句长一点的话，让服务器量一量这个引擎的速度。", first)
            await warm.end(first)
            assert (await warm.collect(first, timeout_s=TIMEOUT_S)).done is not None
        capacity = live.state.worker.capacity()  # type: ignore[attr-defined]
        assert capacity is not None and capacity > streams

        async def speak(i: int) -> tuple[bool, list[dict[str, object]]]:
            # One context per stream: the one opened (text to "default" would open a
            # second, implicit context and count as a second stream).
            async with StreamClient.connect(live.ws_url) as tts:
                context_id = await tts.open(attempts=1)
                await tts.send_text(f"第{i}个流在说话。", context_id)
                await tts.end(context_id)
                result = await tts.collect(context_id, timeout_s=TIMEOUT_S)
                return result.done is not None and result.samples > 0, result.errors

        spoken = await asyncio.gather(*(speak(i) for i in range(streams)))
        assert all(ok for ok, _ in spoken), [errors for _, errors in spoken]


class _NoRoomEngine(ModelledEngine):
    """Loads, but its batch does not fit (as a KV cache too large for the GPU would)."""

    def batcher(self, max_batch: int) -> None:
        raise RuntimeError("CUDA out of memory: the batch's cache does not fit")


def test_a_batch_that_does_not_fit_is_a_load_failure_not_a_dead_engine() -> None:
    """The batcher is built before /ready: a failure there leaves the server failed (and
    the CLI would exit 1), not ready with an engine thread that dies at its first step."""
    engine = _NoRoomEngine(step_a_s=0.001, step_b_s=0.0)
    settings = Settings(engine="espeak", max_batch=4)
    with (
        run_live_server(settings, engine=lambda: (engine, False, None), wait_ready=False) as live,
        httpx.Client(base_url=live.base_url, timeout=TIMEOUT_S) as http,
    ):
        assert not live.state.worker.wait_ready(TIMEOUT_S)  # type: ignore[attr-defined]
        ready = http.get("/ready")
        assert ready.status_code == 503
        assert ready.json()["state"] == "failed" and "out of memory" in ready.json()["detail"]


@pytest.mark.parametrize("host_share", [0.0, 1.0])
def test_a_modelled_step_holds_the_gil_for_its_host_share(host_share: float) -> None:
    """A modelled batched step of cost c spends host_share x c on the CPU (holding the
    GIL, as an engine's host work does) and sleeps the rest: asleep, its thread uses
    (almost) no CPU; busy, a good part of the step even on a crowded machine."""
    from server.engines.base import SynthesisRequest, VoiceSpec

    engine = ModelledEngine(step_a_s=0.05, step_b_s=0.0, host_share=host_share)
    batcher = engine.batcher(4)
    assert batcher is not None
    rows = [batcher.open(SynthesisRequest("你好", VoiceSpec()))]
    cpu, wall = time.thread_time(), time.perf_counter()
    for _ in range(4):
        batcher.step(rows)
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    assert wall >= 0.2
    if host_share:
        assert cpu >= 0.05
    else:
        assert cpu <= 0.03


def test_a_host_share_outside_zero_to_one_is_refused() -> None:
    """host_share is a fraction of the step: anything else is a ValueError."""
    with pytest.raises(ValueError, match="host_share"):
        ModelledEngine(step_a_s=0.01, step_b_s=0.0, host_share=1.5)
