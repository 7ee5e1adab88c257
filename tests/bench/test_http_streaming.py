"""bench/http_streaming.py runs (its smoke mode, as a subprocess) and reports every route."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.smoke import ONE_THREAD, assert_all_finite, figure, run_bench

pytestmark = pytest.mark.live

ROUTES = ("tts_buffered", "tts_streamed", "speech_pcm", "speech_mp3", "speech_ulaw")


@pytest.mark.slow
def test_smoke_run_times_every_route_on_chattts(tiny_checkpoint: Path) -> None:
    """Each route's first byte and last byte are timed, the first no later than the last."""
    report = run_bench(
        "http_streaming.py", "--smoke", "--checkpoint", str(tiny_checkpoint), env=ONE_THREAD
    )
    assert_all_finite(report)
    assert (report["bench"], report["smoke"], report["engine"]) == (
        "http_streaming",
        True,
        "chattts",
    )
    for route in ROUTES:
        first, last = figure(report, f"{route}_ttfb_ms"), figure(report, f"{route}_total_ms")
        assert 0 < first <= last, route
    assert figure(report, "streamed_ttfb_vs_buffered") > 0
