"""Provider credential types and fields; each field calls one provider credentials service
operation. Keys are write-only: the input takes them, no type returns them."""

from __future__ import annotations

from typing import Any

import strawberry
from strawberry.types import Info

from app.access.scopes import Scope
from app.graphql.context import Context
from app.graphql.errors import as_graphql_error
from app.graphql.permissions import requires
from app.graphql.resource import DomainMutations, Payload
from app.kit.errors import Conflict, DomainError, InvalidInput, NotFound
from app.provider_credentials import service
from app.provider_credentials.cache import credential_cache
from app.provider_credentials.schemas import CREDENTIAL, ProviderCredential, ProviderCredentialPut


@strawberry.input(
    description="The key and the provider's own fields; every field replaces the stored one."
)
class ProviderCredentialInput:
    api_key: str = strawberry.field(description="Stored encrypted; never returned")
    base_url: str | None = strawberry.UNSET
    event_type_id: int | None = strawberry.field(default=strawberry.UNSET, description="cal_com")
    calendar_id: str | None = strawberry.field(
        default=strawberry.UNSET, description="google_calendar"
    )
    slot_minutes: int | None = strawberry.field(
        default=strawberry.UNSET, description="google_calendar"
    )
    client_id: str | None = strawberry.field(
        default=strawberry.UNSET, description="google_calendar"
    )
    client_secret: str | None = strawberry.field(
        default=strawberry.UNSET, description="google_calendar"
    )
    refresh_token: str | None = strawberry.field(
        default=strawberry.UNSET, description="google_calendar"
    )
    token_url: str | None = strawberry.field(
        default=strawberry.UNSET, description="google_calendar"
    )


def as_credential(value: Any) -> ProviderCredential:
    return CREDENTIAL.as_graphql(value)


CREDENTIALS = DomainMutations(
    "ProviderCredential",
    scope=Scope.FULL_ACCESS,
    errors=(InvalidInput, NotFound, Conflict),
    node=ProviderCredential,
    as_node=as_credential,
)
DeleteProviderCredentialPayload = CREDENTIALS.payload_type(
    "DeleteProviderCredentialPayload", {"deleted_provider": str}
)


@strawberry.type
class Query:
    @strawberry.field(extensions=requires(Scope.FULL_ACCESS))
    async def provider_credentials(
        self, info: Info[Context, None]
    ) -> list[ProviderCredential] | None:
        try:
            async with info.context.db() as session:
                rows = await service.list_credentials(session, info.context.require_subject())
        except DomainError as exc:
            raise as_graphql_error(exc) from exc
        return [as_credential(row) for row in rows]


@strawberry.type
class Mutation:
    @CREDENTIALS.mutation(description="Set (or replace) the organization's key for a provider.")
    async def set_provider_credential(
        self, info: Info[Context, None], provider: str, input: ProviderCredentialInput
    ) -> Payload:
        box = service.credential_box(info.context.resources.secret_key)
        allow_private = info.context.allow_private_urls
        cache = credential_cache(info.context.resources.redis)
        return await CREDENTIALS.save(
            info,
            ProviderCredentialPut,
            input,
            lambda session, subject, data: service.put_credential(
                session, subject, provider, data, box, allow_private=allow_private, cache=cache
            ),
        )

    @CREDENTIALS.mutation(payload=DeleteProviderCredentialPayload)
    async def delete_provider_credential(self, info: Info[Context, None], provider: str) -> Payload:
        cache = credential_cache(info.context.resources.redis)
        return await CREDENTIALS.perform(
            info,
            lambda session, subject: service.delete_credential(
                session, subject, provider, cache=cache
            ),
            lambda deleted: {"deleted_provider": deleted},
            payload=DeleteProviderCredentialPayload,
        )
