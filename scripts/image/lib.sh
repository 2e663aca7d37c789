# shellcheck shell=bash disable=SC2034  # CACHE_DIR, ULIMITS: for the scripts that source this one
# Shared by scripts/image/*.sh: podman as these scripts run it, and where they keep downloads.
#
# - runc, not crun, when runc is installed: Debian's podman 4.3 with crun fails on kernels that
#   mix cgroup v1 and v2; runc works on both (override with PODMAN_RUNTIME).
# - ulimits within the host's: rootful podman asks for nofile 1048576 and nproc 4194304 by
#   default, which the runtime cannot grant where the host's hard limits are lower.
# - builds and containers on the host's network: no bridge or NAT is needed, so it works where
#   netavark cannot set up firewall rules, and a build reaches the npm registry the host reaches.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE_DIR=${INS_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ins-image}
IMAGE=${IMAGE:-localhost/inference-network-service:latest}

log() { printf '%s %s\n' "[$(date +%H:%M:%S)]" "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v podman >/dev/null || die "podman is not installed (Debian: apt-get install podman runc)"

PODMAN_GLOBAL=()
if [ -n "${PODMAN_RUNTIME:-}" ]; then PODMAN_GLOBAL+=(--runtime "$PODMAN_RUNTIME")
elif command -v runc >/dev/null; then PODMAN_GLOBAL+=(--runtime "$(command -v runc)"); fi

hard_nofile=$(ulimit -Hn)
[ "$hard_nofile" = unlimited ] && hard_nofile=1048576
hard_nproc=$(ulimit -Hu)
[ "$hard_nproc" = unlimited ] && hard_nproc=4096
NOFILE=${INS_ULIMIT_NOFILE:-$(( hard_nofile < 1048576 ? hard_nofile : 1048576 ))}
NPROC=${INS_ULIMIT_NPROC:-$(( hard_nproc < 4096 ? hard_nproc : 4096 ))}
ULIMITS=(--ulimit "nofile=$NOFILE:$NOFILE" --ulimit "nproc=$NPROC:$NPROC")

# Without systemd, podman 4.3 logs an error for each container with a HEALTHCHECK (it cannot
# add the timer that would run it periodically): noise here, where check.sh runs the check.
pod() { podman "${PODMAN_GLOBAL[@]}" "$@" 2> >(grep -v 'unable to get systemd connection' >&2); }

# The base image the Dockerfile builds FROM (its first FROM line), fully qualified the way
# podman resolves the short name (registries.conf.d/shortnames.conf: node = docker.io/library/node).
dockerfile_base() {
  local from
  from=$(awk 'toupper($1) == "FROM" { print $2; exit }' "$ROOT/Dockerfile")
  case "$from" in
    */*/*) echo "$from" ;;
    */*) echo "docker.io/$from" ;;
    *) echo "docker.io/library/$from" ;;
  esac
}
