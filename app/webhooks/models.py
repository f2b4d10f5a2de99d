"""Webhook subscriptions, one delivery per (event, subscription), and every attempt of it."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.core.clock import utcnow
from app.db.base import Base, JSONType, TimestampMixin, UTCDateTime, id_column


class WebhookSubscription(TimestampMixin, Base):
    __tablename__ = "webhook_subscriptions"
    __table_args__ = (
        Index(
            "ix_webhook_subscriptions_organization_id_created_at_id",
            "organization_id",
            "created_at",
            "id",
        ),
    )

    id: Mapped[str] = id_column()
    organization_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    url: Mapped[str] = mapped_column(String(2048))
    secret: Mapped[str] = mapped_column(String(100))
    # After a rotation the old secret keeps signing (next to the new one) until it expires.
    previous_secret: Mapped[str | None] = mapped_column(String(100), nullable=True)
    previous_secret_expires_at: Mapped[datetime | None] = mapped_column(
        UTCDateTime(), nullable=True
    )
    events: Mapped[list[str]] = mapped_column(JSONType)
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    # Why the service switched it off (410 Gone, or failing for too long); None when a user did.
    disabled_reason: Mapped[str | None] = mapped_column(String(255), nullable=True)
    # Start of the current run of failed attempts; reset by any success.
    failing_since: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class WebhookDelivery(TimestampMixin, Base):
    """One event for one subscription. Its id is `X-Service-Delivery` and `webhook-id`."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (UniqueConstraint("subscription_id", "event_id"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # msg_ + 32 hex
    organization_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    subscription_id: Mapped[str] = mapped_column(
        ForeignKey("webhook_subscriptions.id", ondelete="CASCADE"), index=True
    )
    # Indexed: fan-out looks deliveries up by event (the unique key leads with subscription).
    event_id: Mapped[str] = mapped_column(ForeignKey("events.id", ondelete="CASCADE"), index=True)
    event_type: Mapped[str] = mapped_column(String(64))
    # pending → succeeded | failed (retries exhausted, 410, or subscription disabled/inactive)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempt_count: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class WebhookDeliveryAttempt(Base):
    __tablename__ = "webhook_delivery_attempts"
    __table_args__ = (
        Index(
            "ix_webhook_delivery_attempts_subscription_id_created_at_id",
            "subscription_id",
            "created_at",
            "id",
        ),
    )

    id: Mapped[str] = id_column()
    organization_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    subscription_id: Mapped[str] = mapped_column(
        ForeignKey("webhook_subscriptions.id", ondelete="CASCADE")
    )
    delivery_id: Mapped[str] = mapped_column(
        ForeignKey("webhook_deliveries.id", ondelete="CASCADE"), index=True
    )
    event_id: Mapped[str] = mapped_column(String(40))
    event_type: Mapped[str] = mapped_column(String(64))
    attempt: Mapped[int] = mapped_column(Integer)
    status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    success: Mapped[bool] = mapped_column(Boolean)
    duration_ms: Mapped[int] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    response_body: Mapped[str | None] = mapped_column(Text, nullable=True)  # first 2 KB
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
