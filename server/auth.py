"""Bearer-token checks for HTTP requests and WebSocket upgrades."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from fastapi import Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.requests import HTTPConnection

from streaming.protocol import TOKEN_SUBPROTOCOL_PREFIX


class _HasTokens(Protocol):
    def require_token(self, request: Request) -> None: ...


class TokenAuth:
    """Accepts a request when it presents one of the configured tokens.

    With no tokens configured every request is accepted (the app logs a warning at
    start). Comparison is constant-time and looks at every configured token, so timing
    reveals neither which token matched nor how much of one did.
    """

    def __init__(self, tokens: Iterable[str]) -> None:
        self._tokens = tuple(t.encode() for t in tokens)

    @property
    def enabled(self) -> bool:
        return bool(self._tokens)

    def accepts(self, presented: str | None) -> bool:
        if not self._tokens:
            return True
        if presented is None:
            return False
        candidate = presented.encode()
        matched = False
        for token in self._tokens:
            matched |= hmac.compare_digest(candidate, token)
        return matched


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, if any."""
    value = headers.get("authorization")
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def query_of(connection: HTTPConnection) -> Mapping[str, str]:
    """A connection's query parameters, parsed only when it has a query string (parsing
    an empty one cost ~70 us a stream: docs/performance.md)."""
    return connection.query_params if connection.scope.get("query_string") else {}


def websocket_token(
    headers: Mapping[str, str], subprotocols: Iterable[str], query: Mapping[str, str]
) -> str | None:
    """The token a WebSocket client presented: header, then subprotocol, then query."""
    token = bearer_token(headers)
    if token is not None:
        return token
    for protocol in subprotocols:
        if protocol.startswith(TOKEN_SUBPROTOCOL_PREFIX):
            return protocol[len(TOKEN_SUBPROTOCOL_PREFIX) :]
    return query.get("token") or None


#: The OpenAPI security scheme every protected route declares (it checks nothing itself:
#: ``require_bearer`` does, so a missing token gets this server's 401, not FastAPI's 403).
BEARER = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="one of the tokens in --token-file / TTS_TOKENS (open when none are set)",
)


_CREDENTIALS = Security(BEARER)


def require_bearer(state: _HasTokens) -> Callable[..., Any]:
    """A route dependency: refuse a request without one of the configured tokens."""

    def check(
        request: Request, _credentials: HTTPAuthorizationCredentials | None = _CREDENTIALS
    ) -> None:
        state.require_token(request)

    return check
