#!/usr/bin/env bash
# The container deployment, actually run: builds the image, brings docker/compose.yaml up
# (Docker where its engine answers, podman otherwise), then checks what a deployment must do:
#   1. /readyz answers 200 (database and Redis reachable, migrations applied);
#   2. the CLI works inside the api container (`switchboard orgs create`);
#   3. an uploaded document is indexed by the worker (it reads the file the api stored: one
#      shared volume) and a search finds it;
#   4. a contact can be created;
#   5. SIGTERM stops every container within its grace period (none is killed).
# The stack is removed at the end (volumes included) unless SMOKE_KEEP=1.
#
# Environment:
#   SWITCHBOARD_PORT   host port of the api (default 18000)
#   SMOKE_LOCAL_BASE=1 build the base images locally (docker/local-base) instead of pulling
#                      python:3.11-slim, postgres:16 and redis:7: needs root and debootstrap
#   SMOKE_TIMEOUT      seconds to wait for readiness and indexing (default 240)
set -euo pipefail
cd "$(dirname "$0")/.."

export SWITCHBOARD_PORT="${SWITCHBOARD_PORT:-18000}"
TIMEOUT="${SMOKE_TIMEOUT:-240}"
PROJECT=switchboard-smoke
BASE="http://127.0.0.1:${SWITCHBOARD_PORT}"
started=$(date +%s)

say() { printf 'smoke [%4ds] %s\n' "$(($(date +%s) - started))" "$*"; }
fail() { say "FAILED: $*"; exit 1; }

# ---- the engine ---------------------------------------------------------------------------
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  ENGINE=docker
  COMPOSE=(docker compose -p "$PROJECT" -f docker/compose.yaml)
  BUILD_FORMAT=()
elif command -v podman >/dev/null 2>&1; then
  ENGINE=podman
  command -v podman-compose >/dev/null 2>&1 || fail "podman-compose is missing (apt-get install podman-compose)"
  COMPOSE=(podman-compose -p "$PROJECT" -f docker/compose.yaml)
  # Docker's image format keeps the HEALTHCHECK instruction (OCI images drop it).
  BUILD_FORMAT=(--format docker)
  # Inside an unprivileged container (CI, a development sandbox) podman cannot raise resource
  # limits, and crun refuses hybrid cgroups: runc, with limits below the current ones.
  conf=$(mktemp)
  cat > "$conf" <<'CONF'
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]
[engine]
runtime = "runc"
CONF
  export CONTAINERS_CONF="$conf"
else
  fail "neither a Docker engine nor podman is available"
fi
say "engine: $ENGINE"

cleanup() {
  status=$?
  if [ "${SMOKE_KEEP:-0}" != 1 ]; then
    "${COMPOSE[@]}" down -v >/dev/null 2>&1 || true
  fi
  exit "$status"
}
trap cleanup EXIT

docker/secrets.sh >/dev/null

