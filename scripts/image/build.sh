#!/usr/bin/env bash
# Builds the Dockerfile as it stands, with podman: `scripts/image/build.sh [--assemble-base]`.
# The base image (the Dockerfile's FROM) comes from local storage when it is there and fresh,
# else from its registry, else — Docker Hub unreachable, or an air-gapped machine — it is
# assembled by scripts/image/base.sh. An assembled base is kept in podman's storage and reused
# for INS_BASE_MAX_AGE_DAYS (default 7) so that later builds start warm; after that, or when
# base.sh changes, it is assembled again (Debian's and Node's fixes come in that way).
#
# IMAGE names the result (default localhost/inference-network-service:latest).
# shellcheck source=scripts/image/lib.sh
source "$(dirname "$0")/lib.sh"

assemble=false
for arg in "$@"; do
  case "$arg" in
    --assemble-base) assemble=true ;;
    -h|--help) sed -n '2,9p' "$0" | cut -c3-; exit 0 ;;
    *) die "unknown argument $arg (see --help)" ;;
  esac
done

base=$(dockerfile_base)
max_age_days=${INS_BASE_MAX_AGE_DAYS:-7}
script_hash=$(sha256sum "$ROOT/scripts/image/base.sh" | cut -c1-16)

base_is_usable() {
  pod image exists "$base" || return 1
  local assembled script
  assembled=$(pod image inspect --format '{{index .Labels "ins.base.assembled"}}' "$base")
  [ -n "$assembled" ] && [ "$assembled" != '<no value>' ] || return 0   # pulled from its registry
  script=$(pod image inspect --format '{{index .Labels "ins.base.script"}}' "$base")
  [ "$script" = "$script_hash" ] || { log "the cached $base was assembled by another base.sh"; return 1; }
  local age=$(( ($(date +%s) - $(date -d "$assembled" +%s)) / 86400 ))
  [ "$age" -lt "$max_age_days" ] || { log "the cached $base is $age days old"; return 1; }
  log "base $base: assembled $assembled (Node $(pod image inspect --format '{{index .Labels "ins.base.node"}}' "$base")), cached"
}

started=$(date +%s)
if $assemble; then
  "$ROOT/scripts/image/base.sh" "$base"
elif ! base_is_usable; then
  if pod pull --quiet "$base" >/dev/null 2>&1; then
    log "base $base: pulled"
  else
    log "base $base: cannot be pulled; assembling it"
    "$ROOT/scripts/image/base.sh" "$base"
  fi
fi
base_done=$(date +%s)

# --format docker: the OCI format has no HEALTHCHECK. --pull=never: the base is local by now.
pod build --quiet --format docker --pull=never --layers --network host "${ULIMITS[@]}" \
  --tag "$IMAGE" --file "$ROOT/Dockerfile" "$ROOT" >/dev/null
done_at=$(date +%s)
# Each build leaves the previous image and build stages untagged; those of the last week stay
# as the layer cache (npm ci is rerun only when package-lock.json changes), older ones go.
pod image prune --force --filter until=168h >/dev/null
size=$(pod image inspect --format '{{.Size}}' "$IMAGE" | awk '{ printf "%.0f MB", $1 / 1e6 }')
log "built $IMAGE ($size): base $(( base_done - started )) s, build $(( done_at - base_done )) s"
