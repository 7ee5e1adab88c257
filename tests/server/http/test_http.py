"""The HTTP side on a real server: health, readiness, metrics, POST /v1/tts and the page."""

from __future__ import annotations

import io
import json
import subprocess
import threading
import time
import wave
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from chattts_client import StreamClient
from prometheus_client.parser import text_string_to_metric_families

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from server.http.system_routes import WEB_DIR
from server.textnorm import TextFrontend
from streaming.audio import float_to_pcm16
from tests.scripted_engine import ScriptedEngine

TEXT = "今天天气很好，我们去公园散步。"


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    with run_live_server(Settings(engine="espeak")) as live:
        yield live


@pytest.fixture(scope="module")
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=TIMEOUT_S) as client:
        yield client


def tts(
    http: httpx.Client, headers: dict[str, str] | None = None, **body: object
) -> httpx.Response:
    return http.post("/v1/tts", json=body, headers=headers)


# --- health and readiness -------------------------------------------------------------


@pytest.mark.live
def test_health_answers_200(http: httpx.Client) -> None:
    """/health is 200 {"status": "ok"} while the process serves HTTP."""
    response = http.get("/health")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


@pytest.mark.live
def test_ready_answers_200_with_the_engine_when_loaded(http: httpx.Client) -> None:
    """/ready is 200 with the engine's name and sample rate once the engine is warm."""
    response = http.get("/ready")
    assert response.status_code == 200
    body = response.json()
    assert body["ready"] is True
    assert (body["state"], body["engine"], body["degraded"]) == ("ready", "espeak", False)
    assert body["sample_rate"] == 24000
    assert body["text_frontend"]["loaded"] is True and body["text_frontend"]["normalizer"] is True


@pytest.mark.live
def test_ready_waits_for_the_text_normaliser() -> None:
    """With warm-up, /ready stays 503 until the text normaliser has loaded, then turns 200."""
    release = threading.Event()

    def slow_normalizer() -> None:
        release.wait(TIMEOUT_S)

    with run_live_server(Settings(engine="espeak"), wait_ready=False) as live:
        # The app's own front-end may have loaded already: a fresh, slow one shows the gate.
        frontend = TextFrontend(normalizer_factory=slow_normalizer)
        live.state.frontend = frontend  # type: ignore[attr-defined]
        frontend.start()
        live.state.worker.wait_ready(TIMEOUT_S)  # type: ignore[attr-defined]
        waiting = httpx.get(live.base_url + "/ready", timeout=TIMEOUT_S)
        release.set()
        deadline = time.monotonic() + TIMEOUT_S
        while not frontend.loaded and time.monotonic() < deadline:
            time.sleep(0.01)
        loaded = httpx.get(live.base_url + "/ready", timeout=TIMEOUT_S)
        frontend.close()
    assert waiting.status_code == 503 and waiting.json()["text_frontend"]["loaded"] is False
    assert loaded.status_code == 200 and loaded.json()["text_frontend"]["normalizer"] is False


@pytest.mark.live
def test_ready_is_503_while_the_engine_loads() -> None:
    """/ready is 503 (state loading) until the engine factory returns, then 200; /health is
    200 throughout, and WebSocket upgrades are refused with 503 not_ready meanwhile."""
    release = threading.Event()

    def slow_factory() -> tuple[ScriptedEngine, bool, None]:
        if not release.wait(TIMEOUT_S):
            raise RuntimeError("test never released the engine")
        return ScriptedEngine(), False, None

    try:
        with (
            run_live_server(Settings(), engine=slow_factory, wait_ready=False) as live,
            httpx.Client(base_url=live.base_url, timeout=TIMEOUT_S) as http,
        ):
            loading = http.get("/ready")
            assert loading.status_code == 503
            assert (loading.json()["ready"], loading.json()["state"]) == (False, "loading")
            assert http.get("/health").status_code == 200
            refused = http.post("/v1/tts", json={"text": "你好。"})
            assert (refused.status_code, refused.json()["error"]["code"]) == (503, "not_ready")

            release.set()
            assert live.state.worker.wait_ready(TIMEOUT_S)  # type: ignore[attr-defined]
            ready = http.get("/ready")
            assert ready.status_code == 200
            assert (ready.json()["state"], ready.json()["engine"]) == ("ready", "scripted")
    finally:
        release.set()


