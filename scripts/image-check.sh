#!/usr/bin/env bash
# The container image, built and run for real with podman (or Docker) and no image registry:
#   1. a base image with Python 3.11, its venv module and headers, and g++ (the compiled graphs), made from Debian 12
#      with debootstrap (as root); its tag is a key of the suite, the packages and the recipe, so a later run reuses it;
#   2. the CPU image from the Dockerfile on that base, in Docker's format (podman's own drops the HEALTHCHECK):
#      cold (--no-cache), then again from the layer cache; pip gets the host's CA bundle and wheel directory;
#   3. runs it as deploy/k8s runs it (read-only root, every capability dropped, the compile cache on a volume, /tmp
#      a tmpfs), and checks: /ready through the published port, the image's healthcheck and the compose file's, the
#      README's first translation answered as the README shows it, UID 10001, the graphs compiled into the volume
#      and run with the GIL released (/info's compile.gil), SIGTERM ending in exit 0, and a second start on that
#      volume loading the graphs instead of building them;
#   4. prints the image's size and the times.
#   scripts/image-check.sh                 the CPU image: build, run, check
#   scripts/image-check.sh --gpu-build     the GPU image (PyPI's CUDA build of torch) on the same base: build only
#   options: --base IMAGE (a base of your own: Python >= 3.11 with venv and headers, bash, g++), --dockerfile FILE,
#            --tag NAME, --cached (no cold build: the layer cache only)
# Environment: CONTAINER_ENGINE (podman or docker; default podman where installed), IMAGE_CHECK_CACHE (podman's store
# and config, default ~/.cache/nmt-serve-image), DEBIAN_MIRROR, PIP_CERT (a CA bundle for pip; default the system's),
# PIP_FIND_LINKS (a directory or URL of wheels, e.g. torch's CPU build), PIP_INDEX_URL (a PyPI mirror).
# Exit status 77: nothing to run it with here (no podman, or no root for debootstrap), the reason on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=cpu dockerfile=Dockerfile base="" tag="" cold=1
usage() { echo "usage: $0 [--gpu-build] [--base IMAGE] [--dockerfile FILE] [--tag NAME] [--cached]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --gpu-build) mode=gpu ;;
    --base) base=${2:-}; [ -n "$base" ] || usage; shift ;;
    --dockerfile) dockerfile=${2:-}; [ -f "$dockerfile" ] || usage; shift ;;
    --tag) tag=${2:-}; [ -n "$tag" ] || usage; shift ;;
    --cached) cold=0 ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) usage ;;
  esac
  shift
done
tag=${tag:-nmt-serve:$mode}

