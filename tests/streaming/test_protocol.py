"""Protocol v1 wire types: client messages parsed and checked, server events, audio headers.

Pure and synchronous: literal frames in, typed messages or documented error codes out.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streaming import protocol as p
from streaming.errors import ClientError

# --- client messages: round trips -----------------------------------------------------

context_ids = st.text(min_size=1, max_size=p.MAX_CONTEXT_ID_CHARS)
speeds = st.floats(min_value=p.MIN_SPEED, max_value=p.MAX_SPEED, allow_nan=False)
seeds = st.none() | st.integers(min_value=0, max_value=p.MAX_SEED)
# An empty voice means "no voice" on the wire (parsed as None), so it has its own test.
voices = st.none() | st.text(min_size=1, max_size=p.MAX_VOICE_CHARS)
sample_rates = st.none() | st.sampled_from(p.SUPPORTED_SAMPLE_RATES_HZ)

client_messages = st.one_of(
    st.builds(
        p.Start,
        context_ids,
        voice=voices,
        seed=seeds,
        speed=speeds,
        sample_rate=sample_rates,
    ),
    st.builds(p.Text, context_ids, st.text()),
    st.builds(p.Flush, context_ids),
    st.builds(p.End, context_ids),
    st.builds(p.Cancel, context_ids),
)


@given(client_messages)
def test_serialize_then_parse_gives_back_the_message(message: p.ClientMessage) -> None:
    """Every client message survives serialize_client_message -> parse_client_message."""
    assert p.parse_client_message(p.serialize_client_message(message)) == message


@pytest.mark.parametrize(
    "message",
    [
        p.Start("a"),
        p.Start("a", voice="spk", seed=42, speed=1.5, sample_rate=16000),
        p.Start("a", volume=2.5),
        p.Text("a", "你好，世界。"),
        p.Text("a", ""),
        p.Flush("a"),
        p.End("a"),
        p.Cancel("a"),
    ],
    ids=repr,
)
def test_each_of_the_five_client_types_round_trips(message: p.ClientMessage) -> None:
    """Each of the five message types round trips and carries its wire `type` name."""
    raw = p.serialize_client_message(message)
    assert json.loads(raw)["type"] == type(message).__name__.lower()
    assert p.parse_client_message(raw) == message


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"type":"text","text":"x"}', p.Text(p.DEFAULT_CONTEXT_ID, "x")),
        ('{"type":"text","context_id":null,"text":"x"}', p.Text(p.DEFAULT_CONTEXT_ID, "x")),
        ('{"type":"end"}', p.End(p.DEFAULT_CONTEXT_ID)),
        ('{"type":"start","context_id":"a","voice":""}', p.Start("a")),
        ('{"type":"start","context_id":"a","speed":null}', p.Start("a", speed=1.0)),
        ('{"type":"start","context_id":"a","speed":1}', p.Start("a", speed=1.0)),
        ('{"type":"start","context_id":"a","seed":0}', p.Start("a", seed=0)),
        (f'{{"type":"start","context_id":"a","seed":{p.MAX_SEED}}}', p.Start("a", seed=p.MAX_SEED)),
        ('{"type":"start","context_id":"a","speed":0.5}', p.Start("a", speed=0.5)),
        ('{"type":"start","context_id":"a","speed":2.0}', p.Start("a", speed=2.0)),
        ('{"type":"start","context_id":"a","volume":null}', p.Start("a", volume=1.0)),
        ('{"type":"start","context_id":"a","volume":0}', p.Start("a", volume=0.0)),
        ('{"type":"start","context_id":"a","volume":4}', p.Start("a", volume=4.0)),
        ('{"type":"flush","context_id":"' + "c" * 64 + '"}', p.Flush("c" * 64)),
        (
            '{"type":"start","context_id":"a","voice":"' + "v" * p.MAX_VOICE_CHARS + '"}',
            p.Start("a", voice="v" * p.MAX_VOICE_CHARS),
        ),
        ('{"type":"cancel","context_id":"a","extra":[1,2]}', p.Cancel("a")),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 60 else None,
)
def test_valid_edge_inputs_parse(raw: str, expected: p.ClientMessage) -> None:
    """Absent or null context_id means "default"; limits are inclusive; "" voice is None."""
    assert p.parse_client_message(raw) == expected


@pytest.mark.parametrize("rate", p.SUPPORTED_SAMPLE_RATES_HZ)
def test_every_supported_sample_rate_is_accepted(rate: int) -> None:
    """Each documented sample rate parses to an int in Start.sample_rate."""
    message = p.parse_client_message(json.dumps({"type": "start", "sample_rate": rate}))
    assert message == p.Start(p.DEFAULT_CONTEXT_ID, sample_rate=rate)


# --- client messages: refusals --------------------------------------------------------

# fmt: off
MALFORMED: list[tuple[str, str | bytes, str, str | None]] = [
    # (case id, raw frame, error code, context_id the error names)
    ("bad json", "{not json", "bad_json", None),
    ("empty frame", "", "bad_json", None),
    ("truncated json", '{"type":"text"', "bad_json", None),
    ("too deeply nested json", "[" * 100_000, "bad_json", None),
    ("integer past the digit limit", '{"type":"end","n":' + "7" * 4301 + "}", "bad_json", None),
    ("json array", '[{"type":"end"}]', "bad_message", None),
    ("json string", '"end"', "bad_message", None),
    ("json number", "1", "bad_message", None),
    ("json null", "null", "bad_message", None),
    ("missing type", '{"context_id":"a"}', "missing_field", "a"),
    ("null type", '{"type":null,"context_id":"a"}', "missing_field", "a"),
    ("number type", '{"type":5,"context_id":"a"}', "invalid_field", "a"),
    ("list type", '{"type":["text"],"context_id":"a"}', "invalid_field", "a"),
    ("unknown type", '{"type":"speak","context_id":"a"}', "unknown_type", "a"),
    ("type is case sensitive", '{"type":"Text","context_id":"a","text":"x"}', "unknown_type", "a"),
    ("text missing", '{"type":"text","context_id":"a"}', "missing_field", "a"),
    ("text number", '{"type":"text","context_id":"a","text":5}', "invalid_field", "a"),
    ("text null", '{"type":"text","context_id":"a","text":null}', "invalid_field", "a"),
    ("text list", '{"type":"text","context_id":"a","text":["x"]}', "invalid_field", "a"),
    ("context_id empty", '{"type":"text","context_id":"","text":"x"}', "invalid_field", None),
    (
        "context_id too long",
        '{"type":"end","context_id":"' + "c" * (p.MAX_CONTEXT_ID_CHARS + 1) + '"}',
        "invalid_field",
        None,
    ),
    ("context_id number", '{"type":"end","context_id":7}', "invalid_field", None),
    ("context_id bool", '{"type":"end","context_id":true}', "invalid_field", None),
    ("seed negative", '{"type":"start","context_id":"a","seed":-1}', "invalid_field", "a"),
    ("seed too big", f'{{"type":"start","context_id":"a","seed":{p.MAX_SEED + 1}}}', "invalid_field", "a"),
    ("seed bool", '{"type":"start","context_id":"a","seed":true}', "invalid_field", "a"),
    ("seed float", '{"type":"start","context_id":"a","seed":1.5}', "invalid_field", "a"),
    ("seed integral float", '{"type":"start","context_id":"a","seed":4.0}', "invalid_field", "a"),
    ("seed string", '{"type":"start","context_id":"a","seed":"42"}', "invalid_field", "a"),
    ("speed too low", '{"type":"start","context_id":"a","speed":0.24}', "invalid_field", "a"),
    ("speed too high", '{"type":"start","context_id":"a","speed":4.01}', "invalid_field", "a"),
    ("speed zero", '{"type":"start","context_id":"a","speed":0}', "invalid_field", "a"),
    ("speed NaN", '{"type":"start","context_id":"a","speed":NaN}', "invalid_field", "a"),
    ("speed Infinity", '{"type":"start","context_id":"a","speed":Infinity}', "invalid_field", "a"),
    ("speed string", '{"type":"start","context_id":"a","speed":"1.0"}', "invalid_field", "a"),
    ("speed bool", '{"type":"start","context_id":"a","speed":true}', "invalid_field", "a"),
    ("volume too high", '{"type":"start","context_id":"a","volume":4.01}', "invalid_field", "a"),
    ("volume negative", '{"type":"start","context_id":"a","volume":-1}', "invalid_field", "a"),
    ("volume string", '{"type":"start","context_id":"a","volume":"2"}', "invalid_field", "a"),
    ("sample_rate unsupported", '{"type":"start","context_id":"a","sample_rate":12345}', "invalid_field", "a"),
    ("sample_rate string", '{"type":"start","context_id":"a","sample_rate":"24000"}', "invalid_field", "a"),
    ("sample_rate bool", '{"type":"start","context_id":"a","sample_rate":true}', "invalid_field", "a"),
    ("sample_rate fraction", '{"type":"start","context_id":"a","sample_rate":24000.5}', "invalid_field", "a"),
    (
        "voice too long",
        '{"type":"start","context_id":"a","voice":"' + "v" * (p.MAX_VOICE_CHARS + 1) + '"}',
        "invalid_field",
        "a",
    ),
    ("voice number", '{"type":"start","context_id":"a","voice":5}', "invalid_field", "a"),
    ("binary frame", b'{"type":"end","context_id":"a"}', "binary_not_supported", None),
    ("empty binary frame", b"", "binary_not_supported", None),
    ("bytearray frame", bytearray(b'{"type":"end"}'), "binary_not_supported", None),
]
# fmt: on


@pytest.mark.parametrize(
    ("raw", "code", "context_id"),
    [case[1:] for case in MALFORMED],
    ids=[case[0] for case in MALFORMED],
)
def test_malformed_frame_is_refused_with_its_documented_code(
    raw: str | bytes, code: str, context_id: str | None
) -> None:
    """Each malformed frame raises ClientError with its documented code and context."""
    with pytest.raises(ClientError) as caught:
        p.parse_client_message(raw)
    assert caught.value.code == code
    assert caught.value.context_id == context_id
    assert caught.value.limit is None
    assert caught.value.message


@pytest.mark.parametrize(
    ("raw", "field_name"),
    [
        ('{"type":"start","context_id":"a","seed":-1}', "seed"),
        ('{"type":"start","context_id":"a","speed":9}', "speed"),
        ('{"type":"start","context_id":"a","sample_rate":1}', "sample_rate"),
        ('{"type":"start","context_id":"a","voice":1}', "voice"),
        ('{"type":"text","context_id":"a","text":1}', "text"),
        ('{"type":"end","context_id":1}', "context_id"),
    ],
)
def test_invalid_field_message_names_the_field(raw: str, field_name: str) -> None:
    """An invalid_field error's message names the offending field, as documented."""
    with pytest.raises(ClientError) as caught:
        p.parse_client_message(raw)
    assert caught.value.code == "invalid_field"
    assert f"'{field_name}'" in caught.value.message


