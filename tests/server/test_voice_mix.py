"""Voices mixed from others (``POST /v1/voices`` with ``mix``), on the real ChatTTS code
path with the tiny checkpoint: the blend of the parents' speaker embeddings, kept as a
voice, spoken by the engine, unlike either parent; refused where it cannot be made."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from ChatTTS.model.speaker import Speaker

from server.config import Settings
from server.engines.base import VoiceSpec
from tests.conftest import fixed_length_chattts
from tests.live import TIMEOUT_S, LiveServer, run_live_server


@pytest.fixture(scope="module")
def server(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    voices = tmp_path_factory.mktemp("voices")
    # A voice made from a clip, as the store keeps one (its encoding needs no checking here:
    # a mix must refuse it before any use).
    (voices / "chattts").mkdir()
    record = {"name": "cloned", "engine": "chattts", "reference": "codes", "transcript": "你好"}
    (voices / "chattts" / "cloned.json").write_text(json.dumps(record), encoding="utf-8")
    settings = Settings(engine="chattts", model_dir=tiny_checkpoint, voices_dir=voices)
    with run_live_server(settings, engine=fixed_length_chattts(tiny_checkpoint)) as live:
        yield live


def post(server: LiveServer, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.base_url + path, json=body, timeout=TIMEOUT_S * 4)


def audio(server: LiveServer, voice: str, seed: int = 5) -> bytes:
    answer = post(server, "/v1/tts", {"text": "你好，今天天气很好。", "voice": voice,
                                      "seed": seed, "format": "pcm"})  # fmt: skip
    assert answer.status_code == 200, answer.text
    return answer.content


def speaker_of(server: LiveServer, spec: VoiceSpec) -> str:
    """The speaker string the server's engine speaks ``spec`` with (on its engine thread)."""
    worker = server.state.worker  # type: ignore[attr-defined]
    call = worker.call(lambda engine: engine.speaker(spec))
    loop = server.server.loop
    assert loop is not None
    return asyncio.run_coroutine_threadsafe(call, loop).result(TIMEOUT_S)


def test_a_mix_blends_the_parents_embeddings_and_is_spoken(server: LiveServer) -> None:
    """The mixed voice's speaker is the weighted blend of its parents' (unit-length, 0.7 :
    0.3); the engine speaks with it (the same audio as that speaker string given raw), and
    it sounds like neither parent."""
    body = {"name": "blend", "seed": 5,
            "mix": [{"voice": "alloy", "weight": 0.7}, {"voice": "echo", "weight": 0.3}]}  # fmt: skip
    created = post(server, "/v1/voices", body)
    assert created.status_code == 201, created.text
    assert created.json()["description"] == "mix: alloy 0.7, echo 0.3"
    assert created.json()["source"] == "speaker"
    state = server.state  # type: ignore[attr-defined]
    stored = json.loads((state.settings.voices_dir / "chattts" / "blend.json").read_text())
    mixed = Speaker._decode(stored["speaker"]).astype(np.float64)
    parents = [
        Speaker._decode(speaker_of(server, VoiceSpec(speaker_seed=seed))).astype(np.float64)
        for seed in (1000, 1004)  # alloy's and echo's speakers (server.voices.voice.presets)
    ]
    unit = [v / np.linalg.norm(v) for v in parents]
    expected = 0.7 * unit[0] + 0.3 * unit[1]
    cosine = mixed @ expected / np.linalg.norm(mixed) / np.linalg.norm(expected)
    assert cosine > 0.9999  # float16 storage
    assert max(abs(mixed @ u) / np.linalg.norm(mixed) for u in unit) < 0.999
    spoken = audio(server, "blend")
    assert spoken == audio(server, stored["speaker"])  # the blended embedding is what speaks
    assert spoken != audio(server, "alloy")
    assert spoken != audio(server, "echo")


def test_mixes_that_cannot_be_made_are_refused(server: LiveServer) -> None:
    """Unknown parts, a mix beside another source, a voice made from a clip (not a speaker
    vector) and the fallback voice (espeak has none) are refused with 400 and a message
    that says why; a weight of 0 is
    outside the schema (422); nothing is kept."""
    unknown = post(server, "/v1/voices", {"name": "m1", "mix": [{"voice": "nobody", "weight": 1}]})
    assert unknown.status_code == 400
    assert unknown.json()["error"]["code"] == "voice_not_found"
    both = post(server, "/v1/voices", {"name": "m2", "speaker_seed": 3,
                                       "mix": [{"voice": "alloy", "weight": 1}]})  # fmt: skip
    assert both.status_code == 400
    assert "not speaker_seed and mix" in both.json()["error"]["message"]
    espeak = post(server, "/v1/voices", {"name": "m3", "engine": "espeak",
                                         "mix": [{"voice": "alloy", "weight": 1}]})  # fmt: skip
    assert espeak.status_code == 400
    error = espeak.json()["error"]
    assert error["code"] == "invalid_voice" and "cannot mix" in error["message"]
    clip = post(server, "/v1/voices", {"name": "m5", "mix": [{"voice": "alloy", "weight": 1},
                                                              {"voice": "cloned", "weight": 1}]})  # fmt: skip
    assert clip.status_code == 400
    error = clip.json()["error"]
    assert (
        error["code"] == "invalid_voice"
        and "mix[1]: voice 'cloned' is made from a clip" in (error["message"])
    )
    zero = post(server, "/v1/voices", {"name": "m4", "mix": [{"voice": "alloy", "weight": 0}]})
    assert zero.status_code == 422  # the schema's: weights are positive
    assert "weight" in zero.json()["error"]["param"]
    listed = httpx.get(server.base_url + "/v1/voices", timeout=TIMEOUT_S).json()["data"]
    assert not {"m1", "m2", "m3", "m4", "m5"} & {v["name"] for v in listed}
