#!/bin/sh
# The subset of the official postgres image's entrypoint docker/compose.yaml uses: on an empty
# data directory, initdb with the superuser password from POSTGRES_PASSWORD_FILE, run the
# /docker-entrypoint-initdb.d/*.sh scripts against a server listening on its Unix socket only,
# stop it; then run the command (postgres) as the postgres user.
set -eu
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  chown -R postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
export POSTGRES_USER="${POSTGRES_USER:-postgres}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  password_file=$(mktemp)
  cat "$POSTGRES_PASSWORD_FILE" > "$password_file"
  initdb --username="$POSTGRES_USER" --pwfile="$password_file" \
    --auth-local=trust --auth-host=scram-sha-256 -D "$PGDATA" >/dev/null
  rm -f "$password_file"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  for script in /docker-entrypoint-initdb.d/*.sh; do
    [ -e "$script" ] && sh "$script"
  done
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  echo "postgres-entrypoint: database initialised"
fi
exec "$@"
