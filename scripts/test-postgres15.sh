#!/usr/bin/env bash
# The second column of the Postgres matrix: the suite against Debian's PostgreSQL 15 (the default
# run uses embedded PostgreSQL 18). Starts a throwaway cluster on a free loopback port as
# the `postgres` system user (initdb refuses root), runs the tests with DATABASE_URL pointing at it,
# and removes the cluster. Needs the postgresql-15 package (apt-get install postgresql-15).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"

PG_BIN="${PG15_BIN:-/usr/lib/postgresql/15/bin}"
[ -x "$PG_BIN/initdb" ] || { echo "PostgreSQL 15 not found in $PG_BIN (apt-get install postgresql-15)" >&2; exit 1; }
id postgres >/dev/null 2>&1 || useradd --system --user-group postgres

dir="$(mktemp -d /tmp/outbox-pg15-XXXXXX)"
chmod 755 "$dir"
chown postgres "$dir"
port="$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')"
cleanup() {
  runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$dir/data" -m fast stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
# Password auth over TCP, as production runs it (the CLI's tests prove a password is never printed).
password="outbox-pg15"
printf '%s\n' "$password" > "$dir/pwfile"
chown postgres "$dir/pwfile"
runuser -u postgres -- "$PG_BIN/initdb" -D "$dir/data" -U postgres --pwfile="$dir/pwfile" \
  --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C >/dev/null
runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/log" -w -o \
  "-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories= -c max_connections=300 -c max_locks_per_transaction=256 -c fsync=off" start >/dev/null
echo "[pg15] PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$port" >&2
# The other column runs OpenFGA on the postgres datastore (as production does); this one on memory.
# Left out: what runs on servers of its own (chaos, topology: never this one), what tests packaging or
# a browser (the release rehearsal, the console's page test), and tests tagged "once" (long ones whose
# extra minutes test nothing version-specific). The default column runs them all.
DATABASE_URL="postgres://postgres:$password@127.0.0.1:$port/postgres" OUTBOX_OPENFGA_DATASTORE=memory pnpm test \
  --exclude 'scripts/chaos/**' --exclude 'scripts/topology/**' \
  --exclude 'test/release/src/release.test.ts' --exclude 'packages/console/src/console.e2e.test.ts' \
  --tagsFilter '!once' "$@"