@pytest.mark.live
def test_ready_reports_degraded_when_chattts_fails_and_fallback_is_on(tmp_path: Path) -> None:
    """ChatTTS failing to load (empty model dir) with fallback on: ready, engine espeak,
    degraded, and the detail names the failure."""
    settings = Settings(engine="chattts", model_dir=tmp_path, fallback_on_load_failure=True)
    with (
        run_live_server(settings) as live,
        httpx.Client(base_url=live.base_url, timeout=TIMEOUT_S) as http,
    ):
        response = http.get("/ready")
        assert response.status_code == 200
        body = response.json()
        assert (body["state"], body["engine"], body["degraded"]) == ("ready", "espeak", True)
        assert "ChatTTS failed to load" in body["detail"]
        assert tts(http, text="你好。").status_code == 200


@pytest.mark.live
def test_ready_reports_failed_when_chattts_fails_and_fallback_is_off(tmp_path: Path) -> None:
    """With fallback_on_load_failure off, a ChatTTS load failure leaves /ready 503 failed."""
    settings = Settings(engine="chattts", model_dir=tmp_path, fallback_on_load_failure=False)
    with (
        run_live_server(settings, wait_ready=False) as live,
        httpx.Client(base_url=live.base_url, timeout=TIMEOUT_S) as http,
    ):
        assert not live.state.worker.wait_ready(TIMEOUT_S * 4)  # type: ignore[attr-defined]
        response = http.get("/ready")
        assert response.status_code == 503
        body = response.json()
        assert (body["ready"], body["state"]) == (False, "failed")
        assert body["detail"]
        assert tts(http, text="你好。").status_code == 503


# --- metrics --------------------------------------------------------------------------

#: The families README.md documents for /metrics (sessions, active streams, time to
#: first audio, per-segment latency and RTF, audio seconds, errors, queue depth).
DOCUMENTED_FAMILIES = {
    "tts_ws_sessions": "counter",
    "tts_ws_sessions_active": "gauge",
    "tts_active_streams": "gauge",
    "tts_time_to_first_audio_seconds": "histogram",
    "tts_segment_synthesis_seconds": "histogram",
    "tts_segment_rtf": "histogram",
    "tts_audio_seconds": "counter",
    "tts_errors": "counter",
    "tts_engine_queue_depth": "gauge",
    "tts_http_requests": "counter",
}


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(http: httpx.Client) -> Samples:
    response = http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


@pytest.mark.live
def test_metrics_is_prometheus_text_with_the_documented_families(http: httpx.Client) -> None:
    """/metrics parses as Prometheus text and has every documented tts_* family and type."""
    families = {
        family.name: family.type
        for family in text_string_to_metric_families(http.get("/metrics").text)
    }
    assert {name: families.get(name) for name in DOCUMENTED_FAMILIES} == DOCUMENTED_FAMILIES


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


@pytest.mark.live
async def test_metrics_counters_move_after_a_websocket_utterance(
    server: LiveServer, http: httpx.Client
) -> None:
    """One WebSocket utterance of two sentences raises the session, segment, audio,
    character and time-to-first-audio counters."""
    before = scrape(http)
    async with StreamClient.connect(server.ws_url, open_timeout_s=TIMEOUT_S) as client:
        await client.send_text("你好。再见。")
        await client.end()
        result = await client.collect(timeout_s=TIMEOUT_S)
    assert result.done is not None and result.done["segments"] == 2
    after = scrape(http)
    assert moved(before, after, "tts_ws_sessions_total") == 1
    assert moved(before, after, "tts_segments_total") == 2
    assert moved(before, after, "tts_segment_synthesis_seconds_count") == 2
    assert moved(before, after, "tts_segment_rtf_count") == 2
    assert moved(before, after, "tts_time_to_first_audio_seconds_count", route="ws") == 1
    # The counter is the engine's audio; what is sent differs by the segment joins
    # (engine silence trimmed, punctuation pauses added: streaming/joins.py).
    assert moved(before, after, "tts_audio_seconds_total") == pytest.approx(
        result.done["audio_samples"] / 24000, rel=0.25
    )
    assert moved(before, after, "tts_characters_total") == len("你好。再见。")


