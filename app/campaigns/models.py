"""Campaigns: one template message sent to an audience of contacts through one channel, and
the per-recipient ledger that is the truth of its progress."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Boolean, CheckConstraint, ForeignKey, Index, Integer, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, JSONType, TimestampMixin, UTCDateTime, id_column


class CampaignStatus(StrEnum):
    DRAFT = "draft"
    SCHEDULED = "scheduled"
    SENDING = "sending"
    PAUSED = "paused"
    COMPLETED = "completed"
    CANCELLED = "cancelled"


class AudienceType(StrEnum):
    ALL = "all"
    TAGS = "tags"
    MANUAL = "manual"


class RecipientStatus(StrEnum):
    PENDING = "pending"
    # Taken by a dispatch run, in the database, before the send: a second run skips it.
    CLAIMED = "claimed"
    SENT = "sent"
    DELIVERED = "delivered"
    READ = "read"
    FAILED = "failed"
    # Refused for Meta's per-user marketing limit (131049): pending again at `deferred_until`.
    DEFERRED = "deferred"


class Campaign(TimestampMixin, Base):
    __tablename__ = "campaigns"
    __table_args__ = (
        CheckConstraint(
            "status IN ('draft', 'scheduled', 'sending', 'paused', 'completed', 'cancelled')",
            name="status",
        ),
        CheckConstraint("audience_type IN ('all', 'tags', 'manual')", name="audience_type"),
        # Serves the newest-first list (envelope A) of one organization.
        Index("ix_campaigns_organization_id_created_at_id", "organization_id", "created_at", "id"),
    )

    id: Mapped[str] = id_column()
    organization_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(255))
    chat_phone_number_id: Mapped[str] = mapped_column(
        ForeignKey("channels.id", ondelete="CASCADE"), index=True
    )
    message_template_id: Mapped[str | None] = mapped_column(
        ForeignKey("message_templates.id", ondelete="SET NULL"), nullable=True, index=True
    )
    audience_type: Mapped[str] = mapped_column(String(16))
    audience_tags: Mapped[list[str] | None] = mapped_column(JSONType, nullable=True)
    audience_contact_ids: Mapped[list[str] | None] = mapped_column(JSONType, nullable=True)
    # Positional variable ("1", "2"…) → literal text or a {{contact.…}} reference.
    template_parameters: Mapped[dict[str, str] | None] = mapped_column(JSONType, nullable=True)
    scheduled_at: Mapped[datetime | None] = mapped_column(UTCDateTime(timezone=True), nullable=True)
    status: Mapped[str] = mapped_column(String(16), default=CampaignStatus.DRAFT.value)
    total_contacts_count: Mapped[int] = mapped_column(Integer, default=0)
    sent_count: Mapped[int] = mapped_column(Integer, default=0)
    delivered_count: Mapped[int] = mapped_column(Integer, default=0)
    read_count: Mapped[int] = mapped_column(Integer, default=0)
    failed_count: Mapped[int] = mapped_column(Integer, default=0)
    # Recipients waiting out Meta's per-user marketing limit (not sent, not failed).
    deferred_count: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    # Why the campaign paused itself (the channel's rating fell to RED); null otherwise.
    paused_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    livemode: Mapped[bool] = mapped_column(Boolean)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(timezone=True), nullable=True)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(timezone=True), nullable=True)


class CampaignRecipient(Base):
    """One contact of a launched campaign. The campaign's counters move by deltas in the
    same transaction as these rows, so they always equal a count over the ledger."""

    __tablename__ = "campaign_recipients"
    __table_args__ = (
        # The dispatch run streams a campaign's pending rows in contact order.
        Index("ix_campaign_recipients_campaign_id_status", "campaign_id", "status", "contact_id"),
        # Status callbacks find the recipient by the platform's message id. Partial: a
        # launch writes every row without one, and indexing those NULLs costs the launch.
        Index(
            "ix_campaign_recipients_platform_message_id",
            "platform_message_id",
            postgresql_where=text("platform_message_id IS NOT NULL"),
            sqlite_where=text("platform_message_id IS NOT NULL"),
        ),
    )

    campaign_id: Mapped[str] = mapped_column(
        ForeignKey("campaigns.id", ondelete="CASCADE"), primary_key=True
    )
    contact_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    # Snapshots at launch: the audience is what it was when the campaign started.
    phone_number: Mapped[str] = mapped_column(String(50))
    name: Mapped[str] = mapped_column(String(255))
    custom_fields: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    status: Mapped[str] = mapped_column(String(16), default=RecipientStatus.PENDING.value)
    platform_message_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(timezone=True), nullable=True)
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime(timezone=True), nullable=True)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime(timezone=True), nullable=True)
    read_at: Mapped[datetime | None] = mapped_column(UTCDateTime(timezone=True), nullable=True)
    failed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(timezone=True), nullable=True)
    # Meta's pricing of the message (statuses[].pricing): category and whether it is billed.
    pricing_category: Mapped[str | None] = mapped_column(String(32), nullable=True)
    billable: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    # Times the recipient was deferred for Meta's per-user marketing limit, and until when.
    deferrals: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    deferred_until: Mapped[datetime | None] = mapped_column(
        UTCDateTime(timezone=True), nullable=True
    )


__all__ = ["AudienceType", "Campaign", "CampaignRecipient", "CampaignStatus", "RecipientStatus"]
