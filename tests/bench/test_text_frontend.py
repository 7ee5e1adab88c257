"""bench/text_frontend.py runs (its smoke mode, as a subprocess) and reports what it reads
right and what it costs, for this front-end, WeTextProcessing alone and the baseline."""

from __future__ import annotations

from tests.bench.smoke import ONE_THREAD, assert_all_finite, figure, run_bench


def test_smoke_run_scores_and_times_every_corpus() -> None:
    """Sentences read right by each front-end (never more than there are), then per-segment
    percentiles for each kind of text, in order p50 <= p95 <= max, for both front-ends."""
    report = run_bench("text_frontend.py", "--smoke", "--baseline", "HEAD", env=ONE_THREAD)
    assert_all_finite(report)
    assert (report["bench"], report["smoke"], report["baseline"]) == ("text_frontend", True, "HEAD")
    assert figure(report, "load_ms") >= 0
    for corpus in ("assistants", "other_domains"):
        sentences = figure(report, f"read_right.{corpus}.sentences")
        assert sentences > 0
        for run in ("frontend", "wetext_alone", "baseline"):
            assert 0 <= figure(report, f"read_right.{corpus}.{run}") <= sentences
    assert set(report["per_segment"]) == {"prose", "numbers", "markdown", "english", "corpus"}
    for kind in report["per_segment"]:
        for prefix in (f"per_segment.{kind}", f"per_segment.{kind}.baseline"):
            segments, p50, p95, most = (
                figure(report, f"{prefix}.{name}")
                for name in ("segments", "p50_ms", "p95_ms", "max_ms")
            )
            assert segments >= 4 and 0 < p50 <= p95 <= most
