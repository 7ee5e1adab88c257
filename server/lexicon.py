"""The server-wide pronunciation lexicon file (``--lexicon``), reloaded without a restart.

The file's modification time and size are checked at most every ``--lexicon-check-s``
seconds, on the text front-end's thread, as segments are prepared (a ``stat``: a few
microseconds); SIGHUP asks for a reload at the next segment whatever the clock says. A
file that no longer parses keeps the lexicon in use and logs why, once per change of
the file; so does a file that cannot be read. At start-up a bad file is refused
(``server.config_checks.validate``), naming its line.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from streaming.errors import ClientError
from streaming.text import Lexicon, LexiconError, LexiconSettings

__all__ = ["LexiconFile", "request_lexicon"]

logger = logging.getLogger(__name__)

_UNREADABLE = (-1, -1)  # the stamp of a file that cannot be read


class LexiconFile:
    """The lexicon read from ``path``: :meth:`current` is what to apply now."""

    def __init__(
        self,
        path: Path,
        limits: LexiconSettings,
        *,
        check_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._limits = limits
        self._check_s = check_s
        self._clock = clock
        self._reload = threading.Event()
        self._stamp = self._stat()
        self._lexicon = self._read()  # raises LexiconError or OSError: refused at start-up
        self._checked = clock()
        self._failed_stamp: tuple[int, int] | None = None
        logger.info("lexicon %s: %d entries", path, len(self._lexicon))

    @property
    def lexicon(self) -> Lexicon:
        """The lexicon in use, without checking the file."""
        return self._lexicon

    def request_reload(self) -> None:
        """Reload at the next :meth:`current` (a SIGHUP); safe from any thread."""
        self._reload.set()

    def due(self) -> bool:
        """Whether :meth:`current` would look at the file now (a reload asked for, or
        ``check_s`` passed since the last look): work for the front-end's thread."""
        if self._reload.is_set():
            return True
        return self._check_s > 0 and self._clock() - self._checked >= self._check_s

    def current(self) -> Lexicon:
        """The lexicon to apply: reloaded first if the file changed (checked at most every
        ``check_s`` seconds) or a reload was asked for."""
        forced = self._reload.is_set()
        now = self._clock()
        if not forced and (self._check_s <= 0 or now - self._checked < self._check_s):
            return self._lexicon
        self._reload.clear()
        self._checked = now
        try:
            stamp = self._stat()
        except OSError as exc:
            self._failed(_UNREADABLE, f"cannot read it ({exc})")
            return self._lexicon
        if forced or stamp != self._stamp:
            self._load(stamp)
        return self._lexicon

    def _load(self, stamp: tuple[int, int]) -> None:
        try:
            lexicon = self._read()
        except (OSError, UnicodeDecodeError, LexiconError) as exc:
            self._failed(stamp, str(exc))
            return
        self._lexicon, self._stamp, self._failed_stamp = lexicon, stamp, None
        logger.info("lexicon %s reloaded: %d entries", self.path, len(lexicon))

    def _failed(self, stamp: tuple[int, int], why: str) -> None:
        if stamp != self._failed_stamp:
            logger.error(
                "lexicon %s not reloaded, the previous one (%d entries) stays in use: %s",
                self.path,
                len(self._lexicon),
                why,
            )
        self._failed_stamp = stamp

    def _stat(self) -> tuple[int, int]:
        info = os.stat(self.path)
        return info.st_mtime_ns, info.st_size

    def _read(self) -> Lexicon:
        text = self.path.read_text(encoding="utf-8")
        return Lexicon.parse(text, source=str(self.path), limits=self._limits)


def request_lexicon(entries: Mapping[str, str] | None, limits: LexiconSettings) -> Lexicon | None:
    """A request's ``lexicon`` field checked (a 400 ``invalid_lexicon`` naming the entry)."""
    if not entries:
        return None
    try:
        return Lexicon.from_mapping(entries, origin="request", limits=limits)
    except LexiconError as exc:
        raise ClientError(f"lexicon: {exc}", code="invalid_lexicon", param="lexicon") from None
