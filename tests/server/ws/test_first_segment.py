"""The first segment of a streamed reply, on a real server with the default settings."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from chattts_client import StreamClient

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from tests.server.ws.test_stream import assert_complete, speak

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def espeak_server() -> Iterator[LiveServer]:
    with run_live_server(Settings(engine="espeak")) as live:
        yield live


@pytest.mark.parametrize(
    ("text", "segments"),
    [
        ("好的，我们现在开始今天的课程。", ["好的，", "我们现在开始今天的课程。"]),
        ("你好，欢迎使用。", ["你好，", "欢迎使用。"]),
        ("是的。这个方案是可行的。", ["是的。", "这个方案是可行的。"]),
        ("今天天气很好，我们去公园散步吧。", ["今天天气很好，", "我们去公园散步吧。"]),
        # One character and its mark: kept with its clause (too short to say well alone).
        ("嗯，让我想一想。", ["嗯，让我想一想。"]),
    ],
    ids=["okay", "hello", "yes", "long-clause", "hmm"],
)
async def test_a_short_opener_is_spoken_first(
    espeak_server: LiveServer, text: str, segments: list[str]
) -> None:
    """好的， streamed two characters at a time is a segment of its own, not held for the 。."""
    result = await speak(espeak_server, text, size=2)
    assert_complete(result, text)
    assert [s["text"] for s in result.segments] == segments


async def test_the_protocol_example_is_what_the_server_sends(espeak_server: LiveServer) -> None:
    """docs/protocol.md's example exchange: its deltas give its segments, warning and frames."""
    example = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    example = example.split("## Example exchange", 1)[1].split("```", 2)[1]
    sent = re.findall(r'C→S  \{"type":"text","context_id":"a","text":"([^"]*)"\}', example)
    shown = re.findall(r'S→C  \{"type":"segment".*?"text":"([^"]*)"', example)
    removed = json.loads(re.search(r'"removed":(\[.*?\])\}', example).group(1))  # type: ignore[union-attr]
    first_frame_bytes = int(re.search(r"segment=0 sequence=0, (\d+) bytes", example).group(1))  # type: ignore[union-attr]
    assert len(sent) == 3 and len(shown) == 2
    async with StreamClient.connect(espeak_server.ws_url) as client:
        await client.open("a", seed=42)
        for delta in sent:
            await client.send_text(delta, "a")
        await client.end("a")
        result = await client.collect("a", timeout_s=TIMEOUT_S)
    assert_complete(result, "".join(sent))
    assert [s["text"] for s in result.segments] == shown
    assert [w["removed"] for w in result.warnings] == [removed]
    assert result.frames[0].samples * 2 == first_frame_bytes
