"""The page around the stream, in headless Chromium against the real server: the voice
picker (GET /v1/voices, with the token), the download of what was played, the banner
for a degraded server, and distinct messages for 401 and 503 refusals."""

from __future__ import annotations

import io
import json
import re
import threading
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from websockets.sync.client import connect

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from tests.scripted_engine import ScriptedEngine
from tests.web.conftest import SAMPLE_RATE_HZ, WAIT_MS, load, tts_state, wait_state

pytestmark = [pytest.mark.browser, pytest.mark.live]

TOKEN = "s3cret-token"
#: The worklet fades the first samples of a (re)start in over this many samples.
RAMP_SAMPLES = 48
SHORT_TEXT = "你好，欢迎使用流式语音合成。今天天气很好。"


@pytest.fixture(scope="module")
def open_server() -> Iterator[LiveServer]:
    with run_live_server(Settings(engine="espeak")) as server:
        yield server


@pytest.fixture(scope="module")
def token_server() -> Iterator[LiveServer]:
    with run_live_server(Settings(engine="espeak", tokens=(TOKEN,))) as server:
        yield server


class Wire:
    """What the page's WebSockets sent and received, as seen by the browser itself."""

    def __init__(self, page: Any) -> None:
        self.sent: list[dict[str, Any]] = []
        self.pcm: list[bytes] = []
        page.on("websocket", self._watch)

    def _watch(self, ws: Any) -> None:
        ws.on("framesent", lambda payload: self.sent.append(json.loads(payload)))
        ws.on("framereceived", self._received)

    def _received(self, payload: str | bytes) -> None:
        if isinstance(payload, bytes):
            self.pcm.append(payload[12:])  # after the 12-byte frame header

    def samples(self) -> np.ndarray:
        return np.frombuffer(b"".join(self.pcm), "<i2").astype(np.int64)

    def first(self, kind: str) -> dict[str, Any]:
        return next(msg for msg in self.sent if msg["type"] == kind)


def play_whole_text(page: Any, text: str) -> None:
    """Send ``text`` in one message (not as LLM deltas) and press Play."""
    page.uncheck("#stream-mode")
    page.fill("#prebuffer-ms", "500")
    page.dispatch_event("#prebuffer-ms", "change")
    page.fill("#text", text)
    page.click("#play")


def download_wav(page: Any) -> tuple[wave._wave_params, np.ndarray]:
    with page.expect_download(timeout=WAIT_MS) as info:
        page.click("#download")
    data = Path(info.value.path()).read_bytes()
    with wave.open(io.BytesIO(data)) as wav:
        params = wav.getparams()
        frames = wav.readframes(params.nframes)
    return params, np.frombuffer(frames, "<i2").astype(np.int64)


def assert_played(wav: np.ndarray, received: np.ndarray) -> None:
    """``wav`` is the start of ``received`` as the worklet outputs it: the first samples
    faded in over RAMP_SAMPLES (x * i / 48, within rounding), the rest unchanged."""
    assert 0 < len(wav) <= len(received)
    ramp = np.round(received[:RAMP_SAMPLES] * np.arange(RAMP_SAMPLES) / RAMP_SAMPLES)
    assert np.abs(wav[:RAMP_SAMPLES] - ramp).max() <= 1
    np.testing.assert_array_equal(wav[RAMP_SAMPLES:], received[RAMP_SAMPLES : len(wav)])


# --- voices ---------------------------------------------------------------------------


