"""Which server each leg of a context is on, and placing a context on a server again.

A :class:`Router` opens a context's legs (see :mod:`chattts_client.track`), finds the
leg an event from a connection belongs to, and, when a context's server drains or is
lost, places it on a usable server, retried as its
:class:`~chattts_client.policy.ResumePolicy` allows.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from chattts_client.ledger import Part
from chattts_client.link import Link
from chattts_client.policy import ResumePolicy, keep_trying
from chattts_client.track import ServerContext, Track

__all__ = ["Router"]

GetLink = Callable[[], Awaitable[Link]]
#: A track that no server took back: the last cause, and the tries made.
OnFailed = Callable[[Track, "BaseException | None", int], None]


class Router:
    """The legs of every open context, indexed by connection (see the module docstring).

    ``tracks``: the caller's open contexts (the resumer's, read here): a track no longer
    in it is not placed again."""

    def __init__(
        self, policy: ResumePolicy, link: GetLink, tracks: dict[str, Track], failed: OnFailed
    ) -> None:
        self.policy = policy
        self._link = link
        self._tracks = tracks
        self._failed = failed
        self._legs: dict[tuple[int, str], ServerContext] = {}  # (id(link), server id) -> leg
        self._streams: dict[tuple[int, int], ServerContext] = {}  # (id(link), server stream) -> leg

    # --- the legs of each connection ----------------------------------------------------

    def add_leg(self, track: Track, link: Link, base_char: int, server_id: str) -> ServerContext:
        leg = ServerContext(track, link, server_id, Part(base_char))
        track.legs.append(leg)
        self._legs[(id(link), server_id)] = leg
        return leg

    async def open_leg(
        self, track: Track, link: Link, base_char: int, *, by_caller: bool = False
    ) -> ServerContext:
        """A new leg on ``link`` from ``base_char``: its ``start`` goes out before any
        text can (nothing awaits between adding it and queueing the start)."""
        # A resumed leg gets an id of its own: the one it replaces may still be open there.
        server_id = track.id if by_caller else f"{track.id[:48]}~{uuid.uuid4().hex[:8]}"
        leg = self.add_leg(track, link, base_char, server_id)
        leg.by_caller = by_caller
        # A resumed leg sounds like what the caller has heard: started's voice and seed.
        params = {**track.params, **track.ledger.voice}
        try:
            await leg.send({"type": "start", **params})
            await track.pump()
        except BaseException:  # cancelled (a try timed out on a full socket), or failed
            await leg.drop()
            raise
        return leg

    def leg(self, link: Link, server_id: str) -> ServerContext | None:
        """The leg ``link``'s events for context ``server_id`` belong to."""
        return self._legs.get((id(link), server_id))

    def leg_of_stream(self, link: Link, stream: int) -> ServerContext | None:
        """The leg ``link``'s audio frames of ``stream`` belong to (once it started)."""
        return self._streams.get((id(link), stream))

    def started(self, link: Link, stream: int, leg: ServerContext) -> None:
        self._streams[(id(link), stream)] = leg

    def forget(self, link: Link) -> list[ServerContext]:
        """``link`` is gone: the legs it had, no longer indexed."""
        legs = [leg for (owner, _), leg in self._legs.items() if owner == id(link)]
        self._legs = {k: v for k, v in self._legs.items() if k[0] != id(link)}
        self._streams = {k: v for k, v in self._streams.items() if k[0] != id(link)}
        return legs

    # --- placing a context on a server ------------------------------------------------

    def place(self, track: Track, reason: str) -> None:
        """Open the track's next leg on a usable server, unless that is under way."""
        if track.placing is not None and not track.placing.done():
            return
        track.reason = reason
        track.placing = asyncio.get_running_loop().create_task(self._placement(track))

    async def _placement(self, track: Track) -> None:
        """Try to open the track's next leg until one starts or the policy runs out."""

        async def once(attempt: int) -> dict[str, Any] | None:
            if self._tracks.get(track.id) is not track:
                return None  # cancelled, or ended meanwhile: nothing to place
            track.attempts = attempt
            return await self._try_leg(track)

        failure = await keep_trying(self.policy, once, f"resuming {track.id}")
        if failure is not None:
            self._failed(track, *failure)

    async def _try_leg(self, track: Track) -> dict[str, Any] | None:
        """One try: a leg on a usable link. None when it started, else the refusal."""
        link = await self._link()
        last = track.legs[-1] if track.legs else None
        if last is not None and last.drained_at is not None:
            base_char = last.part.base_char + last.drained_at  # after the drained leg
        else:
            base_char = track.ledger.resume_char()
        leg = await self.open_leg(track, link, base_char)
        try:
            async with asyncio.timeout(self.policy.try_timeout_s):
                answer = await asyncio.shield(leg.answer)
        except BaseException as exc:
            if isinstance(exc, TimeoutError):
                # A server that took the connection but does not answer: no new context
                # goes there again (its keepalive ends it); the next try connects anew.
                link.unresponsive = True
            await leg.drop()
            raise
        return None if answer.get("type") == "started" else answer
