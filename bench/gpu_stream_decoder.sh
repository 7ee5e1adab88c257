#!/usr/bin/env bash
# The streaming-decoder benchmark on a CUDA machine, in one command (a few minutes):
#
#     bash bench/gpu_stream_decoder.sh            # from the repository root
#
# Made for the lent GPU host: system python with torch + torchaudio preinstalled, no
# internet, no project venv. It puts the repository on PYTHONPATH (or, with
# INSTALL=1, runs `pip install --no-deps -e .`), checks that every module the ChatTTS
# path imports is there, and says which are missing rather than failing deep inside.
# Missing wheels can be installed offline from a wheelhouse: WHEELS=dir, built on a
# connected machine by `bash bench/gpu_wheels.sh` (writes .whl/, ~15 MB: ChatTTS,
# vocos, encodec, vector_quantize_pytorch, einx, pybase16384, transformers, ...).
#
# Then two runs of bench/stream_decoder.py, each ending in one JSON line:
#   1. float32 everywhere (like for like with the CPU figures), with the ONNX vocoder
#      on the CUDA execution provider when onnxruntime-gpu is importable; its "gpt_cache"
#      block times GPT steps on the dynamic cache, the static cache and the static cache
#      replayed as CUDA graphs (ms per step, and how long the tokens stay the dynamic
#      cache's: the CUDA graph step is first exercised here);
#   2. the GPT in bfloat16 (ChatTTS's own paths run on the same cast GPT), its steps
#      replayed as CUDA graphs, and the Decoder + Vocos backbone under torch.compile
#      (10 s utterances only). If that run fails, it is repeated without CUDA graphs.
#
# From a session lent the GPU (device tool), bench/gpu_check.sh runs the CUDA tests and
# then this script; build the wheelhouse here first:
#     bash bench/gpu_wheels.sh
#     run(command="bash bench/gpu_check.sh", carry=[".whl"], timeout_s=600)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
CKPT="${CKPT:-checkpoints/full}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

if [[ -n "${WHEELS:-}" ]]; then
  # Into a folder of their own, ahead of the system's packages on the path (the host's
  # own transformers may be older than the project's pin).
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/chattts-site "$WHEELS"/*.whl
  export PYTHONPATH="$PWD:/tmp/chattts-site${PYTHONPATH#"$PWD"}"
fi
if [[ "${INSTALL:-0}" == 1 ]]; then
  "$PY" -m pip install --no-deps --no-build-isolation -e .
fi

"$PY" - <<'PYCHECK'
import importlib, sys
needed = ["torch", "torchaudio", "numpy", "ChatTTS", "vocos", "encodec", "vector_quantize_pytorch",
          "einx", "einops", "pybase16384", "transformers", "tokenizers", "safetensors",
          "huggingface_hub", "requests", "tqdm", "numba"]
missing = []
for name in needed:
    try:
        importlib.import_module(name)
    except Exception as exc:  # an import can fail with more than ImportError
        missing.append(f"  {name}: {type(exc).__name__}: {exc}")
import torch
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, "
      f"CUDA {torch.version.cuda}, GPU available: {torch.cuda.is_available()}")
if not torch.cuda.is_available():
    missing.append("  CUDA: torch sees no GPU")
if missing:
    print("cannot run the ChatTTS benchmark here; missing or broken:\n" + "\n".join(missing))
    if any(not line.startswith("  CUDA") for line in missing):
        print("install missing modules offline with WHEELS=<wheelhouse> (see this script's header)")
    sys.exit(3)
try:
    import onnxruntime
    print("onnxruntime", onnxruntime.__version__, onnxruntime.get_available_providers())
except ImportError:
    print("onnxruntime not importable: the ONNX comparison will be skipped")
PYCHECK

# Sized for a lent machine's few minutes (about 5 on an H200 by estimate: ~14,000 GPT
# steps at 10-20 ms in eager float32, far fewer with graphs); FULL=1 repeats more,
# QUICK=1 times 10 s utterances only.
# With $OUT set (the device tool's output folder) the whole log is kept there too.
lengths=(10 30)
if [[ "${FULL:-0}" == 1 ]]; then
  more=(--repeats 3 --long-repeats 2 --first-audio-repeats 5)
elif [[ "${QUICK:-0}" == 1 ]]; then
  lengths=(10)
  more=(--repeats 1 --long-repeats 1 --first-audio-repeats 2)
else
  more=(--repeats 2 --long-repeats 1 --first-audio-repeats 3)
fi
log=/dev/null
[[ -n "${OUT:-}" ]] && log="$OUT/gpu_stream_decoder.log"
export PYTHONUNBUFFERED=1
"$PY" bench/stream_decoder.py --device cuda --checkpoint "$CKPT" \
  --lengths "${lengths[@]}" "${more[@]}" 2>&1 | tee -a "$log"
half=("$PY" bench/stream_decoder.py --device cuda --checkpoint "$CKPT"
  --lengths 10 --repeats 1 --first-audio-repeats 2
  --gpt-dtype bfloat16 --compile-vocoder --no-onnx)
set +e
"${half[@]}" --cuda-graphs 2>&1 | tee -a "$log"
status=${PIPESTATUS[0]}
set -e
if [[ $status != 0 ]]; then
  echo "the bfloat16 run with CUDA graphs failed (status $status); again without them" | tee -a "$log"
  "${half[@]}" --gpt-cache-steps 0 2>&1 | tee -a "$log"
fi
