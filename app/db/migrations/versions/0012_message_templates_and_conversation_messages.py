"""message templates, simulator templates and conversation messages

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-23 21:00:22.211807
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import app.db.base

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table(
        "whatsapp_simulator_templates",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("business_account_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("language", sa.String(length=20), nullable=False),
        sa.Column("category", sa.String(length=20), nullable=False),
        sa.Column(
            "components",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("quality_score", sa.String(length=8), nullable=False),
        sa.Column("rejected_reason", sa.Text(), nullable=True),
        sa.Column("created_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_whatsapp_simulator_templates")),
        sa.UniqueConstraint(
            "business_account_id",
            "name",
            "language",
            name=op.f("uq_whatsapp_simulator_templates_business_account_id"),
        ),
    )
    op.create_table(
        "message_templates",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("organization_id", sa.String(length=36), nullable=False),
        sa.Column("channel_id", sa.String(length=36), nullable=False),
        sa.Column("business_account_id", sa.String(length=64), nullable=False),
        sa.Column("platform_template_id", sa.String(length=64), nullable=True),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("language", sa.String(length=20), nullable=False),
        sa.Column("category", sa.String(length=20), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column(
            "components",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("quality_score", sa.String(length=8), nullable=False),
        sa.Column("rejected_reason", sa.Text(), nullable=True),
        sa.Column("submission_error", sa.Text(), nullable=True),
        sa.Column("livemode", sa.Boolean(), nullable=False),
        sa.Column("created_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "status IN ('PENDING', 'APPROVED', 'REJECTED')",
            name=op.f("ck_message_templates_status"),
        ),
        sa.ForeignKeyConstraint(
            ["channel_id"],
            ["channels.id"],
            name=op.f("fk_message_templates_channel_id_channels"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_message_templates_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_message_templates")),
        sa.UniqueConstraint(
            "organization_id",
            "business_account_id",
            "name",
            "language",
            name=op.f("uq_message_templates_organization_id"),
        ),
    )
    with op.batch_alter_table("message_templates", schema=None) as batch_op:
        batch_op.create_index(
            "ix_message_templates_business_account_id_platform_template_id",
            ["business_account_id", "platform_template_id"],
            unique=False,
        )
        batch_op.create_index("ix_message_templates_channel_id", ["channel_id"], unique=False)
        batch_op.create_index(
            "ix_message_templates_organization_id_created_at_id",
            ["organization_id", "created_at", "id"],
            unique=False,
        )

    op.create_table(
        "conversation_messages",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("organization_id", sa.String(length=36), nullable=False),
        sa.Column("ticket_id", sa.String(length=36), nullable=False),
        sa.Column("channel_id", sa.String(length=36), nullable=True),
        sa.Column("direction", sa.String(length=16), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("template_name", sa.String(length=255), nullable=True),
        sa.Column("platform_message_id", sa.String(length=128), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("sent_at", app.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("delivered_at", app.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("read_at", app.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("failed_at", app.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("created_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "direction IN ('inbound', 'outbound')", name=op.f("ck_conversation_messages_direction")
        ),
        sa.ForeignKeyConstraint(
            ["channel_id"],
            ["channels.id"],
            name=op.f("fk_conversation_messages_channel_id_channels"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_conversation_messages_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["ticket_id"],
            ["inbox_tickets.id"],
            name=op.f("fk_conversation_messages_ticket_id_inbox_tickets"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversation_messages")),
        sa.UniqueConstraint(
            "channel_id", "platform_message_id", name=op.f("uq_conversation_messages_channel_id")
        ),
    )
    with op.batch_alter_table("conversation_messages", schema=None) as batch_op:
        batch_op.create_index(
            "ix_conversation_messages_organization_id_created_at_id",
            ["organization_id", "created_at", "id"],
            unique=False,
        )
        batch_op.create_index(
            "ix_conversation_messages_ticket_id_created_at",
            ["ticket_id", "created_at"],
            unique=False,
        )


def downgrade() -> None:

    with op.batch_alter_table("conversation_messages", schema=None) as batch_op:
        batch_op.drop_index("ix_conversation_messages_ticket_id_created_at")
        batch_op.drop_index("ix_conversation_messages_organization_id_created_at_id")

    op.drop_table("conversation_messages")
    with op.batch_alter_table("message_templates", schema=None) as batch_op:
        batch_op.drop_index("ix_message_templates_organization_id_created_at_id")
        batch_op.drop_index("ix_message_templates_channel_id")
        batch_op.drop_index("ix_message_templates_business_account_id_platform_template_id")

    op.drop_table("message_templates")
    op.drop_table("whatsapp_simulator_templates")
