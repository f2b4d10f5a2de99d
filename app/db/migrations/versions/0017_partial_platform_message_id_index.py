"""campaign recipients: the platform message id index covers only rows that have one

A launch writes the whole audience without message ids; a full index stored one useless NULL
entry per recipient and made the launch pay for it.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-24 01:15:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

INDEX = "ix_campaign_recipients_platform_message_id"
HAS_ID = sa.text("platform_message_id IS NOT NULL")


def upgrade() -> None:
    op.drop_index(INDEX, table_name="campaign_recipients")
    op.create_index(
        INDEX,
        "campaign_recipients",
        ["platform_message_id"],
        postgresql_where=HAS_ID,
        sqlite_where=HAS_ID,
    )


def downgrade() -> None:
    op.drop_index(INDEX, table_name="campaign_recipients")
    op.create_index(INDEX, "campaign_recipients", ["platform_message_id"])
