"""The text front-end: how much of the corpus it reads right, and its cost per segment.

    .venv/bin/python bench/text_frontend.py [--rounds N] [--baseline REF]
    .venv/bin/python bench/text_frontend.py --smoke     # does it run? (one round)

Reads right: the sentences of tests/streaming/corpus (``assistants``, the corpus the
rules are built on, and ``other_domains``, held out), each heard as one of its expected
forms (tests/streaming/corpus/__init__.py), by this front-end (the sentence cut as a
WebSocket context cuts it, each segment prepared after the one before it), by
WeTextProcessing alone (the whole sentence), and by the front-end of git ``REF`` (the
baseline, default ``main``: its ``streaming/`` checked out into a temporary directory
and run in a subprocess, in this same run).

Cost: each segment of realistic LLM output (prose, numbers, markdown, English) and of the
corpus, prepared with a cold cache (the normaliser's LRU cache bypassed: the worst case
of a first sighting), for this front-end and the baseline. Prints tables, then one JSON
line with the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CORPUS = {
    "prose": (
        "今天天气很好，我们一起去公园散步吧。春天来了，花都开了，小鸟在树上唱歌。"
        "他说：“明天见。”然后就走了。这是一个很长的句子，用来测试没有数字的普通文本。"
    ),
    "numbers": (
        "我有3个苹果，价格是12.5元。2024年10月1日下午3点，GPU价格上涨了15%。"
        "会议在19:30开始，预计持续1-2小时。请拨打13812345678或010-12345678联系我们。"
        "全年营收达到$3.5亿，同比增长-2.3%，约1/3来自海外。温度在25℃到30℃之间。"
    ),
    "markdown": (
        "## 安装步骤\n1. 运行 `pip install chattts`\n2. 下载**模型**文件\n"
        "- 详见[文档](https://example.com/docs)\n| 参数 | 默认值 |\n|---|---|\n"
        "| max_chars | 80 |\n> 注意：需要Python 3.11。😀\n```python\nprint(1)\n```"
    ),
    "english": (
        "NASA和ESA在2024年合作发射了新卫星。iPhone 15 Pro的A17芯片采用3nm工艺。"
        "COVID-19疫情期间，WHO发布了指南。GPT-4o模型支持128k上下文。"
    ),
}
#: The segmenter as the server runs it for a WebSocket context (its defaults).
MAX_CHARS, FIRST_MIN_CHARS = 80, 3
#: How the baseline's subprocess is told it is one.
_CHILD = "--child"


def segments_of(text: str) -> list[str]:
    import streaming.segment as segment  # the baseline's, in its subprocess

    # A baseline from before the settings were renamed calls them SegmenterConfig.
    settings = getattr(segment, "SegmenterSettings", None) or segment.SegmenterConfig  # type: ignore[attr-defined]
    segmenter = segment.Segmenter(settings(max_chars=MAX_CHARS, first_min_chars=FIRST_MIN_CHARS))
    return [s.text for s in [*segmenter.push(text), *segmenter.flush()]]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cost_figures(timings: list[float], segments: int) -> dict[str, float]:
    return {
        "segments": segments,
        "p50_ms": round(statistics.median(timings), 2),
        "p95_ms": round(percentile(timings, 0.95), 2),
        "max_ms": round(max(timings), 2),
    }


def speak_and_time(
    job: dict[str, Any], prepare: Any, normalizer: Any, stream: bool
) -> dict[str, Any]:
    """Each sentence spoken (segment by segment) and each segment's cold cost, in ms.

    ``stream``: the front-end takes the previous segment (``before``) and the codes the
    segments before read (``codes``), as a context's stream does: this branch's."""
    spoken = []
    for sentence in job["sentences"]:
        said, before, codes = "", "", ()
        for segment in segments_of(sentence):
            extra = {"before": before, "codes": codes} if stream else {}
            prepared = prepare(segment, normalizer=normalizer, **extra)
            said += prepared.spoken
            before = segment
            codes = (*codes, *getattr(prepared, "codes", ()))
        spoken.append(said)
    timings: dict[str, list[float]] = {}
    for name, segments in job["segments"].items():
        times = timings.setdefault(name, [])
        for _ in range(job["rounds"]):
            for segment in segments:
                started = time.perf_counter()
                prepare(segment, normalizer=normalizer)
                times.append((time.perf_counter() - started) * 1000)
    return {"spoken": spoken, "timings_ms": timings}


def child() -> int:
    """The baseline's side: its prepare_text on the job read from stdin (JSON)."""
    job = json.loads(sys.stdin.read())
    sys.path.insert(0, job["root"])  # its streaming/ first
    from tn.chinese.normalizer import Normalizer as WeText

    from streaming.text import prepare_text  # the baseline's

    library = WeText(cache_dir=job["cache_dir"], **job["options"])
    print(json.dumps(speak_and_time(job, prepare_text, library.normalize, stream=False)))
    return 0


