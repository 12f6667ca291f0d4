#!/usr/bin/env bash
# Install the locked test set (into the project environment: see scripts/env.sh), then run the whole test suite
# (any pytest argument may follow).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/env.sh
source scripts/env.sh
bash scripts/install.sh test
PY=$(nmt_python)
# As activating the environment would: the tools the tests run (shellcheck, hadolint, nmt-serve) are found there.
# One worker a core (pytest-xdist); each test file runs whole on one worker, so the tests of a file share its
# module fixtures (the compiled graphs of tests/model/test_compile.py), and the files go out in the order
# tests/conftest.py collects them in, the slowest first. `-n 0` runs in this process alone.
PATH="$(nmt_bin "$PY"):$PATH" exec "$PY" -m pytest -n auto --dist loadfile --no-loadscope-reorder "$@"
