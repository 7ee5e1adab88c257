"""A phone call hears the server's speech: a Twilio Media Streams bridge.

Twilio opens a WebSocket to this program when a call reaches ``<Connect><Stream
url="wss://YOUR-HOST/media"/></Connect>`` in your TwiML. When Twilio's ``start`` event
names the call's stream, the bridge opens a context on the TTS server with
``encoding: pcm_mulaw`` and ``frame_ms: 20``: every audio frame is then 20 ms of 8 kHz
µ-law, 160 bytes, which is what Twilio plays. Each frame goes to Twilio the moment it
arrives, base64 in a ``media`` message; after the last one a ``mark`` tells when the
call has heard it all (Twilio echoes the mark back once played).

    python client/examples/twilio_media_streams.py --port 8080 \\
        --tts ws://localhost:8000/v1/stream --text "您好，这里是语音助手。"

Twilio needs a public ``wss://`` address: put a TLS proxy or a tunnel in front of the
port. The caller's own audio (inbound ``media``) is where your speech recogniser would
listen; to let the caller interrupt, send ``clear`` for the stream and cancel the
context (:func:`interrupt`). Needs only ``chattts_client`` and ``websockets``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import sys

import websockets
from chattts_client import AudioFrame, StreamClient
from websockets.asyncio.server import ServerConnection

#: Twilio plays 8 kHz µ-law; 20 ms frames are 160 bytes, the size Twilio itself sends.
ENCODING = "pcm_mulaw"
FRAME_MS = 20

logger = logging.getLogger("twilio_bridge")


def media_message(stream_sid: str, audio: bytes) -> str:
    """Twilio's outbound ``media`` message: one frame of µ-law, base64."""
    payload = base64.b64encode(audio).decode("ascii")
    return json.dumps({"event": "media", "streamSid": stream_sid, "media": {"payload": payload}})


def mark_message(stream_sid: str, name: str) -> str:
    """A ``mark``: Twilio sends it back once everything before it has been played."""
    return json.dumps({"event": "mark", "streamSid": stream_sid, "mark": {"name": name}})


def clear_message(stream_sid: str) -> str:
    """``clear``: Twilio drops the audio it holds for the stream (the caller interrupts)."""
    return json.dumps({"event": "clear", "streamSid": stream_sid})


async def speak(
    call: ServerConnection,
    stream_sid: str,
    tts: StreamClient,
    text: str,
    voice: str | None = None,
    seed: int | None = None,
) -> str:
    """Speak ``text`` into the call, frame by frame as it is made; returns the context id
    (the name of the ``mark`` sent after its last frame)."""
    context = await tts.open(voice=voice, seed=seed, encoding=ENCODING, frame_ms=FRAME_MS)
    await tts.send_text(text, context)
    await tts.end(context)
    async for event in tts.events(timeout_s=60):
        if tts.context_of(event) != context:
            continue
        if isinstance(event, AudioFrame):
            await call.send(media_message(stream_sid, event.pcm))
        elif event.get("type") == "error":
            logger.warning("the TTS server: %s", event.get("message"))
        elif event.get("type") == "done":
            break
    await call.send(mark_message(stream_sid, context))
    return context


async def interrupt(
    call: ServerConnection, stream_sid: str, tts: StreamClient, context: str
) -> None:
    """The caller talks over the reply: Twilio drops what it holds, the server stops."""
    await call.send(clear_message(stream_sid))
    await tts.cancel(context)


async def handle_call(
    call: ServerConnection,
    tts_url: str,
    text: str,
    voice: str | None = None,
    seed: int | None = None,
) -> None:
    """One call: speak ``text`` once its stream starts, until Twilio stops it."""
    async with StreamClient.connect(tts_url) as tts:
        async for raw in call:
            message = json.loads(raw)
            event = message.get("event")
            if event == "start":
                stream_sid = message["start"]["streamSid"]
                logger.info("call stream %s started", stream_sid)
                await speak(call, stream_sid, tts, text, voice, seed)
            elif event == "mark":
                logger.info("the caller has heard %s", message["mark"]["name"])
            elif event == "stop":
                break
            # "connected" opens every stream; inbound "media" is the caller's voice.


async def serve(
    host: str, port: int, tts_url: str, text: str, voice: str | None, seed: int | None
) -> None:
    async def handler(call: ServerConnection) -> None:
        await handle_call(call, tts_url, text, voice, seed)

    async with websockets.serve(handler, host, port):
        logger.info("waiting for Twilio on ws://%s:%d", host, port)
        await asyncio.get_running_loop().create_future()  # until interrupted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on")
    parser.add_argument("--port", type=int, default=8080, help="port Twilio connects to")
    parser.add_argument("--tts", default="ws://localhost:8000/v1/stream", help="TTS server")
    parser.add_argument("--text", default="您好，这里是语音助手，请问有什么可以帮您？")
    parser.add_argument("--voice", default=None, help="a voice name (GET /v1/voices)")
    parser.add_argument("--seed", type=int, default=None, help="the same voice on every call")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    try:
        asyncio.run(serve(args.host, args.port, args.tts, args.text, args.voice, args.seed))
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
