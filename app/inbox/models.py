"""Inbox tickets: one conversation with a contact, `open` until someone closes it."""

from __future__ import annotations

from enum import StrEnum

from sqlalchemy import Boolean, CheckConstraint, ForeignKey, Index, String, false, text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, TimestampMixin, id_column


class TicketStatus(StrEnum):
    OPEN = "open"
    CLOSED = "closed"


# The one-open-ticket rule lives in the database, not only in the service's check: two
# concurrent creates for one contact both pass the check, and the second insert then fails
# on this index (the service answers with the ticket that won).
OPEN_TICKET_INDEX = "uq_inbox_tickets_open_contact_id"
_OPEN_ONLY = text("status = 'open'")


class Ticket(TimestampMixin, Base):
    __tablename__ = "inbox_tickets"
    __table_args__ = (
        CheckConstraint("status IN ('open', 'closed')", name="status"),
        # Serves the newest-first cursor walk of one organization.
        Index(
            "ix_inbox_tickets_organization_id_created_at_id", "organization_id", "created_at", "id"
        ),
        # One open conversation per contact in each mode: a live channel's messages never
        # join a test-mode conversation, nor the other way round.
        Index(
            OPEN_TICKET_INDEX,
            "contact_id",
            "livemode",
            unique=True,
            postgresql_where=_OPEN_ONLY,
            sqlite_where=_OPEN_ONLY,
        ),
        # Deleting a contact cascades to its tickets: without this, a scan per deletion.
        Index("ix_inbox_tickets_contact_id", "contact_id"),
    )

    id: Mapped[str] = id_column()
    organization_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    # A ticket is a conversation with its contact: it goes when the contact is deleted.
    contact_id: Mapped[str] = mapped_column(ForeignKey("contacts.id", ondelete="CASCADE"))
    # The messaging channel the conversation runs on: named at creation, or set by the first
    # inbound message. Deleting the channel keeps the conversation's history.
    chat_phone_number_id: Mapped[str | None] = mapped_column(
        ForeignKey("channels.id", ondelete="SET NULL"), nullable=True
    )
    # The channel's mode, or without one the creating credential's; kept when the channel
    # goes, so a live conversation stays live data.
    livemode: Mapped[bool] = mapped_column(Boolean, server_default=false())
    status: Mapped[str] = mapped_column(String(16), default=TicketStatus.OPEN.value)
    assigned_user_id: Mapped[str | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), nullable=True
    )
