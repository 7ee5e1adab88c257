"""G.711 for phone lines: the companding tables, the 24 kHz -> 8 kHz path, exact frames,
and what the WebSocket core says of encodings and frame durations."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming import connection as c
from streaming import encodings, g711
from streaming import protocol as p
from streaming.audio import float_to_pcm16, pcm16_to_float
from streaming.errors import ClientError
from streaming.segment import Segment
from streaming.speech import SpeechPipeline, SpeechSettings
from streaming.text import PreparedText

with warnings.catch_warnings():  # audioop is deprecated (gone in 3.13): a reference only
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

ENGINE_HZ = 24_000
EVERY_PCM16 = np.arange(-32768, 32768, dtype="<i2").tobytes()


# --- the tables -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("law", "reference"), [("ulaw", audioop.lin2ulaw), ("alaw", audioop.lin2alaw)]
)
def test_every_16_bit_sample_encodes_as_the_reference_does(law: str, reference: object) -> None:
    """All 65,536 samples give the code of the reference G.711 coder (CPython's audioop)."""
    assert g711.encode(EVERY_PCM16, law) == reference(EVERY_PCM16, 2)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("law", "reference"), [("ulaw", audioop.ulaw2lin), ("alaw", audioop.alaw2lin)]
)
def test_every_code_decodes_as_the_reference_does(law: str, reference: object) -> None:
    """All 256 codes decode to the reference's 16-bit value."""
    codes = bytes(range(256))
    assert g711.decode(codes, law) == reference(codes, 2)  # type: ignore[operator]


# ITU-T G.711's own values: silence, the largest magnitudes, and segment edges. µ-law
# inverts every bit on the line; A-law inverts the even ones (0x55).
KNOWN_CODES = [
    ("ulaw", 0, 0xFF),
    ("ulaw", -1, 0x7E),
    ("ulaw", 32767, 0x80),
    ("ulaw", -32768, 0x00),
    ("ulaw", 1000, 0xCE),
    ("alaw", 0, 0xD5),
    ("alaw", -1, 0x55),
    ("alaw", 32767, 0xAA),
    ("alaw", -32768, 0x2A),
    ("alaw", 1000, 0xFA),
]


@pytest.mark.parametrize(("law", "sample", "code"), KNOWN_CODES)
def test_known_samples_give_their_g711_codes(law: str, sample: int, code: int) -> None:
    """Known vectors: zero, -1, full scale both ways, and a mid-segment value."""
    assert g711.encode(np.array([sample], np.int16), law) == bytes([code])


@pytest.mark.parametrize("law", g711.LAWS)
def test_decoded_codes_encode_back_to_themselves(law: str) -> None:
    """Every code's value is a fixed point: decode then encode is the identity
    (µ-law's two zeros, 0x7F and 0xFF, both decode to 0, which encodes as 0xFF)."""
    codes = bytes(range(256))
    again = g711.encode(g711.decode(codes, law), law)
    differ = [code for code, back in zip(codes, again, strict=True) if code != back]
    assert differ == ([0x7F] if law == "ulaw" else [])


@pytest.mark.parametrize("law", g711.LAWS)
def test_companding_error_stays_within_g711s_step(law: str) -> None:
    """Companding keeps the error proportional to the sample (log segments): under 3.6%
    of the value above 1,024, at most 36 of 32,768 below (the first segments' steps)."""
    pcm = np.frombuffer(EVERY_PCM16, "<i2").astype(np.int32)
    back = np.frombuffer(g711.decode(g711.encode(EVERY_PCM16, law), law), "<i2")
    error = np.abs(back - pcm)
    large = np.abs(pcm) > 1024
    assert np.max(error[large] / np.abs(pcm[large])) < 0.036
    assert np.max(error[~large]) <= 36


def test_an_odd_number_of_pcm_bytes_is_refused() -> None:
    """Half a sample is an error, not silently dropped."""
    with pytest.raises(ValueError, match="even"):
        g711.encode(b"\x00\x01\x02", "ulaw")


def test_an_unknown_law_is_refused() -> None:
    """A law that is not µ or A is an error naming the two."""
    with pytest.raises(ValueError, match="ulaw, alaw"):
        g711.encode(b"\x00\x00", "mulaw")


# --- encodings ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "law"),
    [("pcm_mulaw", "ulaw"), ("pcm_alaw", "alaw"), ("ulaw", "ulaw"), ("g711_alaw", "alaw")],
)
def test_each_g711_name_encodes_floats_with_its_law(name: str, law: str) -> None:
    """The encoder for a G.711 name is float -> PCM16 -> that law, one byte a sample."""
    samples = np.linspace(-1, 1, 1001, dtype=np.float32)
    assert encodings.encoder(name)(samples) == g711.encode(float_to_pcm16(samples), law)
    assert encodings.bytes_per_sample(name) == 1


