"""The process entry point (``chattts-stream``, ``python -m server``).

It sets numpy's BLAS thread pool (:mod:`server.blas`) before the command line's imports
load numpy, then runs :func:`server.cli.main`. Import nothing else here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from server import blas

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Prepare the process, then run the command line with ``argv``."""
    blas.set_environment(os.environ)
    from server.cli import main as run_cli

    return run_cli(argv)
