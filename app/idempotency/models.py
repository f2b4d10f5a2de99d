"""Stored first responses of POSTs sent with an Idempotency-Key."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Integer, LargeBinary, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.core.clock import utcnow
from app.db.base import Base, UTCDateTime, id_column


class IdempotencyRecord(Base):
    __tablename__ = "idempotency_records"
    __table_args__ = (UniqueConstraint("organization_id", "key"),)

    id: Mapped[str] = id_column()
    organization_id: Mapped[str] = mapped_column(String(36))
    key: Mapped[str] = mapped_column(String(255))
    # SHA-256 of method, path and body: the same key with another request is refused.
    request_hash: Mapped[str] = mapped_column(String(64))
    status_code: Mapped[int] = mapped_column(Integer)
    response_body: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
