#!/usr/bin/env bash
# Install nmt-serve into the current Python (>= 3.11). Safe to re-run. Shared by the README and the Dockerfile.
#   scripts/install.sh              torch (if missing) + this project, editable, with test tools (development),
#                                   and Debian's chromium + chromium-driver for the viewer's browser tests
#   scripts/install.sh --deps-only  torch (if missing) + the runtime dependencies only (a cacheable image layer)
#   scripts/install.sh --runtime    this project, editable, no test tools (after --deps-only)
# torch: an installed torch (e.g. a CUDA build on a GPU host or in a pytorch/pytorch image) is kept;
# otherwise torch 2.13.0 is installed, from $TORCH_INDEX_URL when set (the CPU wheel index in the CPU image).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PIP=("$PY" -m pip install --quiet --disable-pip-version-check --no-cache-dir)
mode=${1:-dev}

install_torch() {
  if ! "$PY" -c 'import torch' 2>/dev/null; then
    "${PIP[@]}" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "torch==2.13.0"
  fi
}

# tests/app/test_viewer_e2e.py drives the system Chromium through chromedriver; without them it skips.
install_browser() {
  command -v chromium >/dev/null && command -v chromedriver >/dev/null && return
  local sudo=""  # a plain string, not an array: macOS's bash 3.2 rejects empty arrays under `set -u`
  if [ "$(id -u)" -ne 0 ]; then
    if sudo -n true 2>/dev/null; then sudo="sudo -n"; else sudo="none"; fi
  fi
  # shellcheck disable=SC2086  # $sudo is empty or two words on purpose
  if [ "$sudo" != none ] && command -v apt-get >/dev/null && {
    $sudo apt-get update -qq &&
      $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        chromium chromium-driver fonts-dejavu-core
  } >/dev/null 2>&1; then
    return
  fi
  echo "install.sh: no chromium/chromedriver (needs apt-get and root or passwordless sudo); the browser tests will be skipped" >&2
}

case "$mode" in
  dev)
    install_torch
    "${PIP[@]}" -e ".[test]"
    install_browser
    ;;
  --deps-only)
    install_torch
    "$PY" - <<'PY' > /tmp/nmt-requirements.txt
import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))
PY
    "${PIP[@]}" -r /tmp/nmt-requirements.txt
    rm -f /tmp/nmt-requirements.txt
    ;;
  --runtime)
    "${PIP[@]}" --no-deps -e .
    ;;
  *)
    echo "usage: $0 [--deps-only | --runtime]" >&2
    exit 2
    ;;
esac
