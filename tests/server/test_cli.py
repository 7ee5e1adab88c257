"""The command line as an operator meets it: help per group, version, usage errors."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from server import __version__
from server.config_input import build_settings

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


def test_gpt_cache_static_with_batching_is_refused_in_one_line() -> None:
    """--gpt-cache static (flag or TTS_GPT_CACHE) with batching on (the default
    --max-batch 16): start-up stops with one line naming both settings' flags and
    variables and what to do; with --max-batch 1 the same flag passes the check."""
    for args, env in ((["--gpt-cache", "static"], {}), ([], {"TTS_GPT_CACHE": "static"})):
        result = run("serve", *args, env=env)
        assert result.returncode != 0
        (line,) = result.stderr.strip().splitlines()
        for needle in ("gpt_cache static", "--gpt-cache, TTS_GPT_CACHE",
                       "--max-batch, TTS_MAX_BATCH", "set max_batch 1"):  # fmt: skip
            assert needle in line, (needle, line)
    from server.cli import parse

    args = parse(["serve", "--gpt-cache", "static", "--max-batch", "1"])
    settings = build_settings(args, {})
    assert settings.chattts.gpt_cache == "static" and settings.max_batch == 1


def test_preview_help_lists_only_what_preview_uses() -> None:
    """preview --help: its text, --mode and the four settings it reads (segmenting and
    text), none of the server's (port, batching, voices, tokens); the flags work."""
    out = run("preview", "--help").stdout
    for flag in ("--mode", "--segment-max-chars", "--first-segment-min-chars",
                 "--allow-control-tags", "--text-cache-dir"):  # fmt: skip
        assert flag in out, flag
    for flag in ("--port", "--max-batch", "--voices-store", "--token-file", "--log-level",
                 "--model-dir", "--max-streams"):  # fmt: skip
        assert flag not in out, flag
    text = "今天天气很好，我们一起去公园散步吧。"
    whole = json.loads(run("preview", "--mode", "http", text).stdout)["segments"]
    cut = json.loads(run("preview", "--mode", "http", "--segment-max-chars", "8", text).stdout)
    assert len(whole) == 1 and len(cut["segments"]) > 1


def test_a_misspelt_variable_is_named_at_start_with_the_closest_setting(tmp_path: Path) -> None:
    """serve with TTS_MAX_STREAM (for TTS_MAX_STREAMS) and TTS_SECRET_THING set: one
    warning each, naming the variable and, where one is close, the setting meant; no
    value is logged; the server starts all the same; setup.sh's variables are not named."""
    env = {"TTS_MAX_STREAM": "7391", "TTS_SECRET_THING": "hunter2", "TTS_TORCH_SPEC": "torch",
           "XDG_DATA_HOME": str(tmp_path)}  # fmt: skip
    command = [*CLI, "serve", "--engine", "espeak", "--port", "0", "--warm-up", "false"]
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, **env}) as server:  # fmt: skip
        try:
            assert server.stderr is not None
            lines = []
            for line in server.stderr:
                lines.append(line)
                if "listening on" in line:
                    break
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(60)
    log = "".join(lines)
    assert "TTS_MAX_STREAM is not a setting (did you mean TTS_MAX_STREAMS?): ignored" in log, log
    assert "TTS_SECRET_THING is not a setting: ignored" in log
    assert "7391" not in log and "hunter2" not in log and "TTS_TORCH_SPEC" not in log
    assert "listening on" in log


def test_make_checkpoint_prints_its_two_lines_and_no_progress_bar(tmp_path: Path) -> None:
    """make-checkpoint: what it wrote and that its audio is noise, on stdout; nothing
    on stderr (transformers' "Writing model shards" bar is kept out)."""
    result = run("make-checkpoint", str(tmp_path / "ck"))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("wrote a tiny ChatTTS checkpoint")
    assert "%|" not in result.stdout and "shards" not in result.stdout
