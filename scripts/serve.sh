#!/usr/bin/env bash
# Install what is missing, then serve the bundled English->German checkpoint on http://127.0.0.1:8000
# (any nmt-serve flag may follow: --port, --host, --model-dir, --device, --dtype).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec nmt-serve "$@"
