"""Channels: the messaging phone numbers an organization sends and receives through."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    text,
    true,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, JSONType, TimestampMixin, UTCDateTime, id_column

# The channel holds its number in its mode (see `Channel.holds_number`).
HOLDS_NUMBER = text("holds_number")


class Channel(TimestampMixin, Base):
    __tablename__ = "channels"
    __table_args__ = (
        # A phone number id belongs to one organization: one live and one test-mode channel
        # hold it, across every organization; the next create is 409, race-safe.
        Index(
            "uq_channels_phone_number_id_livemode",
            "phone_number_id",
            "livemode",
            unique=True,
            postgresql_where=HOLDS_NUMBER,
            sqlite_where=HOLDS_NUMBER,
        ),
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
    # The send budget of the number, shared by its campaigns and replies (app/kit/send_governor.py).
    messages_per_second: Mapped[int] = mapped_column(Integer, server_default=text("80"))
    # True for every channel created since numbers became one organization's: platform
    # traffic for the number reaches the holder only. False only for channels registered
    # before, that shared a number with an older channel of the same mode (migration 0018):
    # they stay listed and receive nothing.
    holds_number: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    # The agent that answers the channel's inbound messages (docs/api.md, "AI replies on
    # WhatsApp"); None: people answer.
    agent_id: Mapped[str | None] = mapped_column(
        ForeignKey("agents.id", ondelete="SET NULL"), nullable=True
    )
    # Meta's view of the number (phone_number_quality_update, account_update webhooks;
    # app/channels/ratings.py): GREEN / YELLOW / RED / UNKNOWN, the messaging limit tier
    # (TIER_250…TIER_UNLIMITED), the last quality event and when Meta sent it, the last
    # account event. Null until Meta says.
    quality_rating: Mapped[str | None] = mapped_column(String(16), nullable=True)
    messaging_limit: Mapped[str | None] = mapped_column(String(32), nullable=True)
    quality_event: Mapped[str | None] = mapped_column(String(32), nullable=True)
    quality_updated_at: Mapped[datetime | None] = mapped_column(
        UTCDateTime(timezone=True), nullable=True
    )
    account_status: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # Meta's time of the latest update applied per kind ({"quality": unix seconds, …}): an
    # older update that arrives late changes nothing.
    platform_event_times: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
