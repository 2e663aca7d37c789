#!/usr/bin/env bash
# Installs the real coding-agent clients the client tests drive (test/clients/): Claude Code and
# the Codex CLI, pinned, into .clients/ (git-ignored). Each ships a native binary of 250-320 MB in
# a platform package of the npm registry, which is why they are not dev dependencies of the
# project: `npm ci` stays small for everyone who does not run these tests.
set -euo pipefail
cd "$(dirname "$0")/../.."
CLAUDE_CODE_VERSION=2.1.197
CODEX_VERSION=0.171.0
dir=.clients
if [ -x "$dir/node_modules/.bin/claude" ] && [ -x "$dir/node_modules/.bin/codex" ] \
  && grep -q "\"version\": \"$CLAUDE_CODE_VERSION\"" "$dir/node_modules/@anthropic-ai/claude-code/package.json" 2>/dev/null \
  && grep -q "\"version\": \"$CODEX_VERSION\"" "$dir/node_modules/@openai/codex/package.json" 2>/dev/null; then
  exit 0
fi
mkdir -p "$dir"
[ -f "$dir/package.json" ] || echo '{"name": "ins-test-clients", "private": true}' > "$dir/package.json"
# Claude Code's install script links its native binary in place of a placeholder: it must run.
npm install --prefix "$dir" --no-audit --no-fund --foreground-scripts=false \
  "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" "@openai/codex@$CODEX_VERSION" >/dev/null
"$dir/node_modules/.bin/claude" --version
"$dir/node_modules/.bin/codex" --version
