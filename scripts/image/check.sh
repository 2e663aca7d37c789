#!/usr/bin/env bash
# Checks a built image the way operators run it (scripts/image/build.sh builds it):
#   - `worker --help` answers;
#   - embedded mode with a volume: the server comes up healthy (the image's HEALTHCHECK), runs
#     as the non-root `node` user with node itself as PID 1, /data is 0700; a node created with
#     the CLI inside the container reports a result; SIGTERM stops it with exit 0 before the
#     stop timeout; after a restart the points are read back from the volume;
#   - PostgreSQL by URL (CHECK_DATABASE_URL's server; default the local one): the same cycle.
# Usage: scripts/image/check.sh [IMAGE]. Prints one line per check; exits 1 at the first failure.
# shellcheck source=scripts/image/lib.sh
source "$(dirname "$0")/lib.sh"

image=${1:-$IMAGE}
admin_url=${CHECK_DATABASE_URL:-postgresql://postgres@127.0.0.1:5432/postgres}
stop_timeout=10
run_id="ins-check-$$"
containers=()
volume=""
database=""

cleanup() {
  # --volumes: the anonymous /data volume of a container without -v goes with it.
  for c in "${containers[@]}"; do pod rm --force --volumes --time 0 "$c" >/dev/null 2>&1 || true; done
  [ -z "$volume" ] || pod volume rm --force "$volume" >/dev/null 2>&1 || true
  [ -z "$database" ] || psql -q "$admin_url" -c "DROP DATABASE IF EXISTS $database WITH (FORCE)" >/dev/null 2>&1 || true
}
trap cleanup EXIT

passed=0
ok() { passed=$((passed + 1)); printf 'ok %d - %s\n' "$passed" "$*"; }
fail() {
  printf 'not ok - %s\n' "$*"
  for c in "${containers[@]}"; do echo "--- logs of $c (last 30 lines)"; pod logs --tail 30 "$c" 2>&1 || true; done
  exit 1
}

free_port() { node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })'; }

# Polls the image's own HEALTHCHECK until it passes (start-up takes a few seconds). The
# containers run with --health-interval disable: podman schedules periodic checks with systemd
# timers, which a machine without systemd lacks; `podman healthcheck run` runs the same check.
wait_healthy() {
  local c=$1
  for _ in $(seq 1 120); do
    pod healthcheck run "$c" >/dev/null 2>&1 && return 0
    [ "$(pod inspect --format '{{.State.Running}}' "$c")" = true ] || fail "$c exited before it was healthy"
    sleep 0.5
  done
  fail "$c: the HEALTHCHECK did not pass within 60 s"
}

# SIGTERM (podman stop) must end the service with exit 0 before podman's SIGKILL.
stop_cleanly() {
  local c=$1 started elapsed code
  started=$(date +%s%N)
  pod stop --time "$stop_timeout" "$c" >/dev/null
  elapsed=$(( ($(date +%s%N) - started) / 1000000 ))
  code=$(pod inspect --format '{{.State.ExitCode}}' "$c")
  [ "$code" = 0 ] || fail "$c: exit code $code after SIGTERM (137: killed at the ${stop_timeout} s stop timeout)"
  ok "$c: SIGTERM → exit 0 in $elapsed ms"
}

report() { # url key job → points credited
  curl -sf -X POST "$1/worker/update_result" -H 'content-type: application/json' \
    -d '{"job_id": "'"$3"'", "api_key": "'"$2"'", "model_name": "check-model", "result": {"message": "hi"}, "status": "success"}' \
    | node -e 'process.stdout.write(String(JSON.parse(require("fs").readFileSync(0, "utf8")).points))'
}

points_today() { # url key node → points of today
  curl -sf -X POST "$1/daily_points" -H 'content-type: application/json' -H "api_key: $2" -d '{"node_name": "'"$3"'", "last_days": 1}' \
    | node -e 'process.stdout.write(String(JSON.parse(require("fs").readFileSync(0, "utf8")).at(-1).points))'
}

# `ins` as the server's hint names it: on the image's PATH.
ins() { local c=$1; shift; pod exec "$c" ins "$@"; }

pod image exists "$image" || die "no image $image (build it: scripts/image/build.sh)"
log "checking $image"

