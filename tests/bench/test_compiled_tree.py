"""bench/compiled_tree.py builds a tree whose modules mypyc compiled, which a server run
from it imports, and bench/server_overhead.py takes such a tree as its baseline."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.smoke import bench_module, run_bench

#: Run in a fresh interpreter from a tree: which file its segmenter came from, and the
#: segments of one text pushed in pieces then flushed.
_SEGMENTS = (
    "import json, streaming.segment as s\n"
    "cut = s.Segmenter(s.SegmenterSettings())\n"
    "found = [x.text for piece in ('你好，欢迎', '使用流式语音合成。Hello', ' there.') "
    "for x in cut.push(piece)] + [x.text for x in cut.flush()]\n"
    "print(json.dumps([s.__file__, found]))\n"
)


def _segments_from(tree: Path) -> tuple[str, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _SEGMENTS],
        cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    where, segments = json.loads(done.stdout)
    return where, segments


@pytest.mark.slow
def test_a_compiled_module_is_the_one_a_server_from_the_tree_imports(tmp_path: Path) -> None:
    """The tree holds this checkout's server/ and streaming/ with the module compiled
    beside its source; run from the tree, Python imports the extension, and it cuts text
    as the Python module does."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("mypyc needs a C compiler")
    tree = tmp_path / "tree"
    report = run_bench("compiled_tree.py", str(tree), "--modules", "streaming/segment.py")
    assert report["bench"] == "compiled_tree" and report["modules"] == ["streaming/segment.py"]
    assert report["seconds"] > 0
    assert (tree / "server" / "app.py").is_file() and (tree / "streaming" / "segment.py").is_file()
    assert not (tree / "build").exists()  # mypyc's C sources and objects are cleared away
    where, compiled = _segments_from(tree)
    assert where.endswith(".so") and Path(where).parent == tree / "streaming"
    source_where, source = _segments_from(Path(__file__).resolve().parents[2])
    assert source_where.endswith("segment.py")
    assert compiled == source and len(source) >= 2


def test_a_tree_is_refused_where_it_cannot_be_built(tmp_path: Path) -> None:
    """A directory that is not empty, and a module the tree does not have, are refused
    with what is wrong, before anything is compiled."""
    compiled_tree = bench_module("compiled_tree.py")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "file").write_text("x")
    with pytest.raises(SystemExit):
        compiled_tree.main([str(tmp_path / "full")])
    assert (tmp_path / "full" / "file").read_text() == "x"
    with pytest.raises(SystemExit, match=r"no such module in the tree: streaming/nothing\.py"):
        compiled_tree.main([str(tmp_path / "new"), "--modules", "streaming/nothing.py"])


def test_the_overhead_benchmark_takes_a_tree_as_its_baseline(tmp_path: Path) -> None:
    """``--baseline DIR`` with a server/ and a streaming/ in it is that directory itself
    (not a git revision); any other name is looked up in git."""
    checkout = bench_module("server_overhead.py").checkout
    (tmp_path / "server").mkdir()
    (tmp_path / "streaming").mkdir()
    with checkout(str(tmp_path)) as root:
        assert root == str(tmp_path.resolve())
    with checkout("HEAD") as root:
        assert root != str(tmp_path) and (Path(root) / "server" / "app.py").is_file()
    with pytest.raises(SystemExit, match="--baseline no-such-ref"), checkout("no-such-ref"):
        pass
