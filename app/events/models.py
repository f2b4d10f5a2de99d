"""Events: what happened in an organization, in the shape webhooks and subscriptions carry."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, ForeignKey, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from app.core.clock import utcnow
from app.db.base import Base, JSONType, UTCDateTime


class Event(Base):
    __tablename__ = "events"
    __table_args__ = (
        Index("ix_events_organization_id_created_at_id", "organization_id", "created_at", "id"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # evt_ + 32 hex
    organization_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    type: Mapped[str] = mapped_column(String(64))
    livemode: Mapped[bool] = mapped_column(Boolean, default=False)
    # The resource as REST returns it, frozen at the moment of the event.
    data: Mapped[dict[str, Any]] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
