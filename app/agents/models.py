"""Voice agents: who answers and places an organization's calls, and how."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ForeignKey, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, JSONType, TimestampMixin, id_column


class Agent(TimestampMixin, Base):
    __tablename__ = "agents"
    __table_args__ = (
        # Serves the newest-first cursor walk of one organization.
        Index("ix_agents_organization_id_created_at_id", "organization_id", "created_at", "id"),
    )

    id: Mapped[str] = id_column()
    organization_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(255))
    agent_type: Mapped[str] = mapped_column(String(16))  # prompt | static
    timezone: Mapped[str] = mapped_column(String(64))
    # active | inactive | training; `is_active` of the REST shapes is derived from it.
    status: Mapped[str] = mapped_column(String(16), default="active")
    # The normalized agent_config (app/agents/config.py), defaults filled in.
    config: Mapped[dict[str, Any]] = mapped_column(JSONType)
