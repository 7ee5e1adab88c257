"""The runnable examples of docs/pipecat.md and docs/livekit.md, run as a reader runs
them against a real server: only the server address is swapped for a live one's, and
a deprecated call in the example's own code fails (the suite turns warnings into
errors; a warning raised for the example's line is attributed to the example)."""

from __future__ import annotations

import re
import wave
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.config import Settings
from tests.live import LiveServer, run_live_server

ROOT = Path(__file__).resolve().parents[2]
#: The address the examples are written for (a server started with `make serve`).
DOC_URL = "ws://localhost:8000/v1/stream"


@pytest.fixture(scope="module")
def espeak() -> Iterator[LiveServer]:
    with run_live_server(Settings(engine="espeak")) as live:
        yield live


def runnable_example(doc: str) -> str:
    """The one ```python block of docs/``doc`` that runs by itself (``asyncio.run``),
    preceded by blank lines so that a traceback's line numbers are the document's."""
    text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
    blocks = [
        (text.count("\n", 0, m.start(1)), m.group(1))
        for m in re.finditer(r"^```python\n(.*?)^```", text, re.M | re.S)
    ]
    (runnable,) = [(line, block) for line, block in blocks if "asyncio.run(main())" in block]
    return "\n" * runnable[0] + runnable[1]


def run_example(doc: str, url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Execute the example as a script in ``tmp_path`` against ``url``."""
    source = runnable_example(doc)
    assert source.count(DOC_URL) == 1, f"docs/{doc}: the example should connect to {DOC_URL}"
    code = compile(source.replace(DOC_URL, url), f"docs/{doc}", "exec")
    monkeypatch.chdir(tmp_path)
    exec(code, {"__name__": "docs_example"})


def test_the_pipecat_example_speaks_both_turns_with_the_current_api(
    espeak: LiveServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/pipecat.md's pipeline, on pipecat's current (not deprecated) API, writes both
    turns' audio to pipecat.wav and prints their words as heard."""
    pytest.importorskip("pipecat")
    run_example("pipecat.md", espeak.ws_url, tmp_path, monkeypatch)
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1] == "你好，欢迎使用流式语音合成。今天天气很好。"
    with wave.open(str(tmp_path / "pipecat.wav")) as wav:
        assert (wav.getnchannels(), wav.getsampwidth(), wav.getframerate()) == (1, 2, 24000)
        assert wav.getnframes() / 24000 > 2.0


def test_the_livekit_example_prints_an_aligned_transcript(
    espeak: LiveServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/livekit.md's stream, run as written, prints each unit of the text with its
    time, in order, then the seconds of audio it received."""
    pytest.importorskip("livekit.agents")
    run_example("livekit.md", espeak.ws_url, tmp_path, monkeypatch)
    lines = capsys.readouterr().out.strip().splitlines()
    timed = [re.fullmatch(r"\s*(\d+\.\d\d)s (.+)", line) for line in lines[:-1]]
    assert all(timed), lines
    starts = [float(m.group(1)) for m in timed if m]
    assert starts == sorted(starts) and starts[0] == 0.0
    assert "".join(m.group(2) for m in timed if m) == "你好，欢迎使用流式语音合成。"
    seconds = re.fullmatch(r"(\d+\.\d\d) s of audio", lines[-1])
    assert seconds and float(seconds.group(1)) > 1.0
