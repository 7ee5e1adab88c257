"""The pronunciation lexicon through the real routes of a real server: the file
(--lexicon), reloaded when it changes and on SIGHUP, a bad new file keeping the old one;
entries per request (/v1/tts, /v1/audio/speech, /v1/preview) and per WebSocket context;
and the preview naming the rule or the entry behind each rewrite."""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from chattts_client import RequestError, StreamClient

from server.cli import main as cli_main
from server.config import Settings
from server.config_input import build_settings
from tests.live import TIMEOUT_S, LiveServer, run_live_server

ROOT = Path(__file__).resolve().parents[2]


def write(path: Path, text: str) -> None:
    """Write ``text`` with a modification time one second on: a change the server sees
    even on a file system that keeps whole seconds."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(before + 1_000_000_000, before + 1_000_000_000))


def preview(http: httpx.Client, text: str, **extra: Any) -> list[dict[str, Any]]:
    answer = http.post("/v1/preview", json={"text": text, **extra})
    assert answer.status_code == 200, answer.text
    return [rewrite for segment in answer.json()["segments"] for rewrite in segment["rewrites"]]


def spoken(http: httpx.Client, text: str, **extra: Any) -> str:
    answer = http.post("/v1/preview", json={"text": text, **extra})
    assert answer.status_code == 200, answer.text
    return "".join(segment["spoken"] for segment in answer.json()["segments"])


@pytest.fixture()
def lexicon_file(tmp_path: Path) -> Path:
    path = tmp_path / "lexicon.tsv"
    write(path, "# the bank's words\n行长\t航长\n")
    return path


@pytest.fixture()
def server(lexicon_file: Path) -> Iterator[LiveServer]:
    settings = Settings(engine="espeak", lexicon=lexicon_file, lexicon_check_s=0.05)
    with run_live_server(settings) as live:
        yield live


def wait_for(check: Any, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_file_entries_apply_and_reload_when_the_file_changes(
    server: LiveServer, lexicon_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The file's entry is applied before the rules and named in the preview; an edit is
    picked up without a restart; a bad edit keeps the lexicon in use and logs the line."""
    with httpx.Client(base_url=server.base_url, timeout=TIMEOUT_S) as http:
        assert preview(http, "行长说AI很强。") == [
            {"start": 0, "end": 2, "text": "行长", "spoken": "航长", "rule": "lexicon",
             "origin": f"{lexicon_file}:2"},
        ]  # fmt: skip
        write(lexicon_file, "行长\t航长\nAI=人工智能\n")
        wait_for(lambda: spoken(http, "行长说AI很强。") == "航长说人工智能很强。", "reload")
        with caplog.at_level(logging.ERROR, logger="server.lexicon"):
            write(lexicon_file, "行长\t航长\nAI 人工智能\n")
            # The file is looked at as segments are prepared: preview until it is.
            wait_for(
                lambda: bool(spoken(http, "行长")) and "line 2: no separator" in caplog.text,
                "the bad line logged",
            )
        assert spoken(http, "行长说AI很强。") == "航长说人工智能很强。"
        assert "the previous one (2 entries) stays in use" in caplog.text


