#!/usr/bin/env bash
# Smoke test of the Docker deployment, for a machine with Docker and Compose v2: build the image, start it
# with docker-compose.yml, wait until the container's healthcheck (GET /ready) passes, translate a sentence
# through the published port, and tear everything down again (also on failure or Ctrl-C).
#   scripts/docker-smoke.sh          GPU image, service `nmt` (needs an NVIDIA GPU and the NVIDIA Container Toolkit)
#   scripts/docker-smoke.sh --cpu    CPU image, service `nmt-cpu`
#   scripts/docker-smoke.sh --lb     GPU image, 2 replicas of `nmt-replica` behind the nginx `lb`
# Environment: PUBLISH_PORT (host port, default 8000), SMOKE_TIMEOUT (seconds to become healthy, default 600),
# NMT_API_KEY (sent as a bearer token when set; the compose file passes it to the service too).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:---gpu}
case "$mode" in
  --gpu) services=(nmt); device=cuda ;;
  --cpu) services=(nmt-cpu); device=cpu ;;
  --lb) services=(lb); device=cuda ;;
  -h | --help) sed -n '2,9p' "$0"; exit 0 ;;
  *) echo "usage: $0 [--gpu | --cpu | --lb]" >&2; exit 2 ;;
esac

export PUBLISH_PORT=${PUBLISH_PORT:-8000}
timeout=${SMOKE_TIMEOUT:-600}
base="http://127.0.0.1:$PUBLISH_PORT"
# Its own project name, so the smoke test never touches a running `nmt-serve` deployment's containers.
compose=(docker compose --project-name "nmt-smoke-$$" --file docker-compose.yml --profile cpu --profile lb)
auth=()
if [ -n "${NMT_API_KEY:-}" ]; then auth=(-H "Authorization: Bearer $NMT_API_KEY"); fi

command -v docker >/dev/null || { echo "docker is not installed" >&2; exit 1; }
docker compose version >/dev/null || { echo "the Compose v2 plugin (docker compose) is not installed" >&2; exit 1; }

cleanup() {
  local status=$?
  if [ "$status" -ne 0 ]; then
    echo "--- smoke test failed (exit $status); last container logs ---" >&2
    "${compose[@]}" logs --no-color --tail 80 >&2 || true
  fi
  echo "tearing down"
  "${compose[@]}" down --volumes --remove-orphans >/dev/null 2>&1 || true
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "building and starting ${services[*]} ($mode); waiting up to ${timeout}s for the healthcheck"
scale=()
if [ "$mode" = --lb ]; then scale=(--scale nmt-replica=2); fi
"${compose[@]}" up --detach --build --wait --wait-timeout "$timeout" "${scale[@]}" "${services[@]}"

echo "GET /ready"
curl -fsS "$base/ready"
echo
info=$(curl -fsS "${auth[@]}" "$base/info")
echo "GET /info: device and dtype: $(grep -oE '"(device|dtype)": ?"[^"]*"' <<<"$info" | tr '\n' ' ')"
grep -qE "\"device\": ?\"$device" <<<"$info" || { echo "expected the model on $device" >&2; exit 1; }

sentence="A man in a blue shirt is riding a bicycle down the street."
for _ in 1 2 3; do  # several requests, so that with --lb more than one replica answers
  out=$(curl -fsS "${auth[@]}" -X POST "$base/translate" -H "Content-Type: application/json" \
    -d "{\"text\": \"$sentence\"}")
  grep -qE '"text": ?"[^"]+"' <<<"$out" || { echo "no translation in: $out" >&2; exit 1; }
done
echo "POST /translate: $sentence"
echo "  -> $out"
echo "smoke test passed"