def baseline(ref: str, job: dict[str, Any]) -> dict[str, Any] | None:
    """The front-end of git ``ref``, run on ``job`` in a subprocess; None if it cannot be."""
    from server.textnorm import _FST_OPTIONS, default_cache_dir, load_wetext

    load_wetext()  # the transducers built in the cache the child reads
    with tempfile.TemporaryDirectory() as root:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", ref, "streaming"], capture_output=True
        )
        if archive.returncode != 0:
            print(f"baseline {ref}: {archive.stderr.decode().strip()}", file=sys.stderr)
            return None
        subprocess.run(["tar", "-x", "-C", root], input=archive.stdout, check=True)
        payload = {
            **job,
            "root": root,
            "cache_dir": str(default_cache_dir()),
            "options": _FST_OPTIONS,
        }
        run = subprocess.run(
            [sys.executable, __file__, _CHILD],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            cwd=root,
        )
    if run.returncode != 0:
        print(f"baseline {ref} failed: {run.stderr[-2000:]}", file=sys.stderr)
        return None
    result: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def scores(spoken: list[str], rows: list[Any]) -> dict[str, int]:
    from tests.streaming.corpus import is_heard_right

    return {"right": sum(is_heard_right(s, row) for s, row in zip(spoken, rows, strict=True))}


def main() -> int:
    if sys.argv[1:] == [_CHILD]:
        return child()
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", default="main", help="git ref of the baseline ('' for none)")
    parser.add_argument("--smoke", action="store_true", help="one round, corpus subsets")
    args = parser.parse_args()
    if args.smoke:
        args.rounds = 1

    from server.textnorm import load_wetext
    from streaming.text import prepare_text
    from tests.streaming.corpus import load

    started = time.perf_counter()
    normalizer = load_wetext()
    load_s = time.perf_counter() - started
    uncached = normalizer.__wrapped__  # type: ignore[attr-defined]
    print(f"load (import + transducers from cache): {load_s * 1000:.0f} ms")

    corpora = {name: load(name) for name in ("assistants", "other_domains")}
    if args.smoke:
        corpora = {name: rows[::25] for name, rows in corpora.items()}
    sentences = [row.text for rows in corpora.values() for row in rows]
    segments = {name: segments_of(text) for name, text in CORPUS.items()}
    segments["corpus"] = [s for text in corpora["assistants"] for s in segments_of(text.text)]
    job = {"sentences": sentences, "segments": segments, "rounds": args.rounds}

    ours = speak_and_time(job, prepare_text, uncached, stream=True)
    library = [uncached(text) for text in sentences]
    before = baseline(args.baseline, job) if args.baseline else None
    report = summarise(corpora, ours, library, before, args)
    report["load_ms"] = round(load_s * 1000)
    print(json.dumps(report))
    return 0


def summarise(
    corpora: dict[str, list[Any]],
    ours: dict[str, Any],
    library: list[str],
    before: dict[str, Any] | None,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Print the tables; the report's figures."""
    runs = {"frontend": ours["spoken"], "wetext_alone": library}
    if before is not None:
        runs["baseline"] = before["spoken"]
    reading: dict[str, dict[str, Any]] = {}
    print(f"\n{'read right':<14}" + "".join(f"{name:>16}" for name in runs))
    offset = 0
    for name, rows in corpora.items():
        reading[name] = {"sentences": len(rows)}
        for run, spoken in runs.items():
            reading[name][run] = scores(spoken[offset : offset + len(rows)], rows)["right"]
        print(f"{name:<14}" + "".join(f"{reading[name][r]:>11}/{len(rows):<4}" for r in runs))
        offset += len(rows)
    cost: dict[str, dict[str, Any]] = {}
    print(
        f"\n{'cost, cold':<10} {'segs':>5} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}   baseline p50/p95/max"
    )
    for kind, timings in ours["timings_ms"].items():
        segments = len(timings) // args.rounds
        cost[kind] = cost_figures(timings, segments)
        line = f"{kind:<10} {segments:>5} {cost[kind]['p50_ms']:>8} {cost[kind]['p95_ms']:>8} {cost[kind]['max_ms']:>8}"
        if before is not None:
            cost[kind]["baseline"] = cost_figures(before["timings_ms"][kind], segments)
            b = cost[kind]["baseline"]
            line += f"   {b['p50_ms']}/{b['p95_ms']}/{b['max_ms']}"
        print(line)
    return {
        "bench": "text_frontend",
        "smoke": args.smoke,
        "baseline": args.baseline if before is not None else None,
        "read_right": reading,
        "per_segment": cost,
    }


if __name__ == "__main__":
    sys.exit(main())