@pytest.mark.live
def test_metrics_counters_move_after_an_http_request(http: httpx.Client) -> None:
    """One POST /v1/tts raises the request, latency, per-segment, audio and time-to-first-audio counters."""
    before = scrape(http)
    response = tts(http, text="你好。", format="pcm")
    assert response.status_code == 200
    after = scrape(http)
    assert moved(before, after, "tts_segments_total") == 1
    assert moved(before, after, "tts_segment_synthesis_seconds_count") == 1
    assert moved(before, after, "tts_segment_rtf_count") == 1
    assert moved(before, after, "tts_characters_total") == len("你好。")
    assert moved(before, after, "tts_http_requests_total", route="/v1/tts", status="200") == 1
    assert moved(before, after, "tts_http_request_seconds_count") == 1
    assert moved(before, after, "tts_time_to_first_audio_seconds_count", route="http") == 1
    # The engine's audio: what was sent plus the engine silence the segment joins trim
    # (streaming/joins.py; espeak ends a sentence with ~250 ms of it).
    engine_s = moved(before, after, "tts_audio_seconds_total")
    assert 0 <= engine_s - len(response.content) / 2 / 24000 < 0.5


@pytest.mark.live
async def test_metrics_count_errors_by_code(server: LiveServer, http: httpx.Client) -> None:
    """tts_errors_total counts a refused WebSocket message and an HTTP refusal by code,
    both as the client's fault."""
    before = scrape(http)
    async with StreamClient.connect(server.ws_url, open_timeout_s=TIMEOUT_S) as client:
        await client.send_raw("{")
        error = await client.recv(TIMEOUT_S)
        assert isinstance(error, dict) and error["code"] == "bad_json"
    assert tts(http, text="😀").status_code == 400
    after = scrape(http)
    assert moved(before, after, "tts_errors_total", kind="bad_json", fault="client") == 1
    assert moved(before, after, "tts_errors_total", kind="nothing_to_speak", fault="client") == 1
    assert moved(before, after, "tts_http_requests_total", route="/v1/tts", status="400") == 1


# --- POST /v1/tts ---------------------------------------------------------------------


def wav_of(response: httpx.Response) -> tuple[wave._wave_params, bytes]:
    with wave.open(io.BytesIO(response.content)) as wav:
        return wav.getparams(), wav.readframes(wav.getnframes())


@pytest.mark.live
def test_tts_returns_a_24khz_mono_16bit_wav(http: httpx.Client) -> None:
    """POST /v1/tts defaults to a WAV file: 24000 Hz, mono, 16-bit, with real audio."""
    response = tts(http, text=TEXT)
    assert response.status_code == 200
    assert response.headers["content-type"] == "audio/wav"
    assert response.headers["x-tts-engine"] == "espeak"
    params, frames = wav_of(response)
    assert (params.framerate, params.nchannels, params.sampwidth) == (24000, 1, 2)
    assert params.nframes > 24000  # more than a second for 15 characters
    assert frames.count(0) < len(frames)  # not silence
    assert "x-tts-removed" not in response.headers


@pytest.mark.live
@pytest.mark.parametrize(
    ("body", "headers"),
    [({"format": "json"}, {}), ({}, {"Accept": "application/json"})],
    ids=["format json", "accept json"],
)
def test_tts_json_has_the_seed_articles_shape(
    http: httpx.Client, body: dict[str, str], headers: dict[str, str]
) -> None:
    """format json, or Accept: application/json, gives {audio_data, sample_rate,
    inference_time_ms} with float samples in [-1, 1]."""
    response = tts(http, headers=headers, text=TEXT, **body)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    data = response.json()
    assert {"audio_data", "sample_rate", "inference_time_ms"} <= set(data)
    assert data["sample_rate"] == 24000
    assert isinstance(data["inference_time_ms"], float) and data["inference_time_ms"] > 0
    samples = data["audio_data"]
    assert len(samples) > 24000
    assert all(isinstance(x, float | int) and -1.0 <= x <= 1.0 for x in samples)
    assert any(x != 0 for x in samples)


