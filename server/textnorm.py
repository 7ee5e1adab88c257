"""The text front-end: WeNet's WeTextProcessing behind ``streaming.text.prepare_text``.

Why the library lives here and not in ``streaming/``: it is synchronous, but it is a
700 MB native dependency (pynini/OpenFst) that loads finite-state transducers from
disk, builds them on first use and logs while doing so; ``streaming/`` stays stdlib
only and takes the normaliser as a plain ``str -> str`` function, so its tests need
neither the library nor its start-up cost.

The front-end's own rules read numbers (``streaming/text/``); the library reads what
no rule claims. Costs, measured by ``bench/text_frontend.py`` on these 2-core machines:
loading the transducers ~0.5 s (building them once, on first start, ~4 s); 0.1-0.3 ms
a segment at p95, up to a few ms when the library is called. Segments are prepared
on one dedicated thread (:meth:`TextFrontend.submit`), but short ones with no digit or
symbol (``inline_max_chars``), which never call the library, on the event loop; the one
thread also serialises calls into pynini, whose thread safety is not documented, and
runs the lexicon file's reload check (:mod:`server.lexicon`).

A :class:`UtteranceText` prepares one context's (or request's) segments in order: code
fences that span segments, the utterance's own lexicon entries over the file's, and the
end of the previous segment, where a cue word for the next one may stand.

The transducers are built with the library's options that change Chinese characters
turned off (interjection removal such as 啊/呃, erhua removal, traditional to
simplified): this server only wants numbers, dates, units and symbols read, and
``prepare_text`` also undoes any change that touches ideographs only.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from server.lexicon import LexiconFile
from streaming.segment import Segment, Segmenter, SegmenterSettings
from streaming.speech import removals_in_utterance
from streaming.text import (
    CodeFences,
    Lexicon,
    Normalizer,
    PreparedText,
    code_body,
    needs_normalizer,
    prepare_text,
)

logger = logging.getLogger(__name__)

# Bump when the options below change: the cache directory name carries it.
_FST_OPTIONS = {
    "remove_interjections": False,
    "remove_erhua": False,
    "traditional_to_simple": False,
    "remove_puncts": False,
    "full_to_half": True,
    "tag_oov": False,
}
_CACHE_VERSION = "wetext-1.2.0-keepzh-1"
# Normalised strings remembered (list numbers, units and years repeat in LLM output).
_CACHE_ENTRIES = 4096
# Digit strings an utterance remembers to say the same way again (a reply names a few).
_MAX_CODES = 64


def default_cache_dir() -> Path:
    """Where the built transducers are kept unless ``--text-cache-dir`` says otherwise."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "chattts-stream" / _CACHE_VERSION


def load_wetext(cache_dir: Path | None = None) -> Normalizer:
    """WeTextProcessing's Chinese normaliser as a cached ``str -> str`` function.

    Builds the transducers into ``cache_dir`` on first use (~4 s), loads them after
    (~0.5 s). Raises ImportError when the library is not installed.
    """
    from tn.chinese.normalizer import Normalizer as WeTextNormalizer

    cache = cache_dir or default_cache_dir()
    # The library logs every load at INFO through a handler of its own.
    logging.getLogger("wetext").setLevel(logging.WARNING)
    with _BUILD_LOCK:
        cache = _built_cache(cache, WeTextNormalizer)
        normalizer = WeTextNormalizer(cache_dir=str(cache), **_FST_OPTIONS)

    @functools.lru_cache(maxsize=_CACHE_ENTRIES)
    def normalize(text: str) -> str:
        try:
            result = normalizer.normalize(text)
        except Exception:  # the library raises on inputs its grammar cannot parse
            logger.warning("text normaliser failed on %r; left as it is", text, exc_info=True)
            return text
        return str(result)

    return normalize


# Two front-ends of one process (tests run several apps) must not build at once.
_BUILD_LOCK = threading.Lock()
_FST_FILES = ("zh_tn_tagger.fst", "zh_tn_verbalizer.fst")


def _built_cache(cache: Path, factory: Any) -> Path:
    """A directory holding the built transducers: ``cache``, built there if needed.

    The build goes to a temporary directory renamed into place, so a process that dies
    mid-build, or another process building too, never leaves half-written files.
    """
    if all((cache / name).is_file() for name in _FST_FILES):
        return cache
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=cache.name + ".", dir=cache.parent))
    except OSError:
        cache = Path(tempfile.gettempdir()) / "chattts-stream" / _CACHE_VERSION
        if all((cache / name).is_file() for name in _FST_FILES):
            return cache
        cache.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=cache.name + ".", dir=cache.parent))
    started = time.perf_counter()
    logger.info("building the text normaliser's transducers in %s (once)", cache)
    factory(cache_dir=str(staging), **_FST_OPTIONS)
    try:
        staging.rename(cache)
    except OSError:  # another process finished first
        shutil.rmtree(staging, ignore_errors=True)
    logger.info("transducers built in %.1f s", time.perf_counter() - started)
    return cache


