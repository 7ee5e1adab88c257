"""bench/gil_convoy.py runs (its smoke mode, as a subprocess) and reports its figures."""

from __future__ import annotations

from tests.bench.smoke import ONE_THREAD, assert_all_finite, figure, run_bench


def test_smoke_run_times_each_call_alone_and_beside_a_busy_thread() -> None:
    """Each kind of call is timed alone, beside a busy thread at the default switch
    interval and at the short one, and the busy thread's share is reported."""
    report = run_bench("gil_convoy.py", "--smoke", env=ONE_THREAD)
    assert_all_finite(report)
    assert (report["bench"], report["smoke"]) == ("gil_convoy", True)
    assert set(report["figures"]) == {"python", "numpy", "torch", "busy_thread"}
    assert figure(report, "switch_interval_ms") == 5.0
    assert figure(report, "short_interval_ms") == 0.5
    for name in ("python", "numpy", "torch"):
        for case in ("alone_us", "busy_default_us", "busy_short_us"):
            assert figure(report, f"figures.{name}.{case}") > 0
    assert figure(report, "figures.busy_thread.short_vs_default_iterations") > 0
