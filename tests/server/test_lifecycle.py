"""Process lifecycle: draining on shutdown, and exiting when no engine can be loaded."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from chattts_client import StreamClient
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from server.config import Settings
from tests.live import TIMEOUT_S, run_live_server
from tests.scripted_engine import ScriptedEngine


async def test_shutdown_drains_audio_in_progress() -> None:
    """On SIGTERM the server refuses new work but finishes the stream in progress, then exits."""
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.05, ms_per_char=300)
    settings = Settings(engine="espeak", drain_timeout_s=TIMEOUT_S, idle_flush_ms=100)
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        async with StreamClient.connect(live.ws_url) as client:
            text = "第一句话。第二句话。"
            await client.send_text(text)
            await client.end()
            seen: list[str] = []
            while isinstance(event := await client.recv(TIMEOUT_S), dict):
                if event["type"] == "segment":
                    seen.append(event["text"])
            live.server.handle_exit(signal.SIGTERM, None)
            ready = httpx.get(live.base_url + "/ready", timeout=TIMEOUT_S)
            assert ready.status_code == 503 and ready.json()["state"] == "draining"
            with pytest.raises(InvalidStatus) as refused:
                async with connect(live.ws_url, open_timeout=TIMEOUT_S):
                    pass
            assert refused.value.response.status_code == 503
            result = await client.collect(timeout_s=TIMEOUT_S)
        assert result.done is not None and result.done["cancelled"] is False
        assert "".join(seen + [s["text"] for s in result.segments]) == text
        deadline = time.monotonic() + TIMEOUT_S
        while not live.server.should_exit and time.monotonic() < deadline:
            time.sleep(0.05)
        assert live.server.should_exit  # drained, then shut down by itself


def test_cli_exits_when_no_engine_can_be_loaded(tmp_path: Path) -> None:
    """serve exits with status 1 when ChatTTS fails to load and the fallback is off."""
    command = [
        sys.executable, "-m", "server", "serve", "--port", "0",
        "--engine", "chattts", "--model-dir", str(tmp_path / "missing"),
        "--fallback-on-load-failure", "false",
    ]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=TIMEOUT_S * 4, check=False
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "no engine could be loaded" in done.stderr