@dataclass(frozen=True)
class PreviewSegment:
    """One segment as the server would speak it."""

    segment: Segment
    prepared: PreparedText

    def to_json(self) -> dict[str, Any]:
        segment, p = self.segment, self.prepared
        return {
            "index": segment.index,
            "text": segment.text,
            "start_char": segment.start,
            "end_char": segment.end,
            "reason": segment.reason,
            "spoken": p.spoken,
            "tags": list(p.tags),
            "removed": [asdict(r) for r in removals_in_utterance(segment, p)],
            "rewrites": [
                {
                    "start": segment.start + piece.start,
                    "end": segment.start + piece.end,
                    "text": segment.text[piece.start : piece.end],
                    "spoken": piece.spoken,
                    "rule": piece.rule or "symbol",
                    **({"origin": piece.origin} if piece.origin else {}),
                }
                for piece in p.rewrites
                if segment.text[piece.start : piece.end] != piece.spoken
            ],
        }


class TextFrontend:
    """Prepares segments for the engine: the normaliser, the tag policy, one thread.

    A short segment with no digit or symbol (``inline_max_chars``) is prepared on the
    event loop when :meth:`submit` is called: the thread's hand-offs cost more than its
    ~0.2 ms, and under the GIL the thread did not run beside the loop anyway.

    ``normalizer_factory`` builds the normaliser on the front-end's thread (``load``);
    ``None`` uses WeTextProcessing, and falls back to no normaliser (digits dropped
    and reported) with an error in the log if the library cannot be loaded.
    """

    def __init__(
        self,
        *,
        allow_control_tags: bool = False,
        normalizer_factory: Callable[[], Normalizer | None] | None = None,
        cache_dir: Path | None = None,
        lexicon: LexiconFile | None = None,
        inline_max_chars: int = 0,
    ) -> None:
        self.allow_control_tags = allow_control_tags
        #: The server-wide lexicon file (--lexicon), if any.
        self.lexicon_file = lexicon
        self._factory = normalizer_factory or functools.partial(load_wetext, cache_dir)
        self._normalizer: Normalizer | None = None
        self._loaded = threading.Event()
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self.load_seconds: float | None = None
        #: Segments up to this long with no number or symbol are prepared on the event
        #: loop at once (~0.1-0.3 ms) instead of through the front-end thread (0: never).
        self.inline_max_chars = inline_max_chars

    @property
    def loaded(self) -> bool:
        return self._loaded.is_set()

    @property
    def has_normalizer(self) -> bool:
        """False when the library could not be loaded (digits are then dropped and reported)."""
        return self._normalizer is not None

    def load(self) -> None:
        """Load the normaliser (blocking); a no-op once loaded."""
        with self._lock:
            if self._loaded.is_set():
                return
            started = time.perf_counter()
            try:
                self._normalizer = self._factory()
            except Exception:
                logger.exception(
                    "text normaliser unavailable: digits and symbols will be dropped and reported"
                )
                self._normalizer = None
            self.load_seconds = time.perf_counter() - started
            self._loaded.set()
            logger.info("text front-end loaded in %.2f s", self.load_seconds)

    def _normalize_lazily(self, text: str) -> str:
        self.load()
        return self._normalizer(text) if self._normalizer is not None else text

    def prepare(
        self,
        text: str,
        lexicon: Lexicon | None = None,
        before: str = "",
        codes: Iterable[tuple[str, str, str]] = (),
    ) -> PreparedText:
        """Prepare one segment (blocking), with ``lexicon``'s entries (all of them:
        :meth:`UtteranceText.lexicon`), the utterance's text ``before`` it (cue words) and the
        digit strings its segments before read digit by digit (``codes``).

        The normaliser is loaded on first need, so a text without digits or symbols
        never waits for it; :meth:`start` loads it ahead of time.
        """
        if not self._loaded.is_set() and needs_normalizer(text):
            self.load()  # numbers are read only when the library is there (else dropped)
        normalizer = self._normalizer if self._loaded.is_set() else self._normalize_lazily
        return prepare_text(
            text,
            normalizer=normalizer,
            allow_tags=self.allow_control_tags,
            lexicon=lexicon,
            before=before,
            codes=codes,
        )

    def file_lexicon(self) -> Lexicon | None:
        """The lexicon file's entries now (reloaded if it changed); on the front-end thread."""
        return self.lexicon_file.current() if self.lexicon_file is not None else None

    def reload_lexicon(self) -> None:
        """Reload the lexicon file before the next segment (SIGHUP)."""
        if self.lexicon_file is not None:
            self.lexicon_file.request_reload()

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="text-frontend")
        return self._executor

    def start(self) -> None:
        """Begin loading on the front-end thread; returns at once."""
        self._pool().submit(self.load)

    def submit(
        self, text: str, utterance: UtteranceText | None = None
    ) -> asyncio.Future[PreparedText]:
        """Start preparing ``text`` on the front-end thread (with ``utterance``'s lexicon);
        await the result on the loop."""
        if utterance is None:
            return asyncio.wrap_future(self._pool().submit(self.prepare, text))
        before = utterance.follow(text)
        if self._inline(text, utterance):
            return _settled(utterance.prepare_now, text, before)
        future = asyncio.wrap_future(self._pool().submit(utterance.prepare_now, text, before))
        utterance.in_thread += 1
        future.add_done_callback(utterance.thread_done)
        return future

    def _inline(self, text: str, utterance: UtteranceText) -> bool:
        """Whether ``text`` is prepared on the loop now: short, loaded, no number or
        symbol (the normaliser, shared with the thread, is not needed), no lexicon file
        to look at, and none of the utterance's segments still on the thread (they are
        prepared in order)."""
        return (
            len(text) <= self.inline_max_chars
            and not utterance.in_thread
            and self._loaded.is_set()
            and not needs_normalizer(text)
            and (self.lexicon_file is None or not self.lexicon_file.due())
        )

    def for_utterance(self, lexicon: Lexicon | None = None) -> UtteranceText:
        """A preparer for the segments of one utterance (a context, a request), with
        its own lexicon entries (they win over the file's)."""
        return UtteranceText(self, lexicon)

    def preview(
        self, text: str, config: SegmenterSettings, lexicon: Lexicon | None = None
    ) -> list[PreviewSegment]:
        """Segments of ``text`` pushed whole then flushed, each prepared (blocking)."""
        segmenter = Segmenter(config)
        segments = [*segmenter.push(text), *segmenter.flush()]
        utterance = self.for_utterance(lexicon)
        return [PreviewSegment(segment, utterance.prepare(segment.text)) for segment in segments]

    async def preview_async(
        self, text: str, config: SegmenterSettings, lexicon: Lexicon | None = None
    ) -> list[PreviewSegment]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool(), self.preview, text, config, lexicon)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