def test_pcm_s16le_encodes_as_16_bit_pcm() -> None:
    """The default encoding is the 16-bit PCM every frame had before."""
    samples = np.linspace(-1, 1, 101, dtype=np.float32)
    assert encodings.encoder("pcm_s16le")(samples) == float_to_pcm16(samples)
    assert encodings.bytes_per_sample("pcm_s16le") == 2


@pytest.mark.parametrize(
    ("name", "asked", "expected"),
    [
        ("ulaw", None, 8000),
        ("pcm_alaw", 8000, 8000),
        ("pcm", None, 24000),
        ("pcm_s16le", 16000, 16000),
    ],
)
def test_the_rate_is_the_one_asked_for_or_the_formats_default(
    name: str, asked: int | None, expected: int
) -> None:
    """G.711 defaults to 8 kHz, the rest to the route's default rate."""
    assert encodings.check_rate(name, asked, 24000) == expected


@pytest.mark.parametrize("rate", [16000, 24000, 48000])
def test_g711_refuses_a_rate_it_cannot_carry(rate: int) -> None:
    """G.711 is 8 kHz: another rate is a 400 naming the field, not a silent change."""
    with pytest.raises(ClientError, match="8000 Hz only") as refused:
        encodings.check_rate("ulaw", rate, 24000)
    assert refused.value.code == "invalid_field" and refused.value.param == "sample_rate"


# --- 24 kHz -> 8 kHz: the anti-aliasing filter, through the real pipeline -------------


def tone(hz: float, seconds: float = 1.0, rate: int = ENGINE_HZ) -> np.ndarray:
    n = np.arange(int(seconds * rate))
    return (0.5 * np.sin(2 * np.pi * hz * n / rate)).astype(np.float32)


def through_telephony(audio: np.ndarray, chunk: int, law: str = "ulaw") -> np.ndarray:
    """``audio`` at 24 kHz through the speech pipeline to 8 kHz (no joins), encoded as
    ``law`` and decoded again, as a phone line hears it."""
    pipeline = SpeechPipeline(SpeechSettings(shape_joins=False), ENGINE_HZ, 8000)
    text = "你好。"
    pipeline.begin(Segment(0, text, 0, len(text), "sentence"), PreparedText(text, ()))
    frames: list[np.ndarray] = []
    for start in range(0, audio.size, chunk):
        frames += pipeline.push(audio[start : start + chunk])
    frames += pipeline.finish()
    codes = b"".join(encodings.encoder(law)(frame) for frame in frames)
    return pcm16_to_float(g711.decode(codes, law))


