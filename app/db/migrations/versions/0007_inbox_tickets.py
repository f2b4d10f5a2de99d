"""inbox tickets

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-22 02:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import app.db.base

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# At most one open ticket per contact, whatever races the service loses (partial index).
OPEN_ONLY = sa.text("status = 'open'")


def upgrade() -> None:
    op.create_table(
        "inbox_tickets",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("organization_id", sa.String(length=36), nullable=False),
        sa.Column("contact_id", sa.String(length=36), nullable=False),
        sa.Column("chat_phone_number_id", sa.String(length=36), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("assigned_user_id", sa.String(length=36), nullable=True),
        sa.Column("created_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.CheckConstraint("status IN ('open', 'closed')", name=op.f("ck_inbox_tickets_status")),
        sa.ForeignKeyConstraint(
            ["assigned_user_id"],
            ["users.id"],
            name=op.f("fk_inbox_tickets_assigned_user_id_users"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["chat_phone_number_id"],
            ["channels.id"],
            name=op.f("fk_inbox_tickets_chat_phone_number_id_channels"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["contact_id"],
            ["contacts.id"],
            name=op.f("fk_inbox_tickets_contact_id_contacts"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_inbox_tickets_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_inbox_tickets")),
    )
    with op.batch_alter_table("inbox_tickets", schema=None) as batch_op:
        batch_op.create_index(
            "ix_inbox_tickets_organization_id_created_at_id",
            ["organization_id", "created_at", "id"],
            unique=False,
        )
        batch_op.create_index("ix_inbox_tickets_contact_id", ["contact_id"], unique=False)
        batch_op.create_index(
            "uq_inbox_tickets_open_contact_id",
            ["contact_id"],
            unique=True,
            postgresql_where=OPEN_ONLY,
            sqlite_where=OPEN_ONLY,
        )


def downgrade() -> None:
    with op.batch_alter_table("inbox_tickets", schema=None) as batch_op:
        batch_op.drop_index("uq_inbox_tickets_open_contact_id")
        batch_op.drop_index("ix_inbox_tickets_contact_id")
        batch_op.drop_index("ix_inbox_tickets_organization_id_created_at_id")

    op.drop_table("inbox_tickets")
