"""Named voices: the registry over the directory store, its routes, and the name used from
every route (the Redis store of a fleet: tests/fleet/test_voices.py)."""

from __future__ import annotations

import base64
import io
import wave
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
from chattts_client import StreamClient

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from server.engines.base import VoiceSpec
from server.voices import PRESET_NAMES, DirectoryStore, Voice, VoiceRegistry
from streaming.errors import ClientError, Conflict, NotFound
from tests.conftest import fixed_length_chattts
from tests.scripted_engine import ScriptedEngine

# --- the registry --------------------------------------------------------------------


def test_each_engine_has_every_openai_name_as_a_preset(tmp_path: Path) -> None:
    registry = VoiceRegistry(DirectoryStore(tmp_path))
    for engine in ("chattts", "espeak"):
        voices = registry.list(engine)
        assert [v.name for v in voices] == sorted(PRESET_NAMES)
        assert all(v.preset for v in voices)
    # Distinct speakers: ChatTTS presets sample different seeds; espeak's differ in variant
    # or pitch (the seed's tens digit picks the pitch).
    chattts = {v.speaker_seed for v in registry.list("chattts")}
    espeak = {(v.speaker, (v.seed or 0) // 10 % 5) for v in registry.list("espeak")}
    assert len(chattts) == len(espeak) == len(PRESET_NAMES)


async def test_created_voices_are_files_read_back_by_a_new_registry(tmp_path: Path) -> None:
    registry = VoiceRegistry(DirectoryStore(tmp_path))
    await registry.add(Voice("narrator", "chattts", speaker_seed=42, seed=7, temperature=0.2))
    assert (tmp_path / "chattts" / "narrator.json").is_file()
    again = VoiceRegistry(DirectoryStore(tmp_path)).get("chattts", "narrator")
    assert again == Voice("narrator", "chattts", speaker_seed=42, seed=7, temperature=0.2)
    assert again.spec(seed=None, speed=1.5) == VoiceSpec(
        voice=None, seed=7, speed=1.5, speaker_seed=42, temperature=0.2
    )
    assert again.spec(seed=3, speed=1.0).seed == 3  # the client's seed wins


async def test_the_registry_refuses_what_it_cannot_keep(tmp_path: Path) -> None:
    registry = VoiceRegistry(DirectoryStore(tmp_path))
    await registry.add(Voice("mine", "espeak", speaker="m3"))
    with pytest.raises(Conflict):
        await registry.add(Voice("mine", "espeak", speaker="f1"))
    with pytest.raises(Conflict):
        await registry.add(Voice("alloy", "espeak", speaker="f1"))  # a preset's name
    with pytest.raises(Conflict):
        await registry.delete("espeak", "alloy")  # a preset
    with pytest.raises(NotFound):
        await registry.delete("espeak", "nobody")
    with pytest.raises(ClientError):
        await registry.add(Voice("../escape", "espeak"))
    with pytest.raises(ClientError):
        registry.resolve("espeak", "nobody", check_raw=lambda name: (_ for _ in ()).throw(
            ValueError("not a variant")))  # fmt: skip
    await registry.delete("espeak", "mine")
    assert not (tmp_path / "espeak" / "mine.json").exists()


def test_an_unreadable_voice_file_is_skipped_not_fatal(tmp_path: Path) -> None:
    (tmp_path / "espeak").mkdir()
    (tmp_path / "espeak" / "broken.json").write_text("{not json")
    (tmp_path / "espeak" / "fine.json").write_text('{"name": "fine", "engine": "espeak"}')
    names = VoiceRegistry(DirectoryStore(tmp_path)).names("espeak")
    assert "fine" in names and "broken" not in names


async def test_a_write_a_crash_interrupted_leaves_no_trace_at_the_next_start(
    tmp_path: Path,
) -> None:
    """A staging file left by a crash mid-write is removed at start; the voice written
    before it is read back whole."""
    await VoiceRegistry(DirectoryStore(tmp_path)).add(Voice("kept", "espeak", speaker="f2"))
    staging = tmp_path / "espeak" / ".half.x1y2z3"
    staging.write_text('{"name": "half", "eng')
    registry = VoiceRegistry(DirectoryStore(tmp_path))
    assert not staging.exists()
    assert [v.name for v in registry.list("espeak") if not v.preset] == ["kept"]


# --- the routes, and the name from every route ----------------------------------------


@pytest.fixture(scope="module")
def scripted(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LiveServer, ScriptedEngine]]:
    """The scripted engine records each request's VoiceSpec (its tone's pitch is the seed)."""
    engine = ScriptedEngine(chunk_delay_s=0.0, ms_per_char=20)
    settings = Settings(
        engine="chattts",
        model_dir=Path("unused-by-the-scripted-engine"),
        voices_dir=tmp_path_factory.mktemp("voices"),
    )
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        yield live, engine


@pytest.mark.live
def test_voice_routes_create_fetch_list_delete(
    scripted: tuple[LiveServer, ScriptedEngine],
) -> None:
    live, _ = scripted
    with httpx.Client(base_url=live.base_url, timeout=TIMEOUT_S) as http:
        listed = http.get("/v1/voices").json()
        assert listed["engine"] == "scripted"
        assert {v["name"] for v in listed["data"]} == set(PRESET_NAMES)
        made = http.post("/v1/voices", json={"name": "host", "speaker_seed": 9, "seed": 11})
        assert made.status_code == 201, made.text
        assert made.json()["source"] == "seed"
        assert http.get("/v1/voices/host").json()["speaker_seed"] == 9
        taken = http.post("/v1/voices", json={"name": "host", "speaker_seed": 1})
        assert taken.status_code == 409 and taken.json()["error"]["code"] == "voice_exists"
        raw = http.post("/v1/voices", json={"name": "raw", "speaker": "any-speaker-string"})
        assert raw.status_code == 201 and raw.json()["source"] == "speaker"
        both = http.post("/v1/voices", json={"name": "x", "speaker": "s", "speaker_seed": 1})
        assert both.status_code == 400 and both.json()["error"]["param"] == "speaker_seed"
        random_speaker = http.post("/v1/voices", json={"name": "surprise"}).json()
        assert isinstance(random_speaker["speaker_seed"], int)
        assert http.delete("/v1/voices/surprise").status_code == 204
        missing = http.get("/v1/voices/surprise")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "voice_not_found"
        preset = http.delete("/v1/voices/alloy")
        assert preset.status_code == 409 and preset.json()["error"]["code"] == "voice_preset"
        fallback = http.get("/v1/voices", params={"engine": "espeak"}).json()
        assert fallback["engine"] == "espeak" and {"alloy", "nova"} <= {
            v["name"] for v in fallback["data"]
        }
        bad_engine = http.get("/v1/voices", params={"engine": "kokoro"})
        assert bad_engine.status_code == 400 and "espeak" in bad_engine.json()["error"]["message"]


@pytest.mark.live
async def test_a_voice_name_works_on_every_route(
    scripted: tuple[LiveServer, ScriptedEngine],
) -> None:
    live, engine = scripted
    with httpx.Client(base_url=live.base_url, timeout=TIMEOUT_S) as http:
        assert http.post("/v1/voices", json={"name": "anchor", "speaker_seed": 77, "seed": 5,
                                             "top_k": 3}).status_code == 201  # fmt: skip
        expected = VoiceSpec(seed=5, speaker_seed=77, top_k=3)

        assert http.post("/v1/tts", json={"text": "你好。", "voice": "anchor"}).status_code == 200
        assert engine.requests[-1].voice == expected
        assert http.post("/v1/tts", json={"text": "你好。", "speaker": "anchor"}).status_code == 200
        assert engine.requests[-1].voice == expected

        with openai.OpenAI(base_url=f"{live.base_url}/v1", api_key="-", max_retries=0) as client:
            client.audio.speech.create(model="tts-1", voice="anchor", input="你好。")
        assert engine.requests[-1].voice == expected

    async with StreamClient.connect(live.ws_url) as ws:
        await ws.start("a", voice="anchor")
        await ws.send_text("你好。", "a")
        await ws.end("a")
        result = await ws.collect("a", timeout_s=TIMEOUT_S)
    assert result.started is not None and result.started["seed"] == 5  # the voice's own
    assert engine.requests[-1].voice == expected


@pytest.mark.live
def test_voices_survive_a_restart(tmp_path: Path) -> None:
    settings = Settings(engine="espeak", voices_dir=tmp_path)
    with run_live_server(settings) as live, httpx.Client(base_url=live.base_url) as http:
        made = http.post("/v1/voices", json={"name": "keeper", "speaker": "f2", "seed": 30})
        assert made.status_code == 201, made.text
    with run_live_server(settings) as live, httpx.Client(base_url=live.base_url) as http:
        kept = http.get("/v1/voices/keeper")
        assert kept.status_code == 200
        assert kept.json()["speaker"] == "f2" and kept.json()["seed"] == 30
        spoken = http.post("/v1/tts", json={"text": "你好。", "voice": "keeper", "format": "pcm"})
        assert spoken.status_code == 200 and len(spoken.content) > 0


@pytest.mark.live
def test_the_fallback_voice_checks_its_own_raw_voices(tmp_path: Path) -> None:
    settings = Settings(engine="espeak", voices_dir=tmp_path)
    with run_live_server(settings) as live, httpx.Client(base_url=live.base_url) as http:
        refused = http.post("/v1/voices", json={"name": "v", "speaker": "tenor"})
        assert refused.status_code == 400 and "m1" in refused.json()["error"]["message"]
        clip = http.post("/v1/voices", json={"name": "v", "clip": "AAAA", "transcript": "好"})
        assert clip.status_code == 400


# --- a voice from a reference clip, through ChatTTS's own code -------------------------


def wav_clip(seconds: float, rate: int = 16000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    tone = 0.3 * np.sin(2 * np.pi * 180 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((tone * 32767).astype("<i2").tobytes())
    return out.getvalue()


@pytest.mark.live
def test_a_reference_clip_voice_end_to_end_on_chattts(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    settings = Settings(engine="chattts", model_dir=tiny_checkpoint, voices_dir=tmp_path)
    with (
        run_live_server(settings, engine=fixed_length_chattts(tiny_checkpoint)) as live,
        httpx.Client(base_url=live.base_url, timeout=TIMEOUT_S) as http,
    ):
        clip = base64.b64encode(wav_clip(2.0)).decode()
        made = http.post(
            "/v1/voices", json={"name": "cloned", "clip": clip, "transcript": "你好世界"}
        )
        assert made.status_code == 201, made.text
        assert made.json()["source"] == "clip" and made.json()["transcript"] == "你好世界"
        # ChatTTS's own encoding: its Speaker decodes it back to DVAE codes, one row per
        # codebook, about one column per 2 mel frames (2 s at 24 kHz: ~94 columns).
        chat = live.state.worker.engine._loaded()  # type: ignore[attr-defined]
        cloned = VoiceRegistry(DirectoryStore(tmp_path)).get("chattts", "cloned")
        assert cloned is not None and cloned.reference is not None
        codes = chat.speaker.decode_prompt(cloned.reference)
        assert codes.shape[0] == chat.config.gpt.num_vq and 80 <= codes.shape[1] <= 110

        spoken = http.post("/v1/tts", json={"text": "你好。", "voice": "cloned", "format": "pcm"})
        assert spoken.status_code == 200 and len(spoken.content) > 24000
        too_long = base64.b64encode(wav_clip(31.0, rate=8000)).decode()
        refused = http.post("/v1/voices", json={"name": "long", "clip": too_long,
                                                "transcript": "好"})  # fmt: skip
        assert refused.status_code == 413 and refused.json()["error"]["code"] == "clip_too_long"
        assert refused.json()["error"]["limit"] == 30
        not_audio = http.post("/v1/voices", json={"name": "junk", "clip": "AAAA",
                                                  "transcript": "好"})  # fmt: skip
        assert not_audio.status_code == 400 and not_audio.json()["error"]["param"] == "clip"


def test_files_that_are_not_voices_are_skipped_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "espeak"
    folder.mkdir()
    (folder / "list.json").write_text("[1, 2]")
    (folder / "number.json").write_text('{"name": 5, "engine": "espeak"}')
    (folder / "other.json").write_text('{"name": "renamed", "engine": "espeak"}')
    (folder / "seed.json").write_text('{"name": "seed", "engine": "espeak", "seed": "7"}')
    (folder / "good.json").write_text('{"name": "good", "engine": "espeak", "seed": 7}')
    with caplog.at_level("WARNING", logger="server.voices"):
        registry = VoiceRegistry(DirectoryStore(tmp_path))
    assert len([r for r in caplog.records if "skipped" in r.getMessage()]) == 4
    created = [v.name for v in registry.list("espeak") if not v.preset]
    assert created == ["good"]


def test_a_busy_context_on_the_fallback_voice_takes_its_own_voice_of_that_name(
    tmp_path: Path,
) -> None:
    from server.voices import Voices

    class Worker:
        engine = ScriptedEngine()
        status = None

        def check_voice(self, voice: str) -> None:
            pass

    voices = Voices(VoiceRegistry(DirectoryStore(tmp_path)), Worker())  # type: ignore[arg-type]
    main = voices.spec("echo", seed=None, speed=1.0)
    fallback = voices.spec("echo", seed=None, speed=1.0, fallback=True)
    echo = VoiceRegistry(DirectoryStore(tmp_path)).get("espeak", "echo")
    assert echo is not None
    assert main.speaker_seed is not None and main.voice is None
    assert (fallback.voice, fallback.seed) == (echo.speaker, echo.seed)
    # A name the fallback voice does not have: its default, with the seed given.
    assert voices.spec("a-chattts-speaker", seed=3, speed=1.0, fallback=True).seed == 3


@pytest.mark.live
def test_voice_limits(tmp_path: Path) -> None:
    settings = Settings(engine="espeak", voices_dir=tmp_path, max_voices=2)
    with run_live_server(settings) as live, httpx.Client(base_url=live.base_url) as http:
        for name in ("one", "two"):
            assert http.post("/v1/voices", json={"name": name}).status_code == 201
        full = http.post("/v1/voices", json={"name": "three"})
        assert full.status_code == 413 and full.json()["error"]["code"] == "too_many_voices"
        assert full.json()["error"]["limit"] == 2
        long_speaker = http.post("/v1/voices", json={"name": "x", "speaker": "s" * 20000})
        assert long_speaker.status_code == 422
