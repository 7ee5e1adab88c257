"""bench/load.py runs (its smoke mode, as a subprocess, on its own fallback-voice server)."""

from __future__ import annotations

import pytest

from tests.bench.smoke import ONE_THREAD, assert_all_finite, figure, run_bench

pytestmark = pytest.mark.live


def test_smoke_run_streams_and_posts_without_errors() -> None:
    """One and two concurrent streams all finish with audio; both HTTP requests answer 200."""
    report = run_bench("load.py", "--smoke", timeout_s=120, env=ONE_THREAD)
    assert_all_finite(report)
    assert (report["bench"], report["smoke"]) == ("load", True)
    assert [level["concurrency"] for level in report["websocket"]] == [1, 2]
    for level in report["websocket"]:
        assert level["streams_ok"] == level["concurrency"] and level["errors"] == []
        assert level["refused"] == 0
        assert figure(level, "ttfa_p50_ms") > 0 and figure(level, "audio_s_per_stream") > 1
        assert figure(level, "wall_rtf_median") > 0 and figure(level, "max_stall_ms") >= 0
        assert 0 < level["ttfa_p50_ms"] <= level["ttfa_p95_ms"] <= level["ttfa_p99_ms"]
    http = report["http"]
    assert (http["requests"], http["errors"]) == (2, 0)
    assert figure(http, "qps") > 0 and 0 < figure(http, "p50_ms") <= figure(http, "p99_ms")
