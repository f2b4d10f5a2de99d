"""provider credentials, agent test runs, model tokens of calls

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26 00:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import app.db.base

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "provider_credentials",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("organization_id", sa.String(length=36), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("base_url", sa.String(length=2048), nullable=True),
        sa.Column("secret_encrypted", sa.Text(), nullable=False),
        sa.Column("api_key_last4", sa.String(length=4), nullable=False),
        sa.Column("created_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_provider_credentials_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_provider_credentials")),
        sa.UniqueConstraint(
            "organization_id", "provider", name=op.f("uq_provider_credentials_organization_id")
        ),
    )
    with op.batch_alter_table("provider_credentials", schema=None) as batch_op:
        batch_op.create_index(
            "ix_provider_credentials_organization_id_created_at_id",
            ["organization_id", "created_at", "id"],
            unique=False,
        )

    op.create_table(
        "agent_test_runs",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("organization_id", sa.String(length=36), nullable=False),
        sa.Column("agent_id", sa.String(length=36), nullable=False),
        sa.Column("livemode", sa.Boolean(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("spec", JSON, nullable=False),
        sa.Column("results", JSON, nullable=False),
        sa.Column("transcript", JSON, nullable=False),
        sa.Column("error", JSON, nullable=True),
        sa.Column("provider", sa.String(length=32), nullable=True),
        sa.Column("model", sa.String(length=100), nullable=True),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("cost", sa.Float(), nullable=False),
        sa.Column("started_at", app.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("finished_at", app.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("created_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_agent_test_runs_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["agents.id"],
            name=op.f("fk_agent_test_runs_agent_id_agents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agent_test_runs")),
    )
    with op.batch_alter_table("agent_test_runs", schema=None) as batch_op:
        batch_op.create_index(
            "ix_agent_test_runs_agent_id_created_at_id",
            ["agent_id", "created_at", "id"],
            unique=False,
        )
        batch_op.create_index(
            "ix_agent_test_runs_organization_id_created_at_id",
            ["organization_id", "created_at", "id"],
            unique=False,
        )


    # Plain ADD COLUMN, never batch mode: SQLite's batch rebuild of call_logs would drop its
    # counter triggers (app/db/counters.py).
    for name in ("input_tokens", "output_tokens"):
        op.add_column(
            "call_logs", sa.Column(name, sa.Integer(), server_default=sa.text("0"), nullable=False)
        )


def downgrade() -> None:
    for name in ("output_tokens", "input_tokens"):
        op.drop_column("call_logs", name)  # ALTER TABLE DROP COLUMN (SQLite 3.35+ too)
    op.drop_table("agent_test_runs")
    op.drop_table("provider_credentials")
