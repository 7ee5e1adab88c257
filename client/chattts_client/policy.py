"""How hard a client tries to continue a context whose server went away."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from websockets.exceptions import WebSocketException

from chattts_client.errors import BusyError, TTSClientError, error_from_event

__all__ = ["BusyBackoff", "ResumePolicy", "keep_trying"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResumePolicy:
    """How hard a client tries to continue a context whose server went away.

    Each interruption gets ``attempts`` tries to open the context on a server (a
    connection refused or lost, a ``start`` refused, or a server that accepts
    connections but has stopped: no ``ready`` within ``try_timeout_s`` of connecting,
    or no answer to the ``start`` within as long, after which no new context goes to
    that connection: each is one try), spaced by ``backoff_s`` doubling up to ``max_backoff_s`` (or a busy server's
    ``retry_after_ms`` when longer), all within ``within_s``; then :class:`ResumeError`.
    """

    attempts: int = 8
    within_s: float = 30.0
    backoff_s: float = 0.1
    max_backoff_s: float = 2.0
    try_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.within_s <= 0 or self.backoff_s < 0:
            raise ValueError("ResumePolicy needs attempts >= 1, within_s > 0, backoff_s >= 0")
        if self.try_timeout_s <= 0:
            raise ValueError("ResumePolicy needs try_timeout_s > 0")


#: One try: None when it succeeded, else the refusal event it got.
Try = Callable[[int], Awaitable["dict[str, Any] | None"]]


async def keep_trying(
    policy: ResumePolicy, once: Try, what: str
) -> tuple[BaseException | None, int] | None:
    """Call ``once(attempt)`` until it succeeds (None) or ``policy`` runs out; then the
    last failure (a refusal as its typed error, or the exception) and the tries made."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    delay_s = policy.backoff_s
    last: BaseException | None = None
    attempt = 0
    while attempt < policy.attempts and (left_s := policy.within_s - (loop.time() - began)) > 0:
        attempt += 1
        hint_s = 0.0
        try:
            # A try: a connection (its handshake and ready bounded by try_timeout_s) and
            # the answer to its start (the same); this bounds anything else in it.
            async with asyncio.timeout(min(left_s, 2 * policy.try_timeout_s)):
                refusal = await once(attempt)
            if refusal is None:
                return None
            last = error_from_event(refusal)
            if isinstance(last, BusyError) and last.retry_after_ms:
                hint_s = last.retry_after_ms / 1000  # the server knows when it has room
        except (TTSClientError, OSError, TimeoutError, WebSocketException) as exc:
            last = exc
        logger.info("%s: try %d failed: %s", what, attempt, last)
        left_s = policy.within_s - (loop.time() - began)
        await asyncio.sleep(max(0.0, min(max(hint_s, delay_s), left_s)))
        delay_s = min(2 * delay_s, policy.max_backoff_s) if delay_s else policy.max_backoff_s
    return last, attempt


class BusyBackoff:
    """When :meth:`StreamClient.open <chattts_client.client.StreamClient.open>` tries a
    ``busy`` start again: after the server's ``retry_after_ms``, or the backoff (0.25 s,
    doubling up to 10 s) if longer; ``attempts`` tries in all, and no wait that would end
    more than ``within_s`` after the first refusal."""

    def __init__(self, attempts: int, within_s: float) -> None:
        if attempts < 1 or within_s < 0:
            raise ValueError("open needs attempts >= 1 and busy_within_s >= 0")
        self.attempts = attempts
        self.within_s = within_s
        self._backoff_s = 0.25
        self._first_refused_at: float | None = None

    def wait_s(self, refusal: BusyError, attempt: int, now: float) -> float | None:
        """How long to wait before the try after ``attempt`` (refused at ``now``); None:
        give up."""
        if self._first_refused_at is None:
            self._first_refused_at = now
        wait_s = max((refusal.retry_after_ms or 0) / 1000, self._backoff_s)
        if attempt == self.attempts or now + wait_s - self._first_refused_at > self.within_s:
            return None
        self._backoff_s = min(2 * self._backoff_s, 10.0)
        return wait_s
