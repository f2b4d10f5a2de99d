"""AI replies on WhatsApp: a channel names the agent that answers it, a message names the
agent that wrote it, and each conversation the agent answers keeps its reply state

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-28 00:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import app.db.base

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("channels") as batch:
        batch.add_column(sa.Column("agent_id", sa.String(length=36), nullable=True))
        batch.create_foreign_key(
            "fk_channels_agent_id_agents", "agents", ["agent_id"], ["id"], ondelete="SET NULL"
        )
    with op.batch_alter_table("conversation_messages") as batch:
        batch.add_column(sa.Column("agent_id", sa.String(length=36), nullable=True))
        batch.create_foreign_key(
            "fk_conversation_messages_agent_id_agents",
            "agents",
            ["agent_id"],
            ["id"],
            ondelete="SET NULL",
        )
    op.create_table(
        "ai_reply_states",
        sa.Column("ticket_id", sa.String(length=36), nullable=False),
        sa.Column("organization_id", sa.String(length=36), nullable=False),
        sa.Column("pending", app.db.base.JSONType, nullable=False),
        sa.Column("first_pending_at", app.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("due_at", app.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("claim_token", sa.String(length=32), nullable=True),
        sa.Column("claimed_until", app.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("silenced_reason", sa.String(length=500), nullable=True),
        sa.Column("replies", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("updated_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["ticket_id"],
            ["inbox_tickets.id"],
            name=op.f("fk_ai_reply_states_ticket_id_inbox_tickets"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_ai_reply_states_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("ticket_id", name=op.f("pk_ai_reply_states")),
    )
    op.create_index(
        "ix_ai_reply_states_organization_id", "ai_reply_states", ["organization_id"]
    )


def downgrade() -> None:
    op.drop_index("ix_ai_reply_states_organization_id", table_name="ai_reply_states")
    op.drop_table("ai_reply_states")
    with op.batch_alter_table("conversation_messages") as batch:
        batch.drop_constraint("fk_conversation_messages_agent_id_agents", type_="foreignkey")
        batch.drop_column("agent_id")
    with op.batch_alter_table("channels") as batch:
        batch.drop_constraint("fk_channels_agent_id_agents", type_="foreignkey")
        batch.drop_column("agent_id")
