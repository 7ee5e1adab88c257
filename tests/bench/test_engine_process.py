"""bench/engine_process.py runs (its smoke mode, as a subprocess) and reports its figures."""

from __future__ import annotations

from tests.bench.smoke import ONE_THREAD, assert_all_finite, figure, run_bench


def test_smoke_run_times_a_step_in_the_thread_and_in_the_engine_process() -> None:
    """A step is timed alone and beside a busy thread for the engine in the server's
    thread and in its own process, with the loop's work beside each, the pipe's round
    trip and the ratios."""
    report = run_bench("engine_process.py", "--smoke", env=ONE_THREAD)
    assert_all_finite(report)
    assert (report["bench"], report["smoke"]) == ("engine_process", True)
    for engine in ("thread", "process"):
        for case in ("alone_ms", "busy_ms", "busy_iterations_per_s"):
            assert figure(report, f"figures.{engine}.{case}") > 0
    assert figure(report, "figures.round_trip_us") > 0
    assert figure(report, "figures.audio_bytes_per_step") == 4 * 512 * 4
    assert figure(report, "busy_step_thread_vs_process") > 0
    assert figure(report, "loop_work_process_vs_thread") > 0
