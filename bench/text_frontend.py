"""Cost of the text front-end per segment: WeTextProcessing load, then prepare_text.

    .venv/bin/python bench/text_frontend.py [--rounds N]
    .venv/bin/python bench/text_frontend.py --smoke     # does it run? (one round)

Segments come from realistic LLM output (prose, numbers, dates, markdown, English), cut
by the server's segmenter. Each is prepared with a cold cache (the normaliser's LRU
cache is bypassed), so the figures are the worst case of a first sighting. Prints a
table, then one JSON line with the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from server.textnorm import load_wetext
from streaming.segment import Segmenter, SegmenterConfig
from streaming.text import prepare_text

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


def segments_of(text: str) -> list[str]:
    segmenter = Segmenter(SegmenterConfig(max_chars=80, first_min_chars=6))
    return [s.text for s in [*segmenter.push(text), *segmenter.flush()]]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--smoke", action="store_true", help="one round: checks it runs (the suite runs it)"
    )
    args = parser.parse_args()
    if args.smoke:
        args.rounds = 1

    started = time.perf_counter()
    normalizer = load_wetext()
    load_s = time.perf_counter() - started
    uncached = normalizer.__wrapped__  # type: ignore[attr-defined]
    print(f"load (import + transducers from cache): {load_s * 1000:.0f} ms")

    results: dict[str, dict[str, float]] = {}
    print(
        f"{'corpus':<10} {'segs':>4} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'rules-only ms':>14}"
    )
    for name, text in CORPUS.items():
        segments = segments_of(text)
        timings: list[float] = []
        rules_only: list[float] = []
        for _ in range(args.rounds):
            for segment in segments:
                t0 = time.perf_counter()
                prepare_text(segment, normalizer=uncached)
                t1 = time.perf_counter()
                prepare_text(segment)
                t2 = time.perf_counter()
                timings.append((t1 - t0) * 1000)
                rules_only.append((t2 - t1) * 1000)
        figures = {
            "segments": len(segments),
            "p50_ms": round(statistics.median(timings), 2),
            "p95_ms": round(percentile(timings, 0.95), 2),
            "max_ms": round(max(timings), 2),
            "rules_only_p50_ms": round(statistics.median(rules_only), 3),
        }
        results[name] = figures
        print(
            f"{name:<10} {len(segments):>4} {figures['p50_ms']:>8} {figures['p95_ms']:>8} "
            f"{figures['max_ms']:>8} {figures['rules_only_p50_ms']:>14}"
        )
    print(
        json.dumps(
            {
                "bench": "text_frontend",
                "smoke": args.smoke,
                "load_ms": round(load_s * 1000),
                "per_segment": results,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
