"""The outbox table: every job, written in the transaction of the change that causes it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.core.clock import utcnow
from app.db.base import Base, JSONType, UTCDateTime, id_column


class OutboxJob(Base):
    __tablename__ = "outbox_jobs"
    __table_args__ = (Index("ix_outbox_jobs_status_available_at", "status", "available_at"),)

    id: Mapped[str] = id_column()
    actor: Mapped[str] = mapped_column(String(100))
    queue: Mapped[str] = mapped_column(String(64))
    args: Mapped[list[Any]] = mapped_column(JSONType)
    # pending (to run, or running) | parked (started too often without finishing: poison)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    # Runs started and not finished; reset whenever a run finishes (even one that reschedules).
    starts: Mapped[int] = mapped_column(Integer, default=0)
    available_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # Last hand-over to the broker; the sweep re-sends a job the broker may have lost.
    dispatched_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # Set while a worker runs the job: a second copy of the message finds it taken. A worker
    # killed mid-run leaves it to expire, and the sweep then re-sends the job.
    locked_until: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # The fencing token of the latest claim: a run settles the job (finish, reschedule, and the
    # writes that go with them) only while the row still carries its own token, so a run that
    # outlived its lease cannot settle what a newer run holds.
    claim_token: Mapped[str | None] = mapped_column(String(32), nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