def test_request_entries_win_over_the_file(server: LiveServer) -> None:
    """/v1/tts speaks with the request's entries (over the file's); /v1/audio/speech takes
    them as an extension field (an entry for an emoji: nothing removed any more)."""
    with httpx.Client(base_url=server.base_url, timeout=TIMEOUT_S) as http:
        answer = http.post(
            "/v1/tts",
            json={
                "text": "行长说G7很快。",
                "format": "json",
                "lexicon": {"行长": "杭长", "G7": "G 7"},
            },
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["spoken"] == "杭长说G 七很快。"
        body = {"model": "tts-1", "input": "好的😀", "voice": "alloy", "response_format": "wav"}
        plain = http.post("/v1/audio/speech", json=body)
        with_entry = http.post("/v1/audio/speech", json={**body, "lexicon": {"😀": "笑脸"}})
    assert plain.status_code == with_entry.status_code == 200
    assert plain.headers["X-TTS-Removed-Count"] == "1"
    assert with_entry.headers.get("X-TTS-Removed-Count", "") == ""
    assert len(with_entry.content) > len(plain.content)  # 笑脸 is said


@pytest.mark.parametrize(
    ("lexicon", "says"),
    [
        ({"": "空"}, "the written form is empty"),
        ({"好": ""}, "the spoken form is empty"),
        ({"好": "😀"}, "has nothing to say"),
        ({"好": "很" * 200}, "longer than 128 characters"),
        ({f"词{k}": "字" for k in range(101)}, "more than 100 entries"),
        ({"好": 3}, "valid string"),
    ],
)
def test_bad_request_entries_are_refused(server: LiveServer, lexicon: Any, says: str) -> None:
    """A request with a bad entry is a 400 naming it (and the limit), before any work."""
    with httpx.Client(base_url=server.base_url, timeout=TIMEOUT_S) as http:
        for route, body in [
            ("/v1/tts", {"text": "你好"}),
            ("/v1/preview", {"text": "你好"}),
            ("/v1/audio/speech", {"model": "tts-1", "input": "你好", "voice": "alloy"}),
        ]:
            answer = http.post(route, json={**body, "lexicon": lexicon})
            assert answer.status_code in (400, 422), (route, answer.text)
            error = answer.json()["error"]
            assert says in error["message"], (route, error)
            assert error["param"] in ("lexicon", None) or "lexicon" in str(error["param"])


async def test_context_entries_over_the_websocket(server: LiveServer) -> None:
    """A context's ``start`` brings its own entries (the Python client's ``lexicon``); a
    bad one is refused with invalid_lexicon and the connection goes on."""
    async with StreamClient.connect(server.ws_url) as client:
        ctx = await client.open(lexicon={"AI": "人工智能"})
        await client.send_text("行长说AI很强。", ctx)
        await client.end(ctx)
        result = await client.collect(ctx, timeout_s=TIMEOUT_S)
        with pytest.raises(RequestError) as refused:
            await client.open("bad", lexicon={"好": "😀"})
        assert refused.value.code == "invalid_lexicon"
        again = await client.open("again")
        await client.end(again)
        await client.collect(again, timeout_s=TIMEOUT_S)
    assert result.errors == []
    assert [s["spoken"] for s in result.segments] == ["航长说人工智能很强。"]


def test_preview_names_the_rule_behind_each_rewrite(server: LiveServer) -> None:
    """Every rewrite in the preview says which rule made it."""
    with httpx.Client(base_url=server.base_url, timeout=TIMEOUT_S) as http:
        rewrites = preview(http, "验证码是826491，请在2分钟内输入。房间302，第2天。")
    assert [(r["text"], r["spoken"], r["rule"]) for r in rewrites] == [
        ("826491", "八二六四九幺", "digits.code"),
        ("2", "两", "number.count"),
        ("302", "三零二", "digits.code"),
        ("2", "二", "number.ordinal"),
    ]


def test_preview_cli_with_a_lexicon(lexicon_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``chattts-stream preview --lexicon FILE`` applies the file and names the entry."""
    assert cli_main(["preview", "--lexicon", str(lexicon_file), "行长的验证码是826491"]) == 0
    rewrites = json.loads(capsys.readouterr().out)["segments"][0]["rewrites"]
    assert [(r["text"], r["spoken"], r["rule"], r.get("origin")) for r in rewrites] == [
        ("行长", "航长", "lexicon", f"{lexicon_file}:2"),
        ("826491", "八二六四九幺", "digits.code", None),
    ]


def test_a_bad_file_stops_the_start_naming_its_line(tmp_path: Path) -> None:
    """serve refuses a lexicon file with a bad line, naming the file, the line, the flag."""
    path = tmp_path / "bad.tsv"
    path.write_text("好=很好\n\n坏的一行\n", encoding="utf-8")
    with pytest.raises(SystemExit) as refused:
        build_settings(None, {"TTS_LEXICON": str(path)})
    message = str(refused.value)
    assert f"{path} line 3: no separator" in message and "--lexicon" in message


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_sighup_reloads_the_file(tmp_path: Path) -> None:
    """A server started from the command line reloads its lexicon on SIGHUP, with the
    modification-time check off (--lexicon-check-s 0)."""
    path = tmp_path / "lexicon.txt"
    write(path, "行长=航长\n")
    port = free_port()
    command = [
        sys.executable, "-m", "server", "serve", "--engine", "espeak", "--port", str(port),
        "--lexicon", str(path), "--lexicon-check-s", "0", "--warm-up", "false",
    ]  # fmt: skip
    run = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=TIMEOUT_S) as http:

            def up() -> bool:
                assert run.poll() is None, run.stderr.read() if run.stderr else ""
                try:
                    return http.get("/health").status_code == 200
                except httpx.TransportError:
                    return False

            wait_for(up, "the server answers")
            assert spoken(http, "行长说AI。") == "航长说A I。"
            write(path, "行长=航长\nAI=人工智能\n")
            time.sleep(0.2)
            assert spoken(http, "行长说AI。") == "航长说A I。"  # no check without the signal
            run.send_signal(signal.SIGHUP)
            wait_for(lambda: spoken(http, "行长说AI。") == "航长说人工智能。", "reload on SIGHUP")
    finally:
        run.send_signal(signal.SIGTERM)
        run.communicate(timeout=TIMEOUT_S)


def doc_block(after: str, language: str = "") -> str:
    """The first fenced block of docs/text.md after the line holding ``after``."""
    text = (ROOT / "docs" / "text.md").read_text(encoding="utf-8")
    start = text.index(after)
    tag = language or r"(?:sh)?"
    block = re.search(rf"^```{tag}\n(.*?)^```", text[start:], re.M | re.S)
    assert block is not None
    return block.group(1)


def test_the_documented_file_and_preview(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/text.md's lexicon file, and its preview commands as written: the CLI with the
    file, and the HTTP request with its documented rewrites."""
    (tmp_path / "lexicon.txt").write_text(doc_block("**The file**"), encoding="utf-8")
    commands = doc_block("## Preview: debug").splitlines()
    cli = shlex.split(commands[1])
    assert cli[:4] == ["chattts-stream", "preview", "--lexicon", "lexicon.txt"]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        assert cli_main(cli[1:]) == 0
    segments = json.loads(capsys.readouterr().out)["segments"]
    assert "".join(s["spoken"] for s in segments) == "航长说人工智能很强。"
    body = json.loads(re.search(r"-d '(\{.*\})'", doc_block("## Preview: debug")).group(1))
    documented = [
        json.loads(line) for line in doc_block("each change with the rule", "json").splitlines()
    ]
    with (
        run_live_server(Settings(engine="espeak")) as live,
        httpx.Client(base_url=live.base_url, timeout=TIMEOUT_S) as http,
    ):
        assert preview(http, body.pop("text"), **body) == documented