skip() { echo "image-check: skipped: $*" >&2; exit 77; }
say() { echo "image-check: $*"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

engine=${CONTAINER_ENGINE:-}
if [ -z "$engine" ]; then
  if command -v podman >/dev/null; then
    engine=podman
  elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    engine=docker
  else
    skip "no podman, and no Docker daemon answering (Debian: apt-get install podman runc debootstrap)"
  fi
fi
command -v "$engine" >/dev/null || skip "CONTAINER_ENGINE=$engine is not installed"
for tool in curl python3; do command -v "$tool" >/dev/null || skip "needs $tool on the host"; done

# podman reads only the configuration made here: runc, cgroupfs (no systemd needed), no default ulimits above the
# host's, and a store of its own under the cache directory, so nothing machine-wide is read or changed.
cache=${IMAGE_CHECK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nmt-serve-image}
if [ "$engine" = podman ]; then
  state=${XDG_RUNTIME_DIR:-/run}/nmt-serve-image
  [ "$(id -u)" = 0 ] || [ -n "${XDG_RUNTIME_DIR:-}" ] || state=/tmp/nmt-serve-image-$(id -u)
  mkdir -p "$cache" "$state"
  cat >"$cache/containers.conf" <<EOF
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "$state/tmp"
EOF
  cat >"$cache/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$cache/storage"
runroot = "$state/run"
EOF
  export CONTAINERS_CONF=$cache/containers.conf CONTAINERS_STORAGE_CONF=$cache/storage.conf
fi
exists() { "$engine" image inspect "$1" >/dev/null 2>&1; }
server=""  # a wheel directory served to a Docker build
log=$(mktemp "${TMPDIR:-/tmp}/nmt-image-check.XXXXXX")
name=nmt-image-check-$$
volume=$name-cache
cleanup() {
  local status=$?
  if [ "$status" -ne 0 ] && [ "$status" -ne 77 ]; then
    echo "--- image check failed (exit $status); the last of $log ---" >&2
    tail -n 40 "$log" >&2
  elif [ "$status" -eq 0 ]; then
    rm -f "$log"
  fi
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi
  "$engine" rm --force "$name" >/dev/null 2>&1 || true
  "$engine" volume rm --force "$volume" >/dev/null 2>&1 || true
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- 1. the base image -------------------------------------------------------------------------------------------
suite=bookworm  # Debian 12: Python 3.11
packages=python3,python3-venv,python3-dev,g++  # python3-dev: Python.h, for model/compile/nogil.py
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
make_base() {  # $1: the tag. A minimal Debian with the packages; no apt lists, caches or manuals
  local root
  root=$(mktemp -d "${TMPDIR:-/tmp}/nmt-serve-rootfs.XXXXXX")
  debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" >>"$log" 2>&1 ||
    { rm -rf "$root"; echo "debootstrap failed" >&2; return 1; }
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/{doc,man,info}
  tar -C "$root" -c . | "$engine" import --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --change "ENV LANG=C.UTF-8" --change 'CMD ["/bin/bash"]' - "$1" >>"$log" 2>&1
  rm -rf "$root"
}
base_time="given"
if [ -z "$base" ]; then
  key=$({ echo "$suite $packages"; declare -f make_base; } | sha256sum | cut -c1-12)
  base=localhost/nmt-serve-base:$suite-$key
  if exists "$base"; then
    base_time="cached"
  else
    [ "$(id -u)" = 0 ] || skip "the base image $base is not made yet, and debootstrap needs root (or pass --base IMAGE)"
    command -v debootstrap >/dev/null || skip "no debootstrap to make the base image with (apt-get install debootstrap)"
    say "making the base image $base (debootstrap $suite: $packages)"
    t=$(now)
    make_base "$base"
    base_time="$(since "$t") s"
  fi
fi

# ---- 2. the image ------------------------------------------------------------------------------------------------
build=("$engine" build --file "$dockerfile" --tag "$tag" --build-arg "BASE_IMAGE=$base")
if [ "$engine" = podman ]; then build+=(--format docker); fi
ca=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
if [ -s "$ca" ]; then build+=(--secret "id=pip-ca,src=$ca"); fi
if [ -n "${PIP_INDEX_URL:-}" ]; then build+=(--build-arg "PIP_INDEX_URL=$PIP_INDEX_URL"); fi
wheels=${PIP_FIND_LINKS:-}
if [ "$mode" = gpu ]; then
  wheels=""  # torch from PyPI: its CUDA build
elif [ -d "$wheels" ] && [ "$engine" = podman ]; then
  build+=(--volume "$(cd "$wheels" && pwd):/wheels:ro" --build-arg PIP_FIND_LINKS=/wheels)
elif [ -d "$wheels" ]; then  # Docker mounts nothing into a build: the directory is served to it over HTTP
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  python3 -m http.server --bind 127.0.0.1 --directory "$wheels" "$port" >/dev/null 2>&1 &
  server=$!
  build+=(--network host --build-arg "PIP_FIND_LINKS=http://127.0.0.1:$port/" --build-arg PIP_TRUSTED_HOST=127.0.0.1)
elif [ -n "$wheels" ]; then
  build+=(--build-arg "PIP_FIND_LINKS=$wheels")
fi
cpu_torch=0  # whether the build is handed torch's CPU build
if [ "$mode" = cpu ] && curl -fsI --max-time 10 https://download.pytorch.org/whl/cpu/ >/dev/null 2>&1; then
  build+=(--build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu)
  cpu_torch=1
elif [ "$mode" = cpu ] && compgen -G "$wheels/torch-*+cpu-*.whl" >/dev/null; then
  cpu_torch=1
elif [ "$mode" = cpu ]; then
  say "warning: no torch CPU wheel (its index or PIP_FIND_LINKS): torch will be PyPI's CUDA build, ~5.5 GB"
fi

built() {  # $1: what; the rest: extra build options. Prints the seconds
  local t
  t=$(now)
  nice "${build[@]}" "${@:2}" . >>"$log" 2>&1 || { echo "the $1 build failed" >&2; return 1; }
  since "$t"
}
cold_time="skipped (--cached)"
if [ "$cold" = 1 ]; then
  say "building $tag from $dockerfile on $base, cold (log: $log)"
  cold_time="$(built cold --no-cache) s"
fi
say "building $tag again, from the layer cache"
cached_time="$(built cached) s"
if [ "$engine" = podman ]; then  # podman's store is this script's own: untagged layers and earlier bases go
  "$engine" image prune --force >/dev/null
  for old in $("$engine" images --format '{{.Repository}}:{{.Tag}}' localhost/nmt-serve-base); do
    if [[ "$base" == localhost/nmt-serve-base:* ]] && [ "$old" != "$base" ]; then
      "$engine" rmi "$old" >/dev/null 2>&1 || true  # unless an image of an earlier run still stands on it
    fi
  done
fi
size=$("$engine" image inspect --format '{{.Size}}' "$tag" | awk '{ printf "%.2f GB", $1 / 1e9 }')
torch=$("$engine" run --rm --entrypoint python "$tag" -c 'import torch; print(torch.__version__)' 2>>"$log")
say "$tag: $size, torch $torch"
if [ "$cpu_torch" = 1 ] && [[ "$torch" != *+cpu* ]]; then
  echo "the build was handed torch's CPU build, yet the image has torch $torch" >&2
  exit 1
fi
if [ "$mode" = gpu ]; then
  [[ "$torch" == *+cu* ]] || { echo "the GPU image has torch $torch, not a CUDA build" >&2; exit 1; }
  printf 'image-check: GPU image built (not run)\n  image         %s  %s (torch %s)\n  base          %s (%s)\n' \
    "$tag" "$size" "$torch" "$base" "$base_time"
  printf '  cold build    %s\n  cached build  %s\n' "$cold_time" "$cached_time"
  exit 0
fi
healthcheck=$("$engine" image inspect --format '{{json .Config.Healthcheck}}' "$tag")
if [[ "$healthcheck" != *'"Test":'* ]]; then
  echo "the image has no HEALTHCHECK (podman: build with --format docker)" >&2
  exit 1
fi

# ---- 3. run it ---------------------------------------------------------------------------------------------------
fail() { echo "$*" >&2; "$engine" logs --tail 40 "$name" >&2 2>&1 || true; exit 1; }
info() { curl -fsS "$url/info" | python3 -c "import json, sys; c = json.load(sys.stdin)['compile']; print($1)"; }
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url=http://127.0.0.1:$port
# As deploy/k8s/base/deployment.yaml runs it: read-only root, no capabilities, no privilege escalation; the compile
# cache a volume (a named volume in docker-compose.yml, an emptyDir there), /tmp an emptyDir, where AOTInductor
# unpacks the packages it loads (so not noexec). The smallest compile that is still the real one: a cache of one
# row (three graphs: the greedy step, the prefill, the log-prob step) without max-autotune's kernel search.
tmp=/tmp:rw,exec,nosuid,nodev,mode=1777
run=("$engine" run --detach --name "$name" --read-only --tmpfs "$tmp"
  --volume "$volume:/var/cache/nmt-serve" --publish "127.0.0.1:$port:8000" --cap-drop ALL
  --security-opt no-new-privileges --env NMT_MAX_BATCH_SIZE=1 --env NMT_COMPILE_MODE=default
  --env TORCHINDUCTOR_COMPILE_THREADS=2)
if [ "$engine" = podman ]; then run+=(--read-only-tmpfs=false); fi
"$engine" volume create "$volume" >/dev/null

start() {  # starts the container; prints the seconds to /ready through the published port
  local t
  "$engine" rm --force "$name" >/dev/null 2>&1 || true
  t=$(now)
  "${run[@]}" "$tag" >>"$log" 2>&1 || fail "the container did not start"
  until curl -fsS --max-time 5 "$url/ready" >/dev/null 2>&1; do
    [ "$("$engine" inspect --format '{{.State.Running}}' "$name")" = true ] || fail "the container exited"
    awk -v t="$(since "$t")" 'BEGIN { exit !(t > 300) }' && fail "no 200 from /ready within 300 s"
    sleep 0.5
  done
  since "$t"
}
stop() {  # SIGTERM, then the exit status must be 0; prints the seconds it took
  local t code
  t=$(now)
  "$engine" stop --time 40 "$name" >>"$log" 2>&1
  code=$("$engine" inspect --format '{{.State.ExitCode}}' "$name")
  [ "$code" = 0 ] || fail "after SIGTERM the container exited with $code, not 0"
  since "$t"
}
compiled() {  # waits until the compiled graphs serve; prints the seconds
  local t state
  t=$(now)
  while state=$(info 'c["state"]') && [ "$state" != compiled ]; do
    [ "$state" != failed ] || fail "compiling failed: the server serves the eager model"
    awk -v t="$(since "$t")" 'BEGIN { exit !(t > 900) }' && fail "the graphs were not compiled within 900 s"
    sleep 1
  done
  since "$t"
}
gil() {  # the graphs run with the GIL released: the C++ extension (model/compile/nogil.py) built in the image's run
  local gil
  gil=$(info 'c["gil"]')
  [ "$gil" = released ] ||
    fail "the compiled graphs run with the GIL $gil, not released (g++ or Python's headers missing?)"
}
# The README's first translation: the request of the block .ci/run runs, and the JSON shown below it.
marker='<!-- .ci/run runs the next block'
block=$(awk -v m="$marker" 'index($0, m) == 1 {f = 1; next} f == 1 && /^```bash$/ {f = 2; next}
  f == 2 && /^```$/ {exit} f == 2 {print}' README.md)
expected=$(awk -v m="$marker" 'index($0, m) == 1 {f = 1; next} f == 1 && /^```bash$/ {f = 2; next}
  f == 2 && /^```$/ {f = 3; next} f == 3 && /^```json$/ {f = 4; next} f == 4 && /^```$/ {exit} f == 4 {print}' README.md)
body=$(sed -n "s|.*localhost:8000/translate .* -d '\(.*\)'.*|\1|p" <<<"$block")
[ -n "$body" ] && [ -n "$expected" ] || { echo "README.md: no first translation after the marker" >&2; exit 1; }
translate() {
  local answer
  answer=$(curl -fsS "$url/translate" -H 'Content-Type: application/json' -d "$body") || fail "POST /translate failed"
  [ "$answer" = "$expected" ] || fail "POST /translate $body answered $answer; the README shows $expected"
}
# The compose file's healthcheck, as written there (the x-healthcheck anchor's exec-form test).
mapfile -t compose_check < <(python3 -c '
import json, re
m = re.search(r"^x-healthcheck:.*?^  test: (\[[^\n]*\])$", open("docker-compose.yml").read(), re.M | re.S)
print("\n".join(json.loads(m.group(1))[1:]))')
[ "${#compose_check[@]}" -gt 1 ] || { echo "docker-compose.yml: no x-healthcheck test" >&2; exit 1; }

say "starting it on 127.0.0.1:$port: read-only root, the compile cache on the volume $volume, /tmp a tmpfs"
ready_time=$(start)
say "/ready after $ready_time s"
if [ "$engine" = podman ]; then
  "$engine" healthcheck run "$name" >>"$log" 2>&1 || fail "the image's healthcheck (podman healthcheck run) failed"
else
  mapfile -t image_check < <(python3 -c '
import json, sys
print("\n".join(json.loads(sys.argv[1])["Test"][1:]))' "$healthcheck")
  "$engine" exec "$name" "${image_check[@]}" >>"$log" 2>&1 || fail "the image's healthcheck failed"
fi
"$engine" exec "$name" "${compose_check[@]}" >>"$log" 2>&1 || fail "the compose file's healthcheck failed"
say "the image's healthcheck and the compose file's pass"
translate
say "POST /translate answers as the README shows: $expected"
uid=$("$engine" exec "$name" cat /proc/1/status | awk '/^Uid:/ { print $2 $3 $4 $5 }')
[ "$uid" = 10001100011000110001 ] || fail "the server runs as UID $uid, not 10001"
if "$engine" exec "$name" touch /app/written 2>>"$log"; then fail "the root filesystem is writable"; fi
say "the server runs as UID 10001 on a read-only root"
compiled >/dev/null
read -r graphs compile_time < <(info 'c["built"], c["seconds"]')
[ "$graphs" -gt 0 ] || fail "no graph was built into the empty compile cache"
gil
say "compiled $graphs graphs into the volume in $compile_time s (/info), running with the GIL released"
first_stop=$(stop)
say "SIGTERM: exit 0 after $first_stop s"

t=$(now)
restart_ready=$(start)
compiled >/dev/null
restart_time=$(since "$t")
[ "$(info 'c["built"], c["loaded"]')" = "0 $graphs" ] || fail "the second start built graphs: $(info 'c')"
gil
translate
second_stop=$(stop)
say "second start: the $graphs graphs loaded from the volume, serving $restart_time s after the start; SIGTERM: exit 0"

cat <<EOF
image-check: passed
  image          $tag  $size (torch $torch)
  base           $base ($base_time)
  cold build     $cold_time
  cached build   $cached_time
  first start    /ready after $ready_time s; $graphs graphs compiled in $compile_time s (a one-row cache, no autotuning), run without the GIL
  second start   /ready after $restart_ready s; the compiled graphs serving after $restart_time s (loaded, none built)
  SIGTERM        exit 0 after $first_stop s and $second_stop s
EOF
