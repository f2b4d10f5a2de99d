"""conversations carry their mode: tickets and messages of a live channel are live data

A ticket takes the mode of its channel (without one, of the credential that created it), a
message that of its channel; test-mode credentials never see the live ones. One open ticket
per contact and mode, so a live channel's messages never join a test-mode conversation.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-25 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

OPEN_INDEX = "uq_inbox_tickets_open_contact_id"
OPEN_ONLY = sa.text("status = 'open'")
_LIVE_CHANNEL = "(SELECT channels.livemode FROM channels WHERE channels.id = {column})"


def upgrade() -> None:
    with op.batch_alter_table("inbox_tickets") as batch:
        batch.add_column(
            sa.Column("livemode", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
    with op.batch_alter_table("conversation_messages") as batch:
        batch.add_column(
            sa.Column("livemode", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
    live_ticket_channel = _LIVE_CHANNEL.format(column="inbox_tickets.chat_phone_number_id")
    op.execute(
        f"UPDATE inbox_tickets SET livemode = {live_ticket_channel} "
        f"WHERE {live_ticket_channel} IS NOT NULL"
    )
    # A message's channel, else (channel deleted since) its conversation's mode.
    live_message_channel = _LIVE_CHANNEL.format(column="conversation_messages.channel_id")
    op.execute(
        "UPDATE conversation_messages SET livemode = COALESCE("
        f"{live_message_channel}, (SELECT inbox_tickets.livemode FROM inbox_tickets "
        "WHERE inbox_tickets.id = conversation_messages.ticket_id))"
    )
    op.drop_index(OPEN_INDEX, table_name="inbox_tickets")
    op.create_index(
        OPEN_INDEX,
        "inbox_tickets",
        ["contact_id", "livemode"],
        unique=True,
        postgresql_where=OPEN_ONLY,
        sqlite_where=OPEN_ONLY,
    )


def downgrade() -> None:
    op.drop_index(OPEN_INDEX, table_name="inbox_tickets")
    op.create_index(
        OPEN_INDEX,
        "inbox_tickets",
        ["contact_id"],
        unique=True,
        postgresql_where=OPEN_ONLY,
        sqlite_where=OPEN_ONLY,
    )
    with op.batch_alter_table("conversation_messages") as batch:
        batch.drop_column("livemode")
    with op.batch_alter_table("inbox_tickets") as batch:
        batch.drop_column("livemode")
