# syntax=docker/dockerfile:1
# CUDA image of the server (docs/gpu.md), in two stages: the build stage has the compiler
# and the Python headers and builds the venv with scripts/setup.sh (the same pinned
# versions as the tests: constraints.txt); the runtime stage has neither, and runs the
# server as an unprivileged user. The model is not in the image: mount it and set
# TTS_MODEL_DIR. Run with `docker run --gpus all` (NVIDIA Container Toolkit).

ARG CUDA_BASE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04

FROM ${CUDA_BASE} AS build
ENV DEBIAN_FRONTEND=noninteractive TTS_PYTHON=python3.11
RUN apt-get update \
    && apt-get install -y --no-install-recommends software-properties-common ca-certificates \
    && add-apt-repository -y ppa:deadsnakes/ppa \
    && apt-get update \
    && apt-get install -y --no-install-recommends python3.11 python3.11-venv python3.11-dev build-essential \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml constraints.txt README.md ./
COPY scripts ./scripts
COPY server ./server
COPY streaming ./streaming
COPY client ./client
COPY web ./web
# torch at the tests' version (setup.sh's default), the CUDA 12.8 build of it.
ARG TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
RUN TTS_TORCH_SPEC="$TORCH_SPEC" TTS_SKIP_APT=1 scripts/setup.sh && rm -rf /root/.cache/pip
# Build the text normaliser's transducers into the image (~4 s once), so pods with a
# read-only root filesystem start without rebuilding them.
ENV TTS_TEXT_CACHE_DIR=/app/text-cache
RUN .venv/bin/chattts-stream preview "预热：2024年10月1日，12.5元。" > /dev/null

FROM ${CUDA_BASE} AS runtime
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    TTS_HOST=0.0.0.0 \
    TTS_PORT=8000 \
    TTS_TEXT_CACHE_DIR=/app/text-cache \
    HOME=/home/tts
# ffmpeg: the compressed formats (mp3, opus, aac, flac) and reference clips; without it
# they answer 503 format_unavailable. libsndfile1: nothing the server imports loads it
# (soundfile's wheels carry their own copy). No compiler, no headers: so the
# torch.compile options (--compile, --compile-vocoder), whose Triton kernels build a C
# launcher at first use, need an image built with gcc and the Python headers added here.
RUN apt-get update \
    && apt-get install -y --no-install-recommends software-properties-common ca-certificates \
    && add-apt-repository -y ppa:deadsnakes/ppa \
    && apt-get update \
    && apt-get install -y --no-install-recommends python3.11 libsndfile1 ffmpeg \
    && apt-get purge -y software-properties-common && apt-get autoremove -y \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --create-home --home-dir /home/tts tts
WORKDIR /app
COPY --from=build --chown=tts:tts /app /app
# Created voices (--voices-dir's default): owned by tts, so a volume mounted here is too.
RUN mkdir -p /home/tts/.local/share/chattts-stream/voices \
    && chown -R tts:tts /home/tts/.local
USER tts
EXPOSE 8000
# Port-agnostic: the check reads TTS_PORT, as the server does.
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
    CMD ["/app/.venv/bin/chattts-stream", "healthcheck"]
ENTRYPOINT ["/app/.venv/bin/chattts-stream", "serve"]
