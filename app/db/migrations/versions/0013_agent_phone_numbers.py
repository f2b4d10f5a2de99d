"""agent phone numbers: which agent answers a number's incoming calls

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-23 21:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import app.db.base

revision = "0013"
# Assigned 0008; chained after the knowledge base's 0012 here so the branch has one head.
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agent_phone_numbers",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("organization_id", sa.String(length=36), nullable=False),
        sa.Column("agent_id", sa.String(length=36), nullable=False),
        sa.Column("phone_number", sa.String(length=50), nullable=False),
        sa.Column("livemode", sa.Boolean(), nullable=False),
        sa.Column("created_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["agents.id"],
            name=op.f("fk_agent_phone_numbers_agent_id_agents"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_agent_phone_numbers_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agent_phone_numbers")),
        sa.UniqueConstraint("phone_number", name=op.f("uq_agent_phone_numbers_phone_number")),
    )
    with op.batch_alter_table("agent_phone_numbers", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_agent_phone_numbers_agent_id"), ["agent_id"], unique=False
        )
        batch_op.create_index(
            "ix_agent_phone_numbers_organization_id_created_at_id",
            ["organization_id", "created_at", "id"],
            unique=False,
        )


def downgrade() -> None:
    op.drop_table("agent_phone_numbers")
