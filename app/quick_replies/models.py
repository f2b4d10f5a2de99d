"""Quick replies: canned message snippets an agent inserts by typing their shortcut."""

from __future__ import annotations

from sqlalchemy import ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, TimestampMixin, id_column


class QuickReply(TimestampMixin, Base):
    __tablename__ = "quick_replies"
    __table_args__ = (
        # A shortcut names one snippet per organization (409 on a duplicate, race-safe).
        UniqueConstraint("organization_id", "shortcut"),
        # Serves the newest-first cursor walk of one organization.
        Index(
            "ix_quick_replies_organization_id_created_at_id", "organization_id", "created_at", "id"
        ),
    )

    id: Mapped[str] = id_column()
    organization_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    shortcut: Mapped[str] = mapped_column(String(100))
    content: Mapped[str] = mapped_column(Text)
