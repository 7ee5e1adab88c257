"""bench/capacity.py runs (its smoke mode, as a subprocess) and reports its figures."""

from __future__ import annotations

import pytest

from tests.bench.smoke import figure, run_bench

pytestmark = pytest.mark.live


def test_smoke_run_reports_each_design_with_the_gpu_preset() -> None:
    """At most two streams: every design's server started, its trials ran and a capacity
    is reported, on the gpu preset's modelled step."""
    report = run_bench("capacity.py", "--smoke", "--prefill-ms", "1.5")
    assert (report["bench"], report["smoke"], report["engine"]) == ("capacity", True, "modelled")
    assert figure(report, "a_ms") > 0 and figure(report, "b_ms") > 0
    assert report["prefill_ms"] == 1.5
    assert set(report["capacity"]) == {"seed", "interleave", "batched"}
    assert {trial["design"] for trial in report["trials"]} == set(report["capacity"])
    assert all(0 <= n <= 2 for n in report["capacity"].values())
    for trial in report["trials"]:  # each side's CPU, to tell which one ran out of core
        assert trial["server_cpu_ms_per_stream"] > 0 and trial["client_cpu_ms_per_stream"] > 0
        assert 0 < trial["server_cores"] <= 2 and 0 < trial["client_cores"] <= 2
