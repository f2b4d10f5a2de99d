"""Imports every domain's models so Base.metadata is complete (migrations, tests)."""

from __future__ import annotations

from app.auth.models import ApiKey
from app.contacts.models import Contact
from app.db.base import Base
from app.db.counters import ResourceCounter
from app.idempotency.models import IdempotencyRecord
from app.organizations.models import Organization, User

__all__ = [
    "ApiKey",
    "Base",
    "Contact",
    "IdempotencyRecord",
    "Organization",
    "ResourceCounter",
    "User",
]
