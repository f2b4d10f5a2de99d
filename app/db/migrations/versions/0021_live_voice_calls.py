"""live voice: stream tokens, media heartbeats, end reasons, answering machines, usage cost

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-27 00:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import app.db.base

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMN, never batch mode: SQLite's batch rebuild of call_logs would drop its
    # counter triggers (app/db/counters.py).
    op.add_column("call_logs", sa.Column("end_reason", sa.String(length=64), nullable=True))
    op.add_column("call_logs", sa.Column("answered_by", sa.String(length=32), nullable=True))
    op.add_column(
        "call_logs",
        sa.Column("usage_cost", sa.Float(), server_default=sa.text("0"), nullable=False),
    )
    op.add_column("call_logs", sa.Column("stream_token_hash", sa.String(length=64), nullable=True))
    op.add_column(
        "call_logs",
        sa.Column("media_heartbeat_at", app.db.base.UTCDateTime(timezone=True), nullable=True),
    )
    # The sweep of calls whose media process died reads only streaming calls.
    op.create_index(
        "ix_call_logs_media_heartbeat_at",
        "call_logs",
        ["media_heartbeat_at"],
        postgresql_where=sa.text("media_heartbeat_at IS NOT NULL"),
        sqlite_where=sa.text("media_heartbeat_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_call_logs_media_heartbeat_at", table_name="call_logs")
    for name in (
        "media_heartbeat_at",
        "stream_token_hash",
        "usage_cost",
        "answered_by",
        "end_reason",
    ):
        op.drop_column("call_logs", name)  # ALTER TABLE DROP COLUMN (SQLite 3.35+ too)
