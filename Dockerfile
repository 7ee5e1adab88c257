# CUDA runtime image: the same scripts/setup.sh as the README, with the CUDA torch build.
FROM nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    TTS_HOST=0.0.0.0 \
    TTS_PORT=8000 \
    TTS_PYTHON=python3.11

# libsndfile1: the seed article's classic OSError when it is missing; ffmpeg: pydub's
# encoder for mp3/ogg/flac responses.
RUN apt-get update \
    && apt-get install -y --no-install-recommends software-properties-common curl ca-certificates \
    && add-apt-repository -y ppa:deadsnakes/ppa \
    && apt-get update \
    && apt-get install -y --no-install-recommends \
        python3.11 python3.11-venv python3.11-dev libsndfile1 ffmpeg build-essential \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY scripts ./scripts
COPY server ./server
COPY streaming ./streaming
COPY client ./client
COPY web ./web
# The CUDA 12.8 torch wheel; override with --build-arg TORCH_SPEC=... for another CUDA.
ARG TORCH_SPEC="torch==2.11.0 --index-url https://download.pytorch.org/whl/cu128"
RUN TTS_TORCH_SPEC="$TORCH_SPEC" scripts/setup.sh && rm -rf /root/.cache/pip
# Build the text normaliser's transducers into the image (~4 s once), so pods with a
# read-only root filesystem start without rebuilding them.
ENV TTS_TEXT_CACHE_DIR=/app/text-cache
RUN .venv/bin/chattts-stream preview "预热：2024年10月1日，12.5元。" > /dev/null \
    && chmod -R a+rX /app/text-cache

EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --start-period=120s --retries=3 \
    CMD curl -fsS http://127.0.0.1:8000/health || exit 1
ENTRYPOINT ["/app/.venv/bin/chattts-stream", "serve"]
