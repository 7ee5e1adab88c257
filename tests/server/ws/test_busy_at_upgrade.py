"""--busy-at-upgrade: a full server refuses the WebSocket upgrade itself (HTTP 503 busy,
with the retry hint), so a balancer can retry it elsewhere; /metrics says how full."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from chattts_client import BusyError, StreamClient

from harness.live import TIMEOUT_S, run_live_server
from server.config import Settings
from tests.scripted_engine import ScriptedEngine

pytestmark = pytest.mark.live


def metric(base_url: str, name: str) -> float:
    body = httpx.get(base_url + "/metrics", timeout=TIMEOUT_S).text
    found = re.search(rf"^{name} (\S+)$", body, re.MULTILINE)
    assert found, name
    return float(found.group(1))


@pytest.mark.parametrize("at_upgrade", [True, False], ids=["at-upgrade", "at-start"])
async def test_a_full_server_refuses_at_the_upgrade_only_when_asked(at_upgrade: bool) -> None:
    """One stream speaking under --max-streams 1: a new connection is refused at the
    upgrade (503 busy, retry_after_ms) with --busy-at-upgrade, else accepted and its start
    refused busy; admission's count and limit are on /metrics; room again once it ends."""
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.05, ms_per_char=300)
    settings = Settings(engine="chattts", model_dir=Path("unused"), max_streams=1,
                        busy_retry_after_ms=300, busy_at_upgrade=at_upgrade)  # fmt: skip
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        async with StreamClient.connect(live.ws_url) as holder:
            speaking = await holder.open(seed=1)
            await holder.send_text("占着引擎的很长的一句话，" * 3, speaking)
            full = (metric(live.base_url, "tts_admitted_streams"),
                    metric(live.base_url, "tts_stream_limit"))  # fmt: skip
            with pytest.raises(BusyError) as refused:
                async with StreamClient.connect(live.ws_url) as late:
                    await late.open(seed=2, attempts=1)
            await holder.cancel(speaking)
            await holder.collect(speaking, timeout_s=TIMEOUT_S)
        async with StreamClient.connect(live.ws_url) as again:
            await again.open(seed=3, attempts=1)
        upgrades = httpx.get(live.base_url + "/metrics", timeout=TIMEOUT_S).text
    assert full == (1, 1)
    assert refused.value.retry_after_ms == 300
    assert (refused.value.context_id is None) is at_upgrade  # a start's refusal names it
    busy_upgrades = 'tts_ws_sessions_refused_total{reason="busy"} 1.0' in upgrades
    assert busy_upgrades is at_upgrade
