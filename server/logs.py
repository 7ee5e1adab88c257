"""The server's log: one line per record, text or JSON, each with its request or session id.

- ``--log-format text`` (default): ``time level logger [id]: message``;
  ``--log-format json``: one JSON object per line (python-json-logger), with
  ``request_id`` and ``session_id`` keys on every line (null outside a request/session)
  and a summary's fields as keys of their own.
- The ids come from context variables set by the HTTP middleware (``X-Request-ID`` when
  the client sends a sane one, else a new one; echoed in the response) and by the
  WebSocket session, so every line logged while serving them carries them, uvicorn's
  and the libraries' included.
- Each HTTP request and each WebSocket context ends with exactly one summary line
  (:func:`summary`): what was asked, what was spoken, how it ended.
- Progress bars (tqdm) and the dependencies' deprecation warnings are kept out.
- **No secrets.** Every record's message is redacted before it is written, whoever
  logged it (uvicorn logs WebSocket upgrades with their query string at INFO, and the
  websockets library every header at DEBUG): query strings, ``Authorization`` (and
  cookie) header values, ``Bearer`` credentials and ``token.`` subprotocols.
- **No forged lines.** In the text format a record is one line: control characters in
  it (a client's newline in a path or a context id included) are escaped, and a
  traceback's lines are indented, so every line that starts at column 0 starts a record.
  JSON lines escape them by construction.
- **Client faults are not errors.** uvicorn's own lines about a client's bad input (a
  text frame that is not UTF-8, a request that is not HTTP) are rewritten to one INFO
  line without a traceback: ERROR is for what someone must fix on the server.
"""

from __future__ import annotations

import contextvars
import logging
import os
import re
import secrets
import sys
import warnings
from typing import Any

__all__ = [
    "REQUEST_ID",
    "SESSION_ID",
    "configure",
    "new_request_id",
    "summary",
]

REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
SESSION_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("session_id", default=None)
_SANE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_summary_log = logging.getLogger("chattts_stream.summary")

# Secrets in a message: (pattern, replacement). A query string is redacted whole: its
# parameter names may be percent-encoded (``tok%65n=``) and still be read as ``token``.
_SECRETS = [
    (re.compile(r"(/[^\s?]*)\?\S*?([\"']?)(?=\s|$)"), r"\1?[redacted]\2"),
    (
        re.compile(
            r"(?i)\b((?:proxy-)?authorization|cookie|set-cookie|x-api-key)(\s*:\s*)[^\r\n]*"
        ),
        r"\1\2[redacted]",
    ),
    # Case-sensitive: "bearer token" in a sentence is no credential.
    (re.compile(r"\b(Bearer\s+)[^\s'\",]+"), r"\1[redacted]"),
    (re.compile(r"(?i)\b(token\.)[^\s'\",]+"), r"\1[redacted]"),
]
# Control characters (C0 but tab, DEL, C1) and the Unicode line separators, as escapes.
_ESCAPES = {
    **{c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c != 0x09},
    0x0A: "\\n",
    0x0D: "\\r",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}
_ESCAPES_BUT_NEWLINE = {c: e for c, e in _ESCAPES.items() if c != 0x0A}
# uvicorn's lines about a client's bad input: (its message) -> what is logged at INFO.
_CLIENT_FAULTS = {
    "Invalid UTF-8 sequence received from client.": (
        "closed with 1007: a text frame that is not valid UTF-8 (client fault)"
    ),
    "Invalid HTTP request received.": "answered 400: a request that is not valid HTTP (client fault)",
    "Unsupported upgrade request.": "an upgrade to a protocol other than WebSocket (client fault)",
}


def new_request_id(offered: str | None) -> str:
    """The client's ``X-Request-ID`` when it is a sane token, else a new id."""
    if offered and _SANE_ID.fullmatch(offered):
        return offered
    return secrets.token_hex(8)


class _Ids(logging.Filter):
    """Puts the current request and session ids on every record (text: as ``ids``)."""

    def __init__(self, *, text: bool) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        request_id, session_id = REQUEST_ID.get(), SESSION_ID.get()
        record.__dict__.update(request_id=request_id, session_id=session_id)
        if self.text:
            ids = " ".join(i for i in (request_id, session_id) if i)
            record.__dict__["ids"] = f" [{ids}]" if ids else ""
        else:
            record.__dict__.pop("color_message", None)  # uvicorn's ANSI copy of the message
        return True