# --- server messages ------------------------------------------------------------------

SERVER_MESSAGES: list[tuple[p.ServerMessage, str, set[str]]] = [
    (
        p.Ready(
            session_id="s1",
            engine="espeak",
            sample_rate=24000,
            limits={"max_message_bytes": 1, "max_text_message_chars": 2},
        ),
        "ready",
        {
            "session_id",
            "engine",
            "sample_rate",
            "limits",
            "protocol",
            "encoding",
            "channels",
            "audio_header_bytes",
            "encodings",
        },
    ),
    (
        p.Started(
            context_id="a", stream=1, sample_rate=24000, voice=None, seed=42, speed=1.0, volume=2.0
        ),
        "started",
        {
            "context_id",
            "stream",
            "sample_rate",
            "voice",
            "seed",
            "speed",
            "volume",
            "encoding",
            "frame_ms",
        },
    ),
    (
        p.SegmentEvent(
            context_id="a",
            stream=1,
            index=0,
            text="你好😀，",
            spoken="你好，",
            start_char=0,
            end_char=4,
            audio_start_sample=0,
            audio_start_ms=0.0,
        ),
        "segment",
        {
            "context_id",
            "stream",
            "index",
            "text",
            "spoken",
            "start_char",
            "end_char",
            "audio_start_sample",
            "audio_start_ms",
        },
    ),
    (
        p.Done(
            context_id="a",
            stream=1,
            segments=2,
            audio_samples=4800,
            audio_ms=200.0,
            cancelled=False,
        ),
        "done",
        {"context_id", "stream", "segments", "audio_samples", "audio_ms", "cancelled"},
    ),
    (
        p.WarningEvent(
            context_id="a",
            code="unspeakable_characters",
            message="1 character(s) cannot be spoken",
            removed=[{"start": 2, "chars": "😀"}],
        ),
        "warning",
        {"context_id", "code", "message", "removed"},
    ),
    (
        p.SegmentWarningEvent(
            context_id="a",
            code="segment_without_audio",
            message="segment 2 made no audio, and so did its retry with another seed",
            segment=2,
        ),
        "warning",
        {"context_id", "code", "message", "segment"},
    ),
    (
        p.ErrorEvent(context_id=None, code="buffer_full", message="full", limit=20),
        "error",
        {"context_id", "code", "message", "limit", "retry_after_ms"},
    ),
    (
        p.ErrorEvent(context_id="a", code="bad_json", message="not json"),
        "error",
        {"context_id", "code", "message", "limit", "retry_after_ms"},
    ),
]


