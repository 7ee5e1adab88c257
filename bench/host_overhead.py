"""The host's cost of a batched ChatTTS step: what caps a GPU's streams, measured on a CPU.

On a GPU the ChatTTS GPT step is tiny (190M parameters), so the Python and per-operation
dispatch around each step decide how many real-time streams a GPU carries. That host
cost is measured here on a checkpoint with ChatTTS's real layer counts and tiny widths
(``write_checkpoint(size="deep")``: GPT 20 layers, Decoder 12, Vocos 8, hidden 64), one
thread, so what is left is mostly the host's work per step and per row:

- ms per batched step at batch 1, 8, 32, 64, 128 (rows opened and prefilled with
  fixed-length utterances; median of each step's time minus its vocoding), wall clock
  and the thread's CPU time (the CPU time is what the step costs the host; on a shared
  machine the wall clock also counts waiting for a core);
- the fitted ``a + b * batch`` (ms) of both;
- device reads per step, counted: every ``Tensor.item``/``tolist``/``numpy``/``cpu``/
  ``__bool__``/``__int__``/``__float__``/``__index__`` during a step that vocodes
  nothing (each is a synchronisation on CUDA);
- operations dispatched per step (what a GPU launches as kernels without a graph);
- where the time of the largest batch goes (``torch.profiler``, top operations);
- the projected real-time streams for a GPU whose device step is :data:`DEVICE` (a
  model, stated below) and whose host is this measured one: the largest batch whose
  host + device step stays within a real-time step (21.3 ms), and within it with the
  admission headroom (0.8);
- the same for the step as it was before (``bench/legacy_batch.py``: a generator, a
  device read and a Python-built penalty window per row), in the same run;
- starting ``k`` joining rows (``--prefill-sizes``): their prompts a forward each
  (``prefill``) against one forward together (``prefill_many``, padded to the longest):
  thread CPU ms (median of ``--prefill-repeats``) and operations dispatched, and the
  ratio, in the same run.

    .venv/bin/python bench/host_overhead.py            # about 2 minutes on a quiet machine
    .venv/bin/python bench/host_overhead.py --smoke    # a few steps (a test)

Ends with one JSON line. Goal: b <= 0.05 ms per row and a <= 4 ms, one read per step.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from bench.legacy_batch import LegacyBatchedDecoder
from server.engines.chattts.batch import BatchedDecoder
from server.engines.chattts.checkpoint import load_chat, write_checkpoint
from server.engines.chattts.decoder import GenerationParams, StreamingDecoder

ROOT = Path(__file__).resolve().parent.parent

TEXTS = ["今天天气很好，我们一起去公园散步吧。", "欢迎使用流式语音合成服务。", "谢谢你的耐心等待。"]
REALTIME_STEP_MS = 1000 / 46.875
HEADROOM = 0.8
#: The modelled device cost of one batched step of ChatTTS's real GPT on an H200 (bf16,
#: ~4.3 TB/s): ``weights_ms`` reads the 190M parameters once (0.38 GB); each kernel
#: costs at least ``kernel_us`` even replayed from a CUDA graph (launch gaps of tiny
#: kernels; the count is measured here); each row reads its keys and values, 61,440
#: bytes a position (20 layers x 2 x 768 x bf16), at ``mean_position`` 512 (a long
#: utterance: pessimistic) = 31.5 MB: ``row_us``.
DEVICE = {
    "weights_ms": 0.09, "kernel_us": 2.5, "row_us": 7.3, "mean_position": 512,
    # The host's cost of replaying a captured step (one launch).
    "graph_replay_ms": 0.05,
}  # fmt: skip
_READS = ("item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__")
_VIEWS = (
    "view", "alias", "as_strided", "expand", "transpose", "permute", "slice", "select",
    "unsqueeze", "squeeze", "detach", "t.default", "_unsafe_view", "split", "unbind",
)  # fmt: skip


def speaker(chat: Any, seed: int) -> str:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        voice: str = chat.sample_random_speaker()
    return voice


class Timer:
    """Wall and thread CPU seconds spent in one method of an object (wrapped in place)."""

    def __init__(self, owner: Any, name: str) -> None:
        self.wall_s = self.cpu_s = 0.0
        inner = getattr(owner, name)

        def timed(*args: Any) -> Any:
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return inner(*args)
            finally:
                self.wall_s += time.perf_counter() - wall
                self.cpu_s += time.thread_time() - cpu

        setattr(owner, name, timed)


class StepClock(Timer):
    """Times each step minus the vocoding inside it (wall and thread CPU time): minus the
    batch's ``_vocode`` call (the old step calls it every step, to check which rows are
    due, and that check is subtracted with it, as in the issue's figures)."""

    def __init__(self, batch: Any) -> None:
        super().__init__(batch, "_vocode")

    @contextmanager
    def step(self, wall: list[float], cpu: list[float]) -> Iterator[None]:
        before_wall, before_cpu = self.wall_s, self.cpu_s
        w, c = time.perf_counter(), time.thread_time()
        yield
        wall.append((time.perf_counter() - w - (self.wall_s - before_wall)) * 1000)
        cpu.append((time.thread_time() - c - (self.cpu_s - before_cpu)) * 1000)