def redact(text: str) -> str:
    """``text`` with every secret it may hold replaced by ``[redacted]``."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


class _Redacted(logging.Filter):
    """Redacts each record's message (both formats) before it is formatted."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            # A request target logged as an argument (uvicorn, websockets): its query is
            # cut whole, whatever its decoded path holds (spaces, no leading slash).
            record.args = tuple(_without_query(arg) for arg in record.args)
        try:
            message = record.getMessage()
        except Exception:  # a broken record: the formatter reports it itself
            return True
        record.msg, record.args = redact(message), None
        return True


def _without_query(arg: object) -> object:
    if isinstance(arg, str) and "?" in arg and (arg.startswith("/") or "://" in arg):
        return arg.partition("?")[0] + "?[redacted]"
    return arg


class _TextFormatter(logging.Formatter):
    """One line per record: control characters escaped, tracebacks indented (and both
    redacted), so that no value a client sent can start a line of its own."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return super().formatMessage(record).translate(_ESCAPES)

    def formatException(self, ei: Any) -> str:
        return _continuation(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _continuation(super().formatStack(stack_info))


def _continuation(text: str) -> str:
    return "\n".join(
        "  " + line for line in redact(text).translate(_ESCAPES_BUT_NEWLINE).split("\n")
    )


class _ClientFaults(logging.Filter):
    """uvicorn's ERROR (with traceback) or WARNING about a client's bad input becomes
    one INFO line that says what happened (on the ``uvicorn.error`` logger)."""

    def filter(self, record: logging.LogRecord) -> bool:
        said = _CLIENT_FAULTS.get(record.msg) if isinstance(record.msg, str) else None
        if said is None:
            return True
        record.msg, record.args = said, None
        record.exc_info = record.exc_text = None
        record.levelno, record.levelname = logging.INFO, "INFO"
        return logging.getLogger(record.name).isEnabledFor(logging.INFO)


class Reported(Exception):
    """A failure already logged in a line of its own, raised to end start-up: uvicorn's
    record of it (the lifespan's traceback) is left out of the log."""


class _ReportedAlready(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, Reported):
            return False
        # Starlette hands uvicorn the lifespan's failure as formatted text.
        text = record.msg if isinstance(record.msg, str) else ""
        return not (
            text.startswith("Traceback")
            and text.rstrip().rsplit("\n", 1)[-1].startswith(f"{__name__}.Reported")
        )


def configure(level: str, fmt: str = "text") -> None:
    """Install the one handler on the root logger (standard error)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_Ids(text=fmt != "json"))
    handler.addFilter(_Redacted())
    if fmt == "json":
        handler.setFormatter(_json_formatter())
    else:
        handler.setFormatter(
            _TextFormatter("%(asctime)s %(levelname)s %(name)s%(ids)s: %(message)s")
        )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    uvicorn_log = logging.getLogger("uvicorn.error")
    for old_filter in [
        f for f in uvicorn_log.filters if isinstance(f, _ClientFaults | _ReportedAlready)
    ]:
        uvicorn_log.removeFilter(old_filter)
    uvicorn_log.addFilter(_ClientFaults())
    uvicorn_log.addFilter(_ReportedAlready())
    quiet_dependencies()


def _json_formatter() -> logging.Formatter:
    from pythonjsonlogger.json import JsonFormatter

    class Formatter(JsonFormatter):
        def formatException(self, ei: Any) -> str | list[str]:  # type: ignore[override]
            text = super().formatException(ei)
            return redact(text) if isinstance(text, str) else [redact(t) for t in text]

    return Formatter(
        "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s %(session_id)s",
        rename_fields={"levelname": "level", "name": "logger", "asctime": "time"},
    )


def quiet_dependencies() -> None:
    """No progress bars, and no deprecation chatter from libraries, in the server log
    (real warnings still come, as one log line each)."""
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    # transformers writes its own (deprecation) warnings through its own handler.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    for category in (FutureWarning, DeprecationWarning, PendingDeprecationWarning):
        warnings.filterwarnings("ignore", category=category)
    logging.captureWarnings(True)


def summary(kind: str, message: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """The one summary line of an HTTP request or a WebSocket context: ``message`` for
    people, ``fields`` as keys of their own in JSON (and ``key=value`` in text)."""
    if not _summary_log.isEnabledFor(level):
        return  # below the threshold: not even the text is built
    shown = " ".join(f"{k}={v}" for k, v in fields.items() if v is not None)
    _summary_log.log(level, "%s %s %s", kind, message, shown, extra={"summary": kind, **fields})
