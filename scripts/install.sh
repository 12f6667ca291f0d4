#!/usr/bin/env bash
# Install nmt-serve and its test tools into the current Python (>= 3.11). Safe to re-run.
# CPU by default: torch 2.13.0 CPU. On a GPU host, install the CUDA build of torch you want first
# (e.g. pip install torch --index-url https://download.pytorch.org/whl/cu124) and it is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c 'import torch' 2>/dev/null; then
  "$PY" -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
fi
"$PY" -m pip install --quiet --disable-pip-version-check -e ".[test]"
