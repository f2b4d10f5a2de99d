"""counters kept per statement (linear, writers never wait), per-tag contact counts, contact
filter indexes

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23 21:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.db.counters import (
    counter_trigger_ddl,
    drop_counter_trigger_ddl,
    legacy_counter_trigger_ddl,
    legacy_drop_counter_trigger_ddl,
)

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

# Tables counted per label: the JSON array column whose text values are the labels.
LABELLED = {"contacts": "tags"}


def _counted_tables(dialect: str) -> list[str]:
    """Every table the row-level counters of 0002-0008 count (whichever migrations added
    them), found in the catalog."""
    bind = op.get_bind()
    if dialect == "postgresql":
        rows = bind.execute(
            sa.text(
                "SELECT DISTINCT c.relname FROM pg_trigger t "
                "JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_proc p ON p.oid = t.tgfoid "
                "WHERE p.proname = 'sb_count_rows' AND NOT t.tgisinternal ORDER BY 1"
            )
        )
    else:
        rows = bind.execute(
            sa.text(
                "SELECT DISTINCT tbl_name FROM sqlite_master "
                "WHERE type = 'trigger' AND name = tbl_name || '_count_insert' ORDER BY 1"
            )
        )
    return [row[0] for row in rows]


def _counters_table(with_label: bool) -> None:
    columns = [
        sa.Column("organization_id", sa.String(length=36), nullable=False),
        sa.Column("resource", sa.String(length=64), nullable=False),
    ]
    key = ["organization_id", "resource"]
    if with_label:
        columns += [
            sa.Column("label", sa.String(length=255), nullable=False),
            sa.Column("slot", sa.BigInteger(), autoincrement=False, nullable=False),
        ]
        key += ["label", "slot"]
    op.create_table(
        "resource_counters",
        *columns,
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(*key, name=op.f("pk_resource_counters")),
    )


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    tables = _counted_tables(dialect)
    for table in tables:
        for statement in legacy_drop_counter_trigger_ddl(table, dialect):
            op.execute(statement)
    if dialect == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS sb_count_rows()")
    # The counts are rebuilt from the rows (the triggers' backfill), in this transaction.
    op.drop_table("resource_counters")
    _counters_table(with_label=True)
    for table in tables:
        for statement in counter_trigger_ddl(table, dialect, LABELLED.get(table)):
            op.execute(statement)

    if dialect == "postgresql":
        # GIN over the organization id needs btree_gin (contrib, like pg_trgm from 0008).
        op.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
        op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    with op.batch_alter_table("contacts", schema=None) as batch_op:
        batch_op.create_index(
            "ix_contacts_organization_id_tags",
            ["organization_id", "tags"],
            unique=False,
            postgresql_using="gin",
            postgresql_ops={"tags": "jsonb_path_ops"},
        )
        batch_op.create_index(
            "ix_contacts_search_trgm",
            ["organization_id", "name", "phone_number"],
            unique=False,
            postgresql_using="gin",
            postgresql_ops={"name": "gin_trgm_ops", "phone_number": "gin_trgm_ops"},
        )
        batch_op.create_index(
            "ix_contacts_organization_id_phone_number",
            ["organization_id", "phone_number"],
            unique=False,
            postgresql_ops={"phone_number": "text_pattern_ops"},
        )


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    with op.batch_alter_table("contacts", schema=None) as batch_op:
        batch_op.drop_index("ix_contacts_organization_id_phone_number")
        batch_op.drop_index("ix_contacts_search_trgm")
        batch_op.drop_index("ix_contacts_organization_id_tags")
    tables = _new_counted_tables(dialect)
    for table in tables:
        for statement in drop_counter_trigger_ddl(table, dialect):
            op.execute(statement)
    op.drop_table("resource_counters")
    if dialect == "postgresql":
        op.execute("DROP SEQUENCE IF EXISTS resource_counter_slots")
    _counters_table(with_label=False)
    for table in tables:
        for statement in legacy_counter_trigger_ddl(table, dialect):
            op.execute(statement)


def _new_counted_tables(dialect: str) -> list[str]:
    bind = op.get_bind()
    if dialect == "postgresql":
        rows = bind.execute(
            sa.text(
                "SELECT DISTINCT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                "JOIN pg_proc p ON p.oid = t.tgfoid "
                "WHERE p.proname = 'sb_count_' || c.relname AND NOT t.tgisinternal ORDER BY 1"
            )
        )
    else:
        rows = bind.execute(
            sa.text(
                "SELECT DISTINCT tbl_name FROM sqlite_master "
                "WHERE type = 'trigger' AND name = tbl_name || '_count_insert' ORDER BY 1"
            )
        )
    return [row[0] for row in rows]
