"""Every example in README.md, client/README.md and docs/*.md, run as a reader runs it
against a real server, or listed in NOT_RUN with why it cannot run here (a GPU, a
cluster, the internet) and where its parts are tested instead.

Shell commands run in bash from an empty folder, as pasted: only the server address is
swapped (``localhost:8000`` for a live server's; the client example's default URL
through ``$CHATTTS_URL``), the checkout's venv is first on ``PATH``, and ``curl`` fails
on an HTTP error status. Python examples run as scripts (a deprecated call fails: the
suite turns warnings into errors)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import subprocess
import sys
import wave
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from tests.conftest import fixed_length_chattts

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", "client/README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]  # fmt: skip
#: The address the examples are written for (a server started with `make serve`).
LOCAL = "localhost:8000"
DOC_URL = f"ws://{LOCAL}/v1/stream"
#: Languages of blocks that are examples to run (others: diagrams, logs, transcripts).
RUNNABLE = ("sh", "python", "json")
#: Bash's longest single argument (MAX_ARG_STRLEN): a clip's base64 past it cannot be
#: put on a command line ("Argument list too long").
MAX_ARG_BYTES = 131072


@dataclass(frozen=True)
class Block:
    """A fenced code block of a document."""

    doc: str
    line: int  # of the opening fence, 1-based
    lang: str
    text: str

    def units(self) -> list[str]:
        """What a reader runs one at a time: a shell block's commands (a line continued
        with a backslash joined, comments and blank lines left out), else the block."""
        if self.lang != "sh":
            return [self.text]
        joined = re.sub(r"\\\n\s*", " ", self.text)
        return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]  # fmt: skip


@cache
def blocks() -> tuple[Block, ...]:
    found = []
    for doc in DOCS:
        text = (ROOT / doc).read_text(encoding="utf-8")
        for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.M | re.S):
            found.append(Block(doc, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2)))
    return tuple(found)


def block(doc: str, marker: str) -> Block:
    """The one example block (sh, python, JSON) of ``doc`` that contains ``marker``."""
    (found,) = [b for b in blocks() if b.doc == doc and b.lang in RUNNABLE and marker in b.text]
    return found


def command(doc: str, marker: str) -> str:
    """The one shell command of ``doc`` that contains ``marker``."""
    (found,) = {u for b in blocks() if b.doc == doc and b.lang == "sh" for u in b.units() if marker in u}  # fmt: skip
    return found


# --- which examples run where ----------------------------------------------------------

# fmt: off
#: (document, a marker in the command or block) -> the test below that runs it.
RUN = {
    ("README.md", "-o hello.wav"): "test_the_quickstart_writes_speech_to_a_wav_file",
    ("README.md", "asyncio.run(main())"): "test_the_python_client_examples_print_what_was_heard",
    ("client/README.md", "asyncio.run(main())"): "test_the_python_client_examples_print_what_was_heard",
    ("README.md", "--out reply.wav"): "test_the_example_client_writes_a_playable_reply",
    ("client/README.md", "--out reply.wav"): "test_the_example_client_writes_a_playable_reply",
    ("docs/protocol.md", "--out reply.wav"): "test_the_example_client_writes_a_playable_reply",
    ("docs/http-api.md", "from openai import OpenAI"): "test_the_openai_example_writes_the_audio",
    ("docs/http-api.md", '"sample_rate": 24000'): "test_the_tts_body_example_is_spoken",
    ("docs/http-api.md", "-o hello.ulaw"): "test_the_ulaw_example_writes_g711_at_8_khz",
    ("docs/http-api.md", "/v1/voices"): "test_the_voice_examples_run_as_written",
    ("docs/http-api.md", "base64 -w0 clip.wav"): "test_the_voice_examples_run_as_written",
    ("docs/http-api.md", "< speaker.txt"): "test_the_voice_examples_run_as_written",
    ("docs/http-api.md", "-o cloned.wav"): "test_the_voice_examples_run_as_written",
    ("docs/http-api.md", '"code": "voice_not_found"'): "test_the_error_example_is_what_the_server_sends",
    ("docs/protocol.md", '{"type":"ready"'): "test_the_ready_example_has_the_fields_the_server_sends",
    ("docs/text.md", "preview"): "test_the_preview_examples_show_the_segments",
    ("docs/pipecat.md", "asyncio.run(main())"): "test_the_pipecat_example_speaks_both_turns_with_the_current_api",
    ("docs/livekit.md", "asyncio.run(main())"): "test_the_livekit_example_prints_an_aligned_transcript",
    ("docs/livekit.md", "AgentSession("): "test_the_livekit_agent_fragment_builds_a_session",
}

_SETUP = "sets up the venv (minutes, apt and PyPI); tests/scripts/test_setup.py runs scripts/setup.sh"
_INSTALL = "installs into the environment; scripts/setup.sh installs the client the same way (-e ./client)"
_WEIGHTS = "needs internet access (Hugging Face); tests/server/test_cli.py pins its offline failure"
_REAL_MODEL = "a server on the real ChatTTS weights, running until stopped; the tests serve a generated checkpoint"
_GPU = "needs an NVIDIA GPU and CUDA torch; bench/gpu_check.sh runs on a lent GPU machine"
_PLAYER = "plays to a sound device; test_client_example.py pipes the same stdout into ffmpeg with ffplay's input options"
_CLUSTER = "needs a Kubernetes cluster; tests/deploy/test_manifests.py checks the manifests it applies"
_BENCH = "a benchmark of minutes; its --smoke run is in tests/bench"

#: (document, marker) -> why the examples it matches do not run here.
NOT_RUN = {
    ("README.md", "make serve    #"): _SETUP + "; a fresh clone's run is the release check",
    ("README.md", "make test     #"): _SETUP + "; it runs this suite",
    ("README.md", "download-weights"): _WEIGHTS,
    ("README.md", 'make serve ARGS="--model-dir'): _REAL_MODEL,
    ("README.md", "pip install"): _INSTALL,
    ("README.md", "ffplay"): _PLAYER,
    ("README.md", "aplay"): _PLAYER,
    ("client/README.md", "pip install"): _INSTALL,
    ("client/README.md", "ffplay"): _PLAYER,
    ("client/README.md", "aplay"): _PLAYER,
    ("docs/protocol.md", "pip install"): _INSTALL,
    ("docs/protocol.md", "ffplay"): _PLAYER,
    ("docs/protocol.md", "aplay"): _PLAYER,
    ("docs/pipecat.md", "pip install"): _INSTALL,
    ("docs/livekit.md", "pip install"): _INSTALL,
    ("docs/gpu.md", "TTS_TORCH_SPEC="): _GPU + " (a CUDA build of torch from its index)",
    ("docs/gpu.md", "torch.cuda.is_available()"): _GPU,
    ("docs/gpu.md", "download-weights"): _WEIGHTS,
    ("docs/gpu.md", "--device cuda"): _GPU,
    ("docs/gpu.md", "docker "): _GPU + "; and Docker with the NVIDIA Container Toolkit",
    ("docs/gpu.md", "gpu_check.sh"): _GPU,
    ("docs/gpu.md", "gpu_batch.py"): _GPU,
    ("docs/gpu.md", "bench/load.py"): _BENCH + " (tests/bench/test_load.py), against a GPU server",
    ("docs/http-api.md", "bench/http_streaming.py"): _BENCH + " (tests/bench/test_http_streaming.py)",
    ("docs/operations.md", "kubectl"): _CLUSTER,
    ("docs/operations.md", "docker compose"): "needs Docker; tests/deploy checks the compose files",
    ("docs/operations.md", "download-weights"): _WEIGHTS,
    ("docs/operations.md", "chattts-weights.tar.gz"): "moves the downloaded weights to another machine, into /models (root)",
    ("docs/operations.md", "chmod -R a+rX /models"): "needs root and the weights in /models",
    ("docs/operations.md", "--model-dir /models/chattts"): _REAL_MODEL,
    ("docs/operations.md", "bench/load.py"): _CLUSTER + "; " + _BENCH + " (tests/bench/test_load.py)",
    ("docs/troubleshooting.md", "download-weights"): _WEIGHTS,
    ("docs/troubleshooting.md", "serve --model-dir"): _REAL_MODEL,
    ("docs/scaling.md", '"type":"resumed"'): "an event the Python client makes; tests/client/test_resume.py checks its fields",
    ("docs/streaming-decoder.md", '"bench": "stream_decoder"'): "a benchmark's output; tests/bench/test_stream_decoder.py runs it",
    ("docs/text.md", '"rule": "lexicon"'): "rewrites as the preview prints them; tests/server/test_lexicon.py checks their fields",
    ("docs/telephony.md", "twilio_media_streams.py --port"): "waits for Twilio's calls until stopped; tests/client/test_telephony_example.py drives its handle_call with Twilio's messages",
    ("docs/home-assistant.md", "--wyoming-port 10200"): _REAL_MODEL + "; tests/server/wyoming/test_wyoming.py serves --wyoming-port on a generated one",
}
# fmt: on


def test_every_example_is_run_here_or_says_why_not() -> None:
    """Each shell command and each python or JSON block of the docs is matched by exactly
    one entry of RUN (a test below runs it) or NOT_RUN (with the reason); every entry
    matches an example that still exists, and every RUN test exists."""
    entries = {**RUN, **NOT_RUN}
    assert not set(RUN) & set(NOT_RUN)
    used: set[tuple[str, str]] = set()
    unclassified, ambiguous = [], []
    for b in blocks():
        if b.lang not in RUNNABLE:
            continue
        for unit in b.units():
            matches = [key for key in entries if key[0] == b.doc and key[1] in unit]
            used.update(matches)
            if not matches:
                unclassified.append(f"{b.doc}:{b.line}: {unit[:80]}")
            elif len(matches) > 1:
                ambiguous.append(f"{b.doc}:{b.line}: {unit[:80]} {matches}")
    assert not unclassified, "examples neither run nor listed in NOT_RUN:\n" + "\n".join(unclassified)  # fmt: skip
    assert not ambiguous, "\n".join(ambiguous)
    assert set(entries) == used, f"entries matching no example: {set(entries) - used}"
    missing = {test for test in RUN.values() if not callable(globals().get(test))}
    assert not missing, missing


def test_no_shell_example_is_left_unfinished() -> None:
    """No command has a placeholder to fill in (a literal ``...``) or a dangling line."""
    for b in blocks():
        if b.lang == "sh":
            for unit in b.units():
                assert "..." not in unit, f"{b.doc}:{b.line}: {unit}"
                assert not unit.rstrip().endswith(("\\", "|", "&&")), f"{b.doc}:{b.line}: {unit}"


def test_blocks_that_hold_commands_are_marked_as_shell() -> None:
    """A block without a language (shown as text) holds no command a reader would paste:
    those are marked ``sh`` and so run above or listed in NOT_RUN."""
    programs = r"(curl|chattts-stream|python3?|pip|make|kubectl|docker|jq|\.venv/bin/\S+)\s"
    for b in blocks():
        if b.lang in ("", "text"):
            for line in b.text.splitlines():
                assert not re.match(programs, line.strip()), f"{b.doc}:{b.line}: {line}"


# --- running them ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def espeak() -> Iterator[LiveServer]:
    with run_live_server(Settings(engine="espeak")) as live:
        yield live


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty folder to run commands in, with the checkout's client/ linked in (and
    client/examples/ as examples/, for client/README.md's commands): what the examples
    write lands here, never in the checkout."""
    (tmp_path / "client").symlink_to(ROOT / "client")
    (tmp_path / "examples").symlink_to(ROOT / "client" / "examples")
    return tmp_path


