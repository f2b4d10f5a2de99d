"""/api/v1/quick-replies: routes → quick replies service → the JSON shape of docs/api.md."""

from __future__ import annotations

from starlette.responses import Response

from app.access.scopes import Scope
from app.kit.queries import CursorQuery
from app.quick_replies import service
from app.quick_replies.cache import snippet_cache
from app.quick_replies.schemas import (
    QuickReplyCreate,
    QuickReplyResponse,
    QuickReplyUpdate,
    quick_reply_to_public,
)
from rest_compat.endpoint import Operation, RequestContext, json_response
from rest_compat.resource import get_handler, list_handler


async def create_quick_reply(ctx: RequestContext) -> Response:
    quick_reply = await service.create_quick_reply(
        ctx.session, ctx.subject, ctx.body(QuickReplyCreate), snippet_cache(ctx.resources.redis)
    )
    return json_response(quick_reply_to_public(quick_reply), status_code=201)


list_quick_replies = list_handler(service.list_quick_replies, quick_reply_to_public)


get_quick_reply = get_handler(service.get_quick_reply, "quick_reply_id", quick_reply_to_public)


async def update_quick_reply(ctx: RequestContext) -> Response:
    quick_reply = await service.update_quick_reply(
        ctx.session,
        ctx.subject,
        ctx.path_param("quick_reply_id"),
        ctx.body(QuickReplyUpdate),
        snippet_cache(ctx.resources.redis),
    )
    return json_response(quick_reply_to_public(quick_reply))


async def delete_quick_reply(ctx: RequestContext) -> Response:
    await service.delete_quick_reply(
        ctx.session,
        ctx.subject,
        ctx.path_param("quick_reply_id"),
        snippet_cache(ctx.resources.redis),
    )
    return Response(status_code=204)


_TAG = "quick-replies"
OPERATIONS = (
    Operation(
        "POST",
        "/quick-replies",
        create_quick_reply,
        Scope.FULL_ACCESS,
        "Create a quick reply (invalidates the organization's cached snippet list)",
        _TAG,
        status_code=201,
        request_model=QuickReplyCreate,
        response_model=QuickReplyResponse,
        errors=(400, 409, 422),
    ),
    Operation(
        "GET",
        "/quick-replies",
        list_quick_replies,
        Scope.FULL_ACCESS,
        "List quick replies (newest first)",
        _TAG,
        query_model=CursorQuery,
        response_model=QuickReplyResponse,
        envelope="C",
        errors=(400, 422),
    ),
    Operation(
        "GET",
        "/quick-replies/{quick_reply_id}",
        get_quick_reply,
        Scope.FULL_ACCESS,
        "Get a quick reply",
        _TAG,
        response_model=QuickReplyResponse,
        errors=(404,),
    ),
    Operation(
        "PUT",
        "/quick-replies/{quick_reply_id}",
        update_quick_reply,
        Scope.FULL_ACCESS,
        "Update a quick reply (fields present replace stored ones; invalidates the cache)",
        _TAG,
        request_model=QuickReplyUpdate,
        response_model=QuickReplyResponse,
        errors=(404, 409, 422),
    ),
    Operation(
        "DELETE",
        "/quick-replies/{quick_reply_id}",
        delete_quick_reply,
        Scope.FULL_ACCESS,
        "Delete a quick reply (invalidates the cache)",
        _TAG,
        status_code=204,
        errors=(404,),
    ),
)
