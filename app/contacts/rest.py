"""/api/v1/contacts: routes → contacts service → the JSON shapes of docs/api.md."""

from __future__ import annotations

from pydantic import Field
from starlette.responses import Response, StreamingResponse

from app.access.scopes import Scope
from app.contacts import service
from app.contacts.schemas import ContactCreate, ContactResponse, ContactUpdate, contact_to_public
from app.kit.pagination import envelope_c
from app.kit.queries import CursorQuery
from rest_compat.endpoint import Operation, RequestContext, json_response
from rest_compat.resource import create_handler, delete_handler, get_handler, update_handler


class ContactListQuery(CursorQuery):
    tag: str | None = Field(default=None, max_length=100)
    search: str | None = Field(default=None, max_length=255)


create_contact = create_handler(ContactCreate, service.create_contact, contact_to_public)


async def list_contacts(ctx: RequestContext) -> Response:
    query = ctx.query(ContactListQuery)
    page = await service.list_contacts(
        ctx.session, ctx.subject, query.cursor(), tag=query.tag, search=query.search
    )
    return json_response(envelope_c([contact_to_public(row) for row in page.items], page))


CSV_MEDIA_TYPE = "text/csv"


async def export_contacts(ctx: RequestContext) -> Response:
    query = ctx.query(ContactListQuery)
    resources, subject = ctx.resources, ctx.subject
    # Read batch by batch, each in a short session of its own, while the client downloads.
    rows = service.export_contacts(
        lambda: resources.session(writes=False), subject, tag=query.tag, search=query.search
    )
    return StreamingResponse(
        rows,
        headers={
            # Set directly: Starlette would append its own charset to a text/* media type.
            "Content-Type": CSV_MEDIA_TYPE + "; charset=utf-8",
            "Content-Disposition": 'attachment; filename="contacts.csv"',
            "X-Content-Type-Options": "nosniff",
        },
    )


get_contact = get_handler(service.get_contact, "contact_id", contact_to_public)


update_contact = update_handler(
    ContactUpdate, service.update_contact, "contact_id", contact_to_public
)


delete_contact = delete_handler(service.delete_contact, "contact_id")


_TAG = "contacts"
OPERATIONS = (
    Operation(
        "POST",
        "/contacts",
        create_contact,
        Scope.FULL_ACCESS,
        "Create a contact",
        _TAG,
        request_model=ContactCreate,
        response_model=ContactResponse,
        errors=(400, 422),
    ),
    Operation(
        "GET",
        "/contacts",
        list_contacts,
        Scope.FULL_ACCESS,
        "List contacts (newest first)",
        _TAG,
        query_model=ContactListQuery,
        response_model=ContactResponse,
        envelope="C",
        errors=(400, 422),
    ),
    Operation(
        "GET",
        "/contacts.csv",
        export_contacts,
        Scope.FULL_ACCESS,
        "Download every contact matching the list's filters as CSV (streamed, newest first)",
        _TAG,
        query_model=ContactListQuery,
        errors=(422,),
        binary_response=(CSV_MEDIA_TYPE,),
    ),
    Operation(
        "GET",
        "/contacts/{contact_id}",
        get_contact,
        Scope.FULL_ACCESS,
        "Get a contact",
        _TAG,
        response_model=ContactResponse,
        errors=(404,),
    ),
    Operation(
        "PUT",
        "/contacts/{contact_id}",
        update_contact,
        Scope.FULL_ACCESS,
        "Update a contact (fields present replace stored ones)",
        _TAG,
        request_model=ContactUpdate,
        response_model=ContactResponse,
        errors=(400, 404, 422),
    ),
    Operation(
        "DELETE",
        "/contacts/{contact_id}",
        delete_contact,
        Scope.FULL_ACCESS,
        "Delete a contact",
        _TAG,
        status_code=204,
        errors=(404,),
    ),
)