def test_picker_lists_the_servers_voices_and_start_sends_the_chosen_one(
    page: Any, token_server: LiveServer
) -> None:
    """The picker holds GET /v1/voices' names (fetched with the page's token), created
    voices included; the chosen voice is the `voice` of `start`, and `started` confirms it."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=token_server.base_url, headers=auth, timeout=TIMEOUT_S) as http:
        created = http.post("/v1/voices", json={"name": "narrator", "speaker": "m3"})
        assert created.status_code == 201, created.text
        names = [voice["name"] for voice in http.get("/v1/voices").json()["data"]]
    assert "narrator" in names and "alloy" in names
    page.add_init_script(f"localStorage.setItem('tts.token', {json.dumps(TOKEN)})")
    wire = Wire(page)
    load(page, token_server)

    state = wait_state(page, "s.voices !== null")
    assert state["voices"] == names
    options = page.eval_on_selector_all("#voice option", "os => os.map(o => o.value)")
    assert options == ["", *names]

    page.select_option("#voice", "narrator")
    play_whole_text(page, "你好。")
    state = wait_state(page, "s.contextState === 'done'")
    assert state["errors"] == []
    start = wire.first("start")
    assert start["voice"] == "narrator" and "seed" not in start
    assert state["voice"] == "narrator"
    assert "voice narrator," in log_text(page)


def log_text(page: Any) -> str:
    return "\n".join(page.eval_on_selector_all("#log li", "lis => lis.map(li => li.textContent)"))


def test_the_log_names_the_default_voice_not_null(page: Any, open_server: LiveServer) -> None:
    """A context on the server's default voice is logged as started with the default
    voice (its seed and speed), not with `voice null`."""
    load(page, open_server)
    play_whole_text(page, "你好。")
    state = wait_state(page, "s.contextState === 'done'")
    assert state["voice"] is None and state["errors"] == []
    logged = log_text(page)
    assert f"voice 默认 default, seed {state['seed']}, speed 1" in logged, logged
    assert "null" not in logged


# --- warnings -------------------------------------------------------------------------


def test_every_warning_is_shown_with_its_code_and_message(
    page: Any, open_server: LiveServer
) -> None:
    """A `warning` event (an emoji the voice cannot read) is shown in the log with its
    code and the server's message, as the page received it."""
    load(page, open_server)
    play_whole_text(page, "你好😀，欢迎。")
    state = wait_state(page, "s.contextState === 'done'")
    [warning] = state["warnings"]
    assert warning["code"] == "unspeakable_characters" and "😀" in warning["message"]
    shown = page.eval_on_selector_all("#log li.warning", "lis => lis.map(li => li.textContent)")
    assert any(f"unspeakable_characters: {warning['message']}" in line for line in shown), shown
    assert page.is_visible("#log li.warning")


def test_a_warning_about_a_segment_marks_that_segment(page: Any, open_server: LiveServer) -> None:
    """A `segment_without_audio` warning (its `segment` the context's index), injected into
    a real session after the second segment's event, is logged with its code, message and
    segment, and marks that segment in the list."""
    message = "segment 1 made no audio: it was not heard"

    def relay(ws: Any) -> None:
        server = ws.connect_to_server()
        ws.on_message(server.send)

        def to_page(frame: str | bytes) -> None:
            ws.send(frame)
            event = json.loads(frame) if isinstance(frame, str) else {}
            if event.get("type") == "segment" and event["index"] == 1:
                ws.send(json.dumps({"type": "warning", "context_id": event["context_id"],
                                    "code": "segment_without_audio", "message": message,
                                    "segment": 1}))  # fmt: skip

        server.on_message(to_page)

    page.route_web_socket("**/v1/stream", relay)
    load(page, open_server)
    play_whole_text(page, SHORT_TEXT)
    state = wait_state(page, "s.contextState === 'done'")
    assert [(w["code"], w["segment"]) for w in state["warnings"]] == [("segment_without_audio", 1)]
    assert f"segment_without_audio: {message} (segment 1)" in log_text(page)
    marked = page.eval_on_selector_all(
        "#segments li.warned", "lis => lis.map(li => li.dataset.index)"
    )
    assert marked == ["1"]
    assert (
        page.get_attribute("#segments li[data-index='1']", "data-warning")
        == "segment_without_audio"
    )


# --- type to speak --------------------------------------------------------------------


def test_typing_after_a_reply_lets_its_tail_play_out(page: Any, open_server: LiveServer) -> None:
    """In type-to-speak, the first keystroke after a reply (its `done` in, its audio still
    playing) starts the next context without cutting that reply: every sample of both is
    played, the second after the first, and nothing is cancelled."""
    wire = Wire(page)
    load(page, open_server)
    page.check("#type-mode")
    page.keyboard.type("今天天气很好，我们一起去公园散步吧。")
    page.click("#play")  # the end of the first reply
    first = wait_state(page, "s.done !== null")
    assert first["contextState"] == "speaking", "the reply should still be playing"
    page.keyboard.type("好的。")  # while its audio plays
    wait_state(page, f"s.contextId !== {json.dumps(first['contextId'])} && s.sent.includes('text')")
    page.click("#play")
    second = wait_state(page, "s.contextState === 'done'")
    total = first["done"]["audioSamples"] + second["done"]["audioSamples"]
    played = wait_state(page, f"s.worklet && s.worklet.totalPlayedSamples >= {total}")
    assert played["worklet"]["totalPlayedSamples"] == total  # every sample, once
    assert second["samplesPlayed"] == second["samplesReceived"] == second["done"]["audioSamples"]
    assert [m["type"] for m in wire.sent if m["type"] in ("cancel", "end")] == ["end", "end"]
    assert second["errors"] == []


