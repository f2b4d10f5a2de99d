"""Contacts: the people an organization messages and calls."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, JSONType, TimestampMixin, id_column


class Contact(TimestampMixin, Base):
    __tablename__ = "contacts"
    __table_args__ = (
        # Serves the newest-first cursor walk of one organization.
        Index("ix_contacts_organization_id_created_at_id", "organization_id", "created_at", "id"),
    )

    id: Mapped[str] = id_column()
    organization_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    phone_number: Mapped[str] = mapped_column(String(50))
    name: Mapped[str] = mapped_column(String(255))
    tags: Mapped[list[str]] = mapped_column(JSONType, default=list)
    notes: Mapped[str | None] = mapped_column(Text, nullable=True)
    custom_fields: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
