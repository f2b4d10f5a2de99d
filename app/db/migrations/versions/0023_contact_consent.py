"""contacts carry marketing consent and do-not-call; organizations their consent keywords

Revision ID: 0023
Revises: 0021
Create Date: 2026-11-25 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from sqlalchemy.dialects import postgresql

from app.db.base import UTCDateTime

revision = "0023"
down_revision = "0021"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    # Plain ADD COLUMN on both backends: a batch rebuild of contacts on SQLite would drop
    # its counter and search triggers.
    op.add_column("contacts", sa.Column("marketing_opt_out_at", UTCDateTime(timezone=True)))
    op.add_column("contacts", sa.Column("marketing_opt_out_source", sa.String(16)))
    op.add_column(
        "contacts",
        sa.Column("do_not_call", sa.Boolean(), server_default=sa.false(), nullable=False),
    )
    op.add_column("contacts", sa.Column("consent_changed_at", UTCDateTime(timezone=True)))
    op.create_table(
        "consent_settings",
        sa.Column("organization_id", sa.String(36), nullable=False),
        sa.Column("opt_out_keywords", JSON, nullable=False),
        sa.Column("opt_in_keywords", JSON, nullable=False),
        sa.Column("opt_out_reply", sa.Text(), nullable=True),
        sa.Column("opt_in_reply", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_consent_settings_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("organization_id", name=op.f("pk_consent_settings")),
    )


def downgrade() -> None:
    op.drop_table("consent_settings")
    for name in ("consent_changed_at", "do_not_call", "marketing_opt_out_source"):
        op.drop_column("contacts", name)
    op.drop_column("contacts", "marketing_opt_out_at")
