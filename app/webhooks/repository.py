"""Every query on webhook subscriptions and their delivery attempts, scoped to one organization."""

from __future__ import annotations

from typing import ClassVar

from sqlalchemy import ColumnElement, bindparam, exists, true

from app.events.models import Event
from app.kit.repository import Filter, OrgScopedRepository
from app.webhooks.models import WebhookDeliveryAttempt, WebhookSubscription
from app.webhooks.schemas import ATTEMPT, WEBHOOK


class WebhookSubscriptionRepository(OrgScopedRepository[WebhookSubscription]):
    model = WebhookSubscription
    resource = "Webhook"
    list_columns: ClassVar = WEBHOOK.columns()


class WebhookDeliveryAttemptRepository(OrgScopedRepository[WebhookDeliveryAttempt]):
    """Attempts are written by the delivery worker; requests only read them. An attempt is
    live data when its event is (a test-mode credential sees those of test-mode events)."""

    model = WebhookDeliveryAttempt
    moded = True

    resource = "Delivery attempt"
    list_columns: ClassVar = ATTEMPT.columns(WebhookDeliveryAttempt.subscription_id)

    def _live_row(self) -> ColumnElement[bool]:
        return exists().where(Event.id == WebhookDeliveryAttempt.event_id, Event.livemode == true())

    @staticmethod
    def of_subscription(subscription_id: str) -> Filter:
        return Filter("subscription", _of_subscription, {"subscription_id": subscription_id})


def _of_subscription() -> ColumnElement[bool]:
    return WebhookDeliveryAttempt.subscription_id == bindparam("subscription_id")
