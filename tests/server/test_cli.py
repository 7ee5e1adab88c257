"""The command line as an operator meets it: help per group, version, usage errors."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from server import __version__

CLI = [sys.executable, "-m", "server.cli"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=120,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def test_serve_help_is_grouped_and_each_group_fits_a_screen() -> None:
    out = run("serve", "--help").stdout
    groups = re.split(r"\n(?=\S[^\n]*:\n)", out)
    titles = [g.splitlines()[0] for g in groups[1:]]
    for name in ("server", "engine", "limits", "audio", "observability"):
        assert any(t.startswith(name) for t in titles), titles
    for group in groups[1:]:
        assert len(group.splitlines()) <= 40, group.splitlines()[0]
    assert out.splitlines()[0] == "usage: chattts-stream serve [flags]"


def test_version() -> None:
    result = run("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"chattts-stream {__version__}"


def test_a_bad_log_level_is_one_line_not_a_traceback() -> None:
    result = run("serve", "--log-level", "bogus")
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "invalid settings: log_level must be debug, info, warning, error or critical, not 'bogus'"
    ]


def test_download_weights_without_network_is_one_clear_line() -> None:
    # A closed local port stands for "no network" (and never downloads a gigabyte).
    result = run(
        "download-weights", "/tmp/unused-weights", env={"HF_ENDPOINT": "http://127.0.0.1:9"}
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot download 2Noise/ChatTTS" in lines[0], result.stderr


def test_healthcheck_follows_the_port_the_settings_give() -> None:
    from server.config import Settings
    from tests.live import run_live_server

    with run_live_server(Settings(engine="espeak")) as live:
        port = live.base_url.rsplit(":", 1)[1]
        assert run("healthcheck", env={"TTS_PORT": port}).returncode == 0
        assert run("healthcheck", "--port", port).returncode == 0
    refused = run("healthcheck", env={"TTS_PORT": "9"})
    assert refused.returncode == 1 and refused.stderr.startswith("unhealthy:")
