"""The live server for tests: :mod:`harness.live`, which the benchmarks share."""

from __future__ import annotations

from harness.live import TIMEOUT_S, LiveServer, child_pids, run_live_server

__all__ = ["TIMEOUT_S", "LiveServer", "child_pids", "run_live_server"]
