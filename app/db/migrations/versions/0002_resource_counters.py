"""resource counters kept by triggers (exact totals without count(*))

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21 23:05:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.db.counters import legacy_counter_trigger_ddl as counter_trigger_ddl
from app.db.counters import legacy_drop_counter_trigger_ddl as drop_counter_trigger_ddl

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

COUNTED_TABLES = ("contacts",)


def upgrade() -> None:
    op.create_table(
        "resource_counters",
        sa.Column("organization_id", sa.String(length=36), nullable=False),
        sa.Column("resource", sa.String(length=64), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("organization_id", "resource", name=op.f("pk_resource_counters")),
    )
    dialect = op.get_bind().dialect.name
    for table in COUNTED_TABLES:
        for statement in counter_trigger_ddl(table, dialect):
            op.execute(statement)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for table in COUNTED_TABLES:
        for statement in drop_counter_trigger_ddl(table, dialect):
            op.execute(statement)
    op.drop_table("resource_counters")