@contextmanager
def counted_reads() -> Iterator[list[str]]:
    """Calls that bring a tensor's value to the host while the block runs."""
    calls: list[str] = []
    originals = {name: getattr(torch.Tensor, name) for name in _READS}

    def counting(name: str) -> Callable[..., Any]:
        def wrapper(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return originals[name](self, *args, **kwargs)

        return wrapper

    for name in _READS:
        setattr(torch.Tensor, name, counting(name))
    try:
        yield calls
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


class OpCounter(TorchDispatchMode):
    """Counts the ATen operations that compute (views excluded): a GPU's kernel launches."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if not any(part in str(func) for part in _VIEWS):
            self.ops += 1
        return func(*args, **(kwargs or {}))


def open_rows(batch: Any, chat: Any, size: int, steps: int) -> list[Any]:
    rows = []
    for i in range(size):
        p = GenerationParams(
            spk_emb=speaker(chat, i), seed=i, max_new_token=steps, min_new_token=steps
        )
        row, embeds = batch.open(TEXTS[i % len(TEXTS)], p)
        assert batch.prefill(row, embeds)
        rows.append(row)
    return rows


def measure(
    kind: str, stream: StreamingDecoder, chat: Any, size: int, steps: int
) -> dict[str, Any]:
    """One batch of ``size`` fixed-length utterances run to the end: step costs, reads."""
    cls = BatchedDecoder if kind == "batched" else LegacyBatchedDecoder
    batch = cls(stream, max_batch=size, max_tokens=512, attention="masked")
    clock = StepClock(batch)
    # The new step's tensor work (what a GPU runs): the rest is the host's bookkeeping.
    tensors = Timer(batch, "_advance") if kind == "batched" else None
    rows = open_rows(batch, chat, size, steps)
    wall: list[float] = []
    cpu: list[float] = []
    bookkeeping: list[float] = []
    reads: list[int] = []
    ops = 0
    while live := [row for row in rows if not row.done]:
        windows = batch.vocoded_windows
        if len(wall) in (3, 4, 5) and not reads:  # a few counted steps (counting is slow)
            counter = OpCounter()
            with counted_reads() as calls, counter:
                batch.step(live)
            if batch.vocoded_windows == windows:
                reads.append(len(calls))
                ops = counter.ops
            continue
        tensor_s = tensors.cpu_s if tensors is not None else 0.0
        with clock.step(wall, cpu):
            batch.step(live)
        if tensors is not None:
            bookkeeping.append(cpu[-1] - (tensors.cpu_s - tensor_s) * 1000)
    return {
        "wall_ms": statistics.median(wall),
        "cpu_ms": statistics.median(cpu),
        "bookkeeping_ms": statistics.median(bookkeeping) if bookkeeping else None,
        "reads_per_step": reads[0] if reads else None,
        "ops_per_step": ops,
    }


def prefill_costs(
    stream: StreamingDecoder, chat: Any, sizes: list[int], repeats: int
) -> dict[int, dict[str, float]]:
    """Thread CPU ms and operations to start ``k`` joining rows, their prompts one
    forward each against one forward together, for each ``k`` of ``sizes``."""
    batch = BatchedDecoder(stream, max_batch=max(sizes), max_tokens=512, attention="masked")
    voices = [speaker(chat, i) for i in range(max(sizes))]

    def opened(k: int) -> tuple[list[Any], list[Any]]:
        pairs = [
            batch.open(
                TEXTS[i % len(TEXTS)],
                GenerationParams(spk_emb=voices[i], seed=i, max_new_token=8, min_new_token=8),
            )
            for i in range(k)
        ]
        return [row for row, _ in pairs], [embeds for _, embeds in pairs]

    def start(k: int, together: bool) -> tuple[float, int]:
        """CPU ms of one start of ``k`` rows, then the operations of another (counted
        apart: counting is slow)."""
        spent, ops = 0.0, 0
        for counted in (False, True):
            rows, embeds = opened(k)
            counter = OpCounter()
            began = time.thread_time()
            with counter if counted else contextlib.nullcontext():
                if together:
                    assert all(batch.prefill_many(rows, embeds))
                else:
                    assert all(batch.prefill(row, e) for row, e in zip(rows, embeds, strict=True))
            if counted:
                ops = counter.ops
            else:
                spent = (time.thread_time() - began) * 1000
            for row in rows:
                batch.close(row)
        return spent, ops

    results: dict[int, dict[str, float]] = {}
    for k in sizes:
        start(k, True)  # warm: shapes seen once
        alone = [start(k, False) for _ in range(repeats)]
        together = [start(k, True) for _ in range(repeats)]
        alone_ms = statistics.median(ms for ms, _ in alone)
        together_ms = statistics.median(ms for ms, _ in together)
        results[k] = {
            "alone_cpu_ms": round(alone_ms, 2),
            "together_cpu_ms": round(together_ms, 2),
            "ratio": round(together_ms / alone_ms, 2),
            "alone_ops": alone[0][1],
            "together_ops": together[0][1],
        }
        print(
            f"  {k:3d} joining rows: {alone_ms:7.2f} ms a prompt at a time "
            f"({alone[0][1]} operations), {together_ms:7.2f} ms together "
            f"({together[0][1]}): {together_ms / alone_ms:.2f}x",
            flush=True,
        )
    return results


def profile(stream: StreamingDecoder, chat: Any, size: int, steps: int) -> list[tuple[str, float]]:
    """Self CPU ms per step of the top operations of the new step at ``size`` rows."""
    batch = BatchedDecoder(stream, max_batch=size, max_tokens=512, attention="masked")
    rows = open_rows(batch, chat, size, steps)
    batch._vocode = lambda *args: None  # type: ignore[method-assign]  # the step alone
    for _ in range(3):
        batch.step(rows)
    count = 10
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(count):
            batch.step(rows)
    totals = sorted(
        ((e.key, e.self_cpu_time_total / 1000 / count) for e in prof.key_averages()),
        key=lambda kv: -kv[1],
    )
    return [(name, round(ms, 3)) for name, ms in totals[:8]]


def fit(points: dict[int, float]) -> tuple[float, float]:
    xs, ys = list(points), list(points.values())
    mx, my = statistics.mean(xs), statistics.mean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return my - b * mx, b


def device_ms(batch: int, ops: tuple[float, float]) -> float:
    """The modelled device step (:data:`DEVICE`) for ``batch`` rows launching
    ``ops[0] + ops[1] * batch`` kernels."""
    kernels_ms = (ops[0] + ops[1] * batch) * DEVICE["kernel_us"] / 1000
    return DEVICE["weights_ms"] + kernels_ms + batch * DEVICE["row_us"] / 1000


def projected_streams(a: float, b: float, ops: tuple[float, float], budget_ms: float) -> int:
    """The largest batch whose host (``a + b * n``) plus device step fits ``budget_ms``."""
    n = 0
    while n < 4096 and a + b * (n + 1) + device_ms(n + 1, ops) <= budget_ms:
        n += 1
    return n


def rounded(values: tuple[float, float]) -> list[float]:
    return [round(values[0], 3), round(values[1], 4)]


def rounded_values(row: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}


def run(kind: str, stream: StreamingDecoder, chat: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Every batch size for one step implementation: figures, fits and projections."""
    by_batch = {}
    for size in args.batches:
        by_batch[size] = row = measure(kind, stream, chat, size, args.steps)
        print(
            f"{kind:8} batch {size:4d}: {row['wall_ms']:7.2f} ms/step wall, {row['cpu_ms']:7.2f}"
            f" ms CPU, {row['reads_per_step']} device reads, {row['ops_per_step']} ops",
            flush=True,
        )
    cpu = fit({s: r["cpu_ms"] for s, r in by_batch.items()})
    ops = fit({s: float(r["ops_per_step"]) for s, r in by_batch.items()})
    result: dict[str, Any] = {
        "by_batch": {size: rounded_values(row) for size, row in by_batch.items()},
        "fit_wall_ms": rounded(fit({s: r["wall_ms"] for s, r in by_batch.items()})),
        "fit_cpu_ms": rounded(cpu),
        "reads_per_step": max((r["reads_per_step"] or 0) for r in by_batch.values()),
        "ops_fit": [round(ops[0], 1), round(ops[1], 2)],
        # This CPU's whole step (its kernels executed here too) taken as a GPU's host.
        "projected_streams_cpu_step": projected_streams(*cpu, ops, REALTIME_STEP_MS),
    }
    if kind == "batched":
        result.update(gpu_host(by_batch, ops))
    print(f"{kind:8} {json.dumps({k: v for k, v in result.items() if k != 'by_batch'})}")
    return result


def gpu_host(by_batch: dict[int, dict[str, Any]], ops: tuple[float, float]) -> dict[str, Any]:
    """The new step's host cost on a GPU, from its parts measured here: launching the
    tensor work (its CPU time at the smallest batch, where the kernels do almost nothing:
    an upper bound) plus the bookkeeping around it (everything in the step but the tensor
    work: the one read, the numpy mirror, chunk checks), or with CUDA graphs the
    bookkeeping plus a replay."""
    smallest = by_batch[min(by_batch)]
    launch_ms = smallest["cpu_ms"] - smallest["bookkeeping_ms"]
    a, b = fit({s: r["bookkeeping_ms"] for s, r in by_batch.items()})
    eager, graphs = (launch_ms + a, b), (DEVICE["graph_replay_ms"] + a, b)
    return {
        "tensor_work_fit_ms": rounded(
            fit({s: r["cpu_ms"] - r["bookkeeping_ms"] for s, r in by_batch.items()})
        ),
        "bookkeeping_fit_ms": rounded((a, b)),
        "gpu_host_eager_fit_ms": rounded(eager),
        "gpu_host_graphs_fit_ms": rounded(graphs),
        "projected_streams": projected_streams(*eager, ops, REALTIME_STEP_MS),
        "projected_streams_with_headroom": projected_streams(
            *eager, ops, REALTIME_STEP_MS * HEADROOM
        ),
        "projected_streams_graphs": projected_streams(*graphs, ops, REALTIME_STEP_MS),
    }


def legacy_gpu_host(legacy: dict[str, Any], batched: dict[str, Any]) -> dict[str, Any]:
    """The old step's host cost on a GPU, estimated: its whole step here less the new
    step's tensor work (the same kernels, which a GPU would run), leaving its Python,
    per-row reads and per-row kernel launches."""
    (a, b), (ta, tb) = legacy["fit_cpu_ms"], batched["tensor_work_fit_ms"]
    launch = batched["gpu_host_eager_fit_ms"][0] - batched["bookkeeping_fit_ms"][0]
    host = (a - ta + launch, b - tb)
    ops = (legacy["ops_fit"][0], legacy["ops_fit"][1])
    return {
        "gpu_host_eager_fit_ms": rounded(host),
        "projected_streams": projected_streams(*host, ops, REALTIME_STEP_MS),
        "projected_streams_with_headroom": projected_streams(
            *host, ops, REALTIME_STEP_MS * HEADROOM
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, default=ROOT / "checkpoints" / "deep")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 64, 128])
    parser.add_argument("--steps", type=int, default=120, help="steps per utterance")
    parser.add_argument("--no-baseline", action="store_true", help="skip the old step")
    parser.add_argument("--smoke", action="store_true", help="a few steps (a test)")
    parser.add_argument(
        "--prefill-sizes", type=int, nargs="+", default=[1, 8, 32], help="joining rows"
    )
    parser.add_argument("--prefill-repeats", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        if args.smoke:
            args.checkpoint = Path(tmp) / "deep"
            args.batches, args.steps = [1, 4], 10
            args.prefill_sizes, args.prefill_repeats = [1, 4], 1
        if not (args.checkpoint / "asset").is_dir():
            write_checkpoint(args.checkpoint, size="deep", seed=0)
        chat = load_chat(args.checkpoint, device="cpu")
        stream = StreamingDecoder(chat)
        measure("batched", stream, chat, 2, 16)  # warm-up
        report: dict[str, Any] = {
            "bench": "host_overhead", "smoke": args.smoke, "threads": 1,
            "gpt_layers": len(chat.gpt.gpt.layers), "hidden": int(chat.config.gpt.hidden_size),
        }  # fmt: skip
        report["batched"] = run("batched", stream, chat, args)
        report["profile_ms"] = profile(stream, chat, max(args.batches), 16)
        print(f"top operations at batch {max(args.batches)} (self CPU ms/step):")
        for name, ms in report["profile_ms"]:
            print(f"  {ms:8.3f}  {name}")
        print("starting joining rows (prompts):")
        report["prefill"] = prefill_costs(stream, chat, args.prefill_sizes, args.prefill_repeats)
        if not args.no_baseline:
            report["legacy"] = legacy = run("legacy", stream, chat, args)
            legacy.update(legacy_gpu_host(legacy, report["batched"]))
    batched = report["batched"]
    a, b = batched["fit_cpu_ms"]
    host_a, host_b = batched["gpu_host_eager_fit_ms"]
    report.update(
        a_ms=a, b_ms=b, reads_per_step=batched["reads_per_step"],
        gpu_host_a_ms=host_a, gpu_host_b_ms=host_b,
        projected_streams=batched["projected_streams"],
        projected_streams_graphs=batched["projected_streams_graphs"],
        legacy_projected_streams=report.get("legacy", {}).get("projected_streams"),
        goal={"a_ms": 4.0, "b_ms": 0.05, "reads_per_step": 1},
        goal_met=a <= 4.0 and b <= 0.05 and batched["reads_per_step"] <= 1,
        gpu_host_goal_met=host_a <= 4.0 and host_b <= 0.05 and batched["reads_per_step"] <= 1,
        device_model=DEVICE,
    )  # fmt: skip
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
