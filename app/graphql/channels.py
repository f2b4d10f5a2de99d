"""Channel types and fields; each field calls one channels service operation.

The upstream access token is write-only: `ChannelCreateInput.accessToken` takes it, and no type
has a field that returns it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import strawberry
from strawberry.types import Info

from app.auth.scopes import Scope
from app.channels import service
from app.channels.schemas import ChannelCreate
from app.graphql.contacts import DeletePayload
from app.graphql.context import Context
from app.graphql.errors import UserError, as_graphql_error, user_errors
from app.graphql.inputs import provided
from app.graphql.pagination import Connection, connection
from app.graphql.permissions import requires
from app.graphql.planned import plannable
from app.kit.errors import DomainError, NotFound
from app.kit.validation import parse_model


@strawberry.type(description="A messaging phone number of the organization.")
class Channel:
    id: strawberry.ID
    organization_id: str
    display_phone_number: str
    phone_number_id: str = strawberry.field(description="The number's id on the platform")
    business_account_id: str
    name: str | None
    livemode: bool = strawberry.field(
        description="False when created with a test key: its traffic goes to the simulator"
    )
    created_at: datetime
    updated_at: datetime


ChannelConnection = Connection[Channel]


@strawberry.type
class ChannelPayload:
    channel: Channel | None = None
    errors: list[UserError] = strawberry.field(default_factory=list)


@strawberry.input
class ChannelCreateInput:
    display_phone_number: str
    phone_number_id: str
    business_account_id: str
    access_token: str = strawberry.field(description="Stored encrypted; never returned")
    name: str | None = strawberry.UNSET


def as_channel(value: Any) -> Channel:
    # Rows and entities carry the same attributes as the type; no copy is needed.
    return cast(Channel, value)


@strawberry.type
class ChannelQuery:
    @strawberry.field(
        extensions=requires(Scope.FULL_ACCESS),
        description="Newest first; test-mode credentials see test-mode channels only.",
    )
    @plannable
    async def channels(
        self,
        info: Info[Context, None],
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
    ) -> ChannelConnection:
        return await connection(
            info.context,
            (first, after, last, before),
            lambda session, subject, params: service.list_channels(session, subject, params),
            as_channel,
        )

    @strawberry.field(extensions=requires(Scope.FULL_ACCESS))
    @plannable
    async def channel(self, info: Info[Context, None], id: strawberry.ID) -> Channel | None:
        context = info.context
        try:
            async with context.db() as session:
                return as_channel(await service.get_channel(session, context.require_subject(), id))
        except NotFound:
            return None
        except DomainError as exc:  # a test-mode credential and a live-mode channel
            raise as_graphql_error(exc) from exc


@strawberry.type
class ChannelMutation:
    @strawberry.mutation(extensions=requires(Scope.FULL_ACCESS))
    async def create_channel(
        self, info: Info[Context, None], input: ChannelCreateInput
    ) -> ChannelPayload:
        context = info.context
        try:
            data = parse_model(ChannelCreate, provided(input), "input")
            box = service.access_token_box(context.resources.secret_key)
            async with context.unit_of_work() as session:
                channel = await service.create_channel(
                    session, context.require_subject(), data, box
                )
        except DomainError as exc:
            return ChannelPayload(errors=user_errors(exc))
        return ChannelPayload(channel=as_channel(channel))

    @strawberry.mutation(extensions=requires(Scope.FULL_ACCESS))
    async def delete_channel(self, info: Info[Context, None], id: strawberry.ID) -> DeletePayload:
        context = info.context
        try:
            async with context.unit_of_work() as session:
                await service.delete_channel(session, context.require_subject(), id)
        except DomainError as exc:
            return DeletePayload(errors=user_errors(exc))
        return DeletePayload(deleted_id=id)
