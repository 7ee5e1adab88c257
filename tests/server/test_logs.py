"""The server's log as an operator reads it: JSON lines, ids, one summary per request
and per context, nothing from progress bars or dependency warnings."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from chattts_client import StreamClient

from harness.live import TIMEOUT_S

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def one_context(port: int) -> None:
    async with StreamClient.connect(
        f"ws://127.0.0.1:{port}/v1/stream", open_timeout_s=TIMEOUT_S
    ) as client:
        ctx = await client.open(voice="nova", seed=5)
        await client.send_text("你好，世界。", ctx)
        await client.end(ctx)
        await client.collect(ctx, timeout_s=TIMEOUT_S)


@pytest.mark.parametrize("engine", ["espeak", "chattts"])
def test_json_logs_carry_ids_and_one_summary_per_request_and_context(
    engine: str, tiny_checkpoint: Path
) -> None:
    """With ChatTTS too: its load (transformers, vocos, tqdm) must not leak a line that is
    not JSON, a progress bar or a deprecation warning into the log."""
    port = free_port()
    model = ["--model-dir", str(tiny_checkpoint)] if engine == "chattts" else []
    server = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "serve", "--engine", engine, *model,
         "--port", str(port), "--log-format", "json"],
        stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + TIMEOUT_S * 2
        while True:
            try:
                if httpx.get(base + "/ready").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not become ready"
            time.sleep(0.1)
        asyncio.run(one_context(port))
        response = httpx.post(
            base + "/v1/tts", json={"text": "你好😀。", "voice": "alloy"},
            headers={"X-Request-ID": "req-42"}, timeout=TIMEOUT_S,
        )  # fmt: skip
        assert response.headers["x-request-id"] == "req-42"
        generated = httpx.get(base + "/v1/voices").headers["x-request-id"]
    finally:
        server.send_signal(signal.SIGTERM)
        _, stderr = server.communicate(timeout=TIMEOUT_S * 2)
    records = [json.loads(line) for line in stderr.splitlines()]  # every line is JSON
    assert records and all(
        {"request_id", "session_id", "level", "message"} <= set(r) for r in records
    )
    http = [r for r in records if r.get("summary") == "http" and r["request_id"] == "req-42"]
    assert len(http) == 1
    assert http[0] | {"ms": 0, "ttfa_ms": 0} == http[0] | {
        "route": "/v1/tts", "status": 200, "engine": engine, "voice": "alloy", "characters": 4,
        "removed": 1, "segments": 1, "outcome": "complete", "ms": 0, "ttfa_ms": 0,
    }  # fmt: skip
    assert http[0]["audio_s"] > 0
    assert len([r for r in records if r["request_id"] == generated and r.get("summary")]) == 1
    contexts = [r for r in records if r.get("summary") == "context"]
    assert len(contexts) == 1
    context = contexts[0]
    assert context["session_id"] and context["outcome"] == "done" and context["voice"] == "nova"
    assert context["characters"] == 6 and context["segments"] >= 1 and context["audio_s"] > 0
    said = [r["message"] for r in records if r["session_id"] == context["session_id"]]
    assert "disconnected" in said and any(m.startswith("connected from") for m in said)
    text = stderr.lower()
    assert "it/s" not in text and "futurewarning" not in text and "deprecat" not in text
