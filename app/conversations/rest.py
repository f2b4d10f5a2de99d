"""/api/v1/inbox/tickets/{ticket_id}/messages: a ticket's conversation and replies."""

from __future__ import annotations

from starlette.responses import Response

from app.access.scopes import Scope
from app.conversations import service
from app.conversations.schemas import MessageResponse, MessageSend, message_to_public
from app.kit.pagination import envelope_c
from app.kit.queries import CursorQuery
from rest_compat.endpoint import Operation, RequestContext, json_response


async def list_messages(ctx: RequestContext) -> Response:
    query = ctx.query(CursorQuery)
    page = await service.list_messages(
        ctx.session, ctx.subject, ctx.path_param("ticket_id"), query.cursor()
    )
    return json_response(envelope_c([message_to_public(row) for row in page.items], page))


async def send_message(ctx: RequestContext) -> Response:
    message = await service.send_message(
        ctx.session, ctx.subject, ctx.resources, ctx.path_param("ticket_id"), ctx.body(MessageSend)
    )
    return json_response(message_to_public(message), status_code=201)


_TAG = "inbox"
OPERATIONS = (
    Operation(
        "GET",
        "/inbox/tickets/{ticket_id}/messages",
        list_messages,
        Scope.FULL_ACCESS,
        "A ticket's messages, newest first",
        _TAG,
        query_model=CursorQuery,
        response_model=MessageResponse,
        envelope="C",
        errors=(400, 404, 422),
    ),
    Operation(
        "POST",
        "/inbox/tickets/{ticket_id}/messages",
        send_message,
        Scope.FULL_ACCESS,
        "Reply on a ticket: text (or a /shortcut) inside the 24-hour window, or a template",
        _TAG,
        status_code=201,
        request_model=MessageSend,
        response_model=MessageResponse,
        errors=(400, 403, 404, 422),
    ),
)