# ---- base images ---------------------------------------------------------------------------
if [ "${SMOKE_LOCAL_BASE:-0}" = 1 ]; then
  base=localhost/switchboard-base/debian:bookworm
  if ! $ENGINE image exists "$base" 2>/dev/null && ! $ENGINE image inspect "$base" >/dev/null 2>&1; then
    command -v debootstrap >/dev/null 2>&1 || fail "SMOKE_LOCAL_BASE=1 needs debootstrap"
    rootfs=$(mktemp -d)
    say "debootstrap bookworm (minbase) into $rootfs"
    debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >/dev/null
    tar -C "$rootfs" -c . | $ENGINE import - "$base" >/dev/null
    rm -rf "$rootfs"
  fi
  context=$(mktemp -d)
  cp docker/local-base/* "$context/"
  cp /etc/ssl/certs/ca-certificates.crt "$context/host-ca-bundle.crt"
  for name in python postgres redis; do
    say "building the local $name base image"
    $ENGINE build -q "${BUILD_FORMAT[@]}" --build-arg "BASE=$base" \
      -t "localhost/switchboard-base/$name:local" -f "$context/$name.Containerfile" "$context" >/dev/null
  done
  rm -rf "$context"
  export PYTHON_IMAGE=localhost/switchboard-base/python:local
  export POSTGRES_IMAGE=localhost/switchboard-base/postgres:local
  export REDIS_IMAGE=localhost/switchboard-base/redis:local
fi

# ---- build and start -----------------------------------------------------------------------
build_started=$(date +%s)
$ENGINE build -q "${BUILD_FORMAT[@]}" --build-arg "PYTHON_IMAGE=${PYTHON_IMAGE:-python:3.11-slim}" \
  -t switchboard:local -f docker/Dockerfile . >/dev/null
say "image built in $(($(date +%s) - build_started)) s"
"${COMPOSE[@]}" down -v >/dev/null 2>&1 || true
"${COMPOSE[@]}" up -d >/dev/null 2>&1 || fail "compose up failed"
say "stack started"

wait_for() {  # wait_for DESCRIPTION COMMAND...
  local what=$1
  shift
  local deadline=$(($(date +%s) + TIMEOUT))
  until "$@"; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "$what not reached within ${TIMEOUT} s"
    sleep 2
  done
}
ready() { [ "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/readyz")" = 200 ]; }
wait_for "/readyz 200" ready
say "ready: $(curl -s "$BASE/readyz")"

json() { python3 -c "import json, sys; print(json.load(sys.stdin)$1)"; }

# ---- the CLI in the api container ----------------------------------------------------------
# The JSON line (podman-compose adds its own "exit code" line).
created=$("${COMPOSE[@]}" exec -T api switchboard orgs create --name Smoke 2>/dev/null | grep '^{' | tail -n 1)
KEY=$(printf '%s' "$created" | json '["api_key"]') || fail "orgs create printed: $created"
AUTH="Authorization: Bearer $KEY"
say "orgs create: organization $(printf '%s' "$created" | json '["organization_id"]')"

# ---- an upload the worker indexes ----------------------------------------------------------
phrase="smoke-$(date +%s)-$$ lighthouse keepers count the tides"
document=$(mktemp --suffix=.txt)
printf 'Operations handbook.\nOur %s every evening at nine.\n' "$phrase" > "$document"
uploaded=$(curl -s -X POST "$BASE/api/v1/knowledge-base/upload" -H "$AUTH" -F "file=@$document")
rm -f "$document"
DOC=$(printf '%s' "$uploaded" | json '["id"]') || fail "upload answered: $uploaded"
say "uploaded document $DOC"
indexed() {
  local status
  status=$(curl -s "$BASE/api/v1/knowledge-base/$DOC" -H "$AUTH" | json '["index_status"]')
  [ "$status" = failed ] && fail "indexing failed: $(curl -s "$BASE/api/v1/knowledge-base/$DOC" -H "$AUTH")"
  [ "$status" = ready ]
}
wait_for "index_status ready" indexed
found=$(curl -s -X POST "$BASE/api/v1/knowledge-base/search" -H "$AUTH" \
  -H 'Content-Type: application/json' -d "{\"query\": \"lighthouse keepers tides\", \"top_k\": 3}")
printf '%s' "$found" | json '["results"][0]["document_id"]' | grep -qx "$DOC" \
  || fail "search did not find the document: $found"
say "indexed by the worker and found by search"

# ---- a contact -----------------------------------------------------------------------------
contact=$(curl -s -X POST "$BASE/api/v1/contacts" -H "$AUTH" -H 'Content-Type: application/json' \
  -d '{"phone_number": "+14155550100", "name": "Ada Lovelace"}')
printf '%s' "$contact" | json '["id"]' >/dev/null || fail "contact create answered: $contact"
say "contact created"

# ---- SIGTERM, within the grace periods -----------------------------------------------------
if [ "$ENGINE" = docker ]; then
  containers=$("${COMPOSE[@]}" ps -a -q)
else
  containers=$(podman ps -a -q --filter "label=io.podman.compose.project=$PROJECT")
fi
stop_started=$(date +%s.%N)
"${COMPOSE[@]}" stop >/dev/null 2>&1
stopped_in=$(python3 -c "print(round($(date +%s.%N) - $stop_started, 1))")
killed=""
for container in $containers; do
  name=$($ENGINE inspect -f '{{.Name}}' "$container")
  code=$($ENGINE inspect -f '{{.State.ExitCode}}' "$container")
  # 137: SIGKILL after the grace period ran out.
  [ "$code" = 137 ] && killed="$killed $name"
  say "  $name exited $code"
done
[ -z "$killed" ] || fail "killed after the grace period:$killed"
say "stopped with SIGTERM in ${stopped_in} s, none killed"
say "PASSED"
