"""What the tests and the benchmarks share: the means to run the service and measure it.

- :mod:`harness.live`: the real app on a real socket (uvicorn on port 0 in a thread),
  and this process's child processes;
- :mod:`harness.fleet`: Redis, server replicas and HAProxy on loopback, each its own
  process, every wait bounded and every process reaped;
- :mod:`harness.seams`: how rough the audio is at chunk joins;
- :mod:`harness.corpus`: the text corpus (tests/streaming/corpus) and how it is scored.

Neither ``tests`` nor ``bench`` is imported from here: both import this. It is installed
with the project (``scripts/setup.sh``), so ``python bench/x.py`` finds it as it finds
``server``.
"""
