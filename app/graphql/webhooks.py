"""Webhook subscription types and fields; each field calls one webhooks service operation.

Delivery attempts are a root connection (`webhookDeliveries(webhookId, ...)`) rather than a
field of WebhookSubscription: a field would run one query per subscription of a list.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import strawberry
from strawberry.types import Info

from app.auth.scopes import Scope
from app.graphql.contacts import DeletePayload
from app.graphql.context import Context
from app.graphql.errors import UserError, user_errors
from app.graphql.inputs import provided
from app.graphql.pagination import Connection, connection
from app.graphql.permissions import requires
from app.graphql.planned import plannable
from app.kit.errors import DomainError, NotFound
from app.kit.validation import parse_model
from app.webhooks import service
from app.webhooks.schemas import WebhookCreate, WebhookUpdate


@strawberry.type
class WebhookSubscription:
    id: strawberry.ID
    organization_id: str
    url: str
    secret: str = strawberry.field(description="HMAC SHA-256 signing secret of deliveries")
    events: list[str]
    is_active: bool
    disabled_reason: str | None = strawberry.field(
        description="Why the service switched the subscription off; null when a user did"
    )
    created_at: datetime
    updated_at: datetime


WebhookSubscriptionConnection = Connection[WebhookSubscription]


@strawberry.type(description="One attempt to deliver one event to a subscription.")
class WebhookDeliveryAttempt:
    id: strawberry.ID
    event_id: str
    event_type: str
    status_code: int | None
    success: bool
    attempt: int
    duration_ms: int
    error: str | None
    created_at: datetime


WebhookDeliveryAttemptConnection = Connection[WebhookDeliveryAttempt]


@strawberry.type
class WebhookPayload:
    webhook: WebhookSubscription | None = None
    errors: list[UserError] = strawberry.field(default_factory=list)


@strawberry.type
class WebhookTestPayload:
    event_id: strawberry.ID | None = None
    delivery_id: strawberry.ID | None = None
    errors: list[UserError] = strawberry.field(default_factory=list)


@strawberry.input
class WebhookCreateInput:
    url: str
    events: list[str]


@strawberry.input(description="Only the fields given change; events replace the stored ones.")
class WebhookUpdateInput:
    url: str | None = strawberry.UNSET
    events: list[str] | None = strawberry.UNSET
    is_active: bool | None = strawberry.UNSET


def as_webhook(value: Any) -> WebhookSubscription:
    # Rows and entities carry the same attributes as the type; no copy is needed.
    return cast(WebhookSubscription, value)


def as_attempt(value: Any) -> WebhookDeliveryAttempt:
    return cast(WebhookDeliveryAttempt, value)


def _allow_private(context: Context) -> bool:
    return context.resources.settings.allow_private_webhook_urls


@strawberry.type
class WebhookQuery:
    @strawberry.field(extensions=requires(Scope.WEBHOOKS_ADMIN))
    @plannable
    async def webhooks(
        self,
        info: Info[Context, None],
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
    ) -> WebhookSubscriptionConnection:
        return await connection(
            info.context,
            (first, after, last, before),
            lambda session, subject, params: service.list_webhooks(session, subject, params),
            as_webhook,
        )

    @strawberry.field(extensions=requires(Scope.WEBHOOKS_ADMIN))
    @plannable
    async def webhook(
        self, info: Info[Context, None], id: strawberry.ID
    ) -> WebhookSubscription | None:
        context = info.context
        try:
            async with context.db() as session:
                return as_webhook(await service.get_webhook(session, context.require_subject(), id))
        except NotFound:
            return None

    @strawberry.field(extensions=requires(Scope.WEBHOOKS_ADMIN))
    @plannable
    async def webhook_deliveries(
        self,
        info: Info[Context, None],
        webhook_id: strawberry.ID,
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
    ) -> WebhookDeliveryAttemptConnection:
        return await connection(
            info.context,
            (first, after, last, before),
            lambda session, subject, params: service.list_webhook_deliveries(
                session, subject, webhook_id, params
            ),
            as_attempt,
        )


@strawberry.type
class WebhookMutation:
    @strawberry.mutation(extensions=requires(Scope.WEBHOOKS_ADMIN))
    async def create_webhook(
        self, info: Info[Context, None], input: WebhookCreateInput
    ) -> WebhookPayload:
        context = info.context
        try:
            data = parse_model(WebhookCreate, provided(input), "input")
            async with context.unit_of_work() as session:
                webhook = await service.create_webhook(
                    session,
                    context.require_subject(),
                    data,
                    allow_private=_allow_private(context),
                )
        except DomainError as exc:
            return WebhookPayload(errors=user_errors(exc))
        return WebhookPayload(webhook=as_webhook(webhook))

    @strawberry.mutation(extensions=requires(Scope.WEBHOOKS_ADMIN))
    async def update_webhook(
        self, info: Info[Context, None], id: strawberry.ID, input: WebhookUpdateInput
    ) -> WebhookPayload:
        context = info.context
        try:
            data = parse_model(WebhookUpdate, provided(input), "input")
            async with context.unit_of_work() as session:
                webhook = await service.update_webhook(
                    session,
                    context.require_subject(),
                    id,
                    data,
                    allow_private=_allow_private(context),
                )
        except DomainError as exc:
            return WebhookPayload(errors=user_errors(exc))
        return WebhookPayload(webhook=as_webhook(webhook))

    @strawberry.mutation(extensions=requires(Scope.WEBHOOKS_ADMIN))
    async def delete_webhook(self, info: Info[Context, None], id: strawberry.ID) -> DeletePayload:
        context = info.context
        try:
            async with context.unit_of_work() as session:
                await service.delete_webhook(session, context.require_subject(), id)
        except DomainError as exc:
            return DeletePayload(errors=user_errors(exc))
        return DeletePayload(deleted_id=id)

    @strawberry.mutation(
        extensions=requires(Scope.WEBHOOKS_ADMIN),
        description="A new signing secret; the old one keeps signing for 24 hours.",
    )
    async def rotate_webhook_secret(
        self, info: Info[Context, None], id: strawberry.ID
    ) -> WebhookPayload:
        context = info.context
        try:
            async with context.unit_of_work() as session:
                webhook = await service.rotate_webhook_secret(
                    session, context.require_subject(), id
                )
        except DomainError as exc:
            return WebhookPayload(errors=user_errors(exc))
        return WebhookPayload(webhook=as_webhook(webhook))

    @strawberry.mutation(
        extensions=requires(Scope.WEBHOOKS_ADMIN),
        description="Queue a signed webhook.test event for this subscription only.",
    )
    async def send_webhook_test(
        self, info: Info[Context, None], id: strawberry.ID
    ) -> WebhookTestPayload:
        context = info.context
        try:
            async with context.unit_of_work() as session:
                queued = await service.send_test_event(session, context.require_subject(), id)
        except DomainError as exc:
            return WebhookTestPayload(errors=user_errors(exc))
        return WebhookTestPayload(
            event_id=strawberry.ID(queued.event_id), delivery_id=strawberry.ID(queued.delivery_id)
        )
