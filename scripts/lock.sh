#!/usr/bin/env bash
# Refresh the locked dependency sets, requirements/*.txt, from pyproject.toml (scripts/lock.py, with uv), then run the
# test suite on them in a new project environment, as a new user would get it.
#   bash scripts/lock.sh             after editing pyproject.toml: every pin it still allows is kept
#   bash scripts/lock.sh --upgrade   the newest release of everything; the locks' headers get today's date
# Review `git diff requirements/` and commit it with the README's "last refreshed" date when the suite passes.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/env.sh
source scripts/env.sh
bash scripts/install.sh test  # uv comes with the test set
PY=$(nmt_python)
"$PY" scripts/lock.py "$@"
if [ "$PY" = "$NMT_VENV/bin/python" ]; then
  rm -rf "$NMT_VENV"  # the project's own environment: made anew from the new locks
fi
exec bash scripts/test.sh
