"""Imports every domain's models so Base.metadata is complete (migrations, tests)."""

from __future__ import annotations

from app.agents.models import Agent
from app.auth.models import ApiKey
from app.calls.models import CallLog
from app.channels.models import Channel
from app.contacts.models import Contact
from app.db.base import Base
from app.db.counters import ResourceCounter
from app.events.models import Event
from app.idempotency.models import IdempotencyRecord
from app.inbox.models import Ticket
from app.kit.outbox_models import OutboxJob
from app.organizations.models import Organization, User
from app.quick_replies.models import QuickReply
from app.webhooks.models import WebhookDelivery, WebhookDeliveryAttempt, WebhookSubscription

__all__ = [
    "Agent",
    "ApiKey",
    "Base",
    "CallLog",
    "Channel",
    "Contact",
    "Event",
    "IdempotencyRecord",
    "Organization",
    "OutboxJob",
    "QuickReply",
    "ResourceCounter",
    "Ticket",
    "User",
    "WebhookDelivery",
    "WebhookDeliveryAttempt",
    "WebhookSubscription",
]
