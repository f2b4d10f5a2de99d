"""index webhook deliveries by event

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 01:50:00

Fan-out asks which subscriptions already have a delivery of an event; without this index
that question scanned every delivery ever made.
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        op.f("ix_webhook_deliveries_event_id"), "webhook_deliveries", ["event_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_webhook_deliveries_event_id"), table_name="webhook_deliveries")
