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


def configure(level: str, fmt: str = "text") -> None:
    """Install the one handler on the root logger (standard error)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_Ids(text=fmt != "json"))
    if fmt == "json":
        from pythonjsonlogger.json import JsonFormatter

        handler.setFormatter(
            JsonFormatter(
                "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s %(session_id)s",
                rename_fields={"levelname": "level", "name": "logger", "asctime": "time"},
            )
        )
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s%(ids)s: %(message)s")
        )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    quiet_dependencies()


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
    shown = " ".join(f"{k}={v}" for k, v in fields.items() if v is not None)
    _summary_log.log(level, "%s %s %s", kind, message, shown, extra={"summary": kind, **fields})
