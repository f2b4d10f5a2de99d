"""Handlers of the standard REST routes, made from a service call and a serializer.

`Operation("GET", "/contacts/{contact_id}", get_handler(service.get_contact, "contact_id",
contact_to_public), ...)`: each factory reads what the route carries (path id, JSON body,
cursor query), calls the service and answers the public shape, so a domain's rest.py only
writes the handlers that do something else.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import Response

from app.access.subject import Subject
from app.kit.http_errors import json_response
from app.kit.pagination import CursorPage, CursorParams, envelope_c
from app.kit.queries import CursorQuery
from rest_compat.endpoint import Handler, RequestContext

ModelT = TypeVar("ModelT", bound=BaseModel)
ToPublic = Callable[[Any], Any]


def list_handler(
    list_page: Callable[[AsyncSession, Subject, CursorParams], Awaitable[CursorPage[Any]]],
    to_public: ToPublic,
) -> Handler:
    """`GET /<things>`: a cursor page (envelope C) of `list_page`'s rows."""

    name = list_page.__name__

    async def handle(ctx: RequestContext) -> Response:
        page = await list_page(ctx.session, ctx.subject, ctx.query(CursorQuery).cursor())
        return json_response(envelope_c([to_public(row) for row in page.items], page))

    return _named(handle, name)


def get_handler(
    get: Callable[[AsyncSession, Subject, str], Awaitable[Any]], id_param: str, to_public: ToPublic
) -> Handler:
    """`GET /<things>/{id}`."""
    name = get.__name__

    async def handle(ctx: RequestContext) -> Response:
        return json_response(
            to_public(await get(ctx.session, ctx.subject, ctx.path_param(id_param)))
        )

    return _named(handle, name)


def create_handler(
    model: type[ModelT],
    create: Callable[..., Awaitable[Any]],
    to_public: ToPublic,
    status_code: int = 200,
    *,
    guards_urls: bool = False,
) -> Handler:
    """`POST /<things>`: the body parsed as `model`. `guards_urls`: the body carries
    user-supplied URLs, so `create` also takes the outbound URL guard's switch."""

    name = create.__name__

    async def handle(ctx: RequestContext) -> Response:
        created = await create(
            ctx.session, ctx.subject, ctx.body(model), **_policy(ctx, guards_urls)
        )
        return json_response(to_public(created), status_code)

    return _named(handle, name)


def update_handler(
    model: type[ModelT],
    update: Callable[..., Awaitable[Any]],
    id_param: str,
    to_public: ToPublic,
    *,
    guards_urls: bool = False,
) -> Handler:
    """`PUT /<things>/{id}`: the body parsed as `model`; `guards_urls` as in `create_handler`."""

    name = update.__name__

    async def handle(ctx: RequestContext) -> Response:
        updated = await update(
            ctx.session,
            ctx.subject,
            ctx.path_param(id_param),
            ctx.body(model),
            **_policy(ctx, guards_urls),
        )
        return json_response(to_public(updated))

    return _named(handle, name)


def delete_handler(
    remove: Callable[[AsyncSession, Subject, str], Awaitable[object]], id_param: str
) -> Handler:
    """`DELETE /<things>/{id}`: 204 without a body."""

    name = remove.__name__

    async def handle(ctx: RequestContext) -> Response:
        await remove(ctx.session, ctx.subject, ctx.path_param(id_param))
        return Response(status_code=204)

    return _named(handle, name)


def _policy(ctx: RequestContext, guards_urls: bool) -> dict[str, bool]:
    """The outbound URL guard's switch, for writes whose body carries user-supplied URLs."""
    return {"allow_private": ctx.allow_private_urls} if guards_urls else {}


def _named(handler: Handler, name: str) -> Handler:
    """The handler under the service function's name: the OpenAPI operationId."""
    handler.__name__ = handler.__qualname__ = name
    return handler