@pytest.mark.live
def test_tts_pcm_is_raw_16bit_samples_with_the_rate_in_a_header(http: httpx.Client) -> None:
    """format pcm gives raw int16 samples, typed with the rate and little-endian layout
    (not audio/L16, which RFC 2586 defines as big-endian)."""
    response = tts(http, text=TEXT, format="pcm")
    assert response.status_code == 200
    assert response.headers["content-type"] == "audio/pcm; rate=24000; channels=1; encoding=s16le"
    assert response.headers["x-tts-sample-rate"] == "24000"
    assert len(response.content) % 2 == 0
    assert len(response.content) > 2 * 24000


@pytest.mark.live
def test_tts_mp3_is_an_mp3_file(http: httpx.Client) -> None:
    """format mp3 gives audio/mpeg bytes that start with an ID3 tag or an MPEG frame sync."""
    response = tts(http, text=TEXT, format="mp3")
    assert response.status_code == 200
    assert response.headers["content-type"] == "audio/mpeg"
    head = response.content[:2]
    assert response.content.startswith(b"ID3") or (head[0] == 0xFF and head[1] & 0xE0 == 0xE0)
    assert len(response.content) > 1000


@pytest.mark.live
def test_tts_sample_rate_16000_resamples(http: httpx.Client) -> None:
    """sample_rate 16000 gives a 16 kHz WAV with 2/3 the samples of the 24 kHz one."""
    native, _ = wav_of(tts(http, text=TEXT, seed=7))
    response = tts(http, text=TEXT, seed=7, sample_rate=16000)
    assert response.status_code == 200
    low, _ = wav_of(response)
    assert low.framerate == 16000
    assert low.nframes / native.nframes == pytest.approx(2 / 3, rel=0.01)


@pytest.mark.live
@pytest.mark.parametrize(
    ("text", "start"),
    [("你好😀，世界。", 2), ("你好。世界😀。", 5), ("你好。\n世界。再见😀。", 9)],
    ids=["first segment", "second segment", "third segment"],
)
def test_tts_reports_removed_characters_in_a_json_header(
    http: httpx.Client, text: str, start: int
) -> None:
    """Characters that cannot be spoken are skipped and listed in X-TTS-Removed (JSON), at
    their offset in the whole request text."""
    assert text[start] == "😀"
    response = tts(http, text=text)
    assert response.status_code == 200
    removed = json.loads(response.headers["x-tts-removed"])
    assert removed == [{"start": start, "chars": "😀", "reason": "emoji"}]


