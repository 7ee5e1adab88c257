"""One Wyoming connection: its events, in order, and what each answers.

- ``describe`` -> ``info`` (:mod:`server.wyoming.info`);
- ``synthesize`` (outside a stream) -> ``audio-start``, ``audio-chunk``...,
  ``audio-stop``: the whole text spoken as ``POST /v1/tts`` speaks it (the same
  segmenter policy, limits and time limit, ``--http-timeout-s``);
- ``synthesize-start``, ``synthesize-chunk``..., ``synthesize-stop`` -> the same audio
  events from the first segment on, then ``synthesize-stopped``
  (:mod:`server.wyoming.streamed`). A ``synthesize`` inside a stream is ignored: Home
  Assistant sends the whole text again before ``synthesize-stop``, for servers that do
  not stream;
- anything else is ignored, as Wyoming peers do with events they do not know.

A request refused (busy, draining, not ready, a voice there is not, a text too long, a
malformed event) or failed before its end gets an ``error`` event (``code`` is this
server's error code, as on every route; ``text`` says why) and the connection closes:
the client sees the error, then the end of the stream (a segment the engine fails on
inside a stream is an ``error`` event too, and the stream goes on). Every failure is counted and
logged where it is handled (:func:`server.errors.report`); each request has one summary
line (logger ``chattts_stream.summary``, kind ``wyoming``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from wyoming.event import Event
from wyoming.info import Describe
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
)

from server import logs
from server.errors import report
from server.http.speech import check_can_speak, check_text_length, start_speech
from server.state import AppState
from server.wyoming.audio import AudioWriter
from server.wyoming.framing import read_event, write_error, write_event
from server.wyoming.info import LANGUAGES, describe
from server.wyoming.streamed import StreamedSpeech
from streaming.errors import ClientError

__all__ = ["WyomingConnection"]

logger = logging.getLogger(__name__)


class WyomingConnection:
    """Serves one accepted connection until it ends (see the module docstring)."""

    def __init__(
        self,
        state: AppState,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        connection_id: str,
    ) -> None:
        self.state = state
        self.reader = reader
        self.writer = writer
        self.id = connection_id
        self.log = logging.LoggerAdapter(logger, {"session": connection_id})
        self.stream: StreamedSpeech | None = None
        #: A request is in progress (an event being answered, or a stream open).
        self.busy = False

    async def run(self) -> None:
        settings = self.state.settings
        try:
            while True:
                async with asyncio.timeout(settings.ws_idle_timeout_s or None):
                    # Inside a stream, a synthesize is Home Assistant's copy of its text:
                    # ignored, so read past whatever its size (a long reply's copy).
                    skip = ("synthesize",) if self.stream is not None else ()
                    event = await read_event(self.reader, settings.max_message_bytes, skip)
                if event is None:
                    break
                self.busy = True
                if not await self._handle(event):
                    break
                self.busy = self.stream is not None
        except TimeoutError:
            self.log.info("closing: no event for %g s", settings.ws_idle_timeout_s)
            self.state.metrics.connections_closed.labels(reason="idle_session").inc()
        except (OSError, asyncio.IncompleteReadError):
            pass  # the client is gone
        except Exception as exc:  # a malformed event, one over the limit; or a bug
            await self._refuse(exc, "event")
        finally:
            if self.stream is not None:
                await self.stream.close()
            self.writer.close()

    async def _handle(self, event: Event) -> bool:
        """Answer one event; False ends the connection."""
        kind = event.type
        if Describe.is_type(kind):
            return await self._describe()
        if Synthesize.is_type(kind):
            if self.stream is not None:
                return True  # Home Assistant's copy of the streamed text
            return await self._synthesize(_text(event), _voice(event))
        if SynthesizeStart.is_type(kind):
            return await self._start(_voice(event))
        if SynthesizeChunk.is_type(kind):
            return await self._chunk(_text(event))
        if SynthesizeStop.is_type(kind):
            return await self._stop()
        return True

    async def _describe(self) -> bool:
        try:
            info = await describe(self.state)
        except Exception as exc:
            return await self._refuse(exc, "describe")
        await self._write(info.event())
        return True

    def _writer(self) -> AudioWriter:
        return AudioWriter(
            self.writer,
            self.state.worker.sample_rate_hz,
            stall_s=self.state.settings.http_stall_timeout_s,
            metrics=self.state.metrics,
        )

    async def _synthesize(self, text: str, voice: str | None) -> bool:
        """A whole text, spoken as /v1/tts speaks it."""
        state = self.state
        summary: dict[str, Any] = {}
        outcome = "refused"
        try:
            check_text_length(state, text)
            check_can_speak(state)
            out = self._writer()  # its first audio is timed by the speech (route wyoming)
            speech = await start_speech(state, text, voice, out.rate_hz, route="wyoming")
            speech.summary = summary
            outcome = "failed"
            frames = speech.frames()
            async with contextlib.aclosing(frames):
                async for frame in frames:
                    await out.frames([frame])
            await out.stop()
            outcome = "complete"
            return True
        except OSError:
            outcome = "disconnected"
            return False
        except Exception as exc:
            return await self._refuse(exc, "synthesize")
        finally:
            logs.summary("wyoming", f"synthesize {outcome}", **{**summary, "outcome": outcome})
            state.metrics.wyoming_requests.labels(kind="synthesize", outcome=outcome).inc()

    async def _start(self, voice: str | None) -> bool:
        if self.stream is not None:
            error = ClientError(
                "synthesize-start while a stream is open: send synthesize-stop first",
                code="bad_message",
            )
            return await self._refuse(error, "synthesize-start")
        try:
            check_can_speak(self.state)  # the engine's rate is known from here on
            stream = StreamedSpeech(self.state, voice, self._writer(), self.log)
        except Exception as exc:
            return await self._refuse(exc, "synthesize-start")
        self.stream = stream
        try:
            await stream.open()
        except Exception as exc:
            stream.outcome = "refused"
            return await self._refuse(exc, "synthesize-start")
        return True

    async def _chunk(self, text: str) -> bool:
        if self.stream is None:
            error = ClientError(
                "synthesize-chunk outside a stream: send synthesize-start first",
                code="bad_message",
            )
            return await self._refuse(error, "synthesize-chunk")
        try:
            await self.stream.push(text)
        except ClientError as exc:
            self.stream.outcome = "refused"
            return await self._refuse(exc, "synthesize-chunk")
        return True

    async def _stop(self) -> bool:
        stream = self.stream
        if stream is None:
            return True  # nothing open: nothing to stop (a repeated stop is harmless)
        try:
            await stream.finish()
        except OSError:
            return False
        except Exception as exc:
            stream.outcome = "failed"
            return await self._refuse(exc, "synthesize-stop")
        await stream.close()  # its admission slot is free before its client hears the end
        self.stream = None
        await self._write(SynthesizeStopped().event())
        return True

    async def _refuse(self, exc: BaseException, where: str) -> bool:
        """Report ``exc`` (counted, logged) and send its ``error`` event; the connection
        then closes (returns False)."""
        code, message = report(
            exc, metrics=self.state.metrics, log=self.log, where=f"[{self.id}] {where}"
        )
        with contextlib.suppress(OSError):
            stall_s = self.state.settings.http_stall_timeout_s
            await write_error(self.writer, code, message, stall_s)
        return False

    async def _write(self, event: Event) -> None:
        await write_event(event, self.writer, self.state.settings.http_stall_timeout_s)


def _text(event: Event) -> str:
    """A ``synthesize``'s or ``synthesize-chunk``'s ``text`` (a string, or bad_message)."""
    text = event.data.get("text")
    if not isinstance(text, str):
        raise ClientError(f"{event.type} needs a text (a string)", code="bad_message")
    return text


def _voice(event: Event) -> str | None:
    """The voice an event names (``voice.name``); a language alone (zh, en) means the
    default voice, which speaks both; another language is refused (voice_not_found)."""
    voice = event.data.get("voice")
    if voice is None:
        return None
    name = voice.get("name") if isinstance(voice, dict) else None
    language = voice.get("language") if isinstance(voice, dict) else None
    if (
        not isinstance(voice, dict)
        or not isinstance(name, str | None)
        or not isinstance(language, str | None)
    ):
        raise ClientError(
            "voice must be an object with a name or a language (strings)", code="bad_message"
        )
    if name:
        return name
    if language and language.split("-")[0].split("_")[0].lower() not in LANGUAGES:
        raise ClientError(
            f"no voice for language {language[:32]!r}: the voices speak {', '.join(LANGUAGES)}",
            code="voice_not_found",
        )
    return None
