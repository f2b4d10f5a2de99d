"""SQLite: a trigram full-text index of contact names and phone numbers (contact search)

PostgreSQL searches contacts through trigram and pattern indexes (0009); this gives SQLite its
counterpart: an external-content FTS5 table with the trigram tokenizer, kept by triggers, read
by app/contacts/repository.py (its reads need SQLite 3.35+ for `MATERIALIZED`). It refers to contacts by their rowid (contacts
have a text key): after a `VACUUM`, which may renumber rowids, or a migration that rebuilds the
contacts table, run `INSERT INTO contacts_fts(contacts_fts) VALUES ('rebuild')` (and, for the
latter, create these triggers again). Nothing changes on PostgreSQL.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-24 00:20:00
"""

from __future__ import annotations

import sqlite3

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_COLUMNS = "name, phone_number"
_NEW = "new.rowid, new.name, new.phone_number"
_OLD = "'delete', old.rowid, old.name, old.phone_number"
SQLITE_SEARCH = (
    f"CREATE VIRTUAL TABLE contacts_fts USING fts5({_COLUMNS}, content='contacts', "
    "tokenize='trigram')",
    "CREATE TRIGGER contacts_fts_insert AFTER INSERT ON contacts BEGIN "
    f"INSERT INTO contacts_fts(rowid, {_COLUMNS}) VALUES ({_NEW}); END",
    "CREATE TRIGGER contacts_fts_delete AFTER DELETE ON contacts BEGIN "
    f"INSERT INTO contacts_fts(contacts_fts, rowid, {_COLUMNS}) VALUES ({_OLD}); END",
    "CREATE TRIGGER contacts_fts_update AFTER UPDATE OF name, phone_number ON contacts BEGIN "
    f"INSERT INTO contacts_fts(contacts_fts, rowid, {_COLUMNS}) VALUES ({_OLD}); "
    f"INSERT INTO contacts_fts(rowid, {_COLUMNS}) VALUES ({_NEW}); END",
    # The contacts that exist already.
    "INSERT INTO contacts_fts(contacts_fts) VALUES ('rebuild')",
)


MIN_SQLITE = (3, 35, 0)


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            raise RuntimeError(
                f"SQLite {sqlite3.sqlite_version} is too old for contact search; "
                f"Switchboard needs {'.'.join(map(str, MIN_SQLITE))} or later"
            )
        for statement in SQLITE_SEARCH:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for trigger in ("insert", "delete", "update"):
            op.execute(f"DROP TRIGGER IF EXISTS contacts_fts_{trigger}")
        op.execute("DROP TABLE IF EXISTS contacts_fts")
