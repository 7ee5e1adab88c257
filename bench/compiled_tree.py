"""Our server with its per-stream modules compiled by mypyc: what a compiled path buys.

Writes this checkout's ``server/`` and ``streaming/`` as git ``--ref`` has them (HEAD)
into DIR, then compiles ``--modules`` there with mypyc (it comes with mypy, in the test
tools, and needs a C compiler) into extension modules beside their sources: Python
imports an extension before a source of the same name, so a server run from DIR runs the
compiled ones. Then measure it against this checkout, in the same run::

    .venv/bin/python bench/compiled_tree.py /tmp/compiled          # 4-5 min on 2 cores
    .venv/bin/python bench/server_overhead.py --baseline /tmp/compiled --rounds 3

(there "before" is the compiled tree, "ours" the same code as Python).

The default modules are those of the per-stream path mypyc compiles as they are: the
speech path's (segmenter, joins, framing, speech pipeline, the utterance's state, the
connection's core), the session, the wire and the scheduler. The rest of that path it
cannot: the engine's audio reaches the session through async generators
(``server/runtime/synthesizer.py``, ``jobs.py``, ``utterance.py``; "async generators are
unimplemented"), and the protocol's dataclasses set ``type`` in each subclass.

Ends with one JSON line: the modules compiled and the seconds the build took.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.server_overhead import write_tree

#: The per-stream modules mypyc compiles as they are (see the module docstring).
MODULES = [
    "streaming/segment.py",
    "streaming/joins.py",
    "streaming/audio.py",
    "streaming/speech.py",
    "streaming/utterance.py",
    "streaming/connection.py",
    "server/ws/session.py",
    "server/ws/wire.py",
    "server/runtime/scheduler.py",
]


def compile_modules(directory: Path, modules: list[str]) -> None:
    """mypyc ``modules`` (paths under ``directory``), the extensions left beside them;
    SystemExit unless each module has its extension for this Python."""
    missing = [m for m in modules if not (directory / m).is_file()]
    if missing:
        raise SystemExit(f"no such module in the tree: {', '.join(missing)}")
    if importlib.util.find_spec("mypyc") is None:
        raise SystemExit("needs mypyc (pip install mypy; it comes with the test tools)")
    # This Python's mypyc, so that the extensions are this Python's.
    command = [sys.executable, "-m", "mypyc", *modules]
    built = subprocess.run(command, cwd=directory, capture_output=True, text=True)
    if built.returncode != 0:
        errors = [line for line in built.stdout.splitlines() if ": error:" in line]
        raise SystemExit("mypyc failed:\n" + "\n".join(errors or built.stderr.splitlines()[-20:]))
    shutil.rmtree(directory / "build", ignore_errors=True)  # its C sources and objects
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]  # .cpython-311-x86_64-linux-gnu.so
    absent = [m for m in modules if not (directory / m).with_suffix(suffix).is_file()]
    if absent:
        raise SystemExit(f"mypyc left no {suffix} for: {', '.join(absent)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path, help="where the tree goes (new, or empty)")
    parser.add_argument("--ref", default="HEAD", help="the git revision to compile (HEAD)")
    parser.add_argument("--modules", nargs="+", default=MODULES, metavar="PATH",
                        help="modules to compile, as paths in the tree (default: the "
                        "per-stream modules mypyc compiles as they are)")  # fmt: skip
    args = parser.parse_args(argv)
    directory: Path = args.directory.resolve()
    if directory.exists() and any(directory.iterdir()):
        parser.error(f"{directory} is not empty")
    directory.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    write_tree(args.ref, directory, flag="--ref")
    print(f"compiling {len(args.modules)} modules of {args.ref} in {directory} ...", flush=True)
    compile_modules(directory, args.modules)
    seconds = time.monotonic() - started
    print(f"built in {seconds:.0f} s; measure it against this checkout with:")
    print(f"  .venv/bin/python bench/server_overhead.py --baseline {directory} --rounds 3")
    report = {"bench": "compiled_tree", "ref": args.ref, "directory": str(directory)}
    print(json.dumps({**report, "modules": args.modules, "seconds": round(seconds, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
