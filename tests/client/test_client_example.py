"""The client example that speaks a reply while it is still being written
(client/examples/speak_while_streaming.py), run as a user runs it, against a real
server: to a growing WAV file, to a player through a pipe (real ffmpeg, the documented
input options), and refused."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
import wave
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "client" / "examples" / "speak_while_streaming.py"
SUMMARY = re.compile(
    r"first audio after (\d+) of (\d+) text pieces .*; (\d+) samples .* written to .*, "
    r"(\d+) sent by the server"
)
#: The input options docs/protocol.md gives ffplay, read here by ffmpeg.
PLAYER_INPUT = ["-f", "s16le", "-ar", "24000", "-ch_layout", "mono", "-i", "-"]


@pytest.fixture(scope="module")
def espeak() -> Iterator[LiveServer]:
    with run_live_server(Settings(engine="espeak")) as live:
        yield live


def example(url: str, *args: str) -> list[str]:
    return [sys.executable, str(EXAMPLE), "--url", url, "--delay-ms", "60", *args]


def summary(stderr: str) -> tuple[int, int, int, int]:
    """(pieces sent at the first audio, pieces in all, samples written, server's samples)."""
    found = SUMMARY.search(stderr)
    assert found, stderr[-2000:]
    first, total, written, sent = (int(g) for g in found.groups())
    return first, total, written, sent


@pytest.mark.live
def test_audio_is_written_while_the_text_is_still_being_sent(
    espeak: LiveServer, tmp_path: Path
) -> None:
    """The first audio arrives before the last text piece is sent; the WAV is playable
    while it grows (its header never claims more than is written) and ends holding
    every sample the server sent."""
    out = tmp_path / "reply.wav"
    run = subprocess.Popen(
        example(espeak.ws_url, "--out", str(out)), stderr=subprocess.PIPE, text=True
    )
    growing: list[tuple[int, int]] = []  # (frames the header claims, bytes of data)
    deadline = time.monotonic() + TIMEOUT_S
    while run.poll() is None and time.monotonic() < deadline:
        if out.exists() and out.stat().st_size > 44:
            with wave.open(str(out)) as wav:
                growing.append((wav.getnframes(), out.stat().st_size - 44))
        time.sleep(0.05)
    _, stderr = run.communicate(timeout=TIMEOUT_S)
    assert run.returncode == 0, stderr[-2000:]
    first, total, written, sent = summary(stderr)
    assert 0 < first < total
    assert written == sent > 0
    with wave.open(str(out)) as wav:
        assert (wav.getnchannels(), wav.getsampwidth(), wav.getframerate()) == (1, 2, 24000)
        assert wav.getnframes() == sent
    assert any(0 < frames < sent for frames, _ in growing)  # readable before the end
    assert all(frames * 2 <= data for frames, data in growing)


@pytest.mark.live
def test_raw_pcm_on_stdout_plays_through_a_pipe(espeak: LiveServer, tmp_path: Path) -> None:
    """`--out -` piped into ffmpeg with the documented player input options decodes to
    every sample the server sent."""
    decoded = tmp_path / "decoded.wav"
    player = subprocess.Popen(
        ["ffmpeg", "-nostdin", "-loglevel", "error", *PLAYER_INPUT, "-y", str(decoded)],
        stdin=subprocess.PIPE,
    )
    assert player.stdin is not None
    run = subprocess.run(
        example(espeak.ws_url, "--out", "-"),
        stdout=player.stdin, stderr=subprocess.PIPE, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    player.stdin.close()
    assert player.wait(TIMEOUT_S) == 0
    assert run.returncode == 0, run.stderr[-2000:]
    first, total, written, sent = summary(run.stderr)
    assert first < total and written == sent > 0
    with wave.open(str(decoded)) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getnframes()) == (24000, 1, sent)


@pytest.mark.live
def test_a_refused_token_exits_2_with_what_to_do(tmp_path: Path) -> None:
    """Against a server with tokens, a wrong --token: exit status 2 and the advice to pass
    the right one (the client's AuthError), not a traceback."""
    with run_live_server(Settings(engine="espeak", tokens=("s3cret",))) as live:
        refused = subprocess.run(
            example(live.ws_url, "--token", "wrong", "--out", str(tmp_path / "no.wav")),
            capture_output=True, text=True, timeout=TIMEOUT_S,
        )  # fmt: skip
        spoken = subprocess.run(
            example(live.ws_url, "--token", "s3cret", "--out", str(tmp_path / "yes.wav")),
            capture_output=True, text=True, timeout=TIMEOUT_S,
        )  # fmt: skip
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "refused the token" in refused.stderr and "pass --token" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not (tmp_path / "no.wav").exists()  # no audio came: no file
    assert spoken.returncode == 0 and summary(spoken.stderr)[3] > 0


def closed_port_url() -> str:
    """A WebSocket URL where nothing listens (a port the OS just handed out, closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"ws://127.0.0.1:{port}/v1/stream"


@pytest.mark.parametrize("out", ["reply.wav", "-"])
def test_no_server_is_one_line_exit_1_and_no_file(tmp_path: Path, out: str) -> None:
    """With nothing listening: exit status 1, one line naming the URL and what to do, no
    traceback, and nothing written (no WAV file, nothing on stdout)."""
    url = closed_port_url()
    run = subprocess.run(
        example(url, "--out", out), cwd=tmp_path, capture_output=True, timeout=TIMEOUT_S
    )
    stderr = run.stderr.decode()
    assert run.returncode == 1, stderr
    assert stderr.strip().splitlines() == [stderr.strip()], stderr
    assert f"cannot reach the server at {url}" in stderr and "make serve" in stderr
    assert run.stdout == b"" and list(tmp_path.iterdir()) == []


def test_an_out_file_that_cannot_be_written_fails_before_connecting(tmp_path: Path) -> None:
    """--out in a folder that does not exist: one line saying so and exit status 1, before
    any connection is tried (nothing listens at the URL either)."""
    out = tmp_path / "missing" / "reply.wav"
    run = subprocess.run(
        example(closed_port_url(), "--out", str(out)),
        capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    assert run.returncode == 1
    assert run.stderr.strip() == f"cannot write {out}: not a file in an existing folder"


def test_help_shows_every_option_with_its_default() -> None:
    """-h lists each option with its default, the URL of a local `make serve` first."""
    run = subprocess.run([sys.executable, str(EXAMPLE), "-h"], capture_output=True, text=True,
                         timeout=TIMEOUT_S)  # fmt: skip
    assert run.returncode == 0
    options = re.split(r"\n  (?=--)", run.stdout.split("options:", 1)[1])[1:]
    assert [o.split()[0] for o in options] == [
        "--url", "--token", "--voice", "--seed", "--sample-rate", "--delay-ms", "--text", "--out",
    ]  # fmt: skip
    for option in options:
        assert "(default:" in option, option
    flat = " ".join(run.stdout.split())
    for shown in ("ws://localhost:8000/v1/stream", "reply.wav", "24000", "40.0"):
        assert f"(default: {shown})" in flat
