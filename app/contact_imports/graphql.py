"""Contact imports over GraphQL: read them, and follow one as it runs. Uploading a file is
REST only (`POST /api/v1/contacts/imports`): GraphQL here carries no file uploads."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import strawberry
from graphql import GraphQLError
from strawberry.types import Info

from app.access.scopes import Scope
from app.contact_imports import service
from app.contact_imports.models import ImportStatus
from app.contact_imports.schemas import CONTACT_IMPORT, ContactImport
from app.graphql.context import Context
from app.graphql.errors import as_graphql_error
from app.graphql.pagination import Connection, connection
from app.graphql.permissions import requires
from app.graphql.planned import plannable
from app.graphql.resource import node_field
from app.graphql.socket import SUBSCRIPTIONS_OVER_WEBSOCKET, SocketContext, SubscriptionSlot
from app.kit.errors import DomainError, NotFound

# How often a followed import is read again while it runs.
PROGRESS_POLL_SECONDS = 1.0


ContactImportConnection = Connection[ContactImport]


def as_contact_import(value: Any) -> ContactImport:
    return CONTACT_IMPORT.as_graphql(value)


FINISHED = (ImportStatus.COMPLETED.value, ImportStatus.FAILED.value)


@strawberry.type
class Query:
    @strawberry.field(extensions=requires(Scope.FULL_ACCESS), description="Newest first.")
    @plannable
    async def contact_imports(
        self,
        info: Info[Context, None],
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
    ) -> ContactImportConnection | None:
        return await connection(
            info.context, (first, after, last, before), service.list_imports, as_contact_import
        )

    contact_import = node_field(
        Scope.FULL_ACCESS, service.get_import, as_contact_import, ContactImport
    )


async def _follow(
    context: SocketContext, first: Any, slot: SubscriptionSlot
) -> AsyncGenerator[ContactImport, None]:
    subject = context.require_subject()
    current = first
    try:
        yield as_contact_import(current)
        while current.status not in FINISHED:
            await asyncio.sleep(PROGRESS_POLL_SECONDS)
            await context.recheck()
            try:
                async with context.db() as session:
                    latest = await service.get_import(session, subject, first.id)
            except NotFound:
                raise as_graphql_error(NotFound("Import")) from None
            if latest.updated_at != current.updated_at or latest.status != current.status:
                current = latest
                yield as_contact_import(current)
    finally:
        slot.release()


@strawberry.type
class Subscription:
    @strawberry.subscription(
        extensions=requires(Scope.FULL_ACCESS),
        description="The import now, then each time its progress changes, until it is "
        "completed or failed.",
    )
    async def contact_import_progress(
        self, info: Info[Context, None], id: strawberry.ID
    ) -> AsyncGenerator[ContactImport, None]:
        # Not a generator itself: an unknown id is refused before the subscription starts.
        context = info.context
        if not isinstance(context, SocketContext):
            raise GraphQLError(SUBSCRIPTIONS_OVER_WEBSOCKET, extensions={"code": "bad_request"})
        try:
            async with context.db() as session:
                first = await service.get_import(session, context.require_subject(), id)
        except DomainError as exc:
            raise as_graphql_error(exc) from exc
        # It counts toward the organization's open subscriptions, as the streamed ones do.
        slot = SubscriptionSlot(context, first.organization_id)
        return _follow(context, first, slot)
