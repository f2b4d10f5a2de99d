"""platform numbers held by one organization; parked delivery statuses

A WhatsApp phone number id, like a voice number, now belongs to one organization per mode:
- channels: one channel per (phone_number_id, livemode) holds the number, across every
  organization (a partial unique index over the holders), instead of one per organization.
  Where channels registered before shared a number within one mode, the oldest keeps it
  (`holds_number`); the others stay, holding nothing, so no row is lost.
- agent phone numbers: unique per (phone_number, livemode) instead of per number, so a
  test-mode assignment never blocks a live one.
- parked_statuses: delivery statuses that arrived before the message they name, retried by
  one job per channel instead of one job per status.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-25 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import app.db.base

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

HOLDERS_INDEX = "uq_channels_phone_number_id_livemode"
HOLDS_NUMBER = sa.text("holds_number")
# An older channel of the same number and mode exists (ties broken by id).
_OLDER_HOLDER = """
UPDATE channels SET holds_number = false
WHERE EXISTS (
    SELECT 1 FROM channels AS older
    WHERE older.phone_number_id = channels.phone_number_id
      AND older.livemode = channels.livemode
      AND (older.created_at < channels.created_at
           OR (older.created_at = channels.created_at AND older.id < channels.id))
)
"""


def upgrade() -> None:
    with op.batch_alter_table("channels") as batch:
        batch.add_column(
            sa.Column("holds_number", sa.Boolean(), server_default=sa.true(), nullable=False)
        )
        batch.drop_constraint("uq_channels_organization_id", type_="unique")
    op.execute(_OLDER_HOLDER)
    op.create_index(
        HOLDERS_INDEX,
        "channels",
        ["phone_number_id", "livemode"],
        unique=True,
        postgresql_where=HOLDS_NUMBER,
        sqlite_where=HOLDS_NUMBER,
    )

    with op.batch_alter_table("agent_phone_numbers") as batch:
        batch.drop_constraint("uq_agent_phone_numbers_phone_number", type_="unique")
        batch.create_unique_constraint(
            "uq_agent_phone_numbers_phone_number_livemode", ["phone_number", "livemode"]
        )

    op.create_table(
        "parked_statuses",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("channel_id", sa.String(length=36), nullable=False),
        sa.Column("platform_message_id", sa.String(length=128), nullable=False),
        sa.Column(
            "status",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("expires_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("created_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["channel_id"],
            ["channels.id"],
            name=op.f("fk_parked_statuses_channel_id_channels"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_parked_statuses")),
    )
    op.create_index(
        "ix_parked_statuses_channel_id_expires_at",
        "parked_statuses",
        ["channel_id", "expires_at"],
    )


def downgrade() -> None:
    op.drop_index("ix_parked_statuses_channel_id_expires_at", table_name="parked_statuses")
    op.drop_table("parked_statuses")
    with op.batch_alter_table("agent_phone_numbers") as batch:
        batch.drop_constraint("uq_agent_phone_numbers_phone_number_livemode", type_="unique")
        batch.create_unique_constraint("uq_agent_phone_numbers_phone_number", ["phone_number"])
    op.drop_index(HOLDERS_INDEX, table_name="channels")
    with op.batch_alter_table("channels") as batch:
        batch.drop_column("holds_number")
        batch.create_unique_constraint(
            "uq_channels_organization_id", ["organization_id", "phone_number_id"]
        )
