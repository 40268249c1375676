#!/usr/bin/env bash
# One entry point for a fresh clone: installs whatever is missing, then runs a root pnpm script.
#   bash scripts/dev.sh test     the whole test suite against real Postgres + OpenFGA
#   bash scripts/dev.sh demo     the six services and the narrated scenario
#   bash scripts/dev.sh stack    Postgres + OpenFGA in the foreground, Ctrl-C stops them
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
exec pnpm "$@"
