"""Channel types and fields; each field calls one channels service operation.

The upstream access token is write-only: `ChannelCreateInput.accessToken` takes it, and no type
has a field that returns it.
"""

from __future__ import annotations

from typing import Any

import strawberry
from strawberry.types import Info

from app.access.scopes import Scope
from app.channels import service
from app.channels.schemas import (
    CHANNEL,
    DEFAULT_MESSAGES_PER_SECOND,
    Channel,
    ChannelCreate,
    ChannelUpdate,
)
from app.graphql.context import Context
from app.graphql.pagination import Connection
from app.graphql.resource import DomainMutations, Payload, list_field, node_field
from app.kit.errors import Conflict, InvalidInput, LiveModeForbidden, NotFound

ChannelConnection = Connection[Channel]


@strawberry.input
class ChannelCreateInput:
    display_phone_number: str
    phone_number_id: str
    business_account_id: str
    access_token: str = strawberry.field(description="Stored encrypted; never returned")
    name: str | None = strawberry.UNSET
    messages_per_second: int = strawberry.field(
        default=DEFAULT_MESSAGES_PER_SECOND,
        description="Messages per second the channel may send, 1 to 1000",
    )


@strawberry.input(description="Only the fields given change.")
class ChannelUpdateInput:
    name: str | None = strawberry.UNSET
    messages_per_second: int | None = strawberry.field(
        default=strawberry.UNSET, description="Messages per second, 1 to 1000"
    )
    agent_id: strawberry.ID | None = strawberry.field(
        default=strawberry.UNSET,
        description="An agent of the organization to answer inbound messages; null: none",
    )


def as_channel(value: Any) -> Channel:
    return CHANNEL.as_graphql(value)


CHANNELS = DomainMutations(
    "Channel",
    scope=Scope.FULL_ACCESS,
    errors=(
        InvalidInput,
        NotFound,
        Conflict,
        LiveModeForbidden,
        service.PhoneNumberNotVerified,
        service.PlatformFailure,
    ),
    node=Channel,
    as_node=as_channel,
)


@strawberry.type
class Query:
    channels = list_field(
        Scope.FULL_ACCESS,
        service.list_channels,
        as_channel,
        Channel,
        description="Newest first; test-mode credentials see test-mode channels only.",
    )
    channel = node_field(Scope.FULL_ACCESS, service.get_channel, as_channel, Channel)


@strawberry.type
class Mutation:
    @CHANNELS.mutation()
    async def create_channel(self, info: Info[Context, None], input: ChannelCreateInput) -> Payload:
        resources = info.context.resources
        box = service.access_token_box(resources.secret_key)
        return await CHANNELS.save(
            info,
            ChannelCreate,
            input,
            lambda session, subject, data: service.create_channel(
                session, subject, data, box, resources.settings
            ),
        )

    update_channel = CHANNELS.update_field(
        ChannelUpdateInput, ChannelUpdate, service.update_channel
    )
    delete_channel = CHANNELS.delete_field(service.delete_channel)
