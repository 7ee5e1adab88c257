"""Which server new contexts go to: the first URL that answers, then the next one each
time that server drains or is lost."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from chattts_client.errors import AuthError, ProtocolError
from chattts_client.link import Link

__all__ = ["Dialer"]


class Dialer:
    """The client's connections: the one new contexts go to (:attr:`link`, the latest
    connected), every one still open (:attr:`links`), and the next URL's once that one
    drains, stops answering or is gone (with ``redial``; without, the first for good)."""

    def __init__(
        self,
        link: Link,
        urls: Sequence[str],
        options: dict[str, Any],
        listen: Callable[[Link], None],
        *,
        redial: bool,
    ) -> None:
        self._urls = list(urls)
        # The URL tried last: each new connection tries the next, so one server that is
        # down is passed over, not tried again and again.
        self._turn = self._urls.index(link.url) if link.url in self._urls else 0
        self._options = options
        self._listen = listen
        self._redial = redial
        self.link = link
        self.links: list[Link] = []
        self.closing = False
        self._connecting: asyncio.Task[Link] | None = None
        self._adopt(link)

    @staticmethod
    async def first(urls: Sequence[str], options: dict[str, Any]) -> Link:
        """The first of ``urls`` that connects; a refusal that every server would give
        (auth, protocol, a bad option) raises at once, anything else after the last."""
        for i, candidate in enumerate(urls):
            try:
                return await Link.open(candidate, **options)
            except (AuthError, ProtocolError, ValueError):
                raise  # the same everywhere
            except Exception:
                if i == len(urls) - 1:
                    raise
        raise ValueError("connect needs at least one URL")

    def _adopt(self, link: Link) -> None:
        self.links.append(link)
        self._listen(link)

    async def usable(self) -> Link:
        """The link new contexts go to; with ``redial``, connected again (the next URL)
        when that server drains or went away. Callers at the same moment share one
        connection attempt."""
        link = self.link
        if not self._redial or not (link.closed or link.draining or link.unresponsive):
            return link
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.get_running_loop().create_task(self._connect_next())
            # Its failure is each waiter's; one that timed out first may leave none.
            self._connecting.add_done_callback(lambda t: t.cancelled() or t.exception())
        return await asyncio.shield(self._connecting)

    async def _connect_next(self) -> Link:
        self._turn = (self._turn + 1) % len(self._urls)
        link = await Link.open(self._urls[self._turn], **self._options)
        if self.closing:
            await link.close()
            raise ConnectionAbortedError("the client is closing")
        if self.link.closed and self.link in self.links:  # else let go of at its close
            self.links.remove(self.link)
        self.link = link
        self._adopt(link)
        return link

    def forget(self, link: Link) -> None:
        """``link`` closed: let go of it, unless new contexts still go there (it is let
        go of when the next connection replaces it)."""
        if link is not self.link and link in self.links:
            self.links.remove(link)

    async def close(self) -> None:
        self.closing = True
        if self._connecting is not None:
            self._connecting.cancel()
        for link in self.links:
            await link.close()
