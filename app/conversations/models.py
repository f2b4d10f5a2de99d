"""Messages of a conversation (a ticket), inbound and outbound, with their delivery state."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    ForeignKey,
    Index,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.core.clock import utcnow
from app.db.base import Base, JSONType, TimestampMixin, UTCDateTime, id_column


class Direction(StrEnum):
    INBOUND = "inbound"
    OUTBOUND = "outbound"


class MessageStatus(StrEnum):
    RECEIVED = "received"  # inbound
    PENDING = "pending"  # outbound, not yet accepted by the platform
    SENT = "sent"
    DELIVERED = "delivered"
    READ = "read"
    FAILED = "failed"


# Outbound states only move forward; `failed` ends everything before `read`.
STATUS_RANK = {
    MessageStatus.PENDING: 0,
    MessageStatus.SENT: 1,
    MessageStatus.DELIVERED: 2,
    MessageStatus.READ: 3,
    MessageStatus.FAILED: 4,
}


class Message(TimestampMixin, Base):
    __tablename__ = "conversation_messages"
    __table_args__ = (
        CheckConstraint("direction IN ('inbound', 'outbound')", name="direction"),
        # Webhook processing is idempotent by the platform's message id, per channel.
        UniqueConstraint("channel_id", "platform_message_id"),
        # A ticket's messages in order.
        Index("ix_conversation_messages_ticket_id_created_at", "ticket_id", "created_at"),
        Index(
            "ix_conversation_messages_organization_id_created_at_id",
            "organization_id",
            "created_at",
            "id",
        ),
    )

    id: Mapped[str] = id_column()
    organization_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    ticket_id: Mapped[str] = mapped_column(ForeignKey("inbox_tickets.id", ondelete="CASCADE"))
    channel_id: Mapped[str | None] = mapped_column(
        ForeignKey("channels.id", ondelete="SET NULL"), nullable=True
    )
    # The mode of the channel (and conversation) the message went through.
    livemode: Mapped[bool] = mapped_column(Boolean, server_default=false())
    direction: Mapped[str] = mapped_column(String(16))
    # `text` or `template`.
    kind: Mapped[str] = mapped_column(String(16))
    text: Mapped[str | None] = mapped_column(Text, nullable=True)
    template_name: Mapped[str | None] = mapped_column(String(255), nullable=True)
    platform_message_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    status: Mapped[str] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime(timezone=True), nullable=True)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime(timezone=True), nullable=True)
    read_at: Mapped[datetime | None] = mapped_column(UTCDateTime(timezone=True), nullable=True)
    failed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(timezone=True), nullable=True)
    # The agent that wrote an outbound message (an AI reply); None for people and inbound.
    agent_id: Mapped[str | None] = mapped_column(
        ForeignKey("agents.id", ondelete="SET NULL"), nullable=True
    )
    # Meta's pricing of the message (statuses[].pricing): category and whether it is billed.
    pricing_category: Mapped[str | None] = mapped_column(String(32), nullable=True)
    billable: Mapped[bool | None] = mapped_column(Boolean, nullable=True)


class ParkedStatus(Base):
    """A delivery status that named no message of its channel when it arrived (a status can
    overtake the send it is about), kept for the channel's one retry job
    (app/conversations/statuses.py). A bounded number per channel."""

    __tablename__ = "parked_statuses"
    __table_args__ = (
        # The channel's parked statuses, oldest first; the expired ones.
        Index("ix_parked_statuses_channel_id_expires_at", "channel_id", "expires_at"),
    )

    id: Mapped[str] = id_column()
    channel_id: Mapped[str] = mapped_column(ForeignKey("channels.id", ondelete="CASCADE"))
    platform_message_id: Mapped[str] = mapped_column(String(128))
    # The `statuses[]` entry, reduced to what applying it reads (id, status, timestamp, errors).
    status: Mapped[dict[str, Any]] = mapped_column(JSONType)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(timezone=True), default=utcnow)
