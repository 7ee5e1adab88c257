"""Speak an LLM's reply while it is still being written.

Each text delta goes to the server the moment it exists, and each audio frame is
written the moment it arrives, so playback starts at the reply's first clause, long
before the reply is complete.

    python client/examples/speak_while_streaming.py --out reply.wav
    python client/examples/speak_while_streaming.py --out - \\
        | ffplay -f s16le -ar 24000 -ch_layout mono -nodisp -autoexit -
    python client/examples/speak_while_streaming.py --out - | aplay -f S16_LE -r 24000 -c 1

``--out FILE.wav`` keeps the WAV header right after every write, so the file plays
while it grows; ``--out -`` writes raw 16-bit mono PCM to stdout for a player.
``fake_llm`` stands in for a model's token stream: put yours in its place. Progress and
a summary go to stderr; a server that cannot be reached or refuses exits non-zero with
one line saying what to do (the WAV file is created only once audio arrives).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import wave
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import BinaryIO

from chattts_client import (
    AudioFrame,
    AuthError,
    BusyError,
    ContextError,
    StreamClient,
    TTSClientError,
    UnavailableError,
    error_from_event,
)
from websockets.exceptions import WebSocketException

#: Where ``make serve`` listens.
LOCAL_URL = "ws://localhost:8000/v1/stream"

REPLY = (
    "你好！我是你的语音助手，很高兴认识你。"
    "今天我们来聊聊流式语音合成：文字一边生成，声音一边播放，不用等整段话写完。"
    "你听到这句话的时候，后面的字可能还没有写出来呢。"
)


async def fake_llm(text: str, delay_ms: float) -> AsyncIterator[str]:
    """``text`` in pieces of one to three characters, ``delay_ms`` apart, as a model
    streams its tokens."""
    start = 0
    for size in _piece_sizes(len(text)):
        await asyncio.sleep(delay_ms / 1000)
        yield text[start : start + size]
        start += size


def _piece_sizes(length: int) -> list[int]:
    sizes: list[int] = []
    total = 0
    while total < length:
        size = min(1 + len(sizes) % 3, length - total)
        sizes.append(size)
        total += size
    return sizes


class OutputError(Exception):
    """The audio could not be written where ``--out`` says."""


class PcmSink:
    """Where the audio goes: a WAV file whose header is right after every write, or
    raw PCM on stdout (flushed per frame, so a player downstream starts at once).

    The file is created with the first audio, so a run that gets none leaves none."""

    def __init__(self, out: str, sample_rate_hz: int) -> None:
        self.samples = 0
        self.out = out
        self._rate_hz = sample_rate_hz
        self._raw: BinaryIO | None = sys.stdout.buffer if out == "-" else None
        self._wav: wave.Wave_write | None = None

    def check(self) -> None:
        """Fail before connecting when the file cannot be created there."""
        if self._raw is not None:
            return
        folder = os.path.dirname(os.path.abspath(self.out))
        if os.path.isdir(self.out) or not os.path.isdir(folder):
            raise OutputError(f"cannot write {self.out}: not a file in an existing folder")
        if not os.access(folder, os.W_OK):
            raise OutputError(f"cannot write {self.out}: the folder is not writable")

    def write(self, pcm: bytes) -> None:
        try:
            if self._raw is not None:
                self._raw.write(pcm)
                self._raw.flush()
            else:
                if self._wav is None:
                    self._wav = wave.open(self.out, "wb")  # noqa: SIM115 (closed by close())
                    self._wav.setnchannels(1)
                    self._wav.setsampwidth(2)
                    self._wav.setframerate(self._rate_hz)
                self._wav.writeframes(pcm)  # rewrites the header's sizes: valid at every moment
        except OSError as exc:
            raise OutputError(f"cannot write {self.out}: {exc.strerror or exc}") from exc
        self.samples += len(pcm) // 2

    def close(self) -> None:
        if self._wav is not None:
            self._wav.close()


@dataclass
class Progress:
    pieces_sent: int = 0
    pieces_total: int = 0
    #: Pieces sent when the first audio arrived; None until it does.
    pieces_at_first_audio: int | None = None
    first_audio_s: float | None = None
    server_samples: int = 0


async def send_reply(
    tts: StreamClient, ctx: str, pieces: AsyncIterator[str], progress: Progress
) -> None:
    async for piece in pieces:
        await tts.send_text(piece, ctx)
        progress.pieces_sent += 1
    await tts.end(ctx)  # no more text: the server speaks the rest, then sends done


async def play_reply(tts: StreamClient, ctx: str, sink: PcmSink, progress: Progress) -> None:
    """Write the context's audio as it comes, until ``done``."""
    began = time.monotonic()
    while True:
        event = await tts.recv(timeout_s=60)
        if tts.context_of(event) != ctx:
            continue
        if isinstance(event, AudioFrame):
            if progress.pieces_at_first_audio is None:
                progress.pieces_at_first_audio = progress.pieces_sent
                progress.first_audio_s = time.monotonic() - began
            sink.write(event.pcm)
        elif event["type"] == "error":
            error = error_from_event(event)
            if not isinstance(error, ContextError):
                raise error
            # One segment failed; the server goes on with the next (a gap in the audio).
            print(f"warning: {error}", file=sys.stderr)
        elif event["type"] == "done":
            progress.server_samples = event["audio_samples"]
            return


