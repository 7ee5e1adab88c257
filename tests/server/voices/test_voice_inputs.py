"""What a caller may send to make a voice, and what it is told otherwise: names in any
script, the fallback voice's own voices, reference clips that hold no voice, and
errors that never repeat ffmpeg's, lzma's or Python's words."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
import subprocess
import wave
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import numpy as np
import pytest
from chattts_client import StreamClient

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from tests.conftest import fixed_length_chattts, sample_speaker

pytestmark = pytest.mark.live

#: Words of the libraries under the server, which a caller must never read.
INTERNALS = re.compile(
    r"Output file #|does not contain any stream|Invalid data found|Compressed data|"
    r"end-of-stream|LZMA|lzma|zlib|Traceback|Error:|Exception|pydantic|dictionary",
)


def wav(samples: np.ndarray, rate: int = 16000) -> str:
    """A mono 16-bit WAV of ``samples``, base64-encoded (a clip as the API takes it)."""
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return base64.b64encode(out.getvalue()).decode()


def speech_like(seconds: float, level: float, rate: int = 16000) -> np.ndarray:
    """A voiced tone with a syllable-rate envelope, peaking near ``level``."""
    t = np.arange(int(seconds * rate)) / rate
    return level * np.sin(2 * np.pi * 180 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))


@pytest.fixture(scope="module")
def espeak_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    settings = Settings(engine="espeak", voices_dir=tmp_path_factory.mktemp("voices"))
    with run_live_server(settings) as live:
        yield live


@pytest.fixture(scope="module")
def chattts_server(
    tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    settings = Settings(
        engine="chattts", model_dir=tiny_checkpoint, voices_dir=tmp_path_factory.mktemp("v")
    )
    with run_live_server(settings, engine=fixed_length_chattts(tiny_checkpoint)) as live:
        yield live


def refusal(answer: httpx.Response, status: int = 400) -> dict[str, str]:
    """The error of a refused request, which must name no internals."""
    assert answer.status_code == status, answer.text
    error: dict[str, str] = answer.json()["error"]
    assert not INTERNALS.search(error["message"]), error["message"]
    return error


def test_the_seed_example_on_the_fallback_voice_says_what_works_there(
    espeak_server: LiveServer,
) -> None:
    """The docs' first voice (speaker_seed) on the quickstart's server, which has only the
    fallback voice: 400 naming speaker_seed, the variants, a seed, the example body to
    send instead and how to get ChatTTS; that example body makes a voice that speaks."""
    with httpx.Client(base_url=espeak_server.base_url, timeout=TIMEOUT_S) as http:
        body = {"name": "narrator", "speaker_seed": 1234, "seed": 7, "temperature": 0.2}
        error = refusal(http.post("/v1/voices", json=body))
        assert (error["code"], error["param"]) == ("invalid_field", "speaker_seed")
        message = error["message"]
        for needle in ("variant", "f3", "m1", "seed", "download-weights", "--model-dir"):
            assert needle in message, (needle, message)
        found = re.search(r"e\.g\. (\{.*?\})", message)
        assert found, message
        example = json.loads(found.group(1))
        assert example["name"] == "narrator"
        assert http.post("/v1/voices", json=example).status_code == 201
        spoken = http.post("/v1/tts", json={"text": "你好。", "voice": "narrator"})
        assert spoken.status_code == 200 and len(spoken.content) > 10_000
        clip = {"name": "c", "clip": wav(speech_like(1, 0.3)), "transcript": "好"}
        assert "download-weights" in refusal(http.post("/v1/voices", json=clip))["message"]


def test_chattts_servers_fallback_voices_do_not_suggest_getting_chattts(
    chattts_server: LiveServer,
) -> None:
    """speaker_seed for the fallback voice of a server that has ChatTTS: what works on the
    fallback voice, and no advice to download what it already has."""
    body = {"name": "n", "engine": "espeak", "speaker_seed": 3}
    answer = httpx.post(chattts_server.base_url + "/v1/voices", json=body, timeout=TIMEOUT_S)
    message = refusal(answer)["message"]
    assert "f3" in message and "download-weights" not in message


NAMES = ["旁白", "小明.v2", "客服-女_1", "ナレーター", "김민수", "Ünïcode", "名" * 64]


def test_voice_names_in_any_script_work_on_every_route_and_as_files(
    espeak_server: LiveServer, tmp_path: Path
) -> None:
    """Names of Chinese, Japanese, Korean and accented Latin letters, up to 64 characters:
    created, fetched and listed by name, spoken by /v1/tts, /v1/audio/speech and a
    WebSocket start, kept as <name>.json, and deleted."""
    settings = Settings(engine="espeak", voices_dir=tmp_path)
    with run_live_server(settings) as live, httpx.Client(base_url=live.base_url) as http:
        for seed, name in enumerate(NAMES):
            made = http.post("/v1/voices", json={"name": name, "seed": seed})
            assert made.status_code == 201 and made.json()["name"] == name, made.text
            assert http.get(f"/v1/voices/{quote(name)}").json()["seed"] == seed
            tts = http.post("/v1/tts", json={"text": "你好。", "voice": name, "format": "pcm"})
            assert tts.status_code == 200 and tts.content, tts.text
            body = {"model": "tts-1", "input": "你好。", "voice": name, "response_format": "pcm"}
            assert http.post("/v1/audio/speech", json=body).status_code == 200
            assert (tmp_path / "espeak" / f"{name}.json").is_file()
        listed = {v["name"] for v in http.get("/v1/voices").json()["data"]}
        assert set(NAMES) <= listed

        async def started(name: str) -> int:
            async with StreamClient.connect(live.ws_url) as tts:
                await tts.start("c", voice=name)
                while True:
                    event = await tts.recv()
                    if isinstance(event, dict) and event["type"] == "started":
                        return int(event["seed"])

        assert asyncio.run(started("旁白")) == 0
        assert http.delete(f"/v1/voices/{quote('旁白')}").status_code == 204
        assert not (tmp_path / "espeak" / "旁白.json").exists()


@pytest.mark.parametrize(
    "name",
    ["", "-lead", ".hidden", "_x", "a/b", "a b", "名" * 65, "😀", "e\u0301", "\U00020000" * 64,
     "a\x00b", "..", "a:b"],
    ids=["empty", "dash", "dot", "underscore", "slash", "space", "65-chars", "emoji",
         "not-nfc", "over-200-bytes", "nul", "dotdot", "colon"],
)  # fmt: skip
def test_a_name_no_voice_may_have_is_refused_with_the_rules(
    espeak_server: LiveServer, name: str
) -> None:
    """Names that are not letters/digits/.-_ starting with a letter or digit, or are
    longer than 64 characters or 200 bytes, or not in NFC: 400 (422 for an empty one)
    stating the rules, no voice made."""
    answer = httpx.post(espeak_server.base_url + "/v1/voices", json={"name": name})
    if name == "":
        assert answer.status_code == 422
        return
    error = refusal(answer)
    assert error["param"] == "name" and "letters or digits of any script" in error["message"]


def ffmpeg_bytes(*args: str) -> bytes:
    return subprocess.run(
        ["ffmpeg", "-v", "error", *args, "pipe:1"], capture_output=True, check=True
    ).stdout


def test_clips_that_hold_no_voice_are_refused_in_plain_words(chattts_server: LiveServer) -> None:
    """A reference clip of 3 s of zeros, one too quiet (-66 dBFS), a video with no sound,
    bytes that are no audio at all and a WAV cut after its header: each a 400 on clip
    saying which, in words of this server's own (none of ffmpeg's)."""
    silent = wav(np.zeros(48000))
    quiet = wav(speech_like(3, 0.0005))
    video = base64.b64encode(
        ffmpeg_bytes("-f", "lavfi", "-i", "color=c=black:s=16x16:d=1", "-f", "matroska")
    ).decode()
    garbage = base64.b64encode(np.random.default_rng(0).bytes(4000)).decode()
    header_only = base64.b64encode(base64.b64decode(wav(np.zeros(10)))[:44]).decode()
    expected = {
        "silence": (silent, "clip is silence"),
        "quiet": (quiet, "too quiet"),
        "video": (video, "no sound track"),
        "garbage": (garbage, "not an audio file"),
        "header only": (header_only, "too short"),
    }
    with httpx.Client(base_url=chattts_server.base_url, timeout=TIMEOUT_S) as http:
        for what, (clip, said) in expected.items():
            body = {"name": "c", "clip": clip, "transcript": "你好"}
            error = refusal(http.post("/v1/voices", json=body))
            assert error["param"] == "clip" and said in error["message"], (what, error)
        fine = {"name": "c", "clip": wav(speech_like(2, 0.3)), "transcript": "你好"}
        assert http.post("/v1/voices", json=fine).status_code == 201


def test_a_broken_speaker_string_is_named_as_such_not_by_its_decoder(
    chattts_server: LiveServer, chat: object
) -> None:
    """A ChatTTS speaker string cut short, as a new voice's speaker and as a raw voice on
    /v1/tts and a WebSocket start: refused as not a speaker string, without lzma's
    'Compressed data ended before the end-of-stream marker'."""
    cut = sample_speaker(chat)[:30]
    with httpx.Client(base_url=chattts_server.base_url, timeout=TIMEOUT_S) as http:
        error = refusal(http.post("/v1/voices", json={"name": "s", "speaker": cut}))
        assert (
            error["code"] == "invalid_voice" and "not a ChatTTS speaker string" in error["message"]
        )
        error = refusal(http.post("/v1/tts", json={"text": "你好。", "voice": cut}))
        assert "not a ChatTTS speaker string" in error["message"]

    async def refused() -> str:
        async with StreamClient.connect(chattts_server.ws_url) as tts:
            await tts.start("c", voice=cut)
            while True:
                event = await tts.recv()
                if isinstance(event, dict) and event["type"] == "error":
                    return str(event["message"])

    message = asyncio.run(refused())
    assert "not a ChatTTS speaker string" in message and not INTERNALS.search(message)


def test_a_json_body_that_is_not_an_object_is_told_so(espeak_server: LiveServer) -> None:
    """A JSON array or string as the body: 422 'the body must be a JSON object', not
    pydantic's 'valid dictionary or object to extract fields from'."""
    for body in ("[1, 2]", '"text"'):
        answer = httpx.post(espeak_server.base_url + "/v1/tts", content=body,
                            headers={"content-type": "application/json"})  # fmt: skip
        error = refusal(answer, 422)
        assert error["message"] == "the body must be a JSON object ({...})"
