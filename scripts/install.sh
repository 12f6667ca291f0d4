#!/usr/bin/env bash
# Install nmt-serve and one locked dependency set (requirements/SET.txt) into the project's environment (see
# scripts/env.sh: the active virtual environment if there is one, else .venv, made here on first use). Safe to
# re-run. Shared by the README's commands, CI, scripts/lock.sh and the Dockerfile.
#   scripts/install.sh [SET]                  SET: test (default; also Debian's chromium and chromedriver for the
#                                             viewer's browser tests, and DeepL's Node.js client where node is),
#                                             runtime (what serving needs), bench, or import (nmt-import's
#                                             sentencepiece and huggingface-hub)
#   scripts/install.sh SET --deps-only        torch and the set, not the project (the Docker image's cacheable layer)
#   scripts/install.sh SET --project-only     the project alone, editable, without dependencies (after --deps-only)
# torch: a torch already in the environment (e.g. a CUDA build on a GPU host) is kept. Otherwise requirements/torch.in's
# release is installed, from $TORCH_INDEX_URL when set (e.g. https://download.pytorch.org/whl/cpu for the CPU build),
# after the packages it needs at their locked versions (requirements/torch.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/env.sh
source scripts/env.sh

set_name="test"
part=all
for arg in "$@"; do
  case "$arg" in
    runtime | test | bench | import) set_name=$arg ;;
    --deps-only) part=deps ;;
    --project-only) part=project ;;
    -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "usage: $0 [runtime | test | bench | import] [--deps-only | --project-only]" >&2; exit 2 ;;
  esac
done

PY=$(nmt_python)
PIP=("$PY" -m pip install --quiet --disable-pip-version-check)

install_torch() {
  "$PY" -c 'import torch' 2>/dev/null && return
  local release
  release=$(grep -E '^torch==' requirements/torch.in)
  echo "installing $release${TORCH_INDEX_URL:+ from $TORCH_INDEX_URL} into $PY" >&2
  "${PIP[@]}" --require-hashes -r requirements/torch.txt
  "${PIP[@]}" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "$release"
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

# tests/app/test_deepl_clients.py runs DeepL's Node.js client (deepl-node, locked in its package-lock.json); without
# node and npm that test skips.
install_node_client() {
  local dir=tests/clients/deepl-node
  [ -f "$dir/package-lock.json" ] || return 0  # a copy without the tests
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "install.sh: no node/npm; the deepl-node client test will be skipped" >&2
    return 0
  fi
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) ||
    echo "install.sh: npm ci in $dir failed; the deepl-node client test will be skipped" >&2
}

if [ "$part" != project ]; then
  install_torch
  echo "installing the locked $set_name set (requirements/$set_name.txt) into $PY" >&2
  "${PIP[@]}" --require-hashes -r "requirements/$set_name.txt"
fi
if [ "$part" != deps ]; then
  # The build requirements are in the lock, so the build uses them rather than the newest setuptools.
  "${PIP[@]}" --no-deps --no-build-isolation -e .
fi
if [ "$set_name" = test ] && [ "$part" = all ]; then
  install_browser
  install_node_client
fi