@dataclass(frozen=True)
class ShellRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def statuses(self) -> list[int]:
        """The HTTP status of each curl, in order."""
        return [int(s) for s in re.findall(r"^HTTP (\d{3})$", self.stderr, re.M)]


def shell(script: str, cwd: Path, live: LiveServer, env: dict[str, str] | None = None) -> ShellRun:
    """``script`` as a reader pastes it into bash against ``live`` (see the module
    docstring): it stops at the first failing command."""
    prelude = (
        "set -euo pipefail\n"
        'curl() { command curl --fail-with-body -w "%{stderr}HTTP %{http_code}\\n" "$@"; }\n'
    )
    address = live.base_url.removeprefix("http://")
    done = subprocess.run(
        ["bash", "-c", prelude + script.replace(LOCAL, address)],
        cwd=cwd, capture_output=True, timeout=TIMEOUT_S * 4,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
             "CHATTTS_URL": live.ws_url, **(env or {})},
    )  # fmt: skip
    run = ShellRun(done.returncode, done.stdout.decode(), done.stderr.decode())
    assert run.returncode == 0, f"{script}\n--- stderr:\n{run.stderr[-3000:]}"
    return run


def read_wav(path: Path) -> tuple[int, int, float]:
    """(channels, sample rate, seconds) of a WAV file, read back by the wave module."""
    with wave.open(str(path)) as wav:
        return wav.getnchannels(), wav.getframerate(), wav.getnframes() / wav.getframerate()


