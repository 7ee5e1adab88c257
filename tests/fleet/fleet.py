"""The fleet on loopback (:mod:`harness.fleet`, which the benchmarks share) and the
marker that skips a fleet test where its binaries are missing."""

from __future__ import annotations

import os

import pytest

from harness.fleet import (
    HAPROXY,
    HAPROXY_CONFIG,
    REDIS,
    TIMEOUT_S,
    Balancer,
    Fleet,
    Replica,
    Store,
    cpu_hogs,
    free_port,
    http_get,
    missing_binaries,
    run_fleet,
)

__all__ = [
    "HAPROXY",
    "HAPROXY_CONFIG",
    "REDIS",
    "TIMEOUT_S",
    "Balancer",
    "Fleet",
    "Replica",
    "Store",
    "cpu_hogs",
    "free_port",
    "http_get",
    "requires_fleet",
    "run_fleet",
]


def _requires_fleet() -> pytest.MarkDecorator:
    """Skip without the binaries, saying which; on CI (CI=true) never skip: there the
    tests run and fail for what setup did not install."""
    reason = missing_binaries()
    on_ci = os.environ.get("CI", "").lower() in {"1", "true"}
    return pytest.mark.skipif(reason is not None and not on_ci, reason=reason or "")


requires_fleet = _requires_fleet()
