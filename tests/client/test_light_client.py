"""The light client installs alone, into a fresh venv, and streams from the server."""

from __future__ import annotations

import json
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

from harness.live import run_live_server
from server.config import Settings

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
#: What the light client must never pull in.
HEAVY = {"torch", "chattts", "pynini", "wetextprocessing", "fastapi", "uvicorn", "transformers"}

SCRIPT = """
import asyncio, json, sys
from chattts_client import StreamClient

async def main(url):
    async with StreamClient.connect(url) as tts:
        ctx = await tts.open(voice="alloy", timestamps=True)
        await tts.send_text("你好，世界。", ctx)
        await tts.end(ctx)
        result = await tts.collect(ctx)
    print(json.dumps({"samples": result.samples, "heard": result.spoken_by(10**6),
                      "modules": sorted(m.split(".")[0] for m in sys.modules)}))

asyncio.run(main(sys.argv[1]))
"""


@pytest.mark.slow
def test_the_client_installs_without_the_server_and_streams(tmp_path: Path) -> None:
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    source = tmp_path / "client"  # a copy: pip builds in the source tree (build/, egg-info)
    shutil.copytree(ROOT / "client", source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    python = env / "bin" / "python"
    install = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         str(source)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-2000:]
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format", "json"], capture_output=True, text=True
    )
    installed = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert "chattts-stream-client" in installed and "websockets" in installed
    assert not installed & HEAVY, installed & HEAVY
    assert installed <= {"chattts-stream-client", "websockets", "pip", "setuptools", "wheel"}
    with run_live_server(Settings(engine="espeak")) as live:
        run = subprocess.run(
            [python, "-c", SCRIPT, live.ws_url], capture_output=True, text=True, timeout=120,
            cwd=tmp_path,  # not the repository: nothing of it on the path
        )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout)
    assert out["samples"] > 12000 and out["heard"] == "你好，世界。"
    assert not set(out["modules"]) & {"torch", "numpy", "server", "streaming", "fastapi"}