# --- download -------------------------------------------------------------------------


def test_download_is_a_wav_of_the_samples_played(page: Any, open_server: LiveServer) -> None:
    """After an utterance, Download saves a 24 kHz 16-bit mono WAV whose samples are the
    ones the server sent, as played (faded in over the first 2 ms)."""
    wire = Wire(page)
    load(page, open_server)
    assert page.is_disabled("#download")

    play_whole_text(page, SHORT_TEXT)
    state = wait_state(page, "s.contextState === 'done'")
    assert state["errors"] == [] and state["underruns"] == 0

    params, wav = download_wav(page)
    assert (params.nchannels, params.sampwidth, params.framerate) == (1, 2, SAMPLE_RATE_HZ)
    received = wire.samples()
    assert len(wav) == len(received) == state["samplesPlayed"] == state["done"]["audioSamples"]
    assert_played(wav, received)


def test_download_after_stop_holds_only_what_was_played(page: Any, open_server: LiveServer) -> None:
    """Stopped mid-utterance, the download is the part that was played, not all that had
    arrived: a prefix of the received samples, as long as the worklet played."""
    wire = Wire(page)
    load(page, open_server)
    play_whole_text(page, "今天天气很好，我们一起去公园散步吧！" * 8)
    wait_state(page, f"s.samplesPlayed > {SAMPLE_RATE_HZ // 2}")
    page.click("#stop")
    state = wait_state(page, "s.contextState === 'cancelled'")

    _, wav = download_wav(page)
    received = wire.samples()
    assert state["samplesPlayed"] <= len(wav) < len(received) - SAMPLE_RATE_HZ
    assert_played(wav, received)


# --- the banner -----------------------------------------------------------------------


def test_banner_says_the_server_is_degraded(page: Any, tmp_path: Path) -> None:
    """A server whose model failed to load and speaks the fallback voice shows a banner
    with /ready's detail."""
    settings = Settings(engine="chattts", model_dir=tmp_path, fallback_on_load_failure=True)
    with run_live_server(settings) as server:
        readiness = httpx.get(server.base_url + "/ready", timeout=TIMEOUT_S).json()
        assert readiness["degraded"] is True and readiness["detail"]
        load(page, server)
        state = wait_state(page, "s.readiness !== null")

    assert state["banner"] == ["degraded"]
    assert page.is_visible("#banner [data-kind='degraded']")
    text = page.text_content("#banner") or ""
    assert "degraded" in text and readiness["detail"] in text


def test_banner_says_the_model_has_random_weights(page: Any, tiny_checkpoint: Path) -> None:
    """A server on a random-weight checkpoint (its speech is noise) says so in a banner."""
    with run_live_server(Settings(engine="chattts", model_dir=tiny_checkpoint)) as server:
        readiness = httpx.get(server.base_url + "/ready", timeout=TIMEOUT_S).json()
        load(page, server)
        state = wait_state(page, "s.readiness !== null")
    assert readiness.get("random_weights") is True
    assert state["banner"] == ["random-weights"]
    assert page.is_visible("#banner [data-kind='random-weights']")
    assert "random weights" in (page.text_content("#banner") or "")


def test_no_banner_for_a_healthy_server(page: Any) -> None:
    """A server that runs the model it was asked for, with real weights (a scripted
    engine stands in for one), shows no banner."""
    settings = Settings(engine="chattts", model_dir=Path("unused"))
    with run_live_server(settings, engine=lambda: (ScriptedEngine(), False, None)) as server:
        load(page, server)
        state = wait_state(page, "s.readiness !== null")
    assert state["readiness"]["degraded"] is False and state["readiness"]["engine"] == "scripted"
    assert state["banner"] == []
    assert page.locator("#banner").count() == 1 and page.is_hidden("#banner")


