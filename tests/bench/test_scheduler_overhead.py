"""bench/scheduler_overhead.py runs (its smoke mode, as a subprocess): the worker's host
work per round, and one hand-off to the event loop per round whatever the batch."""

from __future__ import annotations

from tests.bench.smoke import ONE_THREAD, assert_all_finite, figure, run_bench


def test_smoke_run_times_rounds_and_hands_over_once_per_round() -> None:
    """Every batch size gets a time per round, the fit has its two terms, and every row's
    chunk of a round reaches the loop in a single wake-up."""
    report = run_bench("scheduler_overhead.py", "--smoke", timeout_s=120, env=ONE_THREAD)
    assert_all_finite(report)
    assert (report["bench"], report["smoke"]) == ("scheduler_overhead", True)
    assert set(report["us_per_round"]) == {"1", "8"}
    for batch in ("1", "8"):
        assert figure(report, f"us_per_round.{batch}") > 0
        assert report["handoffs_per_round"][batch] == 1.0
    figure(report, "fit.a_us")
    figure(report, "fit.b_us_per_row")
