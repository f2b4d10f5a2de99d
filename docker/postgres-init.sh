#!/bin/sh
# First start of the database volume only (docker-entrypoint-initdb.d): the application's role
# and database. The role is no superuser: it owns its database (so migrations can create its
# tables, triggers and the trusted pg_trgm extension) and nothing else. Its password is the
# one in the database_url secret, so there is one place to change it.
set -eu
url=$(cat /run/secrets/database_url)
password=$(printf '%s' "$url" | sed -E 's#^[^:]+://[^:@/]+:([^@]*)@.*#\1#')
if [ -z "$password" ] || [ "$password" = "$url" ]; then
  echo "postgres-init: database_url has no password" >&2
  exit 1
fi
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
  --set=password="$password" <<'SQL'
CREATE ROLE switchboard LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'password';
CREATE DATABASE switchboard OWNER switchboard;
SQL
