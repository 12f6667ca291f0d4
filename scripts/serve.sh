#!/usr/bin/env bash
# Install what serving needs (the locked runtime set, into the project environment: see scripts/env.sh), then serve
# the bundled English->German checkpoint on http://127.0.0.1:8000 (any nmt-serve flag may follow: --port, --host,
# --model-dir, --device, --dtype).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/env.sh
source scripts/env.sh
bash scripts/install.sh runtime
PY=$(nmt_python)
exec "$(nmt_bin "$PY")/nmt-serve" "$@"
