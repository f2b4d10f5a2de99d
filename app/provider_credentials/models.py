"""Provider credentials: an organization's keys for the LLM, speech and calendar providers
its agents use. One per organization and provider; keys are sealed (app/kit/crypto.py)."""

from __future__ import annotations

from sqlalchemy import ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, TimestampMixin, id_column


class ProviderCredential(TimestampMixin, Base):
    __tablename__ = "provider_credentials"
    __table_args__ = (
        # One credential per organization and provider (a PUT replaces it, race-safe).
        UniqueConstraint("organization_id", "provider"),
        Index(
            "ix_provider_credentials_organization_id_created_at_id",
            "organization_id",
            "created_at",
            "id",
        ),
    )

    id: Mapped[str] = id_column()
    organization_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    provider: Mapped[str] = mapped_column(String(32))
    base_url: Mapped[str | None] = mapped_column(String(2048), nullable=True)
    # The key and the provider-specific fields (a JSON object: some of them secret, such as
    # an OAuth client secret), sealed together; never returned on any surface.
    secret_encrypted: Mapped[str] = mapped_column(Text)
    api_key_last4: Mapped[str] = mapped_column(String(4))
