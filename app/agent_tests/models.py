"""Agent test runs: a scripted conversation played against an agent in test mode, with
expectations checked on what the agent did (what Vapi and Retell call evals)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.calls.models import Amount
from app.db.base import Base, JSONType, TimestampMixin, UTCDateTime, id_column


class AgentTestRun(TimestampMixin, Base):
    __tablename__ = "agent_test_runs"
    __table_args__ = (
        # An agent's runs, newest first (the list of GET /agents/{id}/tests).
        Index("ix_agent_test_runs_agent_id_created_at_id", "agent_id", "created_at", "id"),
        Index(
            "ix_agent_test_runs_organization_id_created_at_id",
            "organization_id",
            "created_at",
            "id",
        ),
    )

    id: Mapped[str] = id_column()
    organization_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"))
    livemode: Mapped[bool] = mapped_column(Boolean)
    name: Mapped[str | None] = mapped_column(String(255), nullable=True)
    # queued → running → passed | failed | error
    status: Mapped[str] = mapped_column(String(16))
    # The request: turns, tool_mocks, expectations (app/agent_tests/schemas.py).
    spec: Mapped[dict[str, Any]] = mapped_column(JSONType)
    results: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list)
    transcript: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    provider: Mapped[str | None] = mapped_column(String(32), nullable=True)
    model: Mapped[str | None] = mapped_column(String(100), nullable=True)
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost: Mapped[float] = mapped_column(Amount(), default=0.0)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
