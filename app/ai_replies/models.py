"""The reply state of each conversation an agent answers on a messaging channel."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, Integer, String, text
from sqlalchemy.orm import Mapped, mapped_column

from app.core.clock import utcnow
from app.db.base import Base, JSONType, UTCDateTime


class AiReplyState(Base):
    """One row per ticket the channel's agent has been asked to answer.

    `pending` lists the inbound message ids not answered yet, in arrival order (appended under
    the row's lock, so a reply's snapshot is always a prefix of it). A reply job claims the
    row (`claim_token`, `claimed_until`) before answering: two workers never answer one
    conversation at once, and a claim outlived by its worker expires.
    """

    __tablename__ = "ai_reply_states"
    __table_args__ = (Index("ix_ai_reply_states_organization_id", "organization_id"),)

    ticket_id: Mapped[str] = mapped_column(
        ForeignKey("inbox_tickets.id", ondelete="CASCADE"), primary_key=True
    )
    organization_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    pending: Mapped[list[Any]] = mapped_column(JSONType, default=list)
    # When the oldest unanswered message arrived: a burst is answered this long after at most.
    first_pending_at: Mapped[datetime | None] = mapped_column(
        UTCDateTime(timezone=True), nullable=True
    )
    # The quiet moment the reply waits for (the last message's arrival plus the burst window).
    due_at: Mapped[datetime | None] = mapped_column(UTCDateTime(timezone=True), nullable=True)
    claim_token: Mapped[str | None] = mapped_column(String(32), nullable=True)
    claimed_until: Mapped[datetime | None] = mapped_column(
        UTCDateTime(timezone=True), nullable=True
    )
    # Set when the agent handed the conversation to a person: it stays silent on the ticket.
    silenced_reason: Mapped[str | None] = mapped_column(String(500), nullable=True)
    replies: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    updated_at: Mapped[datetime] = mapped_column(
        UTCDateTime(timezone=True), default=utcnow, onupdate=utcnow
    )