def exec_example(
    source: str, swap: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """Execute a python example as a script in ``tmp_path``, each address in ``swap``
    (written -> live) swapped, each exactly once; its globals."""
    for written, live in swap.items():
        assert source.count(written) == 1, f"the example should name {written} once"
        source = source.replace(written, live)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    exec(compile(source, "docs example", "exec"), namespace)
    return namespace


def example_source(doc: str, marker: str) -> str:
    """The block, after blank lines that keep a traceback's line numbers the document's."""
    found = block(doc, marker)
    return "\n" * found.line + found.text


@pytest.mark.live
def test_the_quickstart_writes_speech_to_a_wav_file(espeak: LiveServer, workdir: Path) -> None:
    """README's curl to /v1/tts writes hello.wav: 24 kHz mono speech of the sentence."""
    run = shell(command("README.md", "-o hello.wav"), workdir, espeak)
    assert run.statuses == [200]
    channels, rate, seconds = read_wav(workdir / "hello.wav")
    assert (channels, rate) == (1, 24000) and seconds > 1.0


@pytest.mark.live
@pytest.mark.parametrize("doc", ["README.md", "client/README.md"])
def test_the_python_client_examples_print_what_was_heard(
    doc: str,
    espeak: LiveServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The client example of README.md and of client/README.md speaks its text and prints
    what a listener heard in its first second or so: the start of that text."""
    source = example_source(doc, "asyncio.run(main())")
    exec_example(source, {DOC_URL: espeak.ws_url}, tmp_path, monkeypatch)
    heard = capsys.readouterr().out.strip().splitlines()[-1]
    assert heard and "你好，欢迎使用流式语音合成。".startswith(heard), heard


@pytest.mark.live
@pytest.mark.parametrize("doc", ["README.md", "client/README.md", "docs/protocol.md"])
def test_the_example_client_writes_a_playable_reply(
    doc: str, espeak: LiveServer, workdir: Path
) -> None:
    """`python .../speak_while_streaming.py --out reply.wav` as each document writes it:
    a WAV file with every sample the server sent."""
    run = shell(command(doc, "--out reply.wav"), workdir, espeak)
    sent = re.search(
        r"(\d+) samples .* written to reply\.wav, (\d+) sent by the server", run.stderr
    )
    assert sent and sent.group(1) == sent.group(2), run.stderr
    with wave.open(str(workdir / "reply.wav")) as wav:
        assert (wav.getnchannels(), wav.getframerate()) == (1, 24000)
        assert wav.getnframes() == int(sent.group(2)) > 24000


@pytest.mark.live
def test_the_openai_example_writes_the_audio(
    espeak: LiveServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/http-api.md's OpenAI client streams the sentence's PCM into hello.pcm."""
    pytest.importorskip("openai")
    source = example_source("docs/http-api.md", "from openai import OpenAI")
    swap = {f"http://{LOCAL}": espeak.base_url}
    namespace = exec_example(source, swap, tmp_path, monkeypatch)
    namespace["client"].close()  # the example leaves it to the end of the script
    pcm = (tmp_path / "hello.pcm").read_bytes()
    assert len(pcm) % 2 == 0 and len(pcm) > 24000 * 2  # over a second of 16-bit samples
    assert np.abs(np.frombuffer(pcm, "<i2")).max() > 1000  # speech, not silence


@pytest.mark.live
def test_the_tts_body_example_is_spoken(espeak: LiveServer) -> None:
    """The body docs/http-api.md gives for POST /v1/tts is accepted as written: a WAV."""
    body = json.loads(block("docs/http-api.md", '"sample_rate": 24000').text)
    answer = httpx.post(espeak.base_url + "/v1/tts", json=body, timeout=TIMEOUT_S)
    assert answer.status_code == 200, answer.text
    with wave.open(io.BytesIO(answer.content)) as wav:
        assert wav.getframerate() == body["sample_rate"] and wav.getnframes() > 0


@pytest.mark.live
def test_the_ulaw_example_writes_g711_at_8_khz(espeak: LiveServer, workdir: Path) -> None:
    """docs/http-api.md's curl for format ulaw writes raw µ-law that ffmpeg reads as 8 kHz
    speech (one byte a sample, no header)."""
    run = shell(command("docs/http-api.md", "-o hello.ulaw"), workdir, espeak)
    assert run.statuses == [200]
    data = (workdir / "hello.ulaw").read_bytes()
    decoded = subprocess.run(
        ["ffmpeg", "-v", "error", "-f", "mulaw", "-ar", "8000", "-i", "hello.ulaw", "-f", "s16le", "-"],
        cwd=workdir, capture_output=True, check=True, timeout=TIMEOUT_S,
    ).stdout  # fmt: skip
    assert len(decoded) == 2 * len(data) and len(data) > 8000  # over a second at 8 kHz
    assert np.abs(np.frombuffer(decoded, "<i2")).max() > 1000  # speech, not silence


@pytest.mark.live
def test_the_error_example_is_what_the_server_sends(espeak: LiveServer) -> None:
    """docs/http-api.md's error body has the fields, type, param and code the server
    sends for an unknown voice."""
    shown = json.loads(block("docs/http-api.md", '"code": "voice_not_found"').text)["error"]
    answer = httpx.post(espeak.base_url + "/v1/audio/speech", timeout=TIMEOUT_S,
                        json={"model": "tts-1", "voice": "nobody", "input": "你好。"})  # fmt: skip
    sent = answer.json()["error"]
    assert answer.status_code == 400 and set(shown) <= set(sent)
    assert {k: sent[k] for k in ("type", "param", "code")} == {
        k: shown[k] for k in ("type", "param", "code")
    }
    assert "'nobody'" in sent["message"]


@pytest.mark.live
def test_the_ready_example_has_the_fields_the_server_sends(espeak: LiveServer) -> None:
    """docs/protocol.md's `ready` message has exactly the fields (and limits) a server's has."""
    from chattts_client import StreamClient

    async def ready() -> dict[str, Any]:
        async with StreamClient.connect(espeak.ws_url) as client:
            return client.ready

    shown = json.loads(block("docs/protocol.md", '{"type":"ready"').text)
    sent = asyncio.run(ready())
    assert set(shown) == set(sent) and set(shown["limits"]) == set(sent["limits"])
    assert {k: sent[k] for k in ("type", "protocol", "encoding", "channels")} == {
        k: shown[k] for k in ("type", "protocol", "encoding", "channels")
    }


@pytest.mark.live
def test_the_preview_examples_show_the_segments(workdir: Path) -> None:
    """docs/text.md's `chattts-stream preview` commands (the second with the documented
    lexicon file) and its curl (with a token, as written) print the segments as spoken:
    the code read digit by digit, the lexicon's entries applied."""
    (lexicon,) = [b.text for b in blocks() if b.doc == "docs/text.md" and "# our bank's words" in b.text]  # fmt: skip
    (workdir / "lexicon.txt").write_text(lexicon, encoding="utf-8")
    with run_live_server(Settings(engine="espeak", tokens=("s3cret",))) as live:
        run = shell(block("docs/text.md", "chattts-stream preview").text, workdir, live,
                    env={"TOKEN": "s3cret"})  # fmt: skip
    assert run.statuses == [200]
    decoder, printed, at = json.JSONDecoder(), [], 0
    while at < len(run.stdout.rstrip()):
        body, at = decoder.raw_decode(run.stdout, at)
        printed.append(body)
        while at < len(run.stdout) and run.stdout[at].isspace():
            at += 1
    code, with_file, http = printed
    assert "".join(s["spoken"] for s in code["segments"]) == "验证码是八二六四九幺"
    assert "".join(s["spoken"] for s in with_file["segments"]) == "航长说人工智能很强。"
    spoken = "".join(s["spoken"] for s in http["segments"])
    assert http["mode"] == "stream" and spoken == "航长的验证码是八二六四九幺"


# --- the voices: from a seed, a speaker string and a clip, on ChatTTS ------------------


def speech_clip(espeak: LiveServer, seconds: float) -> bytes:
    """A WAV of ``seconds`` of speech by the fallback voice (its sentence repeated)."""
    answer = httpx.post(espeak.base_url + "/v1/tts", timeout=TIMEOUT_S,
                        json={"text": "你好，这是一段用来复制声音的录音。" * 4, "format": "pcm"})  # fmt: skip
    assert answer.status_code == 200
    speech = np.frombuffer(answer.content, "<i2")
    samples = np.resize(speech, int(seconds * 24000))  # repeated to the length asked
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(24000)
        wav.writeframes(samples.tobytes())
    return out.getvalue()


@pytest.mark.live
@pytest.mark.parametrize("clip_s", [10, 25])
def test_the_voice_examples_run_as_written(
    clip_s: int, espeak: LiveServer, tiny_checkpoint: Path, speaker: str, workdir: Path
) -> None:
    """docs/http-api.md's voice commands, in order, on ChatTTS: a voice from a seed, from
    a speaker string kept in a file, from a 10 s and a 25 s reference clip (whose base64
    is far past what a command line takes), spoken with, listed, one deleted."""
    (workdir / "speaker.txt").write_text(speaker + "\n")
    (workdir / "clip.wav").write_bytes(speech_clip(espeak, clip_s))
    assert len((workdir / "clip.wav").read_bytes()) * 4 / 3 > MAX_ARG_BYTES
    settings = Settings(engine="chattts", model_dir=tiny_checkpoint, voices_dir=workdir / "voices")
    with run_live_server(settings, engine=fixed_length_chattts(tiny_checkpoint)) as live:
        run = shell(block("docs/http-api.md", "/v1/voices/narrator").text, workdir, live)
        listed = httpx.get(live.base_url + "/v1/voices", timeout=TIMEOUT_S).json()["data"]
    assert run.statuses == [201, 201, 201, 200, 200, 204]
    made = {v["name"]: v for v in listed if not v["preset"]}
    assert set(made) == {"mine", "cloned"}  # narrator deleted
    assert made["cloned"]["source"] == "clip" and made["cloned"]["transcript"] == "你好世界"
    assert made["mine"]["source"] == "speaker"
    channels, rate, seconds = read_wav(workdir / "cloned.wav")
    assert (channels, rate) == (1, 24000) and seconds > 0.5


# --- the voice agents' examples ---------------------------------------------------------


@pytest.mark.live
def test_the_pipecat_example_speaks_both_turns_with_the_current_api(
    espeak: LiveServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/pipecat.md's pipeline, on pipecat's current (not deprecated) API, writes both
    turns' audio to pipecat.wav and prints their words as heard."""
    pytest.importorskip("pipecat")
    source = example_source("docs/pipecat.md", "asyncio.run(main())")
    exec_example(source, {DOC_URL: espeak.ws_url}, tmp_path, monkeypatch)
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1] == "你好，欢迎使用流式语音合成。今天天气很好。"
    with wave.open(str(tmp_path / "pipecat.wav")) as wav:
        assert (wav.getnchannels(), wav.getsampwidth(), wav.getframerate()) == (1, 2, 24000)
        assert wav.getnframes() / 24000 > 2.0


@pytest.mark.live
def test_the_livekit_example_prints_an_aligned_transcript(
    espeak: LiveServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/livekit.md's stream, run as written, prints each unit of the text with its
    time, in order, then the seconds of audio it received."""
    pytest.importorskip("livekit.agents")
    source = example_source("docs/livekit.md", "asyncio.run(main())")
    exec_example(source, {DOC_URL: espeak.ws_url}, tmp_path, monkeypatch)
    lines = capsys.readouterr().out.strip().splitlines()
    timed = [re.fullmatch(r"\s*(\d+\.\d\d)s (.+)", line) for line in lines[:-1]]
    assert all(timed), lines
    starts = [float(m.group(1)) for m in timed if m]
    assert starts == sorted(starts) and starts[0] == 0.0
    assert "".join(m.group(2) for m in timed if m) == "你好，欢迎使用流式语音合成。"
    seconds = re.fullmatch(r"(\d+\.\d\d) s of audio", lines[-1])
    assert seconds and float(seconds.group(1)) > 1.0


async def test_the_livekit_agent_fragment_builds_a_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/livekit.md's AgentSession line, with its `...` for the reader's STT and LLM,
    builds a session on the installed LiveKit Agents with the plugin as its TTS (in an
    agent's entrypoint: on its event loop)."""
    pytest.importorskip("livekit.agents")
    from chattts_client.livekit import TTS

    source = example_source("docs/livekit.md", "AgentSession(")
    namespace = exec_example(source, {}, tmp_path, monkeypatch)
    assert isinstance(namespace["session"].tts, TTS)
