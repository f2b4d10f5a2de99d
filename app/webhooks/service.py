"""Webhook subscription operations: the resolvers REST and GraphQL both call.

URL checks happen in this order: the documented prefix rule (400 "URL must start with http:// or
https://"), then the SSRF guard of `app.webhooks.ssrf`, which resolves the host unless the
operator allows private URLs. The guard runs again on every delivery (DNS can change), so the
check here is what gives the caller an early, clear 400.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.access.subject import Subject
from app.core.clock import utcnow
from app.kit.errors import InvalidState, NotFound
from app.kit.pagination import CursorPage, CursorParams
from app.webhooks.delivery import queue_test_event
from app.webhooks.events import validate_event_names, validate_url_scheme
from app.webhooks.models import WebhookSubscription
from app.webhooks.repository import (
    WebhookDeliveryAttemptRepository,
    WebhookSubscriptionRepository,
)
from app.webhooks.schemas import WebhookCreate, WebhookUpdate
from app.webhooks.signing import generate_secret
from app.webhooks.ssrf import Resolver, resolve_public_addresses, system_resolver

WEBHOOK = "Webhook"
# After a rotation the old secret keeps signing next to the new one for this long, so
# receivers can switch over without dropping deliveries.
PREVIOUS_SECRET_TTL = timedelta(hours=24)


async def _guard(url: str, *, allow_private: bool, resolver: Resolver) -> None:
    """InvalidInput (400) when the URL's host is refused by the SSRF guard."""
    await resolve_public_addresses(url, allow_private=allow_private, resolver=resolver)


async def _get_entity(
    repository: WebhookSubscriptionRepository, webhook_id: str
) -> WebhookSubscription:
    return await repository.get_or_404(webhook_id)


async def create_webhook(
    session: AsyncSession,
    subject: Subject,
    data: WebhookCreate,
    *,
    allow_private: bool,
    resolver: Resolver = system_resolver,
) -> WebhookSubscription:
    """A new active subscription with a generated signing secret.

    `allow_private` is `settings.allow_private_webhook_urls`; `resolver` exists for tests.
    """
    url = validate_url_scheme(data.url)
    events = validate_event_names(data.events)
    await _guard(url, allow_private=allow_private, resolver=resolver)
    subscription = WebhookSubscription(
        organization_id=subject.organization_id,
        url=url,
        secret=generate_secret(),
        events=events,
        is_active=True,
    )
    WebhookSubscriptionRepository(session, subject).add(subscription)
    await session.flush()
    return subscription


async def get_webhook(session: AsyncSession, subject: Subject, webhook_id: str) -> Any:
    row = await WebhookSubscriptionRepository(session, subject).get_row_or_404(webhook_id)
    return row


async def list_webhooks(
    session: AsyncSession, subject: Subject, params: CursorParams
) -> CursorPage[Any]:
    """Every subscription of the organization, active or not, newest first."""
    repository = WebhookSubscriptionRepository(session, subject)
    return await repository.cursor_page(params)


async def update_webhook(
    session: AsyncSession,
    subject: Subject,
    webhook_id: str,
    data: WebhookUpdate,
    *,
    allow_private: bool,
    resolver: Resolver = system_resolver,
) -> WebhookSubscription:
    """Changes the fields given. Re-enabling (`is_active` true) also forgets why the service
    had switched the subscription off and its run of failures, so deliveries start afresh."""
    repository = WebhookSubscriptionRepository(session, subject)
    subscription = await _get_entity(repository, webhook_id)
    changes = data.changes()
    if "url" in changes:
        changes["url"] = validate_url_scheme(changes["url"])
    if "events" in changes:
        changes["events"] = validate_event_names(changes["events"])
    if "url" in changes:
        await _guard(changes["url"], allow_private=allow_private, resolver=resolver)
    if changes.get("is_active") is True:
        subscription.disabled_reason = None
        subscription.failing_since = None
    elif changes.get("is_active") is False and subscription.is_active:
        subscription.disabled_reason = None  # switched off by a user: no service reason
    for name, value in changes.items():
        setattr(subscription, name, value)
    await session.flush()
    return subscription


async def delete_webhook(session: AsyncSession, subject: Subject, webhook_id: str) -> None:
    """Removes the subscription; its deliveries and attempts go with it (ON DELETE CASCADE)."""
    repository = WebhookSubscriptionRepository(session, subject)
    subscription = await _get_entity(repository, webhook_id)
    await repository.delete(subscription)
    await session.flush()


async def rotate_webhook_secret(
    session: AsyncSession, subject: Subject, webhook_id: str
) -> WebhookSubscription:
    """A new secret; the current one keeps signing for `PREVIOUS_SECRET_TTL`.

    Rotating again within that window replaces the kept secret with the then-current one:
    only the last two secrets ever sign.
    """
    repository = WebhookSubscriptionRepository(session, subject)
    subscription = await _get_entity(repository, webhook_id)
    subscription.previous_secret = subscription.secret
    subscription.previous_secret_expires_at = utcnow() + PREVIOUS_SECRET_TTL
    subscription.secret = generate_secret()
    await session.flush()
    return subscription


@dataclass(frozen=True, slots=True)
class QueuedTest:
    """What `POST /webhooks/{id}/test` answers: the delivery to watch in the attempts list."""

    event_id: str
    delivery_id: str


async def send_test_event(session: AsyncSession, subject: Subject, webhook_id: str) -> QueuedTest:
    """Queue a signed `webhook.test` event for this subscription only (sent after commit)."""
    repository = WebhookSubscriptionRepository(session, subject)
    subscription = await _get_entity(repository, webhook_id)
    if not subscription.is_active:
        raise InvalidState("Webhook is not active: activate it to send a test event")
    delivery = await queue_test_event(session, subscription, subject.livemode)
    return QueuedTest(delivery.event_id, delivery.id)


async def list_webhook_deliveries(
    session: AsyncSession, subject: Subject, webhook_id: str, params: CursorParams
) -> CursorPage[Any]:
    """Delivery attempts of one subscription, newest first."""
    subscription = await WebhookSubscriptionRepository(session, subject).get_row(webhook_id)
    if subscription is None:
        raise NotFound(WEBHOOK)
    attempts = WebhookDeliveryAttemptRepository(session, subject)
    return await attempts.cursor_page(params, attempts.of_subscription(subscription.id))
