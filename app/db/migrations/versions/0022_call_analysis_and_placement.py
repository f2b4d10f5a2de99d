"""call analysis and at-most-once placement: analysis, placement_attempted_at, unplaced index

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-25 00:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import app.db.base

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

# As app/calls/models.py spells it (the sweep's query repeats it to use the index).
UNPLACED_PREDICATE = "status = 'in-progress' AND call_id LIKE 'sb\\_%' ESCAPE '\\'"


def upgrade() -> None:
    # Plain ADD COLUMN, never batch mode: SQLite's batch rebuild of call_logs would drop its
    # counter triggers (app/db/counters.py).
    op.add_column(
        "call_logs",
        sa.Column("placement_attempted_at", app.db.base.UTCDateTime(timezone=True), nullable=True),
    )
    op.add_column("call_logs", sa.Column("analysis", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=True))
    op.create_index(
        "ix_call_logs_unplaced_started_at",
        "call_logs",
        ["started_at"],
        postgresql_where=sa.text(UNPLACED_PREDICATE),
        sqlite_where=sa.text(UNPLACED_PREDICATE),
    )


def downgrade() -> None:
    op.drop_index("ix_call_logs_unplaced_started_at", table_name="call_logs")
    op.drop_column("call_logs", "analysis")
    op.drop_column("call_logs", "placement_attempted_at")
