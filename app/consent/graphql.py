"""Consent settings over GraphQL: the organization's keywords and confirmation replies."""

from __future__ import annotations

from typing import Any

import strawberry
from strawberry.types import Info

from app.access.scopes import Scope
from app.consent import service
from app.consent.schemas import CONSENT_SETTINGS, ConsentSettings, ConsentSettingsUpdate
from app.graphql.context import Context
from app.graphql.errors import as_graphql_error
from app.graphql.permissions import requires
from app.graphql.resource import DomainMutations, Payload
from app.kit.errors import DomainError, InvalidInput


def as_consent_settings(value: Any) -> ConsentSettings:
    # A stored row or the defaults (app/consent/service.py): both carry the shape's fields.
    return CONSENT_SETTINGS.as_graphql(value)


@strawberry.input(description="Only the fields given change; a reply set to null sends nothing.")
class ConsentSettingsInput:
    opt_out_keywords: list[str] | None = strawberry.UNSET
    opt_in_keywords: list[str] | None = strawberry.UNSET
    opt_out_reply: str | None = strawberry.UNSET
    opt_in_reply: str | None = strawberry.UNSET


CONSENT = DomainMutations(
    "ConsentSettings",
    scope=Scope.FULL_ACCESS,
    errors=(InvalidInput,),
    node=ConsentSettings,
    as_node=as_consent_settings,
)


@strawberry.type
class Query:
    @strawberry.field(extensions=requires(Scope.FULL_ACCESS))
    async def consent_settings(self, info: Info[Context, None]) -> ConsentSettings | None:
        context = info.context
        try:
            async with context.db() as session:
                found = await service.get_consent_settings(session, context.require_subject())
        except DomainError as exc:
            raise as_graphql_error(exc) from exc
        return as_consent_settings(found)


@strawberry.type
class Mutation:
    @CONSENT.mutation(description="Change the organization's consent keywords and replies.")
    async def update_consent_settings(
        self, info: Info[Context, None], input: ConsentSettingsInput
    ) -> Payload:
        return await CONSENT.save(
            info, ConsentSettingsUpdate, input, service.update_consent_settings
        )
