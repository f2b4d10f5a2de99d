"""channel messages per second: the send budget campaigns and replies of a channel share

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-24 00:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("channels") as batch:
        batch.add_column(
            sa.Column(
                "messages_per_second", sa.Integer(), server_default=sa.text("80"), nullable=False
            )
        )
        batch.create_check_constraint(
            op.f("ck_channels_messages_per_second_range"),
            "messages_per_second BETWEEN 1 AND 1000",
        )


def downgrade() -> None:
    with op.batch_alter_table("channels") as batch:
        batch.drop_constraint(op.f("ck_channels_messages_per_second_range"), type_="check")
        batch.drop_column("messages_per_second")
