#!/usr/bin/env bash
# Run a command with a throwaway PostgreSQL server on 127.0.0.1, its URL in ACCORD_TEST_PG_URL.
# Installs Debian's postgresql when no server binaries are found; stops the server on exit.
# Usage: scripts/with_postgres.sh COMMAND [ARGS...]
set -euo pipefail

find_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }

PGBIN="$(find_bin)"
if [ -z "$PGBIN" ] || [ ! -x "$PGBIN/initdb" ]; then
  echo "with_postgres: installing Debian's postgresql" >&2
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >&2
  PGBIN="$(find_bin)"
fi

DATA="$(mktemp -d /tmp/accord-pg.XXXXXX)"
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
as_pg() {
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    chown -R postgres "$DATA"
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}
cleanup() {
  as_pg "$PGBIN/pg_ctl" -D "$DATA/db" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$DATA"
}
trap cleanup EXIT

as_pg "$PGBIN/initdb" -D "$DATA/db" -U accord --auth=trust -E UTF8 >/dev/null
as_pg "$PGBIN/pg_ctl" -D "$DATA/db" -l "$DATA/server.log" -w \
  -o "-h 127.0.0.1 -p $PORT -k $DATA -c fsync=off" start >/dev/null
as_pg "$PGBIN/createdb" -h 127.0.0.1 -p "$PORT" -U accord accord_test

export ACCORD_TEST_PG_URL="postgresql+psycopg://accord@127.0.0.1:$PORT/accord_test"
"$@"
