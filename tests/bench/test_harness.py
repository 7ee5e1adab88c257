"""Benchmarks stand on their own: they import the project and :mod:`harness` as
installed, never ``tests`` and never a ``sys.path`` of their own, and each answers
``--help`` run as a user runs it, from any directory."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHES = sorted(p for p in (ROOT / "bench").glob("*.py") if p.name != "__init__.py")
#: Modules with no command line of their own: run by locust (`locust -f
#: bench/locustfile.py`), or imported by another benchmark (host_overhead.py).
NOT_COMMANDS = {"locustfile.py", "legacy_batch.py"}


def _imported_modules(tree: ast.AST) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


def _touches_sys_path(tree: ast.AST) -> list[int]:
    """Lines reading or writing ``sys.path`` (``from sys import path`` too)."""
    lines = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    ]
    lines += [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and node.module == "sys"
        and any(alias.name == "path" for alias in node.names)
    ]
    return lines


@pytest.mark.parametrize("path", [*BENCHES, *sorted((ROOT / "harness").glob("*.py"))],
                         ids=lambda p: f"{p.parent.name}/{p.name}")  # fmt: skip
def test_no_bench_or_harness_module_imports_tests_or_touches_sys_path(path: Path) -> None:
    """Neither a benchmark nor the harness imports ``tests`` (the harness not ``bench``
    either) or reads or changes ``sys.path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    forbidden = ("tests", "bench") if path.parent.name == "harness" else ("tests",)
    wrong = {m for m in _imported_modules(tree) if m.split(".")[0] in forbidden}
    assert not wrong, f"{path.name} imports {sorted(wrong)}"
    assert not _touches_sys_path(tree), (
        f"{path.name} touches sys.path on lines {_touches_sys_path(tree)}"
    )


def test_the_guard_sees_what_it_forbids() -> None:
    """The checks above find a ``tests`` import and a ``sys.path`` change when there is one."""
    tree = ast.parse(
        "import sys\nfrom sys import path\nsys.path.insert(0, '.')\n"
        "from tests.live import run_live_server\nimport tests.seams\n"
    )
    assert {"tests.live", "tests.seams"} <= _imported_modules(tree)
    assert sorted(_touches_sys_path(tree)) == [2, 3]


@pytest.mark.slow
@pytest.mark.parametrize(
    "path", [p for p in BENCHES if p.name not in NOT_COMMANDS], ids=lambda p: p.name
)
def test_every_benchmark_answers_help_from_any_directory(path: Path, tmp_path: Path) -> None:
    """``python bench/NAME.py --help`` from a directory outside the checkout prints its
    usage and exits 0: its imports resolve through the installed project alone."""
    done = subprocess.run(
        [sys.executable, str(path), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("usage: "), done.stdout[:500]


def test_settings_given_to_a_benchmark_are_read_as_the_server_reads_them() -> None:
    """``--set``/``--compare`` pairs: a flag's spelling or the field's, values parsed by
    the setting's own declaration, and a name that is no setting refused naming the flag."""
    from harness.bench_server import settings_overrides

    found = settings_overrides(["--ws-direct-send=false", "sit_out_ahead_s=1.5"], "--set")
    assert found == {"ws_direct_send": False, "sit_out_ahead_s": 1.5}
    # A setting held in a bundle (Settings.heap) comes as the bundle, the rest default.
    from server.config import Settings
    from server.heap import HeapSettings

    nested = settings_overrides(["gc-young-threshold=0", "wyoming_port=10200"], "--set")
    assert nested["heap"] == HeapSettings(gc_young_threshold=0)
    assert nested["wyoming"] == Settings().wyoming.__class__(wyoming_port=10200)
    assert Settings().replace(**nested).heap.gc_young_threshold == 0
    with pytest.raises(SystemExit, match=r"^--compare: 'bogus' is not a server setting$"):
        settings_overrides(["bogus=1"], "--compare")


def test_kernel_counts_are_a_process_s_writes_switches_and_faults_with_its_threads() -> None:
    """A child that makes 200 writes to a pipe, 30 sleeps in a thread of its own and
    touches 2,000 fresh pages is counted at least that many write system calls, context
    switches and page faults between two reads, its running threads together."""
    from harness.bench_server import kernel_counts

    child_code = (
        "import os, sys, threading, time\n"
        "sys.stdin.readline()\n"
        "for _ in range(200): os.write(1, b'x')\n"
        "napped, end = threading.Event(), threading.Event()\n"
        "def nap():\n"
        "    for _ in range(30): time.sleep(0.001)\n"
        "    napped.set(); end.wait()\n"  # alive while counted: an ended thread's are gone
        "t = threading.Thread(target=nap); t.start()\n"
        "import mmap\n"
        "pages = mmap.mmap(-1, 2000 * 4096)\n"
        "pages.madvise(mmap.MADV_NOHUGEPAGE)\n"  # a fault a 4 KiB page, huge pages or not
        "for i in range(0, len(pages), 4096): pages[i] = 1\n"
        "napped.wait(); os.write(2, b'.')\n"
        "sys.stdin.readline(); end.set(); t.join()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", child_code],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    ) as child:  # fmt: skip
        assert child.stdin is not None and child.stderr is not None
        before = kernel_counts(child.pid)
        child.stdin.write(b"go\n")
        child.stdin.flush()
        assert child.stderr.read(1) == b"."  # done, its thread napped and waiting
        after = kernel_counts(child.pid)
        written, _ = child.communicate(b"end\n", timeout=30)
    assert written == b"x" * 200
    grew = {k: after[k] - before[k] for k in before}
    assert grew["writes"] >= 201, grew  # its 200 and the "." to stderr
    assert grew["context_switches"] >= 30, grew
    assert grew["page_faults"] >= 2000, grew
