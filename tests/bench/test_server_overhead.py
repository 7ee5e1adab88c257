"""bench/server_overhead.py runs (its smoke mode, as a subprocess) and compares both servers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.smoke import ONE_THREAD, assert_all_finite, bench_module, figure, run_bench

pytestmark = pytest.mark.live


@pytest.mark.slow
def test_smoke_run_measures_ours_the_stack_and_the_bare_server_on_the_same_audio() -> None:
    """The three servers (ours, the stack ours stands on replaying what ours sent, the bare
    websockets server) send every stream the same audio; CPU and TTFA are measured for each."""
    report = run_bench("server_overhead.py", "--smoke", timeout_s=180, env=ONE_THREAD)
    assert_all_finite(report)
    assert (report["bench"], report["smoke"], report["streams"]) == ("server_overhead", True, 40)
    for server in ("ours", "stack", "bare"):
        assert figure(report, f"figures.{server}.cpu_s") > 0
        assert figure(report, f"figures.{server}.cpu_ms_per_100ms_audio") > 0
        p50 = figure(report, f"figures.{server}.ttfa_p50_ms")
        assert 0 < p50 <= figure(report, f"figures.{server}.ttfa_p99_ms")
    audio_s = figure(report, "figures.ours.audio_s")
    assert audio_s > 40 * 1.0 and audio_s == figure(report, "figures.bare.audio_s")
    assert audio_s == figure(report, "figures.stack.audio_s")
    assert figure(report, "cpu_ratio_vs_bare") > 0
    # The stack's CPU against the bare server's (from the figures, rounded to 3 places).
    stack = figure(report, "stack_cpu_ratio_vs_bare")
    of_figures = figure(report, "figures.stack.cpu_ms_per_100ms_audio") / figure(
        report, "figures.bare.cpu_ms_per_100ms_audio"
    )
    assert stack > 0 and abs(stack - of_figures) <= 0.05 * of_figures + 0.01
    for path in ("added_ttfa_ms.p50", "added_ttfa_ms.p99", "ttfa_median_both_ms"):
        figure(report, path)  # present and finite (an added time may be negative)
    # Requests of the kernel a stream: every server writes its frames (at least one
    # write a stream: its handshake answer), and the bare one a write a message.
    # Each waits for its next event (switched out) between a stream's messages.
    for server in ("ours", "stack", "bare"):
        assert figure(report, f"figures.{server}.writes_per_stream") >= 1
        assert figure(report, f"figures.{server}.context_switches_per_stream") > 0
        assert figure(report, f"figures.{server}.page_faults_per_stream") >= 0
    assert figure(report, "figures.bare.writes_per_stream") >= 13  # 13 messages, 1 each


@pytest.mark.slow
def test_a_baseline_revision_is_measured_as_before() -> None:
    """--baseline runs our server as a git revision has it (the bench refuses to go on
    if that server's code did not come from the revision's checkout)."""
    report = run_bench(
        "server_overhead.py", "--smoke", "--baseline", "HEAD", timeout_s=240, env=ONE_THREAD
    )
    assert report["baseline"] == "HEAD"
    assert figure(report, "figures.before.cpu_s") > 0
    assert figure(report, "before.cpu_ratio_vs_bare") > 0
    assert figure(report, "figures.before.audio_s") == figure(report, "figures.ours.audio_s")


def test_the_hottest_functions_are_the_event_loops_own_samples(tmp_path: Path) -> None:
    """From py-spy's raw samples: only the main thread's, by the function each was in
    (not its callers), as a share of the loop's CPU per stream, the most first."""
    raw = tmp_path / "raw.txt"
    raw.write_text(
        "process 1:MainThread;run (a.py:1);flush (wire.py:9) 6\n"
        "process 1:MainThread;run (a.py:1);flush (wire.py:9) 2\n"
        "process 1:MainThread;run (a.py:1) 2\n"
        "process 1:engine;step (engine.py:3) 50\n"
    )
    hottest = bench_module("server_overhead.py").hottest
    assert hottest(raw, 100.0) == [("flush (wire.py:9)", 80.0), ("run (a.py:1)", 20.0)]
    assert hottest(raw, 100.0, count=1) == [("flush (wire.py:9)", 80.0)]


def test_perf_s_shared_objects_are_summed_by_where_the_code_lives() -> None:
    """``perf report --sort dso`` lines become microseconds per stream by place (the
    interpreter with CPython's own C modules, the kernel with its modules, NumPy, uvloop,
    libc by any of its names, the rest), in proportion to each line's share of the
    samples; headers and blank lines are skipped."""
    report = (
        "# Samples: 4K of event 'cpu-clock:ppp'\n"
        "#\n"
        "# Overhead  Shared Object\n"
        "    45.00%  libpython3.11.so.1.0\n"
        "     5.00%  _asyncio.cpython-311-x86_64-linux-gnu.so\n"
        "    18.00%  [kernel.kallsyms]\n"
        "     2.00%  [xfs]\n"
        "     5.00%  _multiarray_umath.cpython-311-x86_64-linux-gnu.so\n"
        "     5.00%  libscipy_openblas64_-32a4b2a6.so\n"
        "    10.00%  loop.cpython-311-x86_64-linux-gnu.so\n"
        "     3.00%  libc.so.6\n"
        "     1.00%  libc-2.31.so\n"
        "     1.00%  libpthread-2.31.so\n"
        "     5.00%  orjson.cpython-311-x86_64-linux-gnu.so\n"
        "\n"
    )
    places = bench_module("server_overhead.py").code_places(report, 1000.0)
    assert places == {
        "the Python interpreter": 500,
        "the kernel (system calls, sockets, scheduling, page faults)": 200,
        "NumPy": 100,
        "uvloop (libuv)": 100,
        "libc (memory, strings)": 50,
        "other compiled code (orjson, httptools, the vDSO, ...)": 50,
    }
    assert list(places)[:2] == [
        "the Python interpreter",
        "the kernel (system calls, sockets, scheduling, page faults)",
    ]
