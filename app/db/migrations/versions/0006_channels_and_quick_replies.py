"""channels and quick replies

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22 02:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import app.db.base

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "channels",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("organization_id", sa.String(length=36), nullable=False),
        sa.Column("display_phone_number", sa.String(length=50), nullable=False),
        sa.Column("phone_number_id", sa.String(length=64), nullable=False),
        sa.Column("business_account_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=True),
        sa.Column("livemode", sa.Boolean(), nullable=False),
        sa.Column("access_token_encrypted", sa.Text(), nullable=False),
        sa.Column("created_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_channels_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_channels")),
        sa.UniqueConstraint(
            "organization_id", "phone_number_id", name=op.f("uq_channels_organization_id")
        ),
    )
    with op.batch_alter_table("channels", schema=None) as batch_op:
        batch_op.create_index(
            "ix_channels_organization_id_created_at_id",
            ["organization_id", "created_at", "id"],
            unique=False,
        )

    op.create_table(
        "quick_replies",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("organization_id", sa.String(length=36), nullable=False),
        sa.Column("shortcut", sa.String(length=100), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("created_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_quick_replies_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_quick_replies")),
        sa.UniqueConstraint(
            "organization_id", "shortcut", name=op.f("uq_quick_replies_organization_id")
        ),
    )
    with op.batch_alter_table("quick_replies", schema=None) as batch_op:
        batch_op.create_index(
            "ix_quick_replies_organization_id_created_at_id",
            ["organization_id", "created_at", "id"],
            unique=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("quick_replies", schema=None) as batch_op:
        batch_op.drop_index("ix_quick_replies_organization_id_created_at_id")
    op.drop_table("quick_replies")
    with op.batch_alter_table("channels", schema=None) as batch_op:
        batch_op.drop_index("ix_channels_organization_id_created_at_id")
    op.drop_table("channels")
