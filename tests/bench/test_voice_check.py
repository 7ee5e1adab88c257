"""bench/voice_check.py runs (its smoke mode, as a subprocess) and reports its figures."""

from __future__ import annotations

from tests.bench.smoke import ONE_THREAD, assert_all_finite, figure, run_bench
from tests.fleet.fleet import requires_fleet

pytestmark = [requires_fleet]


def test_smoke_run_times_each_check_against_a_round_trip() -> None:
    """Against a real redis-server: a PING, the check of a seed voice, of a clip voice and
    of an absent name, and a record's HGET are timed, each with its ratio to the PING."""
    report = run_bench("voice_check.py", "--smoke", env=ONE_THREAD)
    assert_all_finite(report)
    assert (report["bench"], report["smoke"]) == ("voice_check", True)
    names = {"ping", "check_seed_voice", "check_clip_voice", "check_absent_name",
             "hget_clip_record"}  # fmt: skip
    assert set(report["figures"]) == set(report["p50_over_ping"]) == names
    for name in names:
        p50, p99 = (
            figure(report, f"figures.{name}.p50_us"),
            figure(report, f"figures.{name}.p99_us"),
        )
        assert 0 < p50 <= p99
    assert figure(report, "p50_over_ping.ping") == 1.0
