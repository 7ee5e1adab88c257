"""Benchmarks: each module is a script (``.venv/bin/python bench/NAME.py --help``) that
prints tables, then one JSON line of figures. Benchmarks report; tests assert (each has
a smoke run in tests/bench/). What they share with the tests lives in :mod:`harness`;
a benchmark imports neither ``tests`` nor touches ``sys.path``: ``scripts/setup.sh``
installs ``bench`` and ``harness`` with the project."""
