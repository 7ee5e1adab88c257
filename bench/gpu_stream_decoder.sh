#!/usr/bin/env bash
# The streaming-decoder benchmark on a CUDA machine, in one command (a few minutes):
#
#     bash bench/gpu_stream_decoder.sh            # from the repository root
#
# Made for the lent GPU host: system python with torch + torchaudio preinstalled, no
# internet, no project venv. It puts the repository on PYTHONPATH (or, with
# INSTALL=1, runs `pip install --no-deps -e .`), checks that every module the ChatTTS
# path imports is there, and says which are missing rather than failing deep inside.
# Missing wheels can be installed offline from a wheelhouse: WHEELS=dir (built on a
# connected machine with `pip download --no-deps -d dir chattts==0.2.5 vocos encodec
# vector_quantize_pytorch einx einops torch-einops-utils loguru pybase16384 numba
# llvmlite "transformers>=5.20,<5.40" tokenizers safetensors huggingface-hub
# onnx onnxruntime-gpu`).
#
# Then two runs of bench/stream_decoder.py, each ending in one JSON line:
#   1. float32 everywhere (like for like with the CPU figures), with the ONNX vocoder
#      on the CUDA execution provider when onnxruntime-gpu is importable; its "gpt_cache"
#      block times GPT steps on the dynamic cache, the static cache and the static cache
#      replayed as CUDA graphs (ms per step, and how long the tokens stay the dynamic
#      cache's: the CUDA graph step is first exercised here);
#   2. the GPT in bfloat16 (ChatTTS's own paths run on the same cast GPT), its steps
#      replayed as CUDA graphs, and the Decoder + Vocos backbone under torch.compile.
#      If that run fails, it is repeated without CUDA graphs.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
CKPT="${CKPT:-checkpoints/full}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

if [[ -n "${WHEELS:-}" ]]; then
  "$PY" -m pip install --no-index --no-deps --find-links "$WHEELS" "$WHEELS"/*.whl
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

"$PY" bench/stream_decoder.py --device cuda --checkpoint "$CKPT" \
  --lengths 10 30 --repeats 3 --long-repeats 2 --first-audio-repeats 5
half=("$PY" bench/stream_decoder.py --device cuda --checkpoint "$CKPT"
  --lengths 10 30 --repeats 2 --long-repeats 1 --first-audio-repeats 3
  --gpt-dtype bfloat16 --compile-vocoder --no-onnx)
"${half[@]}" --cuda-graphs || {
  echo "the bfloat16 run with CUDA graphs failed (status $?); again without them"
  "${half[@]}" --gpt-cache-steps 0
}
