"""Message templates: stored here, reviewed and kept by the messaging platform."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Boolean, CheckConstraint, ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, JSONType, TimestampMixin, UTCDateTime, id_column

# The simulator's table (what the platform holds in test mode) is registered with the tables
# of the templates it simulates; the domain itself never reads it.
from app.integrations.whatsapp import simulator_models  # noqa: F401


class TemplateStatus(StrEnum):
    PENDING = "PENDING"
    APPROVED = "APPROVED"
    REJECTED = "REJECTED"


class TemplateCategory(StrEnum):
    MARKETING = "MARKETING"
    UTILITY = "UTILITY"
    AUTHENTICATION = "AUTHENTICATION"


class MessageTemplate(TimestampMixin, Base):
    __tablename__ = "message_templates"
    __table_args__ = (
        CheckConstraint("status IN ('PENDING', 'APPROVED', 'REJECTED')", name="status"),
        # The platform's rule (one name + language per business account), per organization.
        UniqueConstraint("organization_id", "business_account_id", "name", "language"),
        # Serves the newest-first list (envelope A) of one organization.
        Index(
            "ix_message_templates_organization_id_created_at_id",
            "organization_id",
            "created_at",
            "id",
        ),
        # Status and quality callbacks find a template by the platform's id.
        Index(
            "ix_message_templates_business_account_id_platform_template_id",
            "business_account_id",
            "platform_template_id",
        ),
        Index("ix_message_templates_channel_id", "channel_id"),
    )

    id: Mapped[str] = id_column()
    organization_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    # The channel's token submits and syncs it; a template goes with its channel.
    channel_id: Mapped[str] = mapped_column(ForeignKey("channels.id", ondelete="CASCADE"))
    business_account_id: Mapped[str] = mapped_column(String(64))
    platform_template_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    name: Mapped[str] = mapped_column(String(255))
    language: Mapped[str] = mapped_column(String(20))
    category: Mapped[str] = mapped_column(String(20))
    status: Mapped[str] = mapped_column(String(16), default=TemplateStatus.PENDING.value)
    components: Mapped[list[Any]] = mapped_column(JSONType)
    quality_score: Mapped[str] = mapped_column(String(8), default="")
    # Why the platform (or the pre-flight rules) refused it.
    rejected_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The last failure to reach the platform while submitting (retried); null once submitted.
    submission_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    livemode: Mapped[bool] = mapped_column(Boolean)
    # Meta's own status word (APPROVED, PAUSED, FLAGGED, DISABLED…), finer than `status`.
    platform_status: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # The category before Meta's last recategorization, and when Meta made it.
    previous_category: Mapped[str | None] = mapped_column(String(20), nullable=True)
    category_updated_at: Mapped[datetime | None] = mapped_column(
        UTCDateTime(timezone=True), nullable=True
    )
    # Meta's time of the latest status / quality / category update applied (unix seconds).
    platform_event_times: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)


__all__ = ["MessageTemplate", "TemplateCategory", "TemplateStatus"]