def energy(samples: np.ndarray) -> float:
    middle = samples[samples.size // 10 : -samples.size // 10]  # no edge transients
    return float(np.mean(np.square(middle.astype(np.float64))))


def test_a_5_khz_tone_does_not_come_back_from_8_khz() -> None:
    """5 kHz is above 8 kHz's Nyquist frequency: filtered out (>= 60 dB down), not folded
    to 3 kHz. Without the filter it would come back at full level."""
    heard = energy(through_telephony(tone(5000), chunk=480))
    assert heard < energy(tone(5000)) * 1e-6


def test_a_1_khz_tone_comes_through_at_its_level() -> None:
    """1 kHz is in the telephone band: its energy survives filter and companding (±0.2 dB)."""
    heard = energy(through_telephony(tone(1000), chunk=480))
    assert heard == pytest.approx(energy(tone(1000)), rel=0.05)


@settings(max_examples=25, deadline=None)
@given(chunk=st.integers(min_value=1, max_value=5000))
def test_streamed_telephony_audio_equals_one_shot(chunk: int) -> None:
    """Engine chunks of any size give the same G.711 bytes as one chunk: the filter's
    state carries across chunk seams (no clicks)."""
    audio = tone(440, 0.5) + tone(3100, 0.5) * 0.3
    whole = through_telephony(audio, chunk=audio.size, law="alaw")
    np.testing.assert_array_equal(through_telephony(audio, chunk=chunk, law="alaw"), whole)


# --- exact frames ---------------------------------------------------------------------


def speak_segments(pipeline: SpeechPipeline, texts: list[str]) -> list[np.ndarray]:
    frames: list[np.ndarray] = []
    start = 0
    for index, text in enumerate(texts):
        seg = Segment(index, text, start, start + len(text), "sentence")
        pipeline.begin(seg, PreparedText(text, ()))
        audio = tone(300, 0.37 + 0.11 * index)
        for at in range(0, audio.size, 1000):
            frames += pipeline.push(audio[at : at + 1000])
        frames += pipeline.finish()
        start += len(text)
    return frames


@pytest.mark.parametrize("whole_text", [False, True])
def test_a_context_frame_duration_makes_every_frame_exactly_that_long(whole_text: bool) -> None:
    """frame_ms 20 at 8 kHz: every frame is 160 samples, from the first to the last;
    each segment's last frame is filled with silence, so the next starts on a frame."""
    pipeline = SpeechPipeline(SpeechSettings(), ENGINE_HZ, 8000, whole_text=whole_text, frame_ms=20)
    frames = speak_segments(pipeline, ["你好。", "今天天气很好，", "再见！"])
    assert frames and {frame.size for frame in frames} == {160}
    assert pipeline.samples == 160 * len(frames)
    assert pipeline.samples % 160 == 0


def test_without_a_frame_duration_frames_ramp_up_as_before() -> None:
    """No frame_ms: the server's frames (40 ms first, doubling to 100 ms)."""
    pipeline = SpeechPipeline(SpeechSettings(), ENGINE_HZ, 8000)
    sizes = [frame.size for frame in speak_segments(pipeline, ["你好你好你好。"])]
    assert sizes[:3] == [320, 640, 800]


def test_exact_frames_keep_the_audio_and_only_add_silence() -> None:
    """The padding is silence after the audio: the frames without their zero tail are
    the server's own frames' audio."""
    exact = np.concatenate(
        speak_segments(SpeechPipeline(SpeechSettings(), ENGINE_HZ, 8000, frame_ms=20), ["好。"])
    )
    plain = np.concatenate(
        speak_segments(SpeechPipeline(SpeechSettings(), ENGINE_HZ, 8000), ["好。"])
    )
    assert exact.size >= plain.size and exact.size - plain.size < 160
    np.testing.assert_array_equal(exact[: plain.size], plain)
    assert not exact[plain.size :].any()


# --- the WebSocket core ---------------------------------------------------------------


def core() -> c.Connection:
    return c.Connection(
        c.ConnectionSettings(),
        SpeechSettings(),
        engine_rate_hz=ENGINE_HZ,
        idle_flush_ms=700,
        sentence_flush_ms=150,
        check_voice=lambda voice: None,
        choose_seed=lambda: 42,
    )


def start(**fields: object) -> list[c.Event]:
    return core().receive(json.dumps({"type": "start", "context_id": "a", **fields}))


def started(events: list[c.Event]) -> p.Started:
    (reply,) = [e.message for e in events if isinstance(e, c.Reply)]
    assert isinstance(reply, p.Started)
    return reply


def refusal(events: list[c.Event]) -> ClientError:
    (event,) = events
    assert isinstance(event, c.Refused) and isinstance(event.error, ClientError)
    return event.error


def test_ready_lists_the_encodings() -> None:
    """ready tells a client which start.encoding values it may ask for."""
    ready = p.Ready(session_id="s", engine="chattts", sample_rate=ENGINE_HZ, limits={})
    assert json.loads(ready.to_json())["encodings"] == ["pcm_s16le", "pcm_mulaw", "pcm_alaw"]


def test_started_echoes_the_encoding_and_frame_duration() -> None:
    """pcm_mulaw without a rate is 8 kHz; the frame duration comes back as asked."""
    answer = started(start(encoding="pcm_mulaw", frame_ms=20))
    assert (answer.encoding, answer.frame_ms, answer.sample_rate) == ("pcm_mulaw", 20, 8000)


def test_the_default_encoding_is_16_bit_pcm_at_the_engine_rate() -> None:
    """A start without encoding or frame_ms is what it was: pcm_s16le, the engine's rate."""
    answer = started(start())
    assert (answer.encoding, answer.frame_ms, answer.sample_rate) == ("pcm_s16le", None, 24000)


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"encoding": "opus"}, "'encoding' must be one of pcm_s16le, pcm_mulaw, pcm_alaw"),
        ({"encoding": "pcm_alaw", "sample_rate": 16000}, "8000 Hz only"),
        ({"frame_ms": 5}, "'frame_ms' must be an integer in [10, 1000]"),
        ({"frame_ms": 1001}, "'frame_ms' must be an integer in [10, 1000]"),
        ({"frame_ms": 20.5}, "'frame_ms' must be an integer"),
        ({"frame_ms": True}, "'frame_ms' must be an integer"),
        ({"frame_ms": 10, "sample_rate": 22050}, "not a whole number of samples"),
    ],
)
def test_a_start_the_core_cannot_serve_is_refused_clearly(
    fields: dict[str, object], says: str
) -> None:
    """Each refusal is invalid_field for the context, naming what is wrong."""
    error = refusal(start(**fields))
    assert error.code == "invalid_field" and error.context_id == "a"
    assert says in error.message


@pytest.mark.parametrize("name", ["pcm_s16le", "pcm_mulaw", "alaw"])
def test_an_encoder_for_samples_in_range_gives_the_same_bytes(name: str) -> None:
    """``in_range`` leaves the range check out, not the conversion: samples inside
    (-1, 1) give the same bytes in every encoding."""
    samples = np.linspace(-0.99997, 0.99997, 1001, dtype=np.float32)
    assert encodings.encoder(name, in_range=True)(samples) == encodings.encoder(name)(samples)
