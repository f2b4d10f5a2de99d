"""The simulator's own table (test mode only): the templates of each business account, as the
real platform keeps them. The templates domain never reads it; only the simulator
(app/integrations/whatsapp/simulator.py) does. The templates domain's models import it, so the
table is registered wherever the domain tables are (app/tables.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.core.clock import utcnow
from app.db.base import Base, JSONType, UTCDateTime


# The simulator's record of what the platform holds (test mode only; the domain never reads
# it): the templates of each business account, as the real platform keeps them.
class SimulatedTemplate(Base):
    __tablename__ = "whatsapp_simulator_templates"
    # The platform's rule: one template per name and language in a business account.
    __table_args__ = (UniqueConstraint("business_account_id", "name", "language"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    business_account_id: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(255))
    language: Mapped[str] = mapped_column(String(20))
    category: Mapped[str] = mapped_column(String(20))
    components: Mapped[list[Any]] = mapped_column(JSONType)
    status: Mapped[str] = mapped_column(String(16))
    quality_score: Mapped[str] = mapped_column(String(8), default="")
    rejected_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(timezone=True), default=utcnow)
