"""Contexts that outlive their server: drained or lost, each continues on another one.

:class:`Resumer` sits between :class:`~chattts_client.client.StreamClient` and its
links. Each of the caller's contexts keeps its text in a
:class:`~chattts_client.ledger.ContextLedger` and is spoken by one server context (a
"leg") at a time:

- the server drains (``draining``): it speaks what that context accepted; a new leg is
  opened at once on another server with the same voice, seed and speed, given the text
  after ``end_char``; its events are held until the drained leg's ``done``, then follow
  it (a ``resumed`` event first), so nothing is heard twice;
- the connection is lost (a crash, a network cut, a drain deadline): a new leg starts at
  the segment whose audio was cut, or after the last one heard (``resumed`` says which);
- placing a leg is retried as :class:`~chattts_client.policy.ResumePolicy` allows; then
  :class:`~chattts_client.errors.ResumeError`. Which server a leg is on, and placing it
  again, is the :class:`~chattts_client.router.Router`'s part; the resumer's is what
  the caller sends and hears.

Text goes to the leg as the server can hold it (its ``max_buffered_chars``, each delta
within ``max_text_message_chars``), so no delta is ever refused and the ledger knows
exactly what each server accepted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from websockets.exceptions import ConnectionClosed

from chattts_client.errors import ResumeError
from chattts_client.ledger import ContextLedger
from chattts_client.link import Link
from chattts_client.policy import ResumePolicy
from chattts_client.router import GetLink, Router
from chattts_client.track import ServerContext, Track
from chattts_client.wire import AudioFrame, Event

__all__ = ["ResumePolicy", "Resumer"]

logger = logging.getLogger(__name__)

#: Close codes after which the client, not the server, was at fault: resending the
#: same frames would be refused again (1002 protocol, 1003, 1007 bad UTF-8, 1008, 1009).
_CLIENT_FAULT_CLOSES = frozenset({1002, 1003, 1007, 1008, 1009})


Deliver = Callable[["Event | BaseException"], None]


class Resumer:
    """Keeps the caller's contexts speaking across servers (see the module docstring)."""

    def __init__(self, policy: ResumePolicy, deliver: Deliver, link: GetLink) -> None:
        self._deliver = deliver
        self._link = link
        self.tracks: dict[str, Track] = {}
        self._router = Router(policy, link, self.tracks, self._fail)
        self._failed: dict[str, ResumeError] = {}
        self._next_stream = 1
        self._pumps: set[asyncio.Task[None]] = set()

    # --- the caller's messages ------------------------------------------------------

    async def start(self, link: Link, context_id: str, params: dict[str, Any]) -> None:
        self._raise_if_failed(context_id)
        if context_id in self.tracks:  # open: the server refuses it (context_exists)
            message = {"type": "start", "context_id": context_id, **params}
            await self._unrecorded(self.tracks[context_id], message)
            return
        track = Track(ContextLedger(context_id), params)
        self.tracks[context_id] = track
        await self._router.open_leg(track, link, base_char=0, by_caller=True)

    # The caller's text, flush, end and cancel of an open context go to its ledger and
    # its leg, whatever state the leg is in (a server that went away is resumption's
    # business, never the caller's): a link is asked for only for a context not open.

    async def text(self, context_id: str, text: str) -> None:
        self._raise_if_failed(context_id)
        message = {"type": "text", "context_id": context_id, "text": text}
        track = self.tracks.get(context_id)
        if track is None and context_id == "default":
            # The first text of "default" opens it on the server, as a start would.
            link = await self._link()
            track = self.tracks.get(context_id)  # another first text, while connecting
            if track is None:
                track = self.tracks[context_id] = Track(ContextLedger(context_id), {})
                self._router.add_leg(track, link, 0, context_id).by_caller = True
        if track is None or track.ledger.ended:
            await self._unrecorded(track, message)
            return
        track.ledger.accept(text)
        await track.pump()

    async def flush(self, context_id: str) -> None:
        track = self.tracks.get(context_id)
        if track is None or track.ledger.ended:
            await self._unrecorded(track, {"type": "flush", "context_id": context_id})
            return
        track.flush_pending = True
        await track.pump()

    async def end(self, context_id: str) -> None:
        self._raise_if_failed(context_id)
        track = self.tracks.get(context_id)
        if track is None or track.ledger.ended:
            await self._unrecorded(track, {"type": "end", "context_id": context_id})
            return
        track.ledger.ended = True
        await track.pump()

    async def _unrecorded(self, track: Track | None, message: dict[str, Any]) -> None:
        """A message for a context not open, or ended: not part of any context's text.
        The server refuses it (unknown_context, context_closing), as it would anyway."""
        leg = track.legs[-1] if track is not None and track.legs else None
        if leg is not None and leg.alive:
            await leg.send(message)
        else:
            await (await self._link()).send(message)

    async def cancel(self, context_id: str) -> None:
        track = self.tracks.get(context_id)
        if track is None:
            await (await self._link()).send({"type": "cancel", "context_id": context_id})
            return
        track.cancelled = True
        placing = track.placing is not None and not track.placing.done()
        if track.placing is not None:
            track.placing.cancel()
        live = track.legs[0] if track.legs else None
        for leg in track.legs[1:]:
            await leg.drop()
        if placing or live is None or not live.alive or live.part.span is None:
            if live is not None:
                await live.drop()
            self._close_track(track, {"type": "done", "cancelled": True})  # ends here
        else:  # the server answers with the context's done
            await live.send({"type": "cancel"})

    def _raise_if_failed(self, context_id: str) -> None:
        failure = self._failed.get(context_id)
        if failure is not None:
            raise failure

    # --- the servers' events ----------------------------------------------------------

    async def on_event(self, link: Link, event: Event) -> None:
        if isinstance(event, AudioFrame):
            leg = self._router.leg_of_stream(link, event.stream)
            if leg is None:
                self._deliver(event)  # a context opened by a raw send
            elif not leg.dropped:
                self._route(leg, event)
            return
        kind = event.get("type")
        if kind == "draining":
            await self._on_draining(link, event)
            return
        leg = self._router.leg(link, str(event.get("context_id")))
        if leg is None:
            # A connection-level error or warning, or a context opened by a raw send.
            self._deliver(event)
            return
        if kind == "started":
            self._router.started(link, int(event["stream"]), leg)
            leg.started = event
            leg.answered(event)
            if not leg.dropped:
                self._activate(leg.track)
        elif kind == "error":
            await self._on_error(leg, event)
        elif not leg.dropped:
            self._route(leg, event)

    async def _on_error(self, leg: ServerContext, event: dict[str, Any]) -> None:
        code = event.get("code")
        if leg.started is None and not leg.answer.done():
            # The first error before started refuses the start. A leg of a context the
            # caller opened is answered to the caller (busy, a bad voice), unless the
            # server was draining: then, and for a resumed leg, another try follows.
            leg.answered(event)
            track = leg.track
            await leg.drop()
            if leg.by_caller and code == "draining":  # raced the drain: open it elsewhere
                self._router.place(track, "draining")
            elif leg.by_caller:
                self.tracks.pop(track.id, None)
                self._deliver({**event, "context_id": track.id})
            return
        if leg.dropped or code == "draining" or leg.started is None:
            return  # text sent before a refusal or a drain arrived: resent elsewhere
        self._route(leg, event)

    async def _on_draining(self, link: Link, event: dict[str, Any]) -> None:
        link.draining = True
        for entry in event.get("contexts", []):
            leg = self._router.leg(link, str(entry.get("context_id")))
            if leg is None or leg.dropped:
                continue
            leg.drained_at = int(entry["end_char"])
            leg.drained_ended = bool(entry.get("ended"))
            if not leg.final and leg is leg.track.legs[-1]:
                self._router.place(leg.track, "draining")

    async def on_close(self, link: Link, closed: ConnectionClosed) -> bool:
        """The link is gone: continue every context it was speaking. False when it was
        speaking none (the caller may want to know the connection ended)."""
        legs = self._router.forget(link)
        code = closed.rcvd.code if closed.rcvd else None
        speaking = False
        for leg in legs:
            track = leg.track
            if leg.dropped or leg not in track.legs or self.tracks.get(track.id) is not track:
                continue  # done, or never to be heard
            speaking = True
            leg.answered(closed)
            if track.cancelled:
                self._close_track(track, {"type": "done", "cancelled": True})
            elif code in _CLIENT_FAULT_CLOSES:
                self._fail(track, closed, 0)
            else:
                index = track.legs.index(leg)
                for later in track.legs[index:]:
                    await later.drop()
                if not track.legs or track.legs[-1].drained_at is not None:
                    # A lost successor of a drained leg: place it again; else resume.
                    self._router.place(track, "draining" if index else "closed")
        return speaking

    def _route(self, leg: ServerContext, event: Event) -> None:
        """Deliver an event of a leg if it is the one heard now, else hold it."""
        track = leg.track
        if leg is not track.legs[0] or leg.part.span is None:
            leg.held.append(event)
            return
        ledger = track.ledger
        if isinstance(event, AudioFrame):
            self._deliver(ledger.frame(leg.part, event))
            return
        kind = event.get("type")
        if kind == "segment":
            self._deliver(ledger.segment(leg.part, event))
            self._pump_later(track)  # its previous segment finished: room for text
        elif kind == "timestamps":
            self._deliver(ledger.timestamps(leg.part, event))
        elif kind == "warning":
            self._deliver(ledger.warning(leg.part, event))
        elif kind == "error":
            self._deliver({**event, "context_id": track.id})
        elif kind == "done":
            self._on_done(leg, event)
        else:
            self._deliver({**event, "context_id": track.id})

    def _on_done(self, leg: ServerContext, event: dict[str, Any]) -> None:
        track = leg.track
        if leg.final:
            self._close_track(track, event)
            return
        covered = leg.drained_at if leg.drained_at is not None else leg.part.sent_chars
        track.ledger.finish(leg.part, covered)
        track.legs.remove(leg)
        if track.legs:
            self._activate(track)
        else:
            self._router.place(track, track.reason)

    def _activate(self, track: Track) -> None:
        """The first leg has started and none is heard: it is heard from now on."""
        leg = track.legs[0] if track.legs else None
        if leg is None or leg.started is None or leg.part.span is not None:
            return
        ledger = track.ledger
        ledger.begin(leg.part)
        if track.announced:
            self._deliver(ledger.resumed(leg.part, track.reason, track.attempts))
        else:
            track.announced = True
            stream = self._next_stream
            self._next_stream += 1
            self._deliver(ledger.started(leg.started, stream))
        held, leg.held = leg.held, []
        for event in held:
            if leg in track.legs:
                self._route(leg, event)

    def _close_track(self, track: Track, done: dict[str, Any]) -> None:
        if self.tracks.get(track.id) is track:
            del self.tracks[track.id]
            if track.ledger.stream is None:  # never announced: nothing to total
                self._deliver({**done, "context_id": track.id})
            else:
                self._deliver(track.ledger.done({"stream": None, **done}))
        for leg in track.legs:
            leg.dropped = True

    def _pump_later(self, track: Track) -> None:
        if track.target is not None and track.ledger.text:
            task = asyncio.get_running_loop().create_task(track.pump())
            self._pumps.add(task)
            task.add_done_callback(self._pumps.discard)

    def _fail(self, track: Track, cause: BaseException | None, attempts: int) -> None:
        if self.tracks.get(track.id) is not track:
            return
        del self.tracks[track.id]
        for leg in track.legs:
            leg.dropped = True
        ledger = track.ledger
        error = ResumeError(
            "resume_failed",
            f"context {track.id!r} could not be continued on any server after {attempts} "
            f"tries: {cause}; characters from {ledger.resume_char()} on were not spoken",
            context_id=track.id,
            body={"attempts": attempts, "unspoken_from_char": ledger.resume_char()},
        )
        error.__cause__ = cause
        self._failed[track.id] = error
        self._deliver(error)

    async def close(self) -> None:
        for track in list(self.tracks.values()):
            if track.placing is not None:
                track.placing.cancel()
