"""bench/phrase_cache.py runs (its smoke mode, as a subprocess): cached runs all hit,
new ones all miss, and a hit's first audio comes sooner than a synthesis's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.smoke import ONE_THREAD, assert_all_finite, figure, run_bench


@pytest.mark.slow
def test_smoke_run_compares_a_cached_phrase_with_a_synthesised_one(tiny_checkpoint: Path) -> None:
    """Every figure is finite and positive; the cached runs' first audio beats the
    synthesised runs' on the server's clock and the clients'."""
    report = run_bench(
        "phrase_cache.py", "--smoke", "--checkpoint", str(tiny_checkpoint), env=ONE_THREAD
    )
    assert_all_finite(report)
    assert (report["bench"], report["smoke"], report["engine"]) == ("phrase_cache", True, "chattts")
    assert report["cached_misses"] == 0 and report["cached_hits"] > 0
    assert report["synthesised_hits"] == 0 and report["synthesised_misses"] > 0
    for where in ("server", "http_client", "ws_client"):
        cached = figure(report, f"cached_{where}_p50_ms")
        assert 0 < cached < figure(report, f"synthesised_{where}_p50_ms"), where
