"""contacts carry marketing consent and do-not-call; organizations their consent keywords;
contact imports and their refused rows

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-25 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from sqlalchemy.dialects import postgresql

from app.db.base import UTCDateTime

revision = "0023"
down_revision = "0022"
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
    op.create_table(
        "contact_imports",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("organization_id", sa.String(36), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("file_name", sa.String(255), nullable=False),
        sa.Column("object_key", sa.String(512), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("on_duplicate", sa.String(8), nullable=False),
        sa.Column("default_region", sa.String(2), nullable=True),
        sa.Column("rows_read", sa.Integer(), nullable=False),
        sa.Column("created_count", sa.Integer(), nullable=False),
        sa.Column("updated_count", sa.Integer(), nullable=False),
        sa.Column("skipped_count", sa.Integer(), nullable=False),
        sa.Column("failed_count", sa.Integer(), nullable=False),
        sa.Column("committed_offset", sa.BigInteger(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("finished_at", UTCDateTime(timezone=True), nullable=True),
        sa.Column("created_at", UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_contact_imports_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_contact_imports")),
    )
    op.create_index(
        "ix_contact_imports_organization_id_created_at_id",
        "contact_imports",
        ["organization_id", "created_at", "id"],
    )
    op.create_table(
        "contact_import_errors",
        sa.Column("import_id", sa.String(36), nullable=False),
        sa.Column("row_number", sa.Integer(), nullable=False),
        sa.Column("phone_number", sa.String(100), nullable=True),
        sa.Column("name", sa.String(255), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["import_id"],
            ["contact_imports.id"],
            name=op.f("fk_contact_import_errors_import_id_contact_imports"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "import_id", "row_number", name=op.f("pk_contact_import_errors")
        ),
    )


def downgrade() -> None:
    op.drop_table("contact_import_errors")
    op.drop_index("ix_contact_imports_organization_id_created_at_id", "contact_imports")
    op.drop_table("contact_imports")
    op.drop_table("consent_settings")
    for name in ("consent_changed_at", "do_not_call", "marketing_opt_out_source"):
        op.drop_column("contacts", name)
    op.drop_column("contacts", "marketing_opt_out_at")
