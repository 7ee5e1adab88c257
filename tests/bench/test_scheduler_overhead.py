"""bench/scheduler_overhead.py runs (its smoke mode, as a subprocess): the worker's host
work per round, and one hand-off to the event loop per round whatever the batch."""

from __future__ import annotations

from tests.bench.smoke import ONE_THREAD, assert_all_finite, figure, run_bench


def test_smoke_run_times_rounds_and_hands_over_once_per_round() -> None:
    """Every batch size gets a time per round, the fit has its two terms, and every row's
    chunk of a round reaches the loop in a single wake-up."""
    report = run_bench("scheduler_overhead.py", "--smoke", timeout_s=120, env=ONE_THREAD)
    assert_all_finite(report)
    assert (report["bench"], report["smoke"], report["chunk_every"]) == (
        "scheduler_overhead", True, 1,
    )  # fmt: skip
    assert set(report["us_per_round"]) == {"1", "8"}
    for batch in ("1", "8"):
        assert figure(report, f"us_per_round.{batch}") > 0
        assert report["handoffs_per_round"][batch] == 1.0
    figure(report, "fit.a_us")
    figure(report, "fit.b_us_per_row")


def test_rows_taking_turns_hand_over_only_in_rounds_with_audio() -> None:
    """``--chunk-every 4``: eight rows taking turns give two chunks a round (one hand-off
    a round); one row gives a chunk every fourth round (a hand-off in a quarter of them)."""
    report = run_bench(
        "scheduler_overhead.py", "--smoke", "--chunk-every", "4", timeout_s=120, env=ONE_THREAD
    )
    assert_all_finite(report)
    assert report["chunk_every"] == 4
    assert report["handoffs_per_round"] == {"1": 0.25, "8": 1.0}
    assert figure(report, "us_per_round.8") > 0
