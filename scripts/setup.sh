#!/usr/bin/env bash
# Prepare everything the server (and, with --test, the test suite) needs, idempotently.
#
#   scripts/setup.sh          Python venv in .venv with torch, ChatTTS and the server
#   scripts/setup.sh --test   the same plus test tools, Chromium and ffmpeg (apt)
#
# TTS_TORCH_SPEC overrides the torch requirement (default torch==2.13.0, the tests'
# version, which on the project's build machines is a local CPU wheel; a CUDA host
# passes e.g. "torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128").
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
[[ "${1:-}" == "--test" ]] && want_test=1

PYTHON="${TTS_PYTHON:-python3.11}"
VENV=.venv
TORCH_SPEC="${TTS_TORCH_SPEC:-torch==2.13.0}"

log() { printf '[setup] %s\n' "$*" >&2; }

if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating $VENV with $PYTHON"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --upgrade pip
fi
# constraints.txt: the one pinned set of versions, shared by the tests and the image.
pip=("$VENV/bin/pip" install --quiet --disable-pip-version-check -c constraints.txt)

# torch first: any unpinned torch requirement resolved by pip later would otherwise pull
# a multi-GB CUDA build on a machine that has none.
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    log "installing $TORCH_SPEC"
    # Unquoted on purpose: the spec may carry pip options (e.g. --index-url for CUDA).
    # shellcheck disable=SC2086
    "${pip[@]}" $TORCH_SPEC
fi

# One stamp: "<fingerprint of the install files> <extras installed>". An install with the
# test tools satisfies a plain one (`make serve` after `make test` installs nothing), and a
# reinstall after the files changed keeps the test tools a previous --test run added.
stamp="$VENV/.setup-stamp"
fingerprint=$(cat pyproject.toml client/pyproject.toml constraints.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)
read -r stamped_fingerprint stamped_extras < "$stamp" 2>/dev/null || true
has_test=0
[[ "${stamped_extras:-}" == "[test]" ]] && has_test=1
if [[ "${stamped_fingerprint:-}" != "$fingerprint" || $want_test -gt $has_test ]]; then
    extras=""
    [[ $want_test == 1 || $has_test == 1 ]] && extras="[test]"
    # The light client first: the project depends on it and it is not on the index.
    log "installing the client (client/) and the project${extras}"
    "${pip[@]}" -e ./client
    "${pip[@]}" -e ".${extras}"
    echo "$fingerprint $extras" > "$stamp"
fi

# PyPI's torchaudio wheels ship a compiled extension built against a CUDA torch of their
# own version; beside a CPU torch, or a torch of another version (constraints.txt pins
# torchaudio 2.11 beside torch 2.13), it fails to load and takes `import torchaudio`
# down with it. ChatTTS and vocos only use torchaudio's pure-Python MelSpectrogram, which
# does not need it, and torchaudio skips the extension when its library files are
# absent. So in either case we move those files into lib/cuda-only/ (undo: move back).
"$VENV/bin/python" - <<'PY'
import importlib.metadata, importlib.util, pathlib, sys
import torch
spec = importlib.util.find_spec("torchaudio")
if spec is None:
    sys.exit(0)
same_version = (
    torch.__version__.split("+")[0].split(".")[:2]
    == importlib.metadata.version("torchaudio").split("+")[0].split(".")[:2]
)
if torch.version.cuda is not None and same_version:
    sys.exit(0)
lib = pathlib.Path(spec.origin).parent / "lib"
libs = sorted(lib.glob("*.so"))
if libs:
    aside = lib / "cuda-only"
    aside.mkdir(exist_ok=True)
    for path in libs:
        path.rename(aside / path.name)
    print(f"[setup] torchaudio: moved {len(libs)} CUDA-only libraries to {aside}", file=sys.stderr)
PY
"$VENV/bin/python" -c "import torchaudio.transforms, ChatTTS" \
    || { log "ChatTTS does not import: see the output above"; exit 1; }

apt_install() {
    local missing=()
    for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
    [[ ${#missing[@]} == 0 ]] && return 0
    if [[ $(id -u) != 0 ]]; then
        log "missing system packages: ${missing[*]} (run: sudo apt-get install ${missing[*]})"
        return 1
    fi
    log "apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# TTS_SKIP_APT=1: no system packages (the image's build stage installs its own).
if [[ -z "${TTS_SKIP_APT:-}" ]] && command -v dpkg >/dev/null; then
    # ffmpeg: pydub's encoder for mp3/ogg/flac responses; libsndfile1: soundfile users.
    apt_install ffmpeg || log "compressed formats (mp3/ogg/flac) will be unavailable"
    if [[ $want_test == 1 ]]; then
        apt_install chromium || { log "the browser tests need chromium"; exit 1; }
        # A CJK font (1.6 MB; Debian's fonts-noto-cjk is 57 MB): without one the page's
        # Chinese renders as boxes in the browser tests and their screenshots.
        apt_install fonts-wqy-microhei || { log "the browser tests need a CJK font"; exit 1; }
        # promtool (in Debian's prometheus) checks and unit-tests deploy/prometheus's rules.
        apt_install prometheus || log "promtool unavailable: the alert rule tests will skip"
        # docker-compose (1.x, Python): validates deploy/docker-compose.yml without a daemon.
        apt_install docker-compose || log "docker-compose unavailable: the compose check will skip"
        # jq: the documented voice examples build their JSON bodies with it (tests run them).
        apt_install jq || { log "the documentation's examples need jq"; exit 1; }
        # The fleet tests (tests/fleet/): a real balancer and a real shared voice store.
        apt_install haproxy redis-server || { log "the fleet tests need haproxy and redis-server"; exit 1; }
    fi
fi
log "ready"