def _settled(
    prepare: Callable[[str, str], PreparedText], text: str, before: str
) -> asyncio.Future[PreparedText]:
    """``prepare(text, before)`` run now, as a future that is already done."""
    future: asyncio.Future[PreparedText] = asyncio.get_running_loop().create_future()
    try:
        future.set_result(prepare(text, before))
    except Exception as exc:  # the awaiting caller gets it, as from the thread
        future.set_exception(exc)
    return future


class UtteranceText:
    """Prepares one utterance's segments, in order, with what spans segments (code fences)
    and the utterance's lexicon entries over the file's."""

    def __init__(self, frontend: TextFrontend, lexicon: Lexicon | None = None) -> None:
        self._frontend = frontend
        self._fences = CodeFences()
        self._own = lexicon
        self._merged: tuple[Lexicon | None, Lexicon | None] = (None, lexicon)
        self._previous = ""  # the last segment given, for the cue words before the next
        # Digit strings read digit by digit so far (the latest _MAX_CODES): said the same
        # way when they come back bare.
        self._codes: dict[str, tuple[str, str, str]] = {}
        #: Segments handed to the front-end's thread and not yet prepared.
        self.in_thread = 0

    def thread_done(self, _future: object) -> None:
        self.in_thread -= 1

    def lexicon(self) -> Lexicon | None:
        """The file's entries (as they are now) with this utterance's over them."""
        file_lexicon = self._frontend.file_lexicon()
        if file_lexicon is not self._merged[0]:  # merged once per version of the file
            merged = file_lexicon.merged(self._own) if file_lexicon is not None else self._own
            self._merged = (file_lexicon, merged)
        return self._merged[1]

    def follow(self, text: str) -> str:
        """Note ``text`` as the utterance's latest segment; returns the one before it."""
        before, self._previous = self._previous, text
        return before

    def prepare_now(self, text: str, before: str) -> PreparedText:
        """Prepare a segment that is no code, after ``before`` (blocking; the front-end
        thread)."""
        prepared = self._frontend.prepare(text, self.lexicon(), before, self._codes.values())
        for code in prepared.codes:
            self._codes.pop(code[0], None)
            self._codes[code[0]] = code
        while len(self._codes) > _MAX_CODES:
            del self._codes[next(iter(self._codes))]
        return prepared

    def prepare(self, text: str) -> PreparedText:
        """Prepare the next segment (blocking)."""
        before = self.follow(text)
        return code_body(text) if self._fences.is_code(text) else self.prepare_now(text, before)

    def submit(self, text: str) -> asyncio.Future[PreparedText]:
        """Start preparing the next segment; call on the event loop, segments in order."""
        if self._fences.is_code(text):
            self.follow(text)
            future: asyncio.Future[PreparedText] = asyncio.get_running_loop().create_future()
            future.set_result(code_body(text))
            return future
        return self._frontend.submit(text, self)