async def speak(args: argparse.Namespace, sink: PcmSink) -> Progress:
    progress = Progress(pieces_total=len(_piece_sizes(len(args.text))))
    async with StreamClient.connect(args.url, token=args.token) as tts:
        ctx = await tts.open(voice=args.voice, seed=args.seed, sample_rate=args.sample_rate)
        pieces = fake_llm(args.text, args.delay_ms)
        sending = asyncio.ensure_future(send_reply(tts, ctx, pieces, progress))
        try:
            await play_reply(tts, ctx, sink, progress)
            await sending
        finally:
            sending.cancel()
    return progress


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--url", default=os.environ.get("CHATTTS_URL", LOCAL_URL),
                        help=f"the server's /v1/stream; $CHATTTS_URL, else {LOCAL_URL} "
                        "(make serve)")  # fmt: skip
    parser.add_argument("--token", default=None, help="the server's bearer token, if it has one")
    parser.add_argument("--voice", default=None,
                        help="a name from GET /v1/voices; None: the server's default")  # fmt: skip
    parser.add_argument("--seed", type=int, default=None,
                        help="the sampling seed; None: the server picks one")  # fmt: skip
    parser.add_argument("--sample-rate", type=int, default=24000, help="of the audio written, Hz")
    parser.add_argument("--delay-ms", type=float, default=40.0, help="between text pieces")
    parser.add_argument("--text", default=REPLY, help="the reply the stand-in LLM streams")
    parser.add_argument("--out", default="reply.wav", help="a .wav file, or - for raw PCM")
    return parser.parse_args(argv)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Every option's default in ``-h``; the description's examples as written."""


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sink = PcmSink(args.out, args.sample_rate)
    try:
        sink.check()
        progress = asyncio.run(speak(args, sink))
    except OutputError as exc:
        print(exc, file=sys.stderr)
        return 1
    except AuthError as exc:
        print(f"the server refused the token ({exc}): pass --token", file=sys.stderr)
        return 2
    except BusyError as exc:
        wait_s = (exc.retry_after_ms or 0) / 1000
        print(f"the server is at capacity: try again in {wait_s:g} s", file=sys.stderr)
        return 3
    except UnavailableError as exc:
        print(f"the server takes no new work now ({exc}): try again later", file=sys.stderr)
        return 3
    except TTSClientError as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 1
    except (OSError, TimeoutError, WebSocketException) as exc:
        reason = str(exc) or type(exc).__name__
        print(f"cannot reach the server at {args.url} ({reason}): is it running "
              "(make serve)? --url names another", file=sys.stderr)  # fmt: skip
        return 1
    except KeyboardInterrupt:
        print(f"interrupted: {sink.samples} samples written", file=sys.stderr)
        return 130
    finally:
        sink.close()
    where = "stdout" if args.out == "-" else args.out
    if sink.samples == 0 and args.out != "-":
        where += " (no audio came: no file written)"
    print(
        f"first audio after {progress.pieces_at_first_audio} of {progress.pieces_total} "
        f"text pieces ({progress.first_audio_s or 0:.2f} s); {sink.samples} samples "
        f"({sink.samples / args.sample_rate:.2f} s) written to {where}, "
        f"{progress.server_samples} sent by the server",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
