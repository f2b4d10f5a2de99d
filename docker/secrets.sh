#!/usr/bin/env bash
# Random secrets for docker/compose.yaml, written once into docker/secrets/ (mode 0600, not in
# git). Existing files are kept: replacing switchboard_secret_key invalidates every API key, and
# database_url's password is set in PostgreSQL at the database volume's first start only.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p secrets
chmod 700 secrets
umask 077
random() { python3 -c "import secrets; print(secrets.token_hex($1))"; }
[ -s secrets/switchboard_secret_key ] || random 32 > secrets/switchboard_secret_key
[ -s secrets/postgres_password ] || random 24 > secrets/postgres_password
[ -s secrets/database_url ] ||
  printf 'postgresql+asyncpg://switchboard:%s@postgres:5432/switchboard\n' "$(random 24)" \
    > secrets/database_url
# The containers run as other users (postgres, switchboard) and must read them; the directory
# (0700) keeps other users of this machine out.
chmod 644 secrets/*
echo "docker/secrets: $(ls secrets | tr '\n' ' ')"
