"""/api/v1/webhooks: routes → webhooks service → the JSON shapes of docs/api.md."""

from __future__ import annotations

from typing import Any

from pydantic import Field
from starlette.responses import Response

from app.access.scopes import Scope
from app.kit.pagination import MAX_LIMIT, CursorPage, envelope_c
from app.kit.queries import CursorQuery
from app.webhooks import service
from app.webhooks.schemas import (
    WebhookCreate,
    WebhookDeliveryAttemptResponse,
    WebhookListResponse,
    WebhookSubscriptionResponse,
    WebhookTestResponse,
    WebhookUpdate,
    attempt_to_public,
    webhook_to_public,
)
from rest_compat.endpoint import Operation, RequestContext, json_response
from rest_compat.resource import create_handler, delete_handler, get_handler, update_handler


class WebhookListQuery(CursorQuery):
    """The documented API lists every subscription at once; paging is optional, up to 100 a page."""

    limit: int = Field(default=MAX_LIMIT, ge=1, le=MAX_LIMIT)


def _webhook_list(items: list[dict[str, Any]], page: CursorPage[Any]) -> dict[str, Any]:
    # `webhooks` is the documented shape; the cursor fields ride along for clients that page.
    return {
        "webhooks": items,
        "has_more": page.has_more,
        "next_cursor": items[-1]["id"] if items else None,
    }


create_webhook = create_handler(
    WebhookCreate, service.create_webhook, webhook_to_public, guards_urls=True
)


async def list_webhooks(ctx: RequestContext) -> Response:
    query = ctx.query(WebhookListQuery)
    page = await service.list_webhooks(ctx.session, ctx.subject, query.cursor())
    return json_response(_webhook_list([webhook_to_public(row) for row in page.items], page))


get_webhook = get_handler(service.get_webhook, "webhook_id", webhook_to_public)


update_webhook = update_handler(
    WebhookUpdate, service.update_webhook, "webhook_id", webhook_to_public, guards_urls=True
)


delete_webhook = delete_handler(service.delete_webhook, "webhook_id")


async def send_test_event(ctx: RequestContext) -> Response:
    queued = await service.send_test_event(ctx.session, ctx.subject, ctx.path_param("webhook_id"))
    return json_response(
        {"event_id": queued.event_id, "delivery_id": queued.delivery_id, "status": "pending"},
        202,
    )


async def rotate_webhook_secret(ctx: RequestContext) -> Response:
    webhook = await service.rotate_webhook_secret(
        ctx.session, ctx.subject, ctx.path_param("webhook_id")
    )
    return json_response(webhook_to_public(webhook))


async def list_webhook_deliveries(ctx: RequestContext) -> Response:
    query = ctx.query(CursorQuery)
    page = await service.list_webhook_deliveries(
        ctx.session, ctx.subject, ctx.path_param("webhook_id"), query.cursor()
    )
    return json_response(envelope_c([attempt_to_public(row) for row in page.items], page))


_TAG = "webhooks"
OPERATIONS = (
    Operation(
        "POST",
        "/webhooks",
        create_webhook,
        Scope.WEBHOOKS_ADMIN,
        "Create a webhook subscription (the response carries its signing secret)",
        _TAG,
        request_model=WebhookCreate,
        response_model=WebhookSubscriptionResponse,
        errors=(400, 422),
    ),
    Operation(
        "GET",
        "/webhooks",
        list_webhooks,
        Scope.WEBHOOKS_ADMIN,
        "List webhook subscriptions, active or not (newest first)",
        _TAG,
        query_model=WebhookListQuery,
        response_model=WebhookListResponse,
        errors=(400, 422),
    ),
    Operation(
        "GET",
        "/webhooks/{webhook_id}",
        get_webhook,
        Scope.WEBHOOKS_ADMIN,
        "Get a webhook subscription",
        _TAG,
        response_model=WebhookSubscriptionResponse,
        errors=(404,),
    ),
    Operation(
        "PUT",
        "/webhooks/{webhook_id}",
        update_webhook,
        Scope.WEBHOOKS_ADMIN,
        "Update a webhook subscription (fields present replace stored ones)",
        _TAG,
        request_model=WebhookUpdate,
        response_model=WebhookSubscriptionResponse,
        errors=(400, 404, 422),
    ),
    Operation(
        "DELETE",
        "/webhooks/{webhook_id}",
        delete_webhook,
        Scope.WEBHOOKS_ADMIN,
        "Delete a webhook subscription",
        _TAG,
        status_code=204,
        errors=(404,),
    ),
    Operation(
        "POST",
        "/webhooks/{webhook_id}/rotate-secret",
        rotate_webhook_secret,
        Scope.WEBHOOKS_ADMIN,
        "Rotate the signing secret (the old one keeps signing for 24 hours)",
        _TAG,
        response_model=WebhookSubscriptionResponse,
        errors=(404,),
    ),
    Operation(
        "POST",
        "/webhooks/{webhook_id}/test",
        send_test_event,
        Scope.WEBHOOKS_ADMIN,
        "Send a signed webhook.test event to this subscription (202: queued)",
        _TAG,
        status_code=202,
        response_model=WebhookTestResponse,
        errors=(400, 404),
    ),
    Operation(
        "GET",
        "/webhooks/{webhook_id}/deliveries",
        list_webhook_deliveries,
        Scope.WEBHOOKS_ADMIN,
        "List delivery attempts of a webhook subscription (newest first)",
        _TAG,
        query_model=CursorQuery,
        response_model=WebhookDeliveryAttemptResponse,
        envelope="C",
        errors=(400, 404, 422),
    ),
)
