#!/usr/bin/env bash
# Everything a lent GPU session should run, in one command (~7 min on an H200 by estimate):
#
#     bash bench/gpu_wheels.sh                                   # here, once (.whl/)
#     run(command="bash bench/gpu_check.sh", carry=[".whl"], timeout_s=600)
#
# 1. the CUDA tests (tests/server/engines/chattts/test_gpt_static_cuda.py: CUDA graph capture and replay
#    against the eager static cache, float32 and bfloat16; a seeded stream against the
#    dynamic cache; interleaved graphed slots; the engine's warm-up capture;
#    tests/server/engines/chattts/test_batch_cuda.py: the batched step's graphs per bucket against the
#    uncaptured step, rows against their solo tokens, one synchronisation per step);
# 2. the streaming-decoder benchmark (bench/gpu_stream_decoder.sh), even if 1 failed;
# 3. continuous batching at real dims (bench/gpu_batch.py): ms per step, real-time
#    streams, memory and estimated TTFA per batch size 1 -> 128, and the capacity;
# 4. what a busy event loop costs a CUDA kernel launch beside it (bench/gil_convoy.py
#    --device cuda; ~5 s; its status does not count; CONVOY_S, 60 by default);
# 5. a step of 200 kernel launches beside a busy loop, in the engine thread and in the
#    engine's own process (bench/engine_process.py --device cuda: what --engine-process
#    buys on a GPU; its status does not count; PROCESS_S, 120 by default).
# With $OUT set (the device tool's output folder) the logs are kept there.
#
# Each stage has a wall-clock bound (seconds; a stage that runs past it is stopped and the
# next one starts), so that a lease of a few minutes always gets every stage's figures:
#     TESTS_S=150 BATCH_S=200 DECODER_S=150 CONVOY_S=30 PROCESS_S=60 bash bench/gpu_check.sh
# QUICK=1 runs the streaming-decoder stage on 10 s utterances only (float32, then bf16).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
export WHEELS="${WHEELS:-.whl}"
export PYTHONUNBUFFERED=1
if [[ -d "$WHEELS" ]]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/chattts-site "$WHEELS"/*.whl
fi
export PYTHONPATH="$PWD:/tmp/chattts-site${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "torch sees no CUDA GPU here: the CUDA tests would only be skipped"
  exit 3
fi
log=/dev/null
[[ -n "${OUT:-}" ]] && log="$OUT/gpu_cuda_tests.log"
set +e
timeout "${TESTS_S:-300}" "$PY" -m pytest -c bench/pytest-gpu.ini --rootdir . -p no:cacheprovider -q \
  tests/server/engines/chattts/test_gpt_static_cuda.py tests/server/engines/chattts/test_batch_cuda.py 2>&1 | tee "$log"
tests_status=${PIPESTATUS[0]}
set -e
echo "CUDA tests: exit status $tests_status"
bench_status=0
WHEELS= timeout "${DECODER_S:-420}" bash bench/gpu_stream_decoder.sh || bench_status=$?
batch_status=0
batch_log=/dev/null
[[ -n "${OUT:-}" ]] && batch_log="$OUT/gpu_batch.log"
timeout "${BATCH_S:-300}" "$PY" bench/gpu_batch.py --checkpoint "${CKPT:-checkpoints/full}" 2>&1 | tee "$batch_log" \
  || batch_status=$?
convoy_log=/dev/null
[[ -n "${OUT:-}" ]] && convoy_log="$OUT/gil_convoy.log"
timeout "${CONVOY_S:-60}" "$PY" bench/gil_convoy.py --device cuda 2>&1 | tee "$convoy_log" || true
process_log=/dev/null
[[ -n "${OUT:-}" ]] && process_log="$OUT/engine_process.log"
timeout "${PROCESS_S:-120}" "$PY" bench/engine_process.py --device cuda --rounds 1 2>&1 \
  | tee "$process_log" || true
echo "CUDA tests: exit status $tests_status; benchmark: exit status $bench_status;" \
  "batching: exit status $batch_status"
[[ $tests_status == 0 && $bench_status == 0 && $batch_status == 0 ]]
