"""/api/v1/inbox/tickets: routes → inbox service → the JSON shapes of docs/api.md."""

from __future__ import annotations

from typing import Literal

from starlette.responses import Response

from app.access.scopes import Scope
from app.inbox import service
from app.inbox.schemas import TicketAssign, TicketCreate, TicketResponse, ticket_to_public
from app.kit.pagination import envelope_c
from app.kit.queries import CursorQuery
from rest_compat.endpoint import Operation, RequestContext, json_response
from rest_compat.resource import get_handler


class TicketListQuery(CursorQuery):
    status: Literal["open", "closed"] | None = None


async def create_ticket(ctx: RequestContext) -> Response:
    result = await service.create_ticket(ctx.session, ctx.subject, ctx.body(TicketCreate))
    return json_response(ticket_to_public(result.ticket), 201 if result.created else 200)


async def list_tickets(ctx: RequestContext) -> Response:
    query = ctx.query(TicketListQuery)
    page = await service.list_tickets(ctx.session, ctx.subject, query.cursor(), status=query.status)
    return json_response(envelope_c([ticket_to_public(ticket) for ticket in page.items], page))


get_ticket = get_handler(service.get_ticket, "ticket_id", ticket_to_public)


async def close_ticket(ctx: RequestContext) -> Response:
    ticket = await service.close_ticket(ctx.session, ctx.subject, ctx.path_param("ticket_id"))
    return json_response(ticket_to_public(ticket))


async def assign_ticket(ctx: RequestContext) -> Response:
    ticket = await service.assign_ticket(
        ctx.session, ctx.subject, ctx.path_param("ticket_id"), ctx.body(TicketAssign)
    )
    return json_response(ticket_to_public(ticket))


_TAG = "inbox"
OPERATIONS = (
    Operation(
        "POST",
        "/inbox/tickets",
        create_ticket,
        Scope.FULL_ACCESS,
        "Create a ticket for a contact (201), or get the contact's open ticket (200); "
        "requires the organization_id header",
        _TAG,
        status_code=201,
        other_successes=(200,),
        request_model=TicketCreate,
        response_model=TicketResponse,
        errors=(400, 404, 422),
        # docs/api.md: the caller's organization must be named on ticket creation.
        requires_organization_header=True,
    ),
    Operation(
        "GET",
        "/inbox/tickets",
        list_tickets,
        Scope.FULL_ACCESS,
        "List tickets (newest first)",
        _TAG,
        query_model=TicketListQuery,
        response_model=TicketResponse,
        envelope="C",
        errors=(400, 422),
    ),
    Operation(
        "GET",
        "/inbox/tickets/{ticket_id}",
        get_ticket,
        Scope.FULL_ACCESS,
        "Get a ticket",
        _TAG,
        response_model=TicketResponse,
        errors=(404,),
    ),
    Operation(
        "POST",
        "/inbox/tickets/{ticket_id}/assign",
        assign_ticket,
        Scope.FULL_ACCESS,
        "Assign an open ticket to a user of the organization",
        _TAG,
        request_model=TicketAssign,
        response_model=TicketResponse,
        errors=(400, 404, 422),
    ),
    Operation(
        "POST",
        "/inbox/tickets/{ticket_id}/close",
        close_ticket,
        Scope.FULL_ACCESS,
        "Close an open ticket",
        _TAG,
        response_model=TicketResponse,
        errors=(400, 404),
    ),
)
