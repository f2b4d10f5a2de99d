"""Contacts: the people an organization messages and calls."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, ForeignKey, Index, String, Text, false, text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, JSONType, TimestampMixin, UTCDateTime, id_column

# On PostgreSQL, GIN indexes that start with the organization (btree_gin), so a tenant's
# filter reads only its own entries: jsonb_path_ops answers `tags @> '["vip"]'`, pg_trgm
# answers `name ILIKE '%text%'` and `phone_number LIKE '%text%'` for 3 characters or more.
# SQLite ignores the postgresql_* options and gets plain indexes on the same columns (the
# organization prefix still narrows its scans).
TAGS_INDEX = Index(
    "ix_contacts_organization_id_tags",
    "organization_id",
    "tags",
    postgresql_using="gin",
    postgresql_ops={"tags": "jsonb_path_ops"},
)
SEARCH_INDEX = Index(
    "ix_contacts_search_trgm",
    "organization_id",
    "name",
    "phone_number",
    postgresql_using="gin",
    postgresql_ops={"name": "gin_trgm_ops", "phone_number": "gin_trgm_ops"},
)


# A search starting with '+' can only match an E.164 number as its prefix: a byte-ordered
# B-tree range per organization (app/contacts/repository.py).
PHONE_PREFIX_INDEX = Index(
    "ix_contacts_organization_id_phone_number",
    "organization_id",
    "phone_number",
    postgresql_ops={"phone_number": "text_pattern_ops"},
)


class Contact(TimestampMixin, Base):
    __tablename__ = "contacts"
    __table_args__ = (
        # Serves the newest-first cursor walk of one organization.
        Index("ix_contacts_organization_id_created_at_id", "organization_id", "created_at", "id"),
        TAGS_INDEX,
        SEARCH_INDEX,
        PHONE_PREFIX_INDEX,
        # Inbound messages from a user known by Meta's business-scoped id only.
        Index(
            "ix_contacts_organization_id_platform_user_id",
            "organization_id",
            "platform_user_id",
            postgresql_where=text("platform_user_id IS NOT NULL"),
            sqlite_where=text("platform_user_id IS NOT NULL"),
        ),
    )

    id: Mapped[str] = id_column()
    organization_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    phone_number: Mapped[str] = mapped_column(String(50))
    name: Mapped[str] = mapped_column(String(255))
    tags: Mapped[list[str]] = mapped_column(JSONType, default=list)
    notes: Mapped[str | None] = mapped_column(Text, nullable=True)
    custom_fields: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    # Meta's business-scoped user id (BSUID, `US.1349…`): how WhatsApp names a user who hides
    # their number; replies then go to it. Empty `phone_number` for such a contact.
    platform_user_id: Mapped[str | None] = mapped_column(String(160), nullable=True)
    # Consent (docs/api.md, "Consent"): an opt-out from marketing messages, when and how it
    # came, and whether the contact may be called.
    marketing_opt_out_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    marketing_opt_out_source: Mapped[str | None] = mapped_column(String(16), nullable=True)
    do_not_call: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # When the latest marketing consent change happened (the platform's or keyword's own
    # time): an older opt-out or opt-in that arrives late changes nothing.
    consent_changed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
