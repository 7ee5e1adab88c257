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
        "invalid settings: log_level must be debug, info, warning, error or critical, not "
        "'bogus' (--log-level, TTS_LOG_LEVEL)"
    ]


def test_download_weights_without_network_is_one_clear_line() -> None:
    # A closed local port stands for "no network" (and never downloads a gigabyte).
    result = run(
        "download-weights", "/tmp/unused-weights", env={"HF_ENDPOINT": "http://127.0.0.1:9"}
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot download 2Noise/ChatTTS" in lines[0], result.stderr


def test_download_weights_offline_names_the_doc_section_with_the_copy_steps() -> None:
    """The offline failure points to a section of the docs that exists and carries the
    steps to copy the weights by hand (the nine files, each checked)."""
    from server.engines.chattts.checkpoint import ASSET_FILES
    from tests.test_docs_truth import ROOT, heading_anchors

    result = run(
        "download-weights", "/tmp/unused-weights", env={"HF_ENDPOINT": "http://127.0.0.1:9"}
    )
    named = re.findall(r"(docs/[\w-]+\.md)#([\w-]+)", result.stderr)
    [(doc, anchor)] = named
    path = ROOT / doc
    assert path.exists() and anchor in heading_anchors(path), named
    section = path.read_text(encoding="utf-8").split("\n## ")
    [steps] = [s for s in section if re.sub(r"[^\w\- ]", "", s.splitlines()[0].lower())
               .replace(" ", "-") == anchor]  # fmt: skip
    assert "download-weights" in steps and "tar " in steps
    assert all(f"`{name}`" in steps for name in ASSET_FILES), ASSET_FILES


def test_healthcheck_follows_the_port_the_settings_give() -> None:
    from server.config import Settings
    from tests.live import run_live_server

    with run_live_server(Settings(engine="espeak")) as live:
        port = live.base_url.rsplit(":", 1)[1]
        assert run("healthcheck", env={"TTS_PORT": port}).returncode == 0
        assert run("healthcheck", "--port", port).returncode == 0
    refused = run("healthcheck", env={"TTS_PORT": "9"})
    assert refused.returncode == 1 and refused.stderr.startswith("unhealthy:")


COMMANDS = ("serve", "preview", "make-checkpoint", "healthcheck", "download-weights")


def test_an_unknown_option_without_a_command_names_it_and_lists_the_commands() -> None:
    """`chattts-stream --bogus` says the option is unknown and lists every command."""
    result = run("--bogus")
    assert result.returncode == 2
    assert "unknown option --bogus" in result.stderr
    assert "arguments are required" not in result.stderr
    listed = result.stderr.split("commands:", 1)[1]
    assert all(f"\n  {command} " in listed for command in COMMANDS), result.stderr


def test_no_command_says_so_and_lists_the_commands() -> None:
    """A bare `chattts-stream` says a command is missing and lists every command."""
    result = run()
    assert result.returncode == 2
    assert "no command given" in result.stderr
    listed = result.stderr.split("commands:", 1)[1]
    assert all(f"\n  {command} " in listed for command in COMMANDS), result.stderr


def test_an_unknown_flag_of_a_command_is_reported_by_that_command() -> None:
    """`chattts-stream serve --bogus` names the flag and points at serve's own help."""
    result = run("serve", "--bogus")
    assert result.returncode == 2
    assert "chattts-stream serve: error: unrecognized arguments: --bogus" in result.stderr
    assert "chattts-stream serve --help" in result.stderr
