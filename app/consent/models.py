"""An organization's consent settings: its keywords and confirmation replies."""

from __future__ import annotations

from sqlalchemy import ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, JSONType, TimestampMixin


class ConsentSettings(TimestampMixin, Base):
    """One row per organization that changed the defaults (app/consent/service.py)."""

    __tablename__ = "consent_settings"

    organization_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("organizations.id", ondelete="CASCADE"), primary_key=True
    )
    opt_out_keywords: Mapped[list[str]] = mapped_column(JSONType)
    opt_in_keywords: Mapped[list[str]] = mapped_column(JSONType)
    opt_out_reply: Mapped[str | None] = mapped_column(Text, nullable=True)
    opt_in_reply: Mapped[str | None] = mapped_column(Text, nullable=True)