@pytest.mark.parametrize(
    ("message", "kind", "fields"),
    SERVER_MESSAGES,
    ids=[f"{kind}-{i}" for i, (_, kind, _) in enumerate(SERVER_MESSAGES)],
)
def test_server_message_json_has_its_type_and_every_field(
    message: p.ServerMessage, kind: str, fields: set[str]
) -> None:
    """to_json is one JSON object with the right `type` and exactly the documented fields."""
    raw = message.to_json()
    obj: dict[str, Any] = json.loads(raw)
    assert obj["type"] == kind
    assert set(obj) == fields | {"type"}
    for name in fields:
        assert obj[name] == getattr(message, name)
    assert "\n" not in raw


def test_draining_lists_each_open_context_as_an_object() -> None:
    """draining: its deadline and, per open context, id, stream, end_char and ended."""
    message = p.Draining(
        deadline_ms=30000, contexts=[p.DrainedContext("a", 1, end_char=12, ended=False)]
    )
    assert json.loads(message.to_json()) == {
        "type": "draining",
        "deadline_ms": 30000,
        "contexts": [{"context_id": "a", "stream": 1, "end_char": 12, "ended": False}],
    }


def test_ready_reports_the_audio_format_constants() -> None:
    """ready carries protocol 1, pcm_s16le, mono and the 12-byte header size."""
    obj = json.loads(p.Ready(session_id="s", engine="e", sample_rate=24000, limits={}).to_json())
    assert (obj["protocol"], obj["encoding"], obj["channels"], obj["audio_header_bytes"]) == (
        1,
        "pcm_s16le",
        1,
        12,
    )


