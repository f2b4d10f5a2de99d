"""Meta's limits and ratings: channel quality and messaging limit, template platform status
and category history, message pricing, deferred campaign recipients, business-scoped user ids

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-25 07:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import app.db.base

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

_JSON = app.db.base.JSONType
_TIME = app.db.base.UTCDateTime(timezone=True)


def upgrade() -> None:
    # Plain ADD COLUMN, never batch mode: a batch rebuild would drop the tables' counter
    # triggers (app/db/counters.py).
    op.add_column("channels", sa.Column("quality_rating", sa.String(16), nullable=True))
    op.add_column("channels", sa.Column("messaging_limit", sa.String(32), nullable=True))
    op.add_column("channels", sa.Column("quality_event", sa.String(32), nullable=True))
    op.add_column("channels", sa.Column("quality_updated_at", _TIME, nullable=True))
    op.add_column("channels", sa.Column("account_status", sa.String(64), nullable=True))
    op.add_column("channels", sa.Column("platform_event_times", _JSON, nullable=True))

    op.add_column("message_templates", sa.Column("platform_status", sa.String(32), nullable=True))
    op.add_column(
        "message_templates", sa.Column("previous_category", sa.String(20), nullable=True)
    )
    op.add_column("message_templates", sa.Column("category_updated_at", _TIME, nullable=True))
    op.add_column("message_templates", sa.Column("platform_event_times", _JSON, nullable=True))

    op.add_column(
        "campaign_recipients", sa.Column("pricing_category", sa.String(32), nullable=True)
    )
    op.add_column("campaign_recipients", sa.Column("billable", sa.Boolean(), nullable=True))
    op.add_column(
        "campaign_recipients",
        sa.Column("deferrals", sa.Integer(), server_default=sa.text("0"), nullable=False),
    )
    op.add_column("campaign_recipients", sa.Column("deferred_until", _TIME, nullable=True))
    op.add_column(
        "campaigns",
        sa.Column("deferred_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
    )
    op.add_column("campaigns", sa.Column("paused_reason", sa.Text(), nullable=True))

    op.add_column(
        "conversation_messages", sa.Column("pricing_category", sa.String(32), nullable=True)
    )
    op.add_column("conversation_messages", sa.Column("billable", sa.Boolean(), nullable=True))

    op.add_column("contacts", sa.Column("platform_user_id", sa.String(160), nullable=True))
    op.create_index(
        "ix_contacts_organization_id_platform_user_id",
        "contacts",
        ["organization_id", "platform_user_id"],
        postgresql_where=sa.text("platform_user_id IS NOT NULL"),
        sqlite_where=sa.text("platform_user_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_contacts_organization_id_platform_user_id", table_name="contacts")
    for table, columns in (
        ("contacts", ["platform_user_id"]),
        ("conversation_messages", ["billable", "pricing_category"]),
        ("campaigns", ["paused_reason", "deferred_count"]),
        ("campaign_recipients", ["deferred_until", "deferrals", "billable", "pricing_category"]),
        (
            "message_templates",
            ["platform_event_times", "category_updated_at", "previous_category", "platform_status"],
        ),
        (
            "channels",
            [
                "platform_event_times",
                "account_status",
                "quality_updated_at",
                "quality_event",
                "messaging_limit",
                "quality_rating",
            ],
        ),
    ):
        for column in columns:
            op.drop_column(table, column)
