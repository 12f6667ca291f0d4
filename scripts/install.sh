#!/usr/bin/env bash
# Install nmt-serve into the current Python (>= 3.11). Safe to re-run. Shared by the README and the Dockerfile.
#   scripts/install.sh              torch (if missing) + this project, editable, with test tools (development)
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

case "$mode" in
  dev)
    install_torch
    "${PIP[@]}" -e ".[test]"
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
