"""Channels: the messaging phone numbers an organization sends and receives through."""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, TimestampMixin, id_column


class Channel(TimestampMixin, Base):
    __tablename__ = "channels"
    __table_args__ = (
        # One channel per upstream number in an organization (409 on a duplicate, race-safe).
        UniqueConstraint("organization_id", "phone_number_id"),
        # Serves the newest-first cursor walk of one organization.
        Index("ix_channels_organization_id_created_at_id", "organization_id", "created_at", "id"),
        CheckConstraint("messages_per_second BETWEEN 1 AND 1000", name="messages_per_second_range"),
    )

    id: Mapped[str] = id_column()
    organization_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    display_phone_number: Mapped[str] = mapped_column(String(50))
    # Identifiers of the number and of its business account on the upstream platform.
    phone_number_id: Mapped[str] = mapped_column(String(64))
    business_account_id: Mapped[str] = mapped_column(String(64))
    name: Mapped[str | None] = mapped_column(String(255), nullable=True)
    # False: created with a test key; its traffic goes to the simulator, never upstream.
    livemode: Mapped[bool] = mapped_column(Boolean)
    # The upstream access token, sealed by app.kit.crypto (never returned on any surface).
    access_token_encrypted: Mapped[str] = mapped_column(Text)
    # The send budget of the number, shared by its campaigns and replies (app/channels/governor.py).
    messages_per_second: Mapped[int] = mapped_column(Integer, server_default=text("80"))
