"""agents

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22 02:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import app.db.base
from app.db.counters import legacy_counter_trigger_ddl as counter_trigger_ddl
from app.db.counters import legacy_drop_counter_trigger_ddl as drop_counter_trigger_ddl

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agents",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("organization_id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("agent_type", sa.String(length=16), nullable=False),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column(
            "config",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_agents_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agents")),
    )
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.create_index(
            "ix_agents_organization_id_created_at_id",
            ["organization_id", "created_at", "id"],
            unique=False,
        )
    # Exact list totals without count(*) (app/db/counters.py).
    for statement in counter_trigger_ddl("agents", op.get_bind().dialect.name):
        op.execute(statement)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for statement in drop_counter_trigger_ddl("agents", dialect):
        op.execute(statement)
    # Stale counters would make a later upgrade's totals wrong.
    op.execute("DELETE FROM resource_counters WHERE resource = 'agents'")
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.drop_index("ix_agents_organization_id_created_at_id")
    op.drop_table("agents")
