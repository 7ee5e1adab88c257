#!/usr/bin/env bash
# Build the wheelhouse that bench/gpu_stream_decoder.sh needs on a GPU host with no
# network (Python 3.12, x86_64, torch/numpy/transformers' own needs preinstalled, but
# not ChatTTS and its audio packages). Run it where PyPI is reachable:
#
#     bash bench/gpu_wheels.sh            # writes .whl/ (~15 MB), git-ignored
#
# then on the GPU host, from the repository root with .whl/ copied beside it:
#
#     WHEELS=.whl bash bench/gpu_check.sh     # CUDA tests, then the benchmark
#
# The sdists among them (chattts, encodec) are built into pure-Python wheels here; the
# one compiled package (pybase16384, and its cffi) is fetched for CPython 3.12.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT_DIR:-.whl}"
PY="${PYTHON:-python3}"
PYVER="${GPU_PYTHON_VERSION:-3.12}"
mkdir -p "$OUT"
if [[ "$OUT" != /* ]]; then  # inside the repository: keep it out of git
  exclude=$(git rev-parse --git-path info/exclude)
  mkdir -p "$(dirname "$exclude")"
  grep -qxF "/$OUT/" "$exclude" 2>/dev/null || echo "/$OUT/" >> "$exclude"
fi

pure=(chattts==0.2.5 vocos==0.1.0 encodec==0.1.1 vector_quantize_pytorch==1.32.0
      einx==0.4.3 frozendict==2.5.1 torch_einops_utils==0.2.0 loguru
      transformers==5.24.0)
"$PY" -m pip wheel --quiet --no-deps --wheel-dir "$OUT" "${pure[@]}"
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYVER" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$OUT" pybase16384==0.3.9 "cffi>=1.0"
ls -l "$OUT"
du -sh "$OUT"
