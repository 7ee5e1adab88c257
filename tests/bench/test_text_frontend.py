"""bench/text_frontend.py runs (its smoke mode, as a subprocess) and reports every corpus."""

from __future__ import annotations

from tests.bench.smoke import ONE_THREAD, assert_all_finite, figure, run_bench


def test_smoke_run_times_every_corpus() -> None:
    """Load time, then per-segment percentiles for each corpus, in order p50 <= p95 <= max."""
    report = run_bench("text_frontend.py", "--smoke", env=ONE_THREAD)
    assert_all_finite(report)
    assert (report["bench"], report["smoke"]) == ("text_frontend", True)
    assert figure(report, "load_ms") >= 0
    assert set(report["per_segment"]) == {"prose", "numbers", "markdown", "english"}
    for corpus in report["per_segment"]:
        figures = [figure(report, f"per_segment.{corpus}.{name}")
                   for name in ("segments", "p50_ms", "p95_ms", "max_ms", "rules_only_p50_ms")]  # fmt: skip
        segments, p50, p95, most, rules_only = figures
        assert segments >= 4 and 0 < p50 <= p95 <= most and rules_only > 0