def test_the_fallback_voice_says_what_it_is_and_how_to_get_chattts(
    page: Any, open_server: LiveServer
) -> None:
    """A server with no model speaks the fallback voice: the banner says so, and how to
    get ChatTTS with README's own commands, naming README's section that has them."""
    load(page, open_server)
    state = wait_state(page, "s.readiness !== null")
    assert state["banner"] == ["fallback-voice"]
    text = page.text_content("#banner [data-kind='fallback-voice']") or ""
    assert "fallback voice" in text and "espeak" in text
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    commands = re.findall(r"`([^`]+)`", text)
    assert len(commands) == 2 and all(command in readme for command in commands), commands
    (section,) = re.findall(r'README\.md, "([^"]+)"', text)
    assert f"\n## {section}\n" in readme


def test_at_load_the_page_shows_the_engine_and_that_the_server_is_ready(
    page: Any, open_server: LiveServer
) -> None:
    """Before any connection the page shows what GET /ready says: the engine, and a state
    that is true (ready, not "disconnected")."""
    load(page, open_server)
    state = wait_state(page, "s.readiness !== null")
    assert state["connection"] == "idle" and state["connected"] is False
    assert page.text_content("#engine") == state["engine"] == "espeak"
    assert page.get_attribute("#status", "data-state") == "ready"
    assert "ready: espeak" in (page.text_content("#status") or "")


# --- refusals -------------------------------------------------------------------------


def alert(page: Any) -> dict[str, Any]:
    """The alert as shown: visible, its status and code attributes, and its text."""
    return {
        "visible": page.is_visible("#alert"),
        "status": page.get_attribute("#alert", "data-status"),
        "code": page.get_attribute("#alert", "data-code"),
        "text": page.text_content("#alert") or "",
    }


def test_missing_or_wrong_token_shows_the_401_message(page: Any, token_server: LiveServer) -> None:
    """Without a token the page says one is needed (GET /v1/voices: 401); a wrong one is
    refused at Play with the 401 message, never the 503 one; the right one clears it."""
    load(page, token_server)
    wait_state(page, "s.alert !== null")
    shown = alert(page)
    assert (shown["visible"], shown["status"], shown["code"]) == (True, "401", "unauthorized")
    assert "HTTP 401" in shown["text"] and "token required" in shown["text"]

    page.fill("#token", "wrong-token")
    page.uncheck("#stream-mode")
    page.click("#play")  # the token field's change event fires first
    state = wait_state(page, "s.errors.length > 0")
    assert [err["code"] for err in state["errors"]] == ["unauthorized"]
    shown = alert(page)
    assert (shown["visible"], shown["status"], shown["code"]) == (True, "401", "unauthorized")
    assert "wrong token" in shown["text"] and "503" not in shown["text"]
    assert state["alert"]["message"] == shown["text"]

    page.fill("#token", TOKEN)
    page.press("#token", "Tab")
    wait_state(page, "s.voices !== null")
    assert page.is_hidden("#alert") and tts_state(page)["alert"] is None


def test_a_full_server_shows_the_503_message(page: Any) -> None:
    """With every connection taken, Play is refused with the 503 server-full message (not
    the token one); once a connection is free, Play works and the message goes."""
    with run_live_server(Settings(engine="espeak", max_connections=1)) as server:
        load(page, server)
        with connect(server.ws_url, subprotocols=["tts.v1"], open_timeout=TIMEOUT_S) as held:
            held.recv(timeout=TIMEOUT_S)  # `ready`: the one connection is taken
            play_whole_text(page, "你好。")
            state = wait_state(page, "s.errors.length > 0")
        assert [err["code"] for err in state["errors"]] == ["too_many_connections"]
        shown = alert(page)
        assert (shown["visible"], shown["status"]) == (True, "503")
        assert shown["code"] == "too_many_connections"
        assert "HTTP 503" in shown["text"] and "server full" in shown["text"]
        assert "401" not in shown["text"] and "token" not in shown["text"]

        page.click("#play")
        state = wait_state(page, "s.contextState === 'done'")
        assert state["connected"] is True and page.is_hidden("#alert")


