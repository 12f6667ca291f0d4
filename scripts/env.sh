# shellcheck shell=bash
# Sourced by install.sh, serve.sh, test.sh and lock.sh: `nmt_python` prints the Python of the environment they
# install into and run from, making the project's own environment first when that is the one:
#   1. $PYTHON when set: that interpreter and its environment, as they are;
#   2. else the active virtual environment ($VIRTUAL_ENV; the Docker image's /opt/venv), or the active conda
#      environment other than base;
#   3. else the project's own .venv, made with `python3 -m venv` from the first Python >= 3.11 on the PATH.
# So nothing is ever installed into the system's Python, which Debian and Ubuntu refuse (PEP 668).

NMT_VENV=.venv  # relative to the repository root, where every script runs

nmt_is_311() {  # is "$1" a Python >= 3.11?
  "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null
}

nmt_python() {
  local py
  if [ -n "${PYTHON:-}" ]; then
    py=$(command -v "$PYTHON") || { echo "PYTHON=$PYTHON: no such interpreter" >&2; return 1; }
  elif [ -n "${VIRTUAL_ENV:-}" ]; then
    py="$VIRTUAL_ENV/bin/python"
  elif [ -n "${CONDA_PREFIX:-}" ] && [ "${CONDA_DEFAULT_ENV:-}" != base ]; then
    py="$CONDA_PREFIX/bin/python"
  else
    nmt_project_venv || return 1
    py="$NMT_VENV/bin/python"
  fi
  nmt_is_311 "$py" || { echo "$py is not Python >= 3.11, which nmt-serve needs" >&2; return 1; }
  echo "$py"
}

nmt_project_venv() {  # make .venv unless a working one is there
  if nmt_is_311 "$NMT_VENV/bin/python"; then
    "$NMT_VENV/bin/python" -m pip --version >/dev/null 2>&1 || "$NMT_VENV/bin/python" -m ensurepip --upgrade >/dev/null
    return
  fi
  local base="" candidate
  for candidate in python3 python3.14 python3.13 python3.12 python3.11 python; do
    if command -v "$candidate" >/dev/null && nmt_is_311 "$candidate"; then base=$candidate; break; fi
  done
  if [ -z "$base" ]; then
    echo "no Python >= 3.11 on the PATH: install one (e.g. apt install python3, brew install python@3.12)" >&2
    return 1
  fi
  if [ -e "$NMT_VENV" ]; then
    echo "$NMT_VENV exists but holds no working Python >= 3.11; move it away, or activate the environment to use" >&2
    return 1
  fi
  echo "making the project environment $NMT_VENV with $(command -v "$base") ($("$base" --version 2>&1))" >&2
  if ! "$base" -m venv "$NMT_VENV" >&2; then
    rm -rf "$NMT_VENV"
    echo "could not make $NMT_VENV; on Debian and Ubuntu install python3-venv (sudo apt install python3-venv)" >&2
    return 1
  fi
}

nmt_bin() {  # the folder of that environment's console scripts (nmt-serve, nmt-train, nmt-eval)
  "$1" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'
}
