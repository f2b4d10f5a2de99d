"""API keys: only a keyed hash of the secret is stored."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, Boolean, ForeignKey, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, TimestampMixin, UTCDateTime, id_column


class ApiKey(TimestampMixin, Base):
    __tablename__ = "api_keys"
    __table_args__ = (
        Index("ix_api_keys_organization_id_created_at", "organization_id", "created_at"),
    )

    id: Mapped[str] = id_column()
    organization_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(255))
    # HMAC-SHA256(secret key, full key) in hex: a stolen table alone cannot be replayed.
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # First characters of the key, shown in listings so people can tell keys apart.
    display_prefix: Mapped[str] = mapped_column(String(32))
    scopes: Mapped[list[str]] = mapped_column(JSON)
    livemode: Mapped[bool] = mapped_column(Boolean, default=False)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    created_by_user_id: Mapped[str | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), nullable=True
    )