def test_an_engine_still_loading_shows_the_503_not_ready_message(page: Any) -> None:
    """While the engine loads, Play is refused with the 503 not-ready message."""
    release = threading.Event()

    def slow_engine() -> tuple[ScriptedEngine, bool, None]:
        if not release.wait(TIMEOUT_S):
            raise RuntimeError("test never released the engine")
        return ScriptedEngine(), False, None

    try:
        with run_live_server(Settings(), engine=slow_engine, wait_ready=False) as server:
            load(page, server)
            play_whole_text(page, "你好。")
            state = wait_state(page, "s.errors.length > 0")
            release.set()
    finally:
        release.set()
    assert [err["code"] for err in state["errors"]] == ["not_ready"]
    shown = alert(page)
    assert (shown["visible"], shown["status"], shown["code"]) == (True, "503", "not_ready")
    assert "HTTP 503" in shown["text"] and "loading" in shown["text"]


def test_a_busy_engine_shows_the_503_busy_message(page: Any) -> None:
    """A `start` refused as busy (the engine speaks all it can) shows the 503 busy message
    with the retry hint, and the refused context ends at once, without echoed errors."""
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.05, ms_per_char=300)
    settings = Settings(
        engine="chattts", model_dir=Path("unused"), max_streams=1, busy_retry_after_ms=2000
    )
    with (
        run_live_server(settings, engine=lambda: (engine, False, None)) as server,
        connect(server.ws_url, subprotocols=["tts.v1"], open_timeout=TIMEOUT_S) as held,
    ):
        held.send(json.dumps({"type": "start", "context_id": "held"}))
        held.send(
            json.dumps({"type": "text", "context_id": "held", "text": "占着引擎的长句子，" * 4})
        )
        while json.loads(held.recv(timeout=TIMEOUT_S))["type"] != "started":
            pass
        load(page, server)
        play_whole_text(page, "你好。")
        state = wait_state(page, "s.contextState === 'refused'")
        held.send(json.dumps({"type": "cancel", "context_id": "held"}))
        # Read up to its `done`: a client that stops reading never sees the close frame.
        while not isinstance(msg := held.recv(timeout=TIMEOUT_S), str) or '"done"' not in msg:
            pass

    assert [err["code"] for err in state["errors"]] == ["busy"]
    shown = alert(page)
    assert (shown["visible"], shown["status"], shown["code"]) == (True, "503", "busy")
    assert "server busy" in shown["text"] and "retry in 2 s" in shown["text"]


def test_typing_goes_on_after_a_lost_connection(page: Any, open_server: LiveServer) -> None:
    """In type-to-speak, a connection that dies abruptly (closed 1011 after the first
    segment) is continued on a new one with the same seed: the cut segment again, then
    what was typed meanwhile and after, each character in the segments once, no error."""
    connections: list[Any] = []

    def relay(ws: Any) -> None:
        server = ws.connect_to_server()
        connections.append(ws)
        ws.on_message(server.send)

        def to_page(frame: str | bytes) -> None:
            ws.send(frame)
            event = json.loads(frame) if isinstance(frame, str) else {}
            if len(connections) == 1 and event.get("type") == "segment":
                ws.close(code=1011, reason="lost")  # the first connection dies here
                server.close()

        server.on_message(to_page)

    page.route_web_socket("**/v1/stream", relay)
    load(page, open_server)
    page.check("#type-mode")
    page.keyboard.type("今天天气很好，")
    wait_state(page, "s.resumed.length === 1 && s.stream !== null")
    page.keyboard.type("我们一起去公园散步吧。")
    page.click("#play")
    state = wait_state(page, "s.contextState === 'done'")
    typed = "今天天气很好，我们一起去公园散步吧。"
    assert len(connections) == 2 and state["errors"] == [], state["errors"]
    [resumed] = state["resumed"]
    assert resumed["reason"] == "closed" and resumed["repeated"] is True
    assert "".join(seg["text"] for seg in state["segments"]) == typed
    assert [seg["index"] for seg in state["segments"]] == list(range(len(state["segments"])))
    seeds = re.findall(r"started: stream \d+, voice 默认 default, seed (\d+)", log_text(page))
    assert len(seeds) == 2 and seeds[0] == seeds[1] == str(state["seed"])  # one voice throughout
    assert state["done"]["audioSamples"] == state["samplesReceived"] == state["samplesPlayed"]
