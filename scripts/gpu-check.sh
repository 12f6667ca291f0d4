#!/usr/bin/env bash
# The GPU check, on a host with an NVIDIA GPU and a CUDA build of torch already installed: installs the project into
# that Python's environment without touching torch, then runs bench/gpu.py (the CUDA tests, the GPU benchmarks and a
# load round against a live server), which writes OUT/gpu-check.json and OUT/gpu-check.md.
#   scripts/gpu-check.sh [--wheels DIR] [--out DIR] [--quick] [--data DIR] [--skip tests,bench,load]
#     --wheels DIR  install from DIR only (no network; scripts/gpu-wheels.sh fills it); without it the environment must
#                   already hold everything, and only the imports are checked
#     --out DIR     where the results go (default bench/out/gpu)
#     --quick, --data, --skip: passed to bench/gpu.py (smaller limits; test2016's directory; steps to leave out)
# The Python is $PYTHON, else python3.
set -euo pipefail

usage() { echo "usage: $0 [--wheels DIR] [--out DIR] [--quick] [--data DIR] [--skip tests,bench,load]" >&2; exit 2; }
die() { echo "gpu-check.sh: $*" >&2; exit 1; }
absolute() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }  # before the cd below
wheels="" out=bench/out/gpu passed=()
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels | --out | --data | --skip) [ $# -ge 2 ] || usage ;;&
    --wheels) wheels=$(absolute "$2"); shift 2 ;;
    --out) out=$(absolute "$2"); shift 2 ;;
    --data) passed+=("$1" "$(absolute "$2")"); shift 2 ;;
    --skip) passed+=("$1" "$2"); shift 2 ;;
    --quick) passed+=("$1"); shift ;;
    -h | --help) sed -n '2,10p' "$0"; exit 0 ;;
    *) usage ;;
  esac
done
if [ -n "${NMT_TEST_DATA:-}" ]; then NMT_TEST_DATA=$(absolute "$NMT_TEST_DATA"); export NMT_TEST_DATA; fi
cd "$(dirname "$0")/.."
# shellcheck source=scripts/env.sh
source scripts/env.sh

PY=$(command -v "${PYTHON:-python3}") || die "no ${PYTHON:-python3} on the PATH; set PYTHON to the Python that has CUDA torch"
probe=$("$PY" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())' 2>/dev/null |
  tail -n 1) || die "$PY cannot import torch: install a CUDA build of torch into its environment first"
read -r torch_version cuda available <<<"$probe"
if [ "$available" != True ]; then
  build="built for CUDA $cuda"
  if [ "$cuda" = None ]; then build="a CPU build"; fi
  die "no CUDA GPU: $PY's torch $torch_version ($build) sees none; this check needs an NVIDIA GPU, its driver and a CUDA build of torch"
fi
echo "gpu-check.sh: $PY, torch $torch_version, CUDA $cuda" >&2

if [ -n "$wheels" ]; then
  [ -d "$wheels" ] || die "--wheels $wheels: no such directory (scripts/gpu-wheels.sh makes it)"
  PIP=("$PY" -m pip install --quiet --disable-pip-version-check --no-index --find-links "$wheels")
  # What the CUDA tests need beyond the runtime, within pyproject.toml's ranges.
  mapfile -t tests < <("$PY" -c 'import re, tomllib
for r in tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["test"]:
    if re.match(r"(pytest|hypothesis|asgi-lifespan)\b", r): print(r)')
  "${PIP[@]}" 'setuptools>=68'  # the build backend, which --no-build-isolation takes from the environment
  "${PIP[@]}" --no-build-isolation -e . "${tests[@]}"
  now=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null | tail -n 1)
  [ "$now" = "$torch_version" ] || die "installing changed torch from $torch_version to $now: reinstall the CUDA build"
fi
"$PY" -c 'import fastapi, uvicorn, pydantic_settings, httptools, sentencex, pytest, hypothesis, asgi_lifespan
import importlib.metadata, app.main, model.transformer
importlib.metadata.version("nmt-serve")  # installed, so nmt-serve is on the PATH below' ||
  die "$PY cannot import what the check needs (above): run with --wheels DIR (scripts/gpu-wheels.sh fills it where there is network)"

PATH="$(nmt_bin "$PY"):$PATH" exec "$PY" bench/gpu.py --out "$out" "${passed[@]}"