@pytest.mark.live
@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"text": ""}, 422, "invalid_request"),
        ({}, 422, "invalid_request"),
        ({"text": 5}, 422, "invalid_request"),
        ({"text": "你好。", "speed": 4.5}, 400, "invalid_field"),
        ({"text": "你好。", "speed": 0.2}, 400, "invalid_field"),
        ({"text": "你好。", "seed": -1}, 422, "invalid_request"),
        ({"text": "你好。", "format": "aiff"}, 422, "invalid_request"),
        ({"text": "你好。", "sample_rate": 12345}, 422, "invalid_request"),
        ({"text": "😀😀"}, 400, "nothing_to_speak"),
    ],
    ids=[
        "empty text",
        "no text",
        "text not a string",
        "speed too high",
        "speed too low",
        "seed negative",
        "unknown format",
        "unsupported sample rate",
        "emoji only",
    ],
)
def test_tts_refuses_bad_requests_with_a_json_error(
    http: httpx.Client, body: dict[str, object], status: int, code: str
) -> None:
    """A bad POST /v1/tts body gets its status and {"error": {"code", "message"}}."""
    response = http.post("/v1/tts", json=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == code
    assert error["message"]


# --- the page -------------------------------------------------------------------------


@pytest.mark.live
def test_root_serves_the_page(http: httpx.Client) -> None:
    """GET / serves web/index.html as HTML."""
    if not (WEB_DIR / "index.html").is_file():
        pytest.skip("web/index.html is not committed yet (the page is another engineer's work)")
    response = http.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert response.text == (WEB_DIR / "index.html").read_text(encoding="utf-8")


def test_http_sample_rates_match_the_protocol() -> None:
    """POST /v1/tts accepts exactly the sample rates the WebSocket protocol does."""
    from typing import get_args

    from server.http.tts_routes import SampleRate
    from streaming import protocol

    assert get_args(SampleRate) == protocol.SUPPORTED_SAMPLE_RATES_HZ


@pytest.mark.live
def test_removed_header_is_capped_with_the_total_beside_it(http: httpx.Client) -> None:
    """Many removals: X-TTS-Removed lists the first runs that fit in 4 KB (each run's
    characters cut to 32), X-TTS-Removed-Count has them all."""
    text = "你😀" * 150 + "。"
    response = tts(http, text=text, format="pcm")
    assert response.status_code == 200
    header = response.headers["X-TTS-Removed"]
    listed = json.loads(header)
    everything = tts(http, text=text, format="json").json()["removed"]
    assert len(header) <= 4096 and 0 < len(listed) < len(everything)
    assert listed == everything[: len(listed)]
    assert response.headers["X-TTS-Removed-Count"] == str(len(everything))


@pytest.mark.live
def test_tts_json_prints_each_sample_as_the_float32_it_is(http: httpx.Client) -> None:
    """format json: every sample is a short decimal (no float64 expansion such as
    0.10000000149011612), and, read back as float32 and scaled to 16 bits, the very
    samples of the same request as pcm."""
    answer = tts(http, text=TEXT, format="json", seed=3)
    assert answer.status_code == 200
    raw = answer.text[answer.text.index("[") + 1 : answer.text.index("]")]
    for number in raw.split(","):  # float32 needs at most 9 significant digits
        digits = number.lstrip("-").split("e")[0].replace(".", "").strip("0")
        assert len(digits) <= 9, number
    samples = np.array(answer.json()["audio_data"], np.float32)
    pcm = np.frombuffer(tts(http, text=TEXT, format="pcm", seed=3).content, "<i2")
    assert np.array_equal(np.frombuffer(float_to_pcm16(samples), "<i2"), pcm)


def flac_total_samples(flac: bytes) -> int:
    """The total samples its STREAMINFO states (0: unknown)."""
    assert flac[:4] == b"fLaC" and flac[4] & 0x7F == 0
    info = flac[8:42]
    return ((info[13] & 0x0F) << 32) | int.from_bytes(info[14:18], "big")


@pytest.mark.live
def test_a_whole_flac_states_its_length_a_streamed_one_cannot(http: httpx.Client) -> None:
    """/v1/tts flac as a whole file: its header's total samples are the pcm answer's, so
    ffprobe gives its duration; streamed, ffmpeg could not go back to write it (0,
    unknown, as documented); each decodes to the pcm answer's samples, lossless."""
    pcm = tts(http, text=TEXT, format="pcm", seed=3).content
    whole = tts(http, text=TEXT, format="flac", seed=3).content
    streamed = tts(http, text=TEXT, format="flac", seed=3, stream=True).content
    assert flac_total_samples(whole) == len(pcm) // 2
    assert flac_total_samples(streamed) == 0
    probe = subprocess.run(
        ["ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", "-"],
        input=whole, capture_output=True, check=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    assert float(probe.stdout) == pytest.approx(len(pcm) / 2 / 24000, abs=1e-3)
    for flac in (whole, streamed):
        decoded = subprocess.run(
            ["ffmpeg", "-v", "error", "-i", "-", "-f", "s16le", "-"],
            input=flac, capture_output=True, check=True, timeout=TIMEOUT_S,
        ).stdout  # fmt: skip
        assert decoded == pcm
