"""Wyoming events read from literal bytes: what the wyoming package writes reads back,
and what it would trust blindly is refused first."""

from __future__ import annotations

import asyncio
import json

import pytest
from wyoming.audio import AudioChunk
from wyoming.tts import Synthesize, SynthesizeVoice

from server.wyoming.framing import read_event
from streaming.errors import ClientError, LimitExceeded

LIMIT = 4096


def reader(data: bytes) -> asyncio.StreamReader:
    stream = asyncio.StreamReader(limit=LIMIT)
    stream.feed_data(data)
    stream.feed_eof()
    return stream


def wire(header: dict[str, object], data: bytes = b"", payload: bytes = b"") -> bytes:
    return json.dumps(header).encode() + b"\n" + data + payload


async def written(event: object) -> bytes:
    """The bytes the wyoming package itself writes for ``event``."""
    from wyoming.event import async_write_event

    class Sink:
        def __init__(self) -> None:
            self.data = b""

        def writelines(self, parts: list[bytes]) -> None:
            self.data += b"".join(parts)

        def write(self, part: bytes) -> None:
            self.data += part

        async def drain(self) -> None:
            pass

    sink = Sink()
    await async_write_event(event, sink)  # type: ignore[arg-type]
    return sink.data


async def test_events_the_package_writes_read_back() -> None:
    """A synthesize with its data split out, and an audio chunk with a payload."""
    synth = Synthesize(text="你好。", voice=SynthesizeVoice(name="alloy"))
    chunk = AudioChunk(rate=24000, width=2, channels=1, audio=b"\x01\x02" * 10)
    stream = reader(await written(synth.event()) + await written(chunk.event()))
    first = await read_event(stream, LIMIT)
    second = await read_event(stream, LIMIT)
    assert first is not None and Synthesize.from_event(first) == synth
    assert second is not None and AudioChunk.from_event(second).audio == chunk.audio
    assert await read_event(stream, LIMIT) is None


@pytest.mark.parametrize(
    "data",
    [
        wire({"type": "synthesize", "payload_length": LIMIT}),
        wire({"type": "synthesize", "data_length": 1 << 40}),
        b'{"type": "synthesize", "data": "' + b"x" * LIMIT + b'"}\n',
    ],
    ids=["payload", "data", "header line"],
)
async def test_an_event_over_the_limit_is_refused_before_it_is_read(data: bytes) -> None:
    """Announced lengths (or a header line) beyond the limit: message_too_large."""
    with pytest.raises(LimitExceeded) as refused:
        await read_event(reader(data), LIMIT)
    assert refused.value.code == "message_too_large" and refused.value.limit == LIMIT


@pytest.mark.parametrize(
    "data",
    [
        b"not json\n",
        b"[1, 2]\n",
        wire({"data": {}}),
        wire({"type": 7}),
        wire({"type": "x", "data": [1]}),
        wire({"type": "x", "data_length": -1}),
        wire({"type": "x", "payload_length": True}),
        wire({"type": "x", "data_length": 3}, b"[1]"),
        wire({"type": "x", "data_length": 3}, b"{{{"),
    ],
)
async def test_a_malformed_event_is_a_bad_message(data: bytes) -> None:
    """Not JSON, not an object with a string type, bad lengths, data not an object."""
    with pytest.raises(ClientError) as refused:
        await read_event(reader(data), LIMIT)
    assert refused.value.code == "bad_message"


@pytest.mark.parametrize(
    "data", [b"", b'{"type": "describe"', wire({"type": "x", "payload_length": 9}, b"", b"abc")]
)
async def test_a_stream_cut_short_is_its_end(data: bytes) -> None:
    """Nothing, a header without its newline, a payload cut short: the end, not an error."""
    assert await read_event(reader(data), LIMIT) is None


async def test_a_skipped_event_is_read_past_whatever_its_size() -> None:
    """An event of a type the caller ignores comes back without its data, however large,
    and the next event reads as sent."""
    big = await written(Synthesize(text="好" * LIMIT).event())
    after = await written(Synthesize(text="下一句。").event())
    stream = reader(big + after)
    skipped = await read_event(stream, LIMIT, skip=("synthesize",))
    assert skipped is not None and (skipped.type, skipped.data) == ("synthesize", {})
    nxt = await read_event(stream, LIMIT)
    assert nxt is not None and Synthesize.from_event(nxt).text == "下一句。"
