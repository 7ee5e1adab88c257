"""bench/fleet.py runs (its smoke mode, as a subprocess) and reports its figures."""

from __future__ import annotations

import pytest

from tests.bench.smoke import ONE_THREAD, figure, run_bench
from tests.fleet.fleet import requires_fleet

pytestmark = [requires_fleet, pytest.mark.slow, pytest.mark.live]


def test_smoke_run_reports_both_capacities_and_the_gap_a_crash_adds() -> None:
    """Three replica processes behind HAProxy: the capacity of one alone and of the
    three (at most two streams) are measured; a replica killed under three streams
    leaves every stream heard complete, and the resumption's gap figures are reported."""
    report = run_bench("fleet.py", "--smoke", env=ONE_THREAD)
    assert (report["bench"], report["smoke"]) == ("fleet", True)
    assert 1 <= report["capacity"]["one"] <= 2 and 1 <= report["capacity"]["three"] <= 2
    assert figure(report, "ratio") > 0
    resume = report["resume"]
    assert resume["affected"] >= 1 and resume["errors"] == 0
    assert resume["complete"] == resume["streams"] == 3
    assert figure(report, "resume.gap_p95_ms") >= 0
    figure(report, "resume.added_gap_p95_ms")
    assert figure(report, "resume.back_after_p95_ms") > 0
    assert {trial["fleet"] for trial in report["trials"]} == {"one", "three"}
