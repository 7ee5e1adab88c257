"""bench/connection_cost.py runs (its smoke mode, as a subprocess) and reports its figures."""

from __future__ import annotations

import pytest

from tests.bench.smoke import figure, run_bench

pytestmark = pytest.mark.live


def test_smoke_run_prices_a_connection_on_each_server() -> None:
    """40 connections to each of our server, a bare uvicorn app and a bare websockets
    server (each opened, ready read, a context started, closed): every server's CPU and
    its clients' per connection, and ours against the bare ones."""
    report = run_bench("connection_cost.py", "--smoke")
    assert (report["bench"], report["smoke"], report["connections"]) == (
        "connection_cost", True, 40,
    )  # fmt: skip
    assert set(report["figures"]) == {"ours", "uvicorn", "websockets"}
    for name in report["figures"]:
        assert figure(report, f"figures.{name}.client_cpu_ms") > 0
        assert figure(report, f"figures.{name}.server_cpu_ms") >= 0  # 10 ms clock ticks
        assert figure(report, f"figures.{name}.connections_a_second") > 0
    ours = figure(report, "figures.ours.server_cpu_ms")
    assert ours > 0  # our server's set-up (session, context) is dearer than a tick in 40
    for name in ("uvicorn", "websockets"):
        bare = report["figures"][name]["server_cpu_ms"]
        ratio = report[f"ours_vs_{name}"]
        assert ratio is None if bare == 0 else ratio == pytest.approx(ours / bare, abs=0.01)


def test_a_baseline_is_measured_beside_ours_round_by_round() -> None:
    """``--baseline HEAD --rounds 2``: our server as the last commit has it is measured
    too ('before'), each server twice, alternating; figures are the rounds' medians."""
    report = run_bench("connection_cost.py", "--smoke", "--baseline", "HEAD", "--rounds", "2")
    assert (report["rounds"], report["baseline"]) == (2, "HEAD")
    assert set(report["figures"]) == {"ours", "before", "uvicorn", "websockets"}
    assert figure(report, "figures.before.server_cpu_ms") > 0
    assert figure(report, "figures.before.connections_a_second") > 0
    before = report["figures"]["before"]["server_cpu_ms"]
    ours = report["figures"]["ours"]["server_cpu_ms"]
    assert report["ours_vs_before"] == pytest.approx(ours / before, abs=0.01)
