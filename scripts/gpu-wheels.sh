#!/usr/bin/env bash
# Download, on a machine with network, the wheels scripts/gpu-check.sh installs on a GPU host that has none: every
# pin of requirements/runtime.txt and the test pins the CUDA tests need (pytest, hypothesis, asgi-lifespan and what
# they need, from requirements/test.txt), at their locked versions, for CPython on manylinux x86-64. torch, triton and
# the nvidia-* CUDA packages are left out: the GPU host keeps its own torch.
#   scripts/gpu-wheels.sh DIR [--python-version 3.12]
# Then copy the repository, DIR and Multi30k's test2016 files to the GPU host and run scripts/gpu-check.sh there.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: $0 DIR [--python-version X.Y]" >&2; exit 2; }
dir="" version=3.12
while [ $# -gt 0 ]; do
  case "$1" in
    --python-version) [ $# -ge 2 ] || usage; version=$2; shift 2 ;;
    -h | --help) sed -n '2,7p' "$0"; exit 0 ;;
    -*) usage ;;
    *) [ -z "$dir" ] || usage; dir=$1; shift ;;
  esac
done
[ -n "$dir" ] || usage
[[ "$version" =~ ^3\.[0-9]+$ ]] || { echo "--python-version $version: give X.Y, e.g. 3.12" >&2; exit 2; }
PY=${PYTHON:-python3}

# name==version for each wanted pin whose marker holds on Linux x86-64 with that Python (pip's own packaging
# evaluates the markers, so any Python with pip will do).
mapfile -t pins < <("$PY" - "$version" <<'EOF'
import re, sys
from pip._vendor.packaging.markers import Marker

TEST_NEEDS = {"pytest", "hypothesis", "asgi-lifespan"}  # what tests/cuda and tests/conftest.py import beyond runtime
SKIP = re.compile(r"^(torch|triton|nvidia-.*)$")
where = {"python_version": sys.argv[1], "python_full_version": sys.argv[1] + ".0", "sys_platform": "linux",
         "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
         "implementation_name": "cpython", "platform_python_implementation": "CPython"}

def lock(name):
    """{package: [(version, marker, [packages it is there for])]} of requirements/NAME.txt."""
    out, last = {}, None
    for line in open(f"requirements/{name}.txt"):
        if m := re.match(r"^([A-Za-z0-9][\w.-]*)==(\S+?)(?: ; (.+?))? \\$", line):
            last = (m.group(2), m.group(3), [])
            out.setdefault(m.group(1).lower().replace("_", "-"), []).append(last)
        elif (m := re.match(r"^\s+#\s+(?:via\s+)?([A-Za-z0-9][\w.-]*)", line)) and last and m.group(1) != "via":
            last[2].append(m.group(1).lower())

    return out

runtime, test = lock("runtime"), lock("test")
wanted = set(runtime) | TEST_NEEDS
grown = True
while grown:  # what the wanted test packages need, by the lock's "via" lines
    more = {p for p, pins in test.items() if any(set(via) & TEST_NEEDS for _, _, via in pins)} - TEST_NEEDS
    grown = bool(more)
    TEST_NEEDS |= more
    wanted |= more
for name in sorted(wanted):
    for version, marker, _ in (runtime.get(name) or test[name]):
        if not SKIP.match(name) and (not marker or Marker(marker).evaluate(where)):
            print(f"{name}=={version}")
EOF
)
[ "${#pins[@]}" -gt 10 ] || { echo "found only ${#pins[@]} pins in requirements/: is this the repository?" >&2; exit 1; }

mkdir -p "$dir"
echo "downloading ${#pins[@]} wheels for CPython $version on manylinux x86-64 into $dir" >&2
"$PY" -m pip download --quiet --disable-pip-version-check --dest "$dir" --no-deps --only-binary=:all: \
  --python-version "$version" --implementation cp --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform linux_x86_64 "${pins[@]}"
echo "$(find "$dir" -name '*.whl' | wc -l) wheels, $(du -sh "$dir" | cut -f1) in $dir" >&2
