"""Webhook subscription types and fields; each field calls one webhooks service operation.

Delivery attempts are a root connection (`webhookDeliveries(webhookId, ...)`) rather than a
field of WebhookSubscription: a field would run one query per subscription of a list.
"""

from __future__ import annotations

from typing import Any

import strawberry
from strawberry.types import Info

from app.access.scopes import Scope
from app.graphql.context import Context
from app.graphql.pagination import Connection, connection
from app.graphql.permissions import requires
from app.graphql.planned import plannable
from app.graphql.resource import DomainMutations, Payload, list_field, node_field
from app.kit.errors import InvalidInput, InvalidState, NotFound
from app.webhooks import service
from app.webhooks.schemas import (
    ATTEMPT,
    WEBHOOK,
    WebhookCreate,
    WebhookDeliveryAttempt,
    WebhookSubscription,
    WebhookUpdate,
)

WebhookSubscriptionConnection = Connection[WebhookSubscription]


WebhookDeliveryAttemptConnection = Connection[WebhookDeliveryAttempt]


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
    return WEBHOOK.as_graphql(value)


def as_attempt(value: Any) -> WebhookDeliveryAttempt:
    return ATTEMPT.as_graphql(value)


WEBHOOKS = DomainMutations(
    "Webhook",
    scope=Scope.WEBHOOKS_ADMIN,
    errors=(InvalidInput, NotFound, InvalidState),
    node=WebhookSubscription,
    as_node=as_webhook,
    node_field="webhook",
)
WebhookTestPayload = WEBHOOKS.payload_type(
    "WebhookTestPayload", {"event_id": strawberry.ID, "delivery_id": strawberry.ID}
)


@strawberry.type
class Query:
    webhooks = list_field(
        Scope.WEBHOOKS_ADMIN,
        service.list_webhooks,
        as_webhook,
        WebhookSubscription,
    )
    webhook = node_field(Scope.WEBHOOKS_ADMIN, service.get_webhook, as_webhook, WebhookSubscription)

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
    ) -> WebhookDeliveryAttemptConnection | None:
        return await connection(
            info.context,
            (first, after, last, before),
            lambda session, subject, params: service.list_webhook_deliveries(
                session, subject, webhook_id, params
            ),
            as_attempt,
        )


@strawberry.type
class Mutation:
    create_webhook = WEBHOOKS.create_field(
        WebhookCreateInput, WebhookCreate, service.create_webhook, guards_urls=True
    )
    update_webhook = WEBHOOKS.update_field(
        WebhookUpdateInput, WebhookUpdate, service.update_webhook, guards_urls=True
    )
    delete_webhook = WEBHOOKS.delete_field(service.delete_webhook)

    @WEBHOOKS.mutation(description="A new signing secret; the old one keeps signing for 24 hours.")
    async def rotate_webhook_secret(self, info: Info[Context, None], id: strawberry.ID) -> Payload:
        return await WEBHOOKS.perform(
            info,
            lambda session, subject: service.rotate_webhook_secret(session, subject, id),
            WEBHOOKS.node_answer,
        )

    @WEBHOOKS.mutation(
        payload=WebhookTestPayload,
        description="Queue a signed webhook.test event for this subscription only.",
    )
    async def send_webhook_test(self, info: Info[Context, None], id: strawberry.ID) -> Payload:
        return await WEBHOOKS.perform(
            info,
            lambda session, subject: service.send_test_event(session, subject, id),
            lambda queued: {"event_id": queued.event_id, "delivery_id": queued.delivery_id},
            payload=WebhookTestPayload,
        )
