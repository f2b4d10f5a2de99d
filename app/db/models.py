"""Imports every domain's models so Base.metadata is complete (migrations, tests)."""

from __future__ import annotations

from app.auth.models import ApiKey
from app.contacts.models import Contact
from app.db.base import Base
from app.db.counters import ResourceCounter
from app.events.models import Event
from app.idempotency.models import IdempotencyRecord
from app.kit.outbox_models import OutboxJob
from app.organizations.models import Organization, User
from app.webhooks.models import WebhookDelivery, WebhookDeliveryAttempt, WebhookSubscription

__all__ = [
    "ApiKey",
    "Base",
    "Contact",
    "Event",
    "IdempotencyRecord",
    "Organization",
    "OutboxJob",
    "ResourceCounter",
    "User",
    "WebhookDelivery",
    "WebhookDeliveryAttempt",
    "WebhookSubscription",
]
