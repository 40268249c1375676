#!/bin/sh
# Takes what the official postgres image takes, as far as the test stack uses it: POSTGRES_PASSWORD
# for the postgres superuser (scram-sha-256 over TCP, from any address: the port is published on
# the host's loopback only) and a command `postgres -c name=value …`.
set -eu
if [ "${1:-}" = postgres ]; then shift; fi
: "${POSTGRES_PASSWORD:?the postgres superuser needs a password: set POSTGRES_PASSWORD}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile="$(mktemp)"
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  initdb --pgdata="$PGDATA" --username=postgres --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 \
    --encoding=UTF8 --locale=C >/dev/null
  rm -f "$pwfile"
  echo 'host all all all scram-sha-256' >>"$PGDATA/pg_hba.conf"
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
