"""Benchmark: the CPU one short utterance costs in the speech path (streaming/speech.py).

    .venv/bin/python bench/speech_path.py                         # this checkout, ~15 s
    .venv/bin/python bench/speech_path.py --baseline HEAD~1       # before / after, same run
    .venv/bin/python bench/speech_path.py --smoke                 # does it run?

The utterance is the one ``bench/server_overhead.py``'s streams speak: its text cut by
the segmenter as a streamed context is (first segment at a clause, ``--first-segment-
min-chars`` 3), each segment's audio the instant engine's tone (120 ms a character),
handed to the pipeline whole, as the engine worker hands over a segment's queued chunks
(``--chunk-ms`` cuts it into chunks instead). Each utterance makes its
:class:`~streaming.speech.SpeechPipeline` (joins, framing; no resampling at 24 kHz) and
takes every segment through ``begin``, ``push`` and ``finish``: the per-utterance and
per-segment work of every interface, without the server around it.

The figure is the CPU (``time.thread_time``) per utterance, the best and the median of
``--rounds`` rounds of ``--utterances`` each; the ratio is the best rounds' (a busy
machine only ever adds to a round: on this 2-core VM one tree's rounds ran 128-277 us).
Every round runs in a child process; with ``--baseline REF`` the children of this
checkout and of ``REF`` (its ``streaming/``, from ``git archive``) take turns, so the
ratio is measured at the same moment on the same machine. Identical servers in the
1,000-stream measurement (``bench/server_overhead.py``) differ by up to ~10 %; the best
rounds here tell a few percent (three runs of one change: 0.86-0.93). Ends with one JSON
line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

TEXT = "你好，欢迎使用流式语音合成。"
#: The instant engine's (bench/server_overhead.py): audio per character, its tone.
MS_PER_CHAR = 120
RATE_HZ = 24_000
_CHILD = "--child"


def run_child(utterances: int, chunk_ms: int) -> dict[str, Any]:
    """In a child: ``utterances`` utterances after a warm-up; CPU per utterance (us)."""
    import numpy as np

    import streaming
    from streaming.speech import SpeechPipeline, SpeechSettings
    from streaming.text import PreparedText

    settings = SpeechSettings(first_segment_min_chars=3)
    segmenter = settings.segmenter(whole_text=False)
    segments = [*segmenter.push(TEXT), *segmenter.flush()]
    n = np.arange(RATE_HZ * 10)
    tone = (0.3 * np.sin(2 * np.pi * 220 * n / RATE_HZ)).astype(np.float32)
    step = RATE_HZ * chunk_ms // 1000
    work = []
    for segment in segments:
        audio = tone[: RATE_HZ * MS_PER_CHAR * len(segment.text) // 1000]
        chunks = [audio[i : i + step] for i in range(0, audio.size, step)] if step else [audio]
        work.append((segment, PreparedText(segment.text, ()), chunks))

    samples = 0

    def utterance() -> None:
        nonlocal samples
        pipeline = SpeechPipeline(settings, RATE_HZ, RATE_HZ)
        for segment, prepared, chunks in work:
            pipeline.begin(segment, prepared)
            for chunk in chunks:
                pipeline.push(chunk)
            pipeline.finish()
        samples = pipeline.samples

    for _ in range(min(utterances, 200)):
        utterance()
    start = time.thread_time()
    for _ in range(utterances):
        utterance()
    cpu_us = (time.thread_time() - start) / utterances * 1e6
    return {
        "us_per_utterance": cpu_us,
        "segments": len(segments),
        "audio_ms": samples * 1000 / RATE_HZ,
        "streaming": str(Path(streaming.__file__).parent),
    }


def child(root: str | None, utterances: int, chunk_ms: int) -> dict[str, Any]:
    """One round in a fresh interpreter whose ``streaming`` is ``root``'s (None: ours)."""
    code_root = root or str(ROOT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (code_root, str(ROOT))))}
    command = [sys.executable, __file__, _CHILD, str(utterances), str(chunk_ms)]
    out = subprocess.run(command, cwd=code_root, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"a round in {code_root} failed:\n{out.stderr}")
    figures: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    if not Path(figures["streaming"]).is_relative_to(code_root):
        raise SystemExit(f"the round ran {figures['streaming']}, not {code_root}'s streaming")
    return figures


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [_CHILD]:
        print(json.dumps(run_child(int(argv[1]), int(argv[2]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--utterances", type=int, default=2000, help="per round")
    parser.add_argument("--rounds", type=int, default=5, help="per side, alternating")
    parser.add_argument("--chunk-ms", type=int, default=0,
                        help="hand each segment's audio over in chunks this long "
                        "(0: whole, as the engine worker hands over queued chunks)")  # fmt: skip
    parser.add_argument("--baseline", metavar="REF",
                        help="also measure streaming/ as git REF has it (before)")  # fmt: skip
    parser.add_argument("--smoke", action="store_true", help="one short round a side")
    args = parser.parse_args(argv)
    if args.smoke:
        args.utterances, args.rounds = 20, 1
    if args.utterances <= 0 or args.rounds <= 0 or args.chunk_ms < 0:
        parser.error("--utterances and --rounds must be positive, --chunk-ms not negative")

    from bench.server_overhead import checkout

    rows: dict[str, list[dict[str, Any]]] = {"ours": []}
    with checkout(args.baseline) if args.baseline else _nothing() as root:
        if root is not None:
            rows["before"] = []
        for _ in range(args.rounds):
            rows["ours"].append(child(None, args.utterances, args.chunk_ms))
            if root is not None:
                rows["before"].append(child(root, args.utterances, args.chunk_ms))

    first = rows["ours"][0]
    print(f"utterance: {first['segments']} segments, {first['audio_ms']:.0f} ms of audio; "
          f"{args.utterances} a round, {args.rounds} round(s) a side")  # fmt: skip
    figures: dict[str, dict[str, float]] = {}
    for name, runs in rows.items():
        us = [r["us_per_utterance"] for r in runs]
        figures[name] = {"best_us": min(us), "median_us": statistics.median(us)}
        rounds = ", ".join(f"{u:.1f}" for u in us)
        print(f"{name:6s}: {min(us):.1f} us per utterance at best, "
              f"median {statistics.median(us):.1f} (rounds: {rounds})")  # fmt: skip
    ratio = None
    if "before" in figures:
        # The best rounds: a busy machine only ever adds to a round's CPU.
        ratio = figures["ours"]["best_us"] / figures["before"]["best_us"]
        medians = figures["ours"]["median_us"] / figures["before"]["median_us"]
        print(f"ours / before ({args.baseline}): {ratio:.2f} (best rounds), "
              f"{medians:.2f} (medians)")  # fmt: skip
    print(json.dumps({
        "bench": "speech_path",
        "smoke": args.smoke,
        "baseline": args.baseline,
        "chunk_ms": args.chunk_ms,
        "segments": first["segments"],
        "audio_ms": round(first["audio_ms"]),
        "us_per_utterance": {n: {k: round(v, 1) for k, v in f.items()} for n, f in figures.items()},
        "ratio_vs_baseline": None if ratio is None else round(ratio, 3),
    }))  # fmt: skip
    return 0


class _nothing:
    """No baseline: a context that gives None."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    sys.exit(main())