# --- the Node line the Dockerfile names
want=$(dockerfile_base); want=${want##*:}; want=${want%%-*}
have=$(pod run --rm --network host --no-healthcheck --entrypoint node "${ULIMITS[@]}" "$image" --version)
[[ "$have" == "v$want".* ]] || fail "the image runs Node $have, not the $want line of the Dockerfile"
ok "Node $have"

# --- the worker's entry point
out=$(pod run --rm --network host --no-healthcheck "${ULIMITS[@]}" "$image" worker --help) || fail "worker --help exited non-zero"
grep -q -- '--backend' <<<"$out" || fail "worker --help printed no usage"
ok "worker --help"

# --- embedded database in a volume
volume="$run_id-data"
pod volume create "$volume" >/dev/null
port=$(free_port)
url="http://127.0.0.1:$port"
c="$run_id-embedded"
containers+=("$c")
pod run -d --name "$c" --network host --health-interval disable "${ULIMITS[@]}" -e PORT="$port" -e HOST=127.0.0.1 -v "$volume:/data" "$image" >/dev/null
wait_healthy "$c"
ok "$c: HEALTHCHECK passes"
[ "$(pod exec "$c" id -u)" != 0 ] || fail "$c: commands run as root"
uids=$(pod exec "$c" awk '/^Uid:/ { print $2, $3 }' /proc/1/status)
[ "$uids" = "1000 1000" ] || fail "$c: PID 1 runs as uid $uids, not node (1000)"
ok "$c: runs as node (uid 1000), not root"
cmdline=$(pod exec "$c" cat /proc/1/cmdline | tr '\0' ' ' | sed 's/ $//')
[ "$cmdline" = "node dist/cli/entry.js serve" ] || fail "$c: PID 1 is '$cmdline', not node"
ok "$c: PID 1 is node ($cmdline)"
mode=$(pod exec "$c" stat -c '%a %U' /data)
[ "$mode" = "700 node" ] || fail "$c: /data is '$mode', not '700 node'"
ok "$c: /data is 0700, owned by node"
key=$(ins "$c" node add image-check 2>/dev/null) || fail "$c: ins node add failed"
[[ "$key" == nk_* ]] || fail "$c: ins node add printed no key"
ok "$c: ins node add inside the running container (forwarded to the server)"
[ "$(report "$url" "$key" job-embedded-1)" = 1 ] || fail "$c: the report was not credited"
ok "$c: a report credits 1 point"
stop_cleanly "$c"
pod start "$c" >/dev/null
wait_healthy "$c"
[ "$(points_today "$url" "$key" image-check)" = 1 ] || fail "$c: the point did not survive the restart"
ok "$c: after a restart the volume still holds the point"
stop_cleanly "$c"

# --- PostgreSQL by URL
if ! command -v psql >/dev/null || ! psql -q "$admin_url" -c 'SELECT 1' >/dev/null 2>&1; then
  fail "PostgreSQL at $admin_url is not reachable (set CHECK_DATABASE_URL)"
fi
database="ins_image_check_$$"
psql -q "$admin_url" -c "CREATE DATABASE $database" >/dev/null
db_url=$(node -e 'const u = new URL(process.argv[1]); u.pathname = "/" + process.argv[2]; console.log(u.toString())' "$admin_url" "$database")
port=$(free_port)
url="http://127.0.0.1:$port"
c="$run_id-postgres"
containers+=("$c")
pod run -d --name "$c" --network host --health-interval disable "${ULIMITS[@]}" -e PORT="$port" -e HOST=127.0.0.1 -e DATABASE_URL="$db_url" "$image" >/dev/null
wait_healthy "$c"
curl -sf "$url/readyz" >/dev/null || fail "$c: /readyz is not 200"
ok "$c: on PostgreSQL by URL, healthy and ready"
key=$(ins "$c" node add image-check-pg 2>/dev/null) || fail "$c: ins node add failed"
[ "$(report "$url" "$key" job-pg-1)" = 1 ] || fail "$c: the report was not credited"
[ "$(points_today "$url" "$key" image-check-pg)" = 1 ] || fail "$c: the point was not read back"
ok "$c: ins node add, a report, its point read back"
stop_cleanly "$c"

log "$passed checks passed"