def test_server_json_keeps_chinese_text_unescaped() -> None:
    """Segment text goes out as UTF-8 characters, not \\u escapes (smaller frames)."""
    raw = p.SegmentEvent("a", 1, 0, "你好。", "你好。", 0, 3, 0, 0.0).to_json()
    assert "你好。" in raw


# --- audio frame header ---------------------------------------------------------------

uint32 = st.integers(min_value=0, max_value=2**32 - 1)


@given(uint32, uint32, uint32, st.binary(max_size=64))
def test_audio_header_round_trips(stream: int, segment: int, sequence: int, pcm: bytes) -> None:
    """pack_audio_header + PCM unpacks to the same stream, segment, sequence and PCM."""
    frame = p.pack_audio_header(stream, segment, sequence) + pcm
    assert p.unpack_audio_header(frame) == (stream, segment, sequence, pcm)


def test_audio_header_is_three_little_endian_uint32() -> None:
    """The header is 12 bytes: stream, segment, sequence as little-endian uint32."""
    header = p.pack_audio_header(1, 2, 0x01020304)
    assert p.AUDIO_HEADER_BYTES == 12
    assert header == bytes([1, 0, 0, 0, 2, 0, 0, 0, 4, 3, 2, 1])


def test_header_only_frame_has_empty_pcm() -> None:
    """A frame of exactly 12 bytes unpacks with empty PCM."""
    assert p.unpack_audio_header(bytes(12)) == (0, 0, 0, b"")


@pytest.mark.parametrize("size", [0, 1, 11])
def test_frame_shorter_than_the_header_is_refused(size: int) -> None:
    """A binary frame shorter than its 12-byte header raises ValueError."""
    with pytest.raises(ValueError, match="12-byte header"):
        p.unpack_audio_header(bytes(size))
