"""One WebSocket connection's decisions, without I/O: client frames in, events out.

The session (``server/ws/session.py``) owns the socket, the clock and the engine; whatever
it must *decide* about a client frame is decided here, synchronously: whether the frame
is well formed and within the connection's limits, whether the message is legal for its
context now, which segments the text completes, when an idle fragment is due. Feed a
frame to :meth:`Connection.receive` and act on the events it returns, in order:

- :class:`Reply`: send this message;
- :class:`Refused`: the message was refused (a :class:`~streaming.errors.ClientError`,
  ``busy`` when admission refuses a new context, ``draining`` once the server drains):
  report it and send its ``error`` event; nothing else changed;
- :class:`Opened`: a context opened: start speaking for it (its
  :class:`~streaming.utterance.UtteranceState` then says what its client is sent of each
  speech event, :meth:`~streaming.utterance.UtteranceState.heard`, and its ``done``);
- :class:`FirstText`: the context received its first words (time to first audio starts);
- :class:`Segments`: these segments of the context are ready to speak, in order;
- :class:`Ended`: the context will get no more segments (after ``end``);
- :class:`Cancelled`: drop everything of the context now;
- :class:`IdleTimer`: (re)arm the context's idle timer to call :meth:`Connection.idle`
  after ``delay_s``, or disarm it (``None``).

The session tells the core what only it can know: a segment finished speaking
(:meth:`Connection.spoken`, which frees its characters from the buffer limit), a
context finished (:meth:`Connection.forget`, after its ``done``), and the server began
to drain (:meth:`Connection.drain`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

from streaming import encodings
from streaming import protocol as p
from streaming.errors import ClientError, LimitExceeded, TTSError, Unavailable
from streaming.segment import Segment
from streaming.speech import SpeechSettings
from streaming.text import Lexicon, LexiconError, LexiconSettings
from streaming.utterance import UtteranceState, UtteranceVoice

__all__ = [
    "Cancelled",
    "Connection",
    "ConnectionSettings",
    "Ended",
    "Event",
    "FirstText",
    "IdleTimer",
    "Opened",
    "Refused",
    "Reply",
    "Segments",
]


@dataclass(frozen=True)
class ConnectionSettings:
    """What one connection may ask for; sent to the client in ``ready``."""

    max_message_bytes: int = 64 * 1024
    max_text_message_chars: int = 4000
    max_buffered_chars: int = 20000
    max_contexts: int = 8

    def as_dict(self) -> dict[str, int]:
        # Its fields are ints: a shallow copy is asdict() without its deep copies (one
        # per connection, ~15 us). By its fields, not vars(): a class compiled by mypyc
        # (bench/compiled_tree.py) has no __dict__.
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Reply:
    message: p.ServerMessage


@dataclass(frozen=True)
class Refused:
    error: TTSError


@dataclass(frozen=True)
class Opened:
    context: UtteranceState


@dataclass(frozen=True)
class FirstText:
    context_id: str


@dataclass(frozen=True)
class Segments:
    context_id: str
    segments: tuple[Segment, ...]


@dataclass(frozen=True)
class Ended:
    context_id: str


@dataclass(frozen=True)
class Cancelled:
    context_id: str


@dataclass(frozen=True)
class IdleTimer:
    context_id: str
    #: Seconds until :meth:`Connection.idle` is due; None disarms the timer.
    delay_s: float | None


Event = Reply | Refused | Opened | FirstText | Segments | Ended | Cancelled | IdleTimer


class Connection:
    """The sans-I/O core of one connection; see the module docstring.

    ``check_voice`` returns the seed a named voice fixes (None: it fixes none), and raises
    :class:`ClientError` (``voice_not_found``, listing the names there are) or ValueError
    for a voice that does not exist; ``choose_seed`` picks the seed of a context whose
    message and voice name none; ``admit``
    decides whether a new context may start (admission control, given its id): False
    to speak on the main engine, True on the fallback voice, or it raises ``busy``.
    ``lexicon_limits`` bound the lexicon a ``start`` may bring.
    """

    def __init__(
        self,
        limits: ConnectionSettings,
        speech: SpeechSettings,
        *,
        engine_rate_hz: int,
        idle_flush_ms: int,
        sentence_flush_ms: int,
        check_voice: Callable[[str], int | None],
        choose_seed: Callable[[], int],
        admit: Callable[[str], bool] = lambda context_id: False,
        lexicon_limits: LexiconSettings | None = None,
    ) -> None:
        self.limits = limits
        self.lexicon_limits = lexicon_limits or LexiconSettings(max_entries=100)
        self.speech = speech
        self.engine_rate_hz = engine_rate_hz
        self.idle_flush_ms = idle_flush_ms
        self.sentence_flush_ms = sentence_flush_ms
        self._check_voice = check_voice
        self._choose_seed = choose_seed
        self._admit = admit
        self.contexts: dict[str, UtteranceState] = {}
        self._next_stream = 1
        #: The server drains: no context opens, the open ones speak what they hold.
        self.draining = False

    @property
    def holds_unspoken_text(self) -> bool:
        return any(context.buffered_chars for context in self.contexts.values())

    def receive(self, raw: str | bytes) -> list[Event]:
        """Apply one client frame; a refused one changes nothing but gets its error."""
        message = self.read(raw)
        return [message] if isinstance(message, Refused) else self.apply(message)

    def read(self, raw: str | bytes) -> p.ClientMessage | Refused:
        """One client frame as a message (:meth:`apply` it), or its refusal: the first
        half of :meth:`receive`, for a caller that looks at the message in between (the
        voice a ``start`` names, confirmed with the store)."""
        try:
            size = len(raw) if isinstance(raw, bytes) else len(raw.encode("utf-8", "surrogatepass"))
            limit = self.limits.max_message_bytes
            if size > limit:
                raise LimitExceeded(
                    f"message of {size} bytes exceeds the limit of {limit} bytes",
                    code="message_too_large",
                    limit=limit,
                )
            return p.parse_client_message(raw)
        except (ClientError, Unavailable) as exc:
            return Refused(exc)

    def apply(self, message: p.ClientMessage) -> list[Event]:
        """Apply one message :meth:`read` gave; a refused one changes nothing but gets its
        error."""
        try:
            return self._dispatch(message)
        except (ClientError, Unavailable) as exc:
            return [Refused(exc)]

    def idle(self, context_id: str) -> list[Event]:
        """The context's idle timer fired: its pending fragment is spoken now."""
        context = self.contexts.get(context_id)
        if context is None or context.closing:
            return []
        return self._cut(context, context.segmenter.flush())

    def spoken(self, context_id: str, segment: Segment) -> None:
        """A segment of the context finished (spoken, failed or dropped)."""
        context = self.contexts.get(context_id)
        if context is not None and not context.cancelled:  # cancel already freed them
            context.queued_chars -= len(segment.text)

    def forget(self, context_id: str) -> None:
        """The context is done (its ``done`` was sent): its id may be used again."""
        self.contexts.pop(context_id, None)

    def drain(self, deadline_ms: int) -> list[Event]:
        """The server drains before shutdown: tell the client, and end every open context
        as ``end`` would (all the text it accepted is spoken, then its ``done``); from
        now on ``start`` is refused, and so is more text for a context ended here, each
        with ``draining``, so the client continues elsewhere from ``end_char``."""
        if self.draining:
            return []
        self.draining = True
        entries: list[p.DrainedContext] = []
        events: list[Event] = []
        for context in self.contexts.values():
            if context.cancelled:
                continue  # its done is on its way: nothing to continue
            received, ended = context.received_chars, context.closing
            entries.append(p.DrainedContext(context.id, context.stream, received, ended))
            if not context.closing:
                context.closing = context.drained = True
                flushed = self._cut(context, context.segmenter.flush())
                events += [IdleTimer(context.id, None), *flushed, Ended(context.id)]
        return [Reply(p.Draining(deadline_ms=deadline_ms, contexts=entries)), *events]

    def cancel_all(self) -> list[Event]:
        """The connection is closing: every context is cancelled."""
        events: list[Event] = []
        for context in self.contexts.values():
            events += self._cancel(context)
        return events

    # -- rules ---------------------------------------------------------------------

    def _dispatch(self, message: p.ClientMessage) -> list[Event]:
        if isinstance(message, p.Start):
            return self._start(message)
        events: list[Event] = []
        context = self.contexts.get(message.context_id)
        if context is None:
            if message.context_id == p.DEFAULT_CONTEXT_ID and isinstance(message, p.Text):
                # The delta must be acceptable before the implicit start: a context opened
                # by a refused message would hold its place and never speak.
                self._check_delta(message.text, 0, message.context_id)
                events = self._start(p.Start(p.DEFAULT_CONTEXT_ID))
                context = self.contexts[p.DEFAULT_CONTEXT_ID]
            elif isinstance(message, p.Cancel):
                return []  # cancelling what already finished is not an error
            else:
                raise ClientError(
                    f"context {message.context_id!r} is not open",
                    code="unknown_context",
                    context_id=message.context_id,
                )
        if isinstance(message, p.Cancel):
            return self._cancel(context)
        if context.drained:
            raise Unavailable(
                f"context {context.id!r} was ended at character {context.received_chars} by "
                "the server's drain; continue it on another server",
                code="draining",
                context_id=context.id,
            )
        if context.closing:
            raise ClientError(
                f"context {context.id!r} has ended; start a new one (or wait for its done)",
                code="context_closing",
                context_id=context.id,
            )
        if isinstance(message, p.Text):
            return events + self._accept_text(context, message.text)
        if isinstance(message, p.Flush):
            return [IdleTimer(context.id, None), *self._cut(context, context.segmenter.flush())]
        # End: speak the rest, then the context closes.
        context.closing = True
        flushed = self._cut(context, context.segmenter.flush())
        return [IdleTimer(context.id, None), *flushed, Ended(context.id)]

    def _start(self, message: p.Start) -> list[Event]:
        if self.draining:
            raise Unavailable(
                "the server is draining before shutdown; open the context on another server",
                code="draining",
                context_id=message.context_id,
            )
        limit = self.limits.max_contexts
        if message.context_id in self.contexts:
            raise ClientError(
                f"context {message.context_id!r} is already open",
                code="context_exists",
                context_id=message.context_id,
            )
        if len(self.contexts) >= limit:
            raise LimitExceeded(
                f"this connection already has {len(self.contexts)} open contexts (limit {limit})",
                code="too_many_contexts",
                context_id=message.context_id,
                limit=limit,
            )
        seed = self._seed(message)
        lexicon = self._lexicon(message)
        voice = self._voice(message, seed)  # admitted last: nothing is refused after it
        context = UtteranceState(
            message.context_id,
            self._next_stream,
            voice,
            self.speech.segmenter(whole_text=False),
            timestamps=message.timestamps,
            lexicon=lexicon,
            max_frame_ms=self.speech.max_frame_ms,
        )
        self._next_stream += 1
        self.contexts[context.id] = context
        started = p.Started(
            context_id=context.id,
            stream=context.stream,
            sample_rate=voice.sample_rate_hz,
            voice=voice.voice,
            seed=voice.seed,
            speed=voice.speed,
            volume=voice.volume,
            encoding=voice.encoding,
            frame_ms=voice.frame_ms,
        )
        events: list[Event] = [Opened(context), Reply(started)]
        if voice.fallback:
            warning = p.WarningEvent(
                context_id=context.id,
                code="busy_fallback_voice",
                message="the engine is at capacity: this context is spoken with the fallback voice",
            )
            events.append(Reply(warning))
        return events

    def _voice(self, message: p.Start, seed: int) -> UtteranceVoice:
        """How the context sounds and what its frames are, then its admission."""
        encoding = message.encoding or encodings.DEFAULT_ENCODING
        rate_hz = encodings.check_rate(
            encoding, message.sample_rate, self.engine_rate_hz, context_id=message.context_id
        )
        _check_frame(message, rate_hz)
        fallback = self._admit(message.context_id)
        return UtteranceVoice(
            message.voice, seed, message.speed, rate_hz, fallback, message.seed is not None,
            message.volume, encoding, message.frame_ms,
        )  # fmt: skip

    def _lexicon(self, message: p.Start) -> Lexicon | None:
        """The context's lexicon, checked against the limits (``invalid_lexicon``)."""
        if not message.lexicon:
            return None
        try:
            return Lexicon.from_mapping(
                dict(message.lexicon), origin="context", limits=self.lexicon_limits
            )
        except LexiconError as exc:
            raise ClientError(
                f"field 'lexicon': {exc}", code="invalid_lexicon", context_id=message.context_id
            ) from None

    def _seed(self, message: p.Start) -> int:
        """The context's seed: the client's, else its named voice's own, else a new one
        (and the voice checked on the way)."""
        own_seed = None
        if message.voice is not None:
            try:
                own_seed = self._check_voice(message.voice)
            except ValueError as exc:
                raise ClientError(
                    f"field 'voice': {exc}", code="invalid_field", context_id=message.context_id
                ) from None
            except ClientError as exc:
                raise type(exc)(
                    f"field 'voice': {exc.message}", code=exc.code, context_id=message.context_id
                ) from None
        seed = message.seed if message.seed is not None else own_seed
        return self._choose_seed() if seed is None else seed

    def _check_delta(self, text: str, buffered: int, context_id: str) -> None:
        """Refuse a delta beyond the limits, given the ``buffered`` characters unspoken."""
        limits = self.limits
        if len(text) > limits.max_text_message_chars:
            raise LimitExceeded(
                f"text delta of {len(text)} characters exceeds the limit of "
                f"{limits.max_text_message_chars}",
                code="text_too_long",
                context_id=context_id,
                limit=limits.max_text_message_chars,
            )
        if buffered + len(text) > limits.max_buffered_chars:
            raise LimitExceeded(
                f"context {context_id!r} holds {buffered} unspoken characters; "
                f"{len(text)} more would exceed the limit of {limits.max_buffered_chars} "
                "(delta refused, resend later)",
                code="buffer_full",
                context_id=context_id,
                limit=limits.max_buffered_chars,
            )

    def _accept_text(self, context: UtteranceState, text: str) -> list[Event]:
        self._check_delta(text, context.buffered_chars, context.id)
        events: list[Event] = []
        context.received_chars += len(text)
        if not context.has_text and text.strip():
            context.has_text = True
            events.append(FirstText(context.id))
        events += self._cut(context, context.segmenter.push(text))
        return [*events, self._idle_timer(context)]

    def _idle_timer(self, context: UtteranceState) -> IdleTimer:
        """After text: a fragment left pending is spoken when the input pauses."""
        segmenter = context.segmenter
        if not segmenter.pending_text.strip():
            return IdleTimer(context.id, None)
        # A complete sentence, held only in case a closing quote follows, waits less.
        delay_ms = (
            self.sentence_flush_ms if segmenter.holds_complete_sentence else self.idle_flush_ms
        )
        return IdleTimer(context.id, delay_ms / 1000)

    def _cut(self, context: UtteranceState, segments: list[Segment]) -> list[Event]:
        if not segments:
            return []
        cut = sum(len(segment.text) for segment in segments)
        context.queued_chars += cut
        context.tally.characters += cut
        return [Segments(context.id, tuple(segments))]

    def _cancel(self, context: UtteranceState) -> list[Event]:
        context.cancelled = context.closing = True
        context.queued_chars = 0
        return [IdleTimer(context.id, None), Cancelled(context.id)]


def _check_frame(message: p.Start, rate_hz: int) -> None:
    """A frame duration must be a whole number of samples at the context's rate."""
    if message.frame_ms is not None and message.frame_ms * rate_hz % 1000:
        raise ClientError(
            f"field 'frame_ms': {message.frame_ms} ms at {rate_hz} Hz is not a whole number "
            "of samples; choose one that is (at 22050 and 44100 Hz: a multiple of 20 ms)",
            code="invalid_field",
            context_id=message.context_id,
        )
