"""Process lifecycle: draining on shutdown, and exiting when no engine can be loaded."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from chattts_client import StreamClient
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from harness.live import TIMEOUT_S, run_live_server
from server.config import Settings
from tests.scripted_engine import ScriptedEngine

pytestmark = pytest.mark.live


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


async def events_until_closed(ws: ClientConnection) -> tuple[list[dict[str, Any]], int | None]:
    """Every JSON event until the server closes the socket, and its close code."""
    events: list[dict[str, Any]] = []
    try:
        while True:
            message = await asyncio.wait_for(ws.recv(), TIMEOUT_S)
            if isinstance(message, str):
                events.append(json.loads(message))
    except ConnectionClosed as closed:
        return events, closed.rcvd.code if closed.rcvd else None


async def test_drain_tells_every_session_then_ends_its_contexts_after_their_text() -> None:
    """On SIGTERM every open session gets `draining` before anything else of the drain: a
    context open there speaks all the text it accepted (the fragment after its last
    sentence too) and ends with done; more text for it and new starts are refused with
    `draining`; an idle session is told as well; both close with 1012 after the audio."""
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.05, ms_per_char=200)
    settings = Settings(engine="espeak", drain_timeout_s=TIMEOUT_S, idle_flush_ms=5000)
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        async with (
            connect(live.ws_url, open_timeout=TIMEOUT_S) as speaking,
            connect(live.ws_url, open_timeout=TIMEOUT_S) as idle,
        ):
            for ws in (speaking, idle):
                assert json.loads(await ws.recv())["type"] == "ready"
            text = "第一句话。第二句"  # a sentence, then a fragment the idle flush would wait for
            await speaking.send(json.dumps({"type": "start", "context_id": "a", "seed": 1}))
            await speaking.send(json.dumps({"type": "text", "context_id": "a", "text": text}))
            while not isinstance(await speaking.recv(), bytes):  # speaking now
                pass
            live.server.handle_exit(signal.SIGTERM, None)
            spoke, spoke_close = await asyncio.wait_for(_refused_then_closed(speaking), TIMEOUT_S)
            told, idle_close = await events_until_closed(idle)
    kinds = [e["type"] for e in spoke]
    draining = [e for e in spoke if e["type"] == "draining"]
    assert len(draining) == 1 and kinds.index("draining") < kinds.index("done")
    assert 0 < draining[0]["deadline_ms"] <= TIMEOUT_S * 1000
    assert draining[0]["contexts"] == [
        {"context_id": "a", "stream": 1, "end_char": len(text), "ended": False}
    ]
    segments = [e for e in spoke if e["type"] == "segment"]
    assert "".join(s["text"] for s in segments) == text[segments[0]["start_char"] :]
    assert segments[-1]["end_char"] == len(text)
    refusals = [(e["code"], e["context_id"]) for e in spoke if e["type"] == "error"]
    assert refusals == [("draining", "a"), ("draining", "b")]
    [done] = [e for e in spoke if e["type"] == "done"]
    assert done["cancelled"] is False
    assert [e["type"] for e in told] == ["draining"] and told[0]["contexts"] == []
    assert (spoke_close, idle_close) == (1012, 1012)


async def _refused_then_closed(ws: ClientConnection) -> tuple[list[dict[str, Any]], int | None]:
    """Events up to `draining`; then more text for the open context and a new start
    (both refused), and every event until the close."""
    events: list[dict[str, Any]] = []
    while not events or events[-1]["type"] != "draining":
        message = await ws.recv()
        if isinstance(message, str):
            events.append(json.loads(message))
    await ws.send(json.dumps({"type": "text", "context_id": "a", "text": "后来的话。"}))
    await ws.send(json.dumps({"type": "start", "context_id": "b"}))
    more, code = await events_until_closed(ws)
    return events + more, code


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
