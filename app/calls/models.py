"""Call logs: one row per voice call an organization's agents placed or answered."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from app.core.clock import utcnow
from app.db.base import Base, JSONType, TimestampMixin, UTCDateTime, id_column

# The `call_id` of a browser session (app/calls/web.py): it has no carrier call.
BROWSER_CALL_ID_PREFIX = "web_"


class Amount(TypeDecorator[float]):
    """A double that reads back as a float everywhere. asyncpg already returns floats, and
    SQLAlchemy's asyncpg Float processor needs the result's column type, which the prepared
    reads (app/db/prepared.py) compile without."""

    impl = Float()
    cache_ok = True

    def result_processor(self, dialect: Dialect, coltype: Any) -> Any:
        if dialect.driver == "asyncpg":
            return None
        return _as_float


def _as_float(value: Any) -> float | None:
    # SQLite hands back an int for a whole amount stored as such.
    return None if value is None else float(value)


# On PostgreSQL: a pg_trgm GIN index, so `search` (ILIKE '%text%' on any of the three columns)
# is answered from the index. SQLite ignores the postgresql_* options and gets a plain index on
# the same columns, which serves exact call_id lookups (carrier status callbacks).
SEARCH_INDEX = Index(
    "ix_call_logs_search_trgm",
    "call_id",
    "from_number",
    "to_number",
    postgresql_using="gin",
    postgresql_ops={
        "call_id": "gin_trgm_ops",
        "from_number": "gin_trgm_ops",
        "to_number": "gin_trgm_ops",
    },
)


# A call still under way that carries its gateway id (`sb_…`): no carrier SID recorded yet.
UNPLACED_PREDICATE = "status = 'in-progress' AND call_id LIKE 'sb\\_%' ESCAPE '\\'"


class CallLog(TimestampMixin, Base):
    __tablename__ = "call_logs"
    __table_args__ = (
        # Newest call first within one organization (the list order).
        Index("ix_call_logs_organization_id_started_at_id", "organization_id", "started_at", "id"),
        # A contact's most recent calls (GraphQL Contact.recentCalls).
        Index("ix_call_logs_contact_id_started_at_id", "contact_id", "started_at", "id"),
        SEARCH_INDEX,
        # Streaming calls, for the sweep of calls whose media process died (app/voice/sweep.py).
        Index(
            "ix_call_logs_media_heartbeat_at",
            "media_heartbeat_at",
            postgresql_where=text("media_heartbeat_at IS NOT NULL"),
            sqlite_where=text("media_heartbeat_at IS NOT NULL"),
        ),
        # Outbound calls the carrier has not confirmed yet, for the placement sweep
        # (app/calls/placement.py); the predicate is repeated word for word by its query.
        Index(
            "ix_call_logs_unplaced_started_at",
            "started_at",
            postgresql_where=text(UNPLACED_PREDICATE),
            sqlite_where=text(UNPLACED_PREDICATE),
        ),
    )

    id: Mapped[str] = id_column()
    organization_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    livemode: Mapped[bool] = mapped_column(Boolean)
    call_id: Mapped[str] = mapped_column(String(255))
    # Agents and channels are referenced without a foreign key on purpose: a call log is a
    # historical record and keeps naming the agent or number after either is deleted.
    agent_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    chat_phone_number_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    phone_number_id: Mapped[str | None] = mapped_column(String(255), nullable=True)
    # The contact the call was with; cleared when that contact is deleted.
    contact_id: Mapped[str | None] = mapped_column(
        ForeignKey("contacts.id", ondelete="SET NULL"), nullable=True
    )
    from_number: Mapped[str] = mapped_column(String(50))
    to_number: Mapped[str] = mapped_column(String(50))
    direction: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    duration_seconds: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    recording_url: Mapped[str | None] = mapped_column(String(2048), nullable=True)
    # Segments {speaker: "agent" | "caller", text, timestamp (seconds from the call's start)}.
    transcript: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list)
    summary: Mapped[str | None] = mapped_column(Text, nullable=True)
    # USD. A double: the API reports it as a JSON number and nothing sums it server-side.
    cost: Mapped[float] = mapped_column(Amount(), default=0.0)
    # Model tokens of the agent's replies in the call (the conversation engine's usage).
    input_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    output_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    # Live voice (app/voice/): why the call ended (`caller_hung_up`, `transferred`,
    # `voicemail_left`, `silence_timeout`, …) and who answered an outbound call (the
    # carrier's answering-machine detection: `human`, `machine_end_beep`, …).
    end_reason: Mapped[str | None] = mapped_column(String(64), nullable=True)
    answered_by: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # USD of speech to text, the model and speech of the call; `cost` adds the carrier's price.
    usage_cost: Mapped[float] = mapped_column(Amount(), default=0.0, server_default=text("0"))
    # SHA-256 of the one media stream token that may still open the call's stream.
    stream_token_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # Refreshed by the process holding the call's media stream; a stale one means it died.
    media_heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # When the carrier was last asked to place the call: set before the request, so a run
    # after a lost answer looks the call up at the carrier instead of ringing the callee
    # twice (app/calls/placement.py).
    placement_attempted_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # The post-call analysis {status, data, success, criteria, reason, error, extractor,
    # model, analyzed_at} (app/calls/analysis.py); null when the agent asks for none.
    analysis: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)


class AgentPhoneNumber(TimestampMixin, Base):
    """A carrier number whose incoming calls an agent answers. A number belongs to one
    organization and one agent at a time in each mode (unique across the service: the carrier
    routes each number to one account). A live assignment is verified with the carrier; a
    test-mode one never routes a live call, so it never stands in a live one's way."""

    __tablename__ = "agent_phone_numbers"
    __table_args__ = (
        UniqueConstraint(
            "phone_number", "livemode", name="uq_agent_phone_numbers_phone_number_livemode"
        ),
        Index(
            "ix_agent_phone_numbers_organization_id_created_at_id",
            "organization_id",
            "created_at",
            "id",
        ),
    )

    id: Mapped[str] = id_column()
    organization_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"), index=True)
    phone_number: Mapped[str] = mapped_column(String(50))
    livemode: Mapped[bool] = mapped_column(Boolean)
