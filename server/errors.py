"""The one place a failure is logged and counted, as the table in :mod:`streaming.errors` says.

Everything that handles an error (a refused message, a failed segment, an HTTP error
response, a broken connection) calls :func:`report` once: the error is counted in
``tts_errors_total`` by its code and logged at its level, with a traceback only for
what is a bug. The exception classes themselves live in :mod:`streaming.errors`.
"""

from __future__ import annotations

import logging

from server.metrics import Metrics
from streaming.errors import outcome, public_message

__all__ = ["report"]


def report(
    exc: BaseException,
    *,
    metrics: Metrics,
    log: logging.Logger | logging.LoggerAdapter[logging.Logger],
    where: str,
) -> tuple[str, str]:
    """Count and log ``exc`` (handled at ``where``); return its ``(code, message)``."""
    row = outcome(exc)
    code, message = public_message(exc)
    metrics.errors.labels(kind=code, fault=row.fault).inc()
    if log.isEnabledFor(row.log_level):
        detail = message if code != "internal_error" else f"{type(exc).__name__}: {exc}"
        log.log(
            row.log_level,
            "%s: %s (%s)",
            where,
            detail,
            code,
            exc_info=exc if row.traceback else None,
        )
    return code, message
