"""call logs

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-22 02:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import app.db.base
from app.db.counters import legacy_counter_trigger_ddl as counter_trigger_ddl
from app.db.counters import legacy_drop_counter_trigger_ddl as drop_counter_trigger_ddl

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

TRIGRAM_COLUMNS = ("call_id", "from_number", "to_number")


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        # Trigram operator classes for the search index (ILIKE '%text%').
        op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    op.create_table(
        "call_logs",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("organization_id", sa.String(length=36), nullable=False),
        sa.Column("livemode", sa.Boolean(), nullable=False),
        sa.Column("call_id", sa.String(length=255), nullable=False),
        sa.Column("agent_id", sa.String(length=36), nullable=True),
        sa.Column("chat_phone_number_id", sa.String(length=36), nullable=True),
        sa.Column("phone_number_id", sa.String(length=255), nullable=True),
        sa.Column("contact_id", sa.String(length=36), nullable=True),
        sa.Column("from_number", sa.String(length=50), nullable=False),
        sa.Column("to_number", sa.String(length=50), nullable=False),
        sa.Column("direction", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("duration_seconds", sa.Integer(), nullable=False),
        sa.Column("started_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("ended_at", app.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("recording_url", sa.String(length=2048), nullable=True),
        sa.Column(
            "transcript",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.Column("cost", sa.Float(), nullable=False),
        sa.Column("created_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["contact_id"],
            ["contacts.id"],
            name=op.f("fk_call_logs_contact_id_contacts"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_call_logs_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_call_logs")),
    )
    with op.batch_alter_table("call_logs", schema=None) as batch_op:
        batch_op.create_index(
            "ix_call_logs_organization_id_started_at_id",
            ["organization_id", "started_at", "id"],
            unique=False,
        )
        batch_op.create_index(
            "ix_call_logs_contact_id_started_at_id",
            ["contact_id", "started_at", "id"],
            unique=False,
        )
        # GIN trigram index on PostgreSQL; a plain index elsewhere (the options are ignored).
        batch_op.create_index(
            "ix_call_logs_search_trgm",
            list(TRIGRAM_COLUMNS),
            unique=False,
            postgresql_using="gin",
            postgresql_ops={column: "gin_trgm_ops" for column in TRIGRAM_COLUMNS},
        )
    for statement in counter_trigger_ddl("call_logs", dialect):
        op.execute(statement)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for statement in drop_counter_trigger_ddl("call_logs", dialect):
        op.execute(statement)
    op.execute("DELETE FROM resource_counters WHERE resource = 'call_logs'")
    with op.batch_alter_table("call_logs", schema=None) as batch_op:
        batch_op.drop_index("ix_call_logs_search_trgm")
        batch_op.drop_index("ix_call_logs_contact_id_started_at_id")
        batch_op.drop_index("ix_call_logs_organization_id_started_at_id")

    op.drop_table("call_logs")
    # pg_trgm stays installed: other objects of the database may use it.
