"""Benchmark: joins between segments, shaped (streaming/joins.py) against plain concatenation.

    .venv/bin/python bench/segment_joins.py                 # espeak + tiny ChatTTS, ~20 s
    .venv/bin/python bench/segment_joins.py --engines espeak
    .venv/bin/python bench/segment_joins.py --smoke         # does it run? (two segments)

A multi-sentence text is cut by the production segmenter, each segment synthesised by
a real engine (espeak: real speech with real silences; ChatTTS on a generated tiny
random-weight checkpoint: the real code path, noise for audio), and the segments are
joined two ways: as the server did before (chunks sent as they come) and through
:class:`streaming.joins.SegmentJoiner`, fed in the engine's own chunks. Printed per
engine, and as one final JSON line:

- joins: the largest first-or-last sample of a segment over the RMS (where the
  waveform is cut; 0 when segments start and end at rest), the sample step at each
  segment join (last sample of one segment into the first
  of the next) over the median step inside segments, and the largest step within 5 ms
  of a join over the 99th percentile step inside segments (a click scores far above 1);
  spectral flux across the join (tests/seams.py; a pause followed by an onset
  scores high by nature, so it is reported for comparison only);
- silence: leading and trailing silence per segment (below -45 dBFS), and the pause
  between segments;
- loudness: spread (max - min) of per-segment voiced level in dB;
- cost: joiner CPU time per second of audio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from server.engines.base import SynthesisRequest, VoiceSpec, audio_only  # noqa: E402
from server.engines.chattts.settings import ChatTTSSettings  # noqa: E402
from streaming.joins import SegmentJoiner, pause_ms_for  # noqa: E402
from streaming.segment import Segmenter  # noqa: E402
from tests.seams import measure_seams  # noqa: E402

TEXT = (
    "今天天气很好，我们一起去公园散步吧。人工智能正在改变我们的生活方式！"
    "你觉得呢？我想，未来会更好；不过还有很多问题要解决：比如隐私、安全和公平。"
    "好了，就说到这里"
)
#: --smoke: two segments, one join.
SMOKE_TEXT = "今天天气很好，我们一起去公园散步吧。"
SILENCE_POWER = 10 ** (-45 / 10)

Synth = Callable[[str], Iterator[np.ndarray]]


def _espeak() -> tuple[Synth, int, Callable[[], None]]:
    from server.engines.espeak import EspeakEngine

    engine = EspeakEngine()
    voice = VoiceSpec(seed=7)

    def synth(text: str) -> Iterator[np.ndarray]:
        return audio_only(engine.synthesize(SynthesisRequest(text, voice), lambda: False))

    return synth, engine.sample_rate_hz, engine.close


def _chattts(tmp: Path, steps: int) -> tuple[Synth, int, Callable[[], None]]:
    from server.engines.chattts.checkpoint import write_checkpoint
    from server.engines.chattts.engine import ChatTTSEngine

    model_dir = write_checkpoint(tmp / "tiny", size="tiny", seed=0)
    engine = ChatTTSEngine(
        model_dir, ChatTTSSettings(device="cpu", max_new_token=steps, min_new_token=steps)
    )
    voice = VoiceSpec(seed=7)

    def synth(text: str) -> Iterator[np.ndarray]:
        return audio_only(engine.synthesize(SynthesisRequest(text, voice), lambda: False))

    return synth, engine.sample_rate_hz, engine.close


def _block_power(x: np.ndarray, block: int) -> np.ndarray:
    n = x.size // block * block
    return np.mean(x[:n].reshape(-1, block).astype(np.float64) ** 2, axis=1)


def _edge_silence_ms(x: np.ndarray, rate: int) -> tuple[float, float]:
    block = rate // 100
    loud = np.flatnonzero(_block_power(x, block) >= SILENCE_POWER)
    if not loud.size:
        return x.size * 1000 / rate, 0.0
    lead = loud[0] * 10.0
    trail = (x.size - (loud[-1] + 1) * block) * 1000 / rate
    return lead, trail


def _voiced_db(x: np.ndarray, rate: int) -> float:
    power = _block_power(x, rate // 100)
    voiced = power[power > 1e-4]
    return float(10 * np.log10(np.mean(voiced))) if voiced.size else float("nan")


def _join_figures(segments: list[np.ndarray], rate: int) -> dict[str, float]:
    """Step and flux figures at the joins of the concatenated ``segments``."""
    audio = np.concatenate(segments).astype(np.float64)
    joins = np.cumsum([s.size for s in segments])[:-1]
    steps = np.abs(np.diff(audio))
    near = np.zeros(steps.size, dtype=bool)
    radius = 5 * rate // 1000
    for j in joins:
        near[max(0, j - radius) : j + radius] = True
    inside = steps[~near]
    p99 = float(np.percentile(inside, 99)) or 1e-12
    seams = measure_seams(audio, [int(j) for j in joins])
    # Where the waveform is cut: the first and last sample of each segment's audio,
    # over the RMS of the whole (0: the segment starts and ends at rest).
    rms = float(np.sqrt(np.mean(audio**2))) or 1e-12
    edge = max(max(abs(float(s[0])), abs(float(s[-1]))) for s in segments if s.size)
    return {
        "edge_amplitude_over_rms": edge / rms,
        "step_ratio_median": seams.step_ratio_median,
        "step_ratio_max": seams.step_ratio_max,
        "near_join_step_over_p99": float(steps[near].max()) / p99,
        "flux_ratio_median": seams.flux_ratio_median,
    }


def run_engine(name: str, synth: Synth, rate: int, text: str = TEXT) -> dict[str, Any]:
    segmenter = Segmenter()
    texts = [s.text for s in [*segmenter.push(text), *segmenter.flush()]]
    raw: list[list[np.ndarray]] = [[np.asarray(c, np.float32) for c in synth(t)] for t in texts]
    joiner = SegmentJoiner(rate)
    shaped: list[np.ndarray] = []
    bodies: list[np.ndarray] = []
    cpu = 0.0
    for text, chunks in zip(texts, raw, strict=True):
        start = time.process_time()
        joiner.begin(text)
        out = [joiner.process(c) for c in chunks]
        out.append(joiner.finish(pause=text is not texts[-1]))
        cpu += time.process_time() - start
        whole = np.concatenate(out)
        shaped.append(whole)
        bodies.append(whole[: whole.size - joiner.last_pause_samples])
    plain = [np.concatenate(c) for c in raw]
    audio_s = sum(p.size for p in plain) / rate
    plain_edges = [_edge_silence_ms(p, rate) for p in plain]
    shaped_edges = [_edge_silence_ms(b, rate) for b in bodies]
    plain_db = [_voiced_db(p, rate) for p in plain]
    shaped_db = [_voiced_db(b, rate) for b in bodies]
    result: dict[str, Any] = {
        "engine": name,
        "segments": len(texts),
        "audio_s": round(audio_s, 2),
        "plain": {
            "joins": _join_figures(plain, rate),
            "lead_ms_median": statistics.median(e[0] for e in plain_edges),
            "trail_ms_median": statistics.median(e[1] for e in plain_edges),
            "loudness_spread_db": max(plain_db) - min(plain_db),
        },
        "shaped": {
            "joins": _join_figures(shaped, rate),
            "lead_ms_median": statistics.median(e[0] for e in shaped_edges),
            "trail_ms_median": statistics.median(e[1] for e in shaped_edges),
            "loudness_spread_db": max(shaped_db) - min(shaped_db),
            "first_and_last_samples_zero": all(b[0] == 0 and b[-1] == 0 for b in bodies),
            "pauses_ms": [round(pause_ms_for(t)) for t in texts[:-1]],
        },
        "joiner_cpu_ms_per_audio_s": round(cpu * 1000 / audio_s, 3),
    }
    print(f"\n== {name}: {len(texts)} segments, {audio_s:.1f} s of audio")
    for label in ("plain", "shaped"):
        r = result[label]
        j = r["joins"]
        print(
            f"  {label:6s} edge |x|/rms {j['edge_amplitude_over_rms']:.2f}, "
            f"join step/median {j['step_ratio_median']:.2f} (max "
            f"{j['step_ratio_max']:.2f}), max step near joins / p99 inside "
            f"{j['near_join_step_over_p99']:.2f}, flux ratio {j['flux_ratio_median']:.2f}; "
            f"lead {r['lead_ms_median']:.0f} ms, trail {r['trail_ms_median']:.0f} ms "
            f"(medians); loudness spread {r['loudness_spread_db']:.1f} dB"
        )
    print(f"  pauses (ms): {result['shaped']['pauses_ms']}  texts: {texts}")
    print(f"  joiner CPU: {result['joiner_cpu_ms_per_audio_s']} ms per s of audio")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engines", nargs="+", default=["espeak", "chattts"])
    parser.add_argument("--steps", type=int, default=72,
                        help="ChatTTS: GPT steps per segment (random weights end at random)")  # fmt: skip
    parser.add_argument("--smoke", action="store_true",
                        help="a quick run that checks it works (the suite runs it): two "
                        "segments, 24 ChatTTS steps each")  # fmt: skip
    args = parser.parse_args()
    text, steps = (SMOKE_TEXT, 24) if args.smoke else (TEXT, args.steps)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.engines:
            synth, rate, close = _espeak() if name == "espeak" else _chattts(Path(tmp), steps)
            try:
                results.append(run_engine(name, synth, rate, text))
            finally:
                close()
    print(json.dumps({"bench": "segment_joins", "smoke": args.smoke, "results": results}))


if __name__ == "__main__":
    main()
