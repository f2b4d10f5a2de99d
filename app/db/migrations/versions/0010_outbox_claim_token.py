"""outbox claim token: a run settles its job only while it still holds the claim

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23 21:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("outbox_jobs") as batch:
        batch.add_column(sa.Column("claim_token", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("outbox_jobs") as batch:
        batch.drop_column("claim_token")
